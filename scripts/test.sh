#!/usr/bin/env bash
# The tests on a fresh machine: set up .venv, then pytest (slow end-to-end tests included;
# pass -m "not slow" to skip them). Extra arguments go to pytest.
# With CI set (or HOSTGAP_TEST_VLLM=1) it also builds .venv-vllm (scripts/install-vllm.sh) and
# runs the vLLM-on-CPU integration test, which starts the real engine once.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# The HTML report tests render in headless Chromium (Debian's package); without it they skip.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "hostgap test: chromium could not be installed; report rendering tests will skip" >&2
fi
status=0
.venv/bin/python -m pytest -p no:cacheprovider -m "not vllm" "$@" || status=$?
if [ "${HOSTGAP_TEST_VLLM:-${CI:-}}" ] && [ "${HOSTGAP_TEST_VLLM:-1}" != 0 ]; then
  bash scripts/install-vllm.sh
  .venv-vllm/bin/python -m pytest -p no:cacheprovider -q -m vllm tests/test_vllm_integration.py tests/test_vllm_tp_integration.py || status=$?
fi
exit $status
