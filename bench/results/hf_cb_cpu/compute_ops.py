"""Where two runs' CPU compute per decode step differs: the compute ops (hostgap's CPU-compute
analogue, anatomy.timeline.cpu_compute_mask) of each run's kept N2 trace, summed by name inside
the steady decode steps' windows, per step; the largest differences first.
Usage: python compute_ops.py RUN_A RUN_B [TOP]"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from hostgap.analysis.trace import analyse_trace
from hostgap.analysis.vllm_split import decode_rows
from hostgap.anatomy.timeline import activity_rows


def per_step(run_dir: Path) -> tuple[str, dict[str, float], dict[str, float]]:
    r = json.loads((run_dir / "results.json").read_text())
    a = analyse_trace(run_dir / r["anatomy_trace"])
    trace = a.trace
    rows = decode_rows(a.anatomy().to_dict()["steps"])
    _kind, ops = activity_rows(trace)
    ev = trace.events
    start, end = ev.start_ns[ops], ev.end_ns[ops]
    w0 = np.array([s["start_ns"] for s in rows])
    w1 = w0 + np.array([s["wall_ns"] for s in rows])
    k = np.searchsorted(w0, start, side="right") - 1
    inside = (k >= 0) & (start < w1[np.maximum(k, 0)])
    ns, count = defaultdict(float), defaultdict(float)
    for name, dur in zip(trace.names_of(ops[inside]), (end - start)[inside]):
        ns[name] += dur / len(rows)
        count[name] += 1 / len(rows)
    return r["engine"], ns, count


if __name__ == "__main__":
    (ea, a, ca), (eb, b, cb) = per_step(Path(sys.argv[1])), per_step(Path(sys.argv[2]))
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    print(
        f"compute per decode step: {ea} {sum(a.values()) / 1e6:.3f} ms ({sum(ca.values()):.0f} ops), "
        f"{eb} {sum(b.values()) / 1e6:.3f} ms ({sum(cb.values()):.0f} ops)"
    )
    for name in sorted(set(a) | set(b), key=lambda n: -abs(b.get(n, 0) - a.get(n, 0)))[:top]:
        print(
            f"  {name:40s} {a.get(name, 0) / 1e3:8.1f} µs ({ca.get(name, 0):4.1f})  "
            f"{b.get(name, 0) / 1e3:8.1f} µs ({cb.get(name, 0):4.1f})  {(b.get(name, 0) - a.get(name, 0)) / 1e3:+8.1f} µs"
        )
