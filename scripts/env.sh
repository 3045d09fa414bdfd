#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) with hostgap and its exact pinned dependencies.
# Sourced by scripts/main.sh and scripts/test.sh; safe to run again (quick when up to date).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY="$cand"; break
    fi
  done
fi
[ -n "$PY" ] || { echo "hostgap setup: error: Python >= 3.11 not found (set PYTHON=...)" >&2; exit 2; }
# pip's machine-wide index configuration may name folders that do not exist: drop those notices
quiet_pip() { "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }; }
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
STAMP=.venv/.hostgap-lock
if [ ! -f "$STAMP" ] || ! cmp -s requirements/lock.txt "$STAMP"; then
  # torch==2.13.0 is pinned to the CPU build: an open range would pull a multi-GB CUDA build
  quiet_pip .venv/bin/pip install --quiet -r requirements/lock.txt
  cp requirements/lock.txt "$STAMP"
fi
quiet_pip .venv/bin/pip install --quiet --no-deps -e .
