"""Compare two traces (or runs) and fail when the candidate regressed.

    python examples/compare_traces.py BASELINE CANDIDATE ['host_fraction>+5%']

Exit status 1 when a condition holds (the grammar of ``hostgap compare --fail-if``).
"""

import sys

import hostgap

baseline, candidate = sys.argv[1], sys.argv[2]
condition = sys.argv[3] if len(sys.argv) > 3 else "host_fraction>+5%"
comparison = hostgap.compare(baseline, candidate, fail_if=condition)
for row in comparison.metrics.to_pylist():
    if row["metric"] in ("wall_ns", "host_exposed_ns", "host_fraction"):
        print(f"{row['metric']:>16}: {row['a']} -> {row['b']} ({row['basis']})")
print("regressed:" if comparison.failed else "no regression:", condition)
sys.exit(1 if comparison.failed else 0)
