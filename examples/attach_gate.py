"""Profile a running vLLM or SGLang server under a known load and gate on a regression against a
baseline run (a run id, a run directory or a trace).

    python examples/attach_gate.py URL BASELINE [OUTPUT_FOLDER]

The server needs its profiler routes (vLLM: --profiler-config; SGLang: on by default).
"""

import sys

import hostgap

url, baseline = sys.argv[1], sys.argv[2]
output = sys.argv[3] if len(sys.argv) > 3 else "runs"
run = hostgap.attach(url, steps=8, skip=1, load=2, output_len=64, baseline=0, output=output)
print(f"attached {run.run_id}: host fraction {run.step_medians.get('host_fraction')}, {run.verdict['verdict']}")
gate = hostgap.compare(baseline, run, fail_if="host_fraction>+10pp")
print("FAIL:" if gate.failed else "ok:", ", ".join(gate.held) or "no condition held")
sys.exit(1 if gate.failed else 0)
