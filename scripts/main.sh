#!/usr/bin/env bash
# The main job on a fresh machine: set up .venv, then `hostgap measure` on its default
# workload (tiny preset on a CPU machine, llama-3.2-1b batch 1 on a CUDA machine).
# Extra arguments go to `hostgap measure`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec .venv/bin/hostgap measure "$@"
