#!/usr/bin/env bash
# Validate `hostgap measure` on one GPU, within the ~6 minute budget of an H200 loan.
#
#   bench/gpu/validate.sh                  # GPU: floor + 8 cells -> bench/results/h200/
#   bench/gpu/validate.sh --cpu-test       # CPU: the same steps on the tiny preset (for testing)
#   bench/gpu/validate.sh --out DIR --budget-s 330
#
# GPU cells (bench/gpu/cells-h200.json): llama-3.2-1b, llama-3.2-3b and llama-3.1-8b at batch 1,
# context 2048, eager and graph (CUDA graph captured by hand); llama-3.1-8b eager at batch 8
# (context 2048) and 64 (context 512, so each of the ~17 prefills stays under a second).
# Ordered so one model is built once and the 8B cells come before the 3B ones.
#
# The sweep runs under `timeout --signal=INT`: when the budget runs out the sweep stops cleanly,
# every finished cell is in the database, and rerunning the script resumes the rest.
#
# On the GPU machine (torch 2.11, transformers 5.17, no network) hostgap is used from src/ with
# `pip install --no-deps -e .` (or PYTHONPATH=src when pip cannot). Its pure-Python dependencies
# that machine may lack are installed from bench/gpu/wheels/ when that folder holds wheels; fill
# it on a machine with network (Python 3.12, x86_64; ~4 MiB, within the device carry limit):
#
#   bash bench/gpu/fetch-wheels.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

cpu_test=0
out=""
budget_s=330
python="${PYTHON:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-test) cpu_test=1 ;;
    --out) out="$2"; shift ;;
    --budget-s) budget_s="$2"; shift ;;
    --python) python="$2"; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "validate.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ] && [ "$cpu_test" = 1 ]; then python="$root/.venv/bin/python"; else python=python3; fi
fi

if [ "$cpu_test" = 1 ]; then
  device=cpu
  cells="$here/cells-cpu.json"
  out="${out:-${TMPDIR:-/tmp}/hostgap-validate-cpu}"
  common=(--repeats 2 --traced-repeats 1 --warmup 1 --retries 0)  # contended cells: flagged, not re-run
  stacks_preset=tiny; stacks_context=64
else
  device=cuda
  cells="$here/cells-h200.json"
  out="${out:-$root/bench/results/h200}"
  common=(--repeats 3 --traced-repeats 1 --warmup 1 --retries 1 --keep-traces none --no-gzip)
  stacks_preset=llama-3.2-1b; stacks_context=2048
fi
mkdir -p "$out"
log() { echo "[validate $(date -u +%H:%M:%S)] $*" >&2; }
t_start=$(date +%s)

# -- hostgap importable? -------------------------------------------------------------------
if ! "$python" -c "import hostgap.cli" 2>/dev/null; then
  if compgen -G "$here/wheels/*.whl" >/dev/null; then
    log "installing carried wheels from bench/gpu/wheels"
    "$python" -m pip install -q --no-index --no-deps "$here"/wheels/*.whl || true
  fi
  "$python" -m pip install -q --no-deps --no-build-isolation -e . 2>/dev/null \
    || export PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$python" -c "import hostgap.cli" 2>"$out/import-error.txt"; then
  log "hostgap cannot be imported: $(tail -n1 "$out/import-error.txt")"
  log "carry the missing packages as wheels in bench/gpu/wheels (see the header of this script)"
  exit 2
fi
hg=("$python" -m hostgap)
"$python" - <<'EOF' >"$out/environment.txt" 2>&1 || true
import platform, torch, transformers
print("python", platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "-")
EOF
log "$(head -n2 "$out/environment.txt" | tr '\n' ' ')"

# -- 1. launch floor --------------------------------------------------------------------------
floor="$out/floor-$device.json"
log "floor on $device"
"${hg[@]}" floor --device "$device" --samples 200 --out "$floor" | tee "$out/floor.txt"
floor_opt=()
[ "$device" = cuda ] && floor_opt=(--floor-file "$floor")

# -- 2. the cells -------------------------------------------------------------------------------
left=$(( budget_s - ($(date +%s) - t_start) ))
log "sweep over $(basename "$cells") with ${left}s left"
set +e
timeout --signal=INT --kill-after=30 "$left" \
  "${hg[@]}" sweep --cells "$cells" --device "$device" "${common[@]}" "${floor_opt[@]}" \
  --out "$out/runs" --db "$out/runs.sqlite" 2>&1 | grep -v "USDT" | tee "$out/sweep.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 130 ] || [ "$rc" = 124 ] && log "budget reached: rerun this script to resume the remaining cells"

# -- 3. host stacks (py-spy), when it is installed and the budget allows ------------------------
left=$(( budget_s - ($(date +%s) - t_start) ))
if [ "$rc" = 0 ] && [ "$left" -ge 60 ] && "$python" -c "import sys; from hostgap.capture.protocol.stacks import find_pyspy; sys.exit(find_pyspy() is None)"; then
  log "py-spy stacks with ${left}s left"
  set +e
  timeout --signal=INT --kill-after=20 "$left" \
    "${hg[@]}" measure -p "$stacks_preset" -L "$stacks_context" --device "$device" --n2 32 --repeats 2 \
    --traced-repeats 1 --retries 0 --stacks --keep-traces none --out "$out/runs" --db "$out/runs.sqlite" -q \
    2>&1 | tee "$out/stacks.txt"
  set -e
else
  log "py-spy stacks skipped (sweep exit $rc, ${left}s left, py-spy $(command -v py-spy || echo missing))"
fi

# -- 4. summary ---------------------------------------------------------------------------------
"${hg[@]}" runs --db "$out/runs.sqlite" --json >"$out/runs.json"
"${hg[@]}" runs --db "$out/runs.sqlite" --csv >"$out/runs.csv"
"${hg[@]}" runs --db "$out/runs.sqlite" | tee "$out/summary.txt"
"$python" "$here/summarise.py" "$out/runs.json" "$floor" | tee "$out/summary.md"
log "done in $(( $(date +%s) - t_start ))s (sweep exit $rc); results in $out"
[ "$rc" = 0 ] || [ "$rc" = 130 ] || [ "$rc" = 124 ] || exit "$rc"
