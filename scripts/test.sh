#!/usr/bin/env bash
# The tests on a fresh machine: set up .venv, the code checks (scripts/lint.sh: layers, lint,
# format, types; HOSTGAP_LINT=0 skips them), then pytest (slow end-to-end tests included; pass
# -m "not slow" to skip them). Extra arguments go to pytest.
# With CI set (or HOSTGAP_TEST_VLLM=1) it also builds .venv-vllm (scripts/install-vllm.sh) and
# runs every test marked vllm (the engine tests and the real OpenAI server, started once).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# The HTML report tests render in headless Chromium (Debian's package); without it they skip.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "hostgap test: chromium could not be installed; report rendering tests will skip" >&2
fi
# The rules tests run promtool, the fleet tests a real Prometheus (Debian's package, 2.42); its
# install script would start a service on :9090, which policy-rc.d refuses. Without it they skip.
if ! command -v promtool >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
    && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) \
    || echo "hostgap test: prometheus could not be installed; the rules and fleet tests will skip" >&2
  rm -f /usr/sbin/policy-rc.d
fi
status=0
if [ "${HOSTGAP_LINT:-1}" != 0 ]; then
  bash scripts/lint.sh || status=$?
fi
.venv/bin/python -m pytest -p no:cacheprovider -m "not vllm" "$@" || status=$?
# A child is forked only from a process with no other thread: the tests of the forked analysis
# again in a fresh process, where they must run (in the suite above, threads an earlier test
# left, such as tqdm's monitor, skip them)
HOSTGAP_TEST_FORK=1 .venv/bin/python -m pytest -p no:cacheprovider -q tests/test_parallel_beside.py \
  tests/test_analysis_beside.py || status=$?
# The suite above reads Kineto JSON with the compiled decoder (hostgap.readers._kcolumns) when it is
# built; the loader tests run again on the pure-Python decoder, the path of a machine without one.
if .venv/bin/python -c 'import hostgap.readers._kcolumns' 2>/dev/null; then
  HOSTGAP_PURE_PYTHON=1 .venv/bin/python -m pytest -p no:cacheprovider -q -m "not slow and not vllm" \
    tests/test_load_kineto.py tests/test_load_streaming.py tests/test_load_hostile.py tests/test_load_timestamps.py \
    tests/test_load_pins_decimal.py tests/test_kineto_fuzz.py tests/test_fuzz_loaders.py \
    tests/test_fuzz_regressions.py tests/test_corpus.py tests/test_load_text.py || status=$?
fi
if [ "${HOSTGAP_TEST_VLLM:-${CI:-}}" ] && [ "${HOSTGAP_TEST_VLLM:-1}" != 0 ]; then
  bash scripts/install-vllm.sh
  # every test marked vllm; the real OpenAI server (tests/vllm_server.py) starts once for the session
  .venv-vllm/bin/python -m pytest -p no:cacheprovider -q -m vllm tests || status=$?
fi
exit $status
