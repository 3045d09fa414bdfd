"""``hostgap trim``: the rows of a trace that belong to a range of steps."""

from __future__ import annotations

import numpy as np

from hostgap.anatomy.markers import find_markers
from hostgap.errors import HostgapError
from hostgap.events import GPU_OP_KINDS, Kind, Trace
from hostgap.link import Links, link


def parse_range(text: str, n_steps: int) -> tuple[int, int]:
    """``A:B`` (end exclusive, Python slice rules, either side optional) → (a, b)."""
    try:
        a, b = text.split(":")
        sl = slice(int(a) if a.strip() else None, int(b) if b.strip() else None)
    except ValueError:
        raise HostgapError("--steps", f"expected A:B (e.g. 2:5), got {text!r}") from None
    a, b, _ = sl.indices(n_steps)
    if a >= b:
        raise HostgapError("--steps", f"{text!r} selects no step (the trace has {n_steps})")
    return a, b


def trim_rows(trace: Trace, a: int, b: int, step_marker: str | None = None,
              links: Links | None = None) -> np.ndarray:
    """Rows of steps a..b-1: host events that start inside their CPU windows, and the GPU work
    those steps launched (whenever it ran)."""
    links = links if links is not None else link(trace)
    ev = trace.events
    _, markers = find_markers(trace, step_marker)
    if not len(markers):
        raise HostgapError(trace.meta.path, "no step markers: nothing to trim by")
    starts = np.sort(ev.start_ns[markers])
    ends = ev.end_ns[markers][np.argsort(ev.start_ns[markers], kind="stable")]
    lo = starts[a]
    hi = starts[b] if b < len(starts) else ends[-1]
    gpu_side = ev.kind <= Kind.GPU_ANNOTATION
    host = ~gpu_side & (ev.start_ns >= lo) & (ev.start_ns < hi if b < len(starts) else ev.start_ns <= hi)
    launch = links.launch_of
    gpu = ev.of_kind(*GPU_OP_KINDS) & (launch >= 0)
    gpu[gpu] = host[launch[gpu]]
    last_gpu = ev.end_ns[gpu].max() if gpu.any() else hi
    ann = (ev.kind == Kind.GPU_ANNOTATION) & (ev.end_ns > lo) & (ev.start_ns < last_gpu)
    return np.flatnonzero(host | gpu | ann)
