"""Does transformers' async batching overlap anything on a CPU? The evidence from a measured
run's kept N2 trace (hostgap's reader): which threads run ops, how much of the loop's own work
(hostgap.cb.prepare / hostgap.cb.update) runs while a forward pass (hostgap.cb.forward_sample)
does, and the forward steps per call. Usage: python overlap.py RUN_DIR [RUN_DIR ...]"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from hostgap.analysis.trace import analyse_trace
from hostgap.anatomy.intervals import covered_each, merge
from hostgap.events import Kind


def evidence(run_dir: Path) -> dict:
    r = json.loads((run_dir / "results.json").read_text())
    trace = analyse_trace(run_dir / r["anatomy_trace"]).trace
    ev = trace.events

    def rows(*names):
        return np.flatnonzero(trace.name_mask(lambda s: s in names) & ev.of_kind(Kind.ANNOTATION))

    fwd = rows("hostgap.cb.forward_sample")
    loop = rows("hostgap.cb.prepare", "hostgap.cb.update")
    seg_s, seg_e = merge(ev.start_ns[fwd], ev.end_ns[fwd])
    overlap = covered_each(ev.start_ns[loop], ev.end_ns[loop], seg_s, seg_e)
    ops = ev.kind == Kind.CPU_OP
    facts = r["engine_facts"]
    return {
        "engine": r["engine"],
        "batch": r["batch"],
        "async_mode": facts.get("async_mode"),
        "threads_running_ops": int(len(np.unique(ev.tid[ops]))),
        "loop_work_ns": int((ev.end_ns[loop] - ev.start_ns[loop]).sum()),
        "loop_work_during_forward_ns": int(overlap.sum()),
        "forward_steps_per_call_n2": (facts.get("forward_steps_per_call") or {}).get(str(r["n2"])),
        "n2": r["n2"],
    }


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(json.dumps(evidence(Path(arg))))
