#!/usr/bin/env bash
# The code checks CI runs (scripts/test.sh calls this first): the layer contract (import-linter),
# lint (ruff check), format (ruff format --check), types (mypy over src/hostgap) and module size
# (scripts/check_sizes.py: no module of src/hostgap over 600 lines). Every check runs; the exit
# status is 1 when any failed. Configuration: pyproject.toml; the rules turned off,
# and why: CONTRIBUTING.md. Tools and versions: requirements/lock.txt (scripts/env.sh installs them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -x .venv/bin/ruff ] || { echo "lint: .venv/bin/ruff missing: run scripts/env.sh first" >&2; exit 2; }
PATHS=(src tests bench scripts)
status=0
run() {
  echo "lint: $*" >&2
  "$@" || { status=1; echo "lint: FAILED: $*" >&2; }
}
run .venv/bin/lint-imports --no-cache
run .venv/bin/ruff check "${PATHS[@]}"
run .venv/bin/ruff format --check "${PATHS[@]}"
run .venv/bin/mypy
run .venv/bin/python scripts/check_sizes.py
exit $status
