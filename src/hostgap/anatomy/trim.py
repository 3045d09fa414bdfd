"""``hostgap trim``: the rows of a trace that belong to a range of steps."""

from __future__ import annotations

import numpy as np

from hostgap.anatomy.link import Links, link
from hostgap.anatomy.markers import NO_MARKERS, find_markers
from hostgap.errors import HostgapError
from hostgap.events import GPU_OP_KINDS, Kind, Trace


def parse_range(text: str, n_steps: int) -> tuple[int, int]:
    """``A:B`` (end exclusive, Python slice rules, either side optional) → (a, b)."""
    try:
        start, stop = text.split(":")
        sl = slice(int(start) if start.strip() else None, int(stop) if stop.strip() else None)
    except ValueError:
        raise HostgapError("--steps", f"expected A:B (e.g. 2:5), got {text!r}") from None
    a, b, _ = sl.indices(n_steps)
    if a >= b:
        raise HostgapError("--steps", f"{text!r} selects no step (the trace has {n_steps})")
    return a, b


def trim_rows(trace: Trace, a: int, b: int, step_marker: str | None = None, links: Links | None = None) -> np.ndarray:
    """Rows of steps a..b-1, chosen so that every step metric of the kept steps (wall, busy,
    host-exposed, host_wait and the other idle causes, flags) is the same in the trimmed trace:

    - host events that start inside the steps' CPU windows;
    - the GPU work those steps launched, whenever it ran;
    - every GPU op that runs inside the kept steps' walls, launched elsewhere or not at all
      (work queued by an earlier step, work launched before the capture): it kept the device
      busy there, and without it the device would look idle and waiting on the host;
    - per stream, the last GPU op that ended before the range: the idle gap in front of the
      range's first op keeps its true start instead of being cut at the boundary;
    - the launch calls of every kept GPU op, so kept ops stay linked.

    Work from dropped steps that is kept this way has no step in the trimmed trace: its waits
    count as *outside the capture* there (docs/anatomy.md, "Trim")."""
    links = links if links is not None else link(trace)
    ev = trace.events
    _, markers = find_markers(trace, step_marker)
    if not len(markers):
        raise HostgapError(
            trace.meta.path,
            f"{NO_MARKERS}; nothing to trim by (--step-marker REGEX names the annotations that delimit steps)",
        )
    starts = np.sort(ev.start_ns[markers])
    ends = ev.end_ns[markers][np.argsort(ev.start_ns[markers], kind="stable")]
    lo = starts[a]
    last = b >= len(starts)
    hi = ends[-1] if last else starts[b]
    gpu_side = ev.kind <= Kind.GPU_ANNOTATION
    host = ~gpu_side & (ev.start_ns >= lo) & (ev.start_ns <= hi if last else ev.start_ns < hi)
    launch = links.launch_of
    dev_op = ev.of_kind(*GPU_OP_KINDS)
    gpu = dev_op & (launch >= 0)
    gpu[gpu] = host[launch[gpu]]
    last_gpu = ev.end_ns[gpu].max() if gpu.any() else hi
    # the last kept step's wall ends at the next marker, or with its own last GPU op
    wall_end = max(last_gpu, hi) if last else hi
    gpu |= dev_op & (ev.end_ns > lo) & (ev.start_ns < wall_end)
    gpu[_last_before(ev, dev_op & ~gpu, lo)] = True
    kept_launch = launch[gpu & (launch >= 0)]
    host[kept_launch] = True
    last_gpu = max(last_gpu, ev.end_ns[gpu].max()) if gpu.any() else last_gpu
    ann = (ev.kind == Kind.GPU_ANNOTATION) & (ev.end_ns > lo) & (ev.start_ns < last_gpu)
    return np.flatnonzero(host | gpu | ann)


def _last_before(ev, candidates: np.ndarray, t: int) -> np.ndarray:
    """Rows of the op with the latest end at or before ``t`` on each (device, stream)."""
    rows = np.flatnonzero(candidates & (ev.end_ns <= t))
    if not len(rows):
        return rows
    rows = rows[np.lexsort((ev.end_ns[rows], ev.stream[rows], ev.device[rows]))]
    key = np.stack((ev.device[rows].astype(np.int64), ev.stream[rows]), axis=1)
    is_last = np.ones(len(rows), dtype=bool)
    is_last[:-1] = np.any(key[1:] != key[:-1], axis=1)
    return rows[is_last]
