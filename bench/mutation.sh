#!/usr/bin/env bash
# Mutation audit of the analysis core: does the test suite notice a wrong number?
#
#   bash bench/mutation.sh                       # every core module, 60 strong mutants each
#   bash bench/mutation.sh -n 20 src/hostgap/anatomy/steps.py src/hostgap/anatomy/link.py
#   bash bench/mutation.sh --timeout 600 ...     # per test run (raise it on a loaded machine)
#
# For each module, ../shared/tools/mutate.py flips one operator at a time (--strong: +/-, * and
# /, and/or, not, min/max, ==/!=, booleans), runs the module's own tests (the map below), then the
# whole fast suite for any mutant they miss. Prints one line per module: sampled, caught, the
# share caught, and each survivor with its line. Needs a clean working tree (the tool edits the
# module in place and restores it) and .venv (scripts/env.sh). Run it before an anatomy or model
# change lands; the target is >= 95 % caught on every module.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
n=60
seed=1
timeout=240
mods=()
tests_for_only=""
list_only=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) n="$2"; shift ;;
    --seed) seed="$2"; shift ;;
    --timeout) timeout="$2"; shift ;;
    --tests-for) tests_for_only="$2"; shift ;;
    --list) list_only=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) mods+=("$1") ;;
  esac
  shift
