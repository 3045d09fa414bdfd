#!/usr/bin/env bash
# The tests on a fresh machine: set up .venv, then pytest (slow end-to-end tests included;
# pass -m "not slow" to skip them). Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