done
# The tests that exercise a module first (a glob per package, narrower where the package's
# tests are slow); the whole fast suite confirms every mutant they miss.
tests_for() {
  case "$1" in
    src/hostgap/readers/nsys.py|src/hostgap/readers/nsys_db.py) echo tests/test_load_nsys*.py tests/test_load_pins_nsys.py ;;
    src/hostgap/readers/decimal_ns.py) echo tests/test_load_timestamps.py tests/test_load_pins_decimal.py tests/test_load_kineto.py ;;
    src/hostgap/readers/apis.py) echo tests/test_load_kineto.py tests/test_load_nsys.py ;;
    src/hostgap/readers/__init__.py) echo tests/test_load_parallel.py tests/test_load_kineto.py ;;
    src/hostgap/readers/kineto/__init__.py) echo tests/test_load_parallel.py tests/test_load_kineto.py tests/test_load_streaming.py ;;
    src/hostgap/readers/kineto/schema.py) echo tests/test_load_number_strings.py tests/test_load_pins_ints.py tests/test_load_kineto.py tests/test_kcolumns.py tests/test_load_hostile.py ;;
    src/hostgap/readers/kineto/compiled.py) echo tests/test_kcolumns.py tests/test_kcolumns_scratch.py tests/test_load_number_strings.py tests/test_load_parallel.py ;;
    src/hostgap/readers/kineto/stream.py) echo tests/test_load_parallel.py tests/test_load_streaming.py tests/test_load_hostile.py ;;
    src/hostgap/readers/text.py) echo tests/test_load_text.py tests/test_load_hostile.py tests/test_load_pins_text.py ;;
    src/hostgap/readers/*)    echo tests/test_load_*.py tests/test_kineto_fuzz.py tests/test_corpus.py ;;
    src/hostgap/anatomy/link.py|src/hostgap/events.py)
                           echo tests/test_link*.py tests/test_events_*.py tests/test_load_*.py tests/test_anatomy_steps.py ;;
    src/hostgap/anatomy/comm.py|src/hostgap/anatomy/collectives.py)
                           echo tests/test_ranks*.py tests/test_anatomy_comm.py tests/test_anatomy_steps.py tests/test_anatomy_kernel_rows.py ;;
    src/hostgap/anatomy/*) echo tests/test_anatomy_*.py tests/test_timeline*.py tests/test_cpu_compute.py ;;
    src/hostgap/stats/confidence.py|src/hostgap/stats/rounds.py|src/hostgap/stats/noise.py)
                           echo tests/test_capture_rounds.py tests/test_capture_point_inside.py tests/test_capture_differencing.py tests/test_capture_coverage.py tests/test_capture_coverage_noise.py tests/test_stats_confidence.py tests/test_stats_noise.py ;;
    src/hostgap/stats/differencing.py|src/hostgap/capture/protocol/validity.py|src/hostgap/checks.py)
                           echo tests/test_capture_differencing.py tests/test_capture_point_inside.py tests/test_capture_rounds.py tests/test_capture_validity.py tests/test_capture_converge.py ;;
    src/hostgap/stats/engine_diff.py|src/hostgap/capture/protocol/interleave.py)
                           echo tests/test_capture_interleave.py tests/test_capture_validity.py ;;
    src/hostgap/analysis/vllm_split.py) echo tests/test_vllm_*.py tests/test_cb_split.py ;;  # steady_steps serves both splits
    src/hostgap/capture/engines/*.py|src/hostgap/analysis/harvest_table.py) echo tests/test_vllm_*.py ;;
    src/hostgap/model/attribution/joule_shares.py) echo tests/test_attribution_energy.py ;;
    src/hostgap/model/attribution/*) echo tests/test_attribution_*.py ;;
    src/hostgap/stats/joules.py|src/hostgap/capture/protocol/energy_run.py) echo tests/test_stats_joules.py tests/test_energy_run.py ;;
    src/hostgap/energy/*)  echo tests/test_energy_counters.py ;;
    src/hostgap/model/energy_paper.py) echo tests/test_energy_paper.py ;;
    src/hostgap/server/watch/dcgm.py) echo tests/test_watch_energy.py ;;
    src/hostgap/model/steptable/files.py|src/hostgap/model/steptable/rows.py|src/hostgap/model/steptable/layouts.py)
                           echo tests/test_attribution_*.py ;;
    src/hostgap/model/roofline.py) echo tests/test_model_roofline.py tests/test_model_pins.py tests/test_model_pins_roofline.py tests/test_model_regimes.py ;;
    src/hostgap/model/fitting/measured.py) echo tests/test_model_fitting_numbers.py tests/test_model_roofline.py tests/test_model_stepmodel.py ;;
    src/hostgap/model/accounting.py) echo tests/test_model_accounting.py tests/test_model_numbers.py tests/test_model_pins.py ;;
    src/hostgap/model/fitting/calibrate.py) echo tests/test_model_calibrate.py tests/test_model_regimes.py ;;
    src/hostgap/model/arch.py) echo tests/test_model_pins_arch.py tests/test_model_accounting.py tests/test_model_numbers.py ;;
    src/hostgap/model/whatif/overlap.py|src/hostgap/model/whatif/cpu.py|src/hostgap/model/whatif/megakernel.py|src/hostgap/model/graphlaunch.py)
                           echo tests/test_model_whatif_operators.py tests/test_model_hf_cb.py ;;
    src/hostgap/model/published.py|src/hostgap/model/whatif/spec_residual.py)
                           echo tests/test_model_published.py tests/test_model_whatif_operators.py ;;
    src/hostgap/model/cell.py|src/hostgap/model/whatif/paper.py|src/hostgap/model/whatif/change.py)
                           echo tests/test_model_whatif.py tests/test_model_pins_whatif.py tests/test_model_regimes.py tests/test_model_library.py ;;
    src/hostgap/model/whatif/registry.py) echo tests/test_model_library.py tests/test_model_published.py tests/test_model_whatif_operators.py ;;
    src/hostgap/model/prediction.py|src/hostgap/model/regimes.py|src/hostgap/model/fitting/sources.py)
                           echo tests/test_model_library.py tests/test_model_api.py tests/test_model_cli.py tests/test_model_stepmodel.py tests/test_model_hf_cb.py ;;
    src/hostgap/model/levers/*.py)
                           echo tests/test_advise_*.py ;;
    src/hostgap/model/*)   echo tests/test_model_*.py ;;
    src/hostgap/analysis/cb_split.py) echo tests/test_cb_split.py tests/test_capture_hf_cb.py ;;
    src/hostgap/analysis/trace.py|src/hostgap/analysis/trace_cache.py)
                           echo tests/test_trace_cache.py tests/test_load_progress.py tests/test_api.py tests/test_architecture.py ;;
    src/hostgap/analysis/*)   echo tests/test_ranks*.py ;;
    src/hostgap/cli/runs.py) echo tests/test_cli_runs.py tests/test_report_runs.py tests/test_capture_validity.py ;;
    src/hostgap/report/figures/hotspots.py)
                           echo tests/test_report_kernels.py tests/test_report_html.py tests/test_report_words.py ;;
    src/hostgap/cli/models.py|src/hostgap/cli/models_common.py|src/hostgap/cli/predict.py)
                           echo tests/test_model_cli.py tests/test_model_regimes.py tests/test_model_roofline.py tests/test_model_stepmodel.py tests/test_cli_common.py tests/test_capture_validity.py tests/test_attribution_cli.py tests/test_model_calibrate.py ;;
    src/hostgap/cli/measure_console.py)
                           echo tests/test_capture_cli.py tests/test_capture_measure.py tests/test_capture_validity.py tests/test_capture_coverage_noise.py tests/test_cli_*.py ;;
    src/hostgap/report/model_view.py)
                           echo tests/test_model_api.py tests/test_model_cli.py tests/test_model_stepmodel.py tests/test_model_regimes.py tests/test_model_published.py tests/test_capture_validity.py ;;
    src/hostgap/server/fleet/rules.py) echo tests/test_fleet_rules.py ;;
    src/hostgap/server/fleet/*) echo tests/test_fleet_view.py tests/test_fleet_rules.py ;;
    src/hostgap/server/watch/anomaly.py) echo tests/test_watch_anomaly.py tests/test_fleet_view.py tests/test_fleet_rules.py ;;
    src/hostgap/report/*)  echo tests/test_report_*.py tests/test_ranks_report.py tests/test_anatomy_cli.py ;;
    *)                     echo tests ;;
  esac
}

if [ -n "$tests_for_only" ]; then tests_for "$tests_for_only"; exit 0; fi
tool="$root/../shared/tools/mutate.py"
[ -f "$tool" ] || { echo "mutation.sh: $tool not found (needs ../shared beside the project)" >&2; exit 2; }
[ -x .venv/bin/python ] || { echo "mutation.sh: .venv missing: run scripts/env.sh first" >&2; exit 2; }
if [ -n "$(git status --porcelain -- src)" ]; then
  echo "mutation.sh: src/ has uncommitted changes; the audit needs a clean tree" >&2; exit 2
fi
if [ ${#mods[@]} -eq 0 ]; then
  # the Kineto loader is its package's __init__.py (readers/kineto/)
  mapfile -t mods < <({ ls src/hostgap/events.py src/hostgap/readers/*.py src/hostgap/readers/kineto/*.py \
    src/hostgap/anatomy/*.py src/hostgap/stats/*.py src/hostgap/checks.py src/hostgap/model/*.py src/hostgap/model/*/*.py \
    | grep -v '__init__.py$'; echo src/hostgap/readers/kineto/__init__.py; })
fi
if [ -n "$list_only" ]; then printf '%s\n' "${mods[@]}"; exit 0; fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
total=0; caught=0
for m in "${mods[@]}"; do
  # shellcheck disable=SC2046
  tests=$(ls $(tests_for "$m") 2>/dev/null | tr '\n' ' ')
  j="$out/$(echo "$m" | tr '/' '_').json"
  # a mutant may turn a size limit into an allocation of it (readers/text.py's 16 GiB): cap the
  # address space of the loader audits' processes so it fails instead of filling the machine
  # (not the others': headless Chromium in the report tests reserves far more than 8 GB)
  vmem=unlimited
  case "$m" in src/hostgap/readers/*) vmem="${HOSTGAP_MUTATION_VMEM_KB:-8000000}" ;; esac
  (ulimit -v "$vmem"; exec .venv/bin/python "$tool" "$m" --strong -n "$n" --seed "$seed" --timeout "$timeout" --tests "$tests" --json "$j" \
    > "$out/log" 2>&1) || true
  .venv/bin/python - "$m" "$j" "$out/log" <<'PY'
import json, sys
mod, path, log = sys.argv[1:4]
try:
    rows = json.load(open(path))
except (OSError, ValueError):
    tail = open(log).read().strip().splitlines()[-1:] or ["no output"]
    print(f"{mod}: audit failed: {tail[0]}"); sys.exit(0)
src = open(mod).read().splitlines()
alive = [r for r in rows if r["status"] == "survived"]
n = len(rows); k = n - len(alive)
pct = 100.0 * k / n if n else 100.0
print(f"{mod}: {n} sampled, {k} caught ({pct:.0f} %)" + (", survivors:" if alive else ""))
for r in alive:
    line = src[r["line"] - 1].strip()[:90] if r["line"] else ""
    print(f"    line {r['line']}: {r['mutation']}  | {line}")
PY
done
