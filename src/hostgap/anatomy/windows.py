"""Step windows and the device-op table: built once per trace, read by every part of the anatomy.

**Step windows** (METHOD.md §3). For step i with marker [start_i, marker_end_i]:

- ``next_start`` = start of step i+1 (int64 max for the last step);
- ``cpu_end`` = next_start (the last step: its marker end): the host works on step i until then,
  and a host event belongs to the step whose CPU window [start, cpu_end] holds its start (a
  time exactly on a boundary belongs to the later step);
- ``wall_end`` = next_start; for the last step max(marker end, end of its last GPU op).
  Wall = start → wall_end.

**Device ops** are the GPU ops (kernels, copies, memsets) or, on a CPU-only trace, the CPU-compute
analogue (:func:`hostgap.anatomy.timeline.cpu_compute_mask`), with what the rest of the anatomy
needs about each: its launch, when the GPU had it (``enqueue_ns``: the launch call's end), the
step that launched it, and whether it came from outside the capture.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from hostgap.anatomy.link import Links, row_dtype
from hostgap.events import HOST_API_KINDS, NONE, Kind, Trace

INT_MIN = np.iinfo(np.int64).min
INT_MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class StepWindows:
    """The time windows of every step (arrays of int64 ns, one entry per step)."""

    names: list[str]
    start_ns: np.ndarray
    marker_end_ns: np.ndarray
    next_start_ns: np.ndarray
    cpu_end_ns: np.ndarray
    wall_end_ns: np.ndarray
    thread: np.ndarray  # the host thread of each step's marker (NONE: the whole trace)

    def __len__(self) -> int:
        return len(self.start_ns)

    @cached_property  # read once per step: computing it per read would be steps x steps
    def wall_ns(self) -> np.ndarray:
        return np.maximum(self.wall_end_ns - self.start_ns, 0)

    def step_of(self, t: np.ndarray) -> np.ndarray:
        """Index of the step whose CPU window holds time ``t`` (NONE outside every step)."""
        return step_of(t, self.start_ns, self.marker_end_ns)


def step_of(t: np.ndarray, start: np.ndarray, marker_end: np.ndarray) -> np.ndarray:
    """Index of the step whose CPU window (start → next start; the last: → its marker end)
    holds ``t``; NONE outside every step."""
    if not len(start):
        return np.full(len(t), NONE, dtype=np.int64)
    i = np.searchsorted(start, t, side="right") - 1
    last = len(start) - 1
    ok = (i >= 0) & ((i < last) | (t <= marker_end[last]))
    return np.where(ok, i, NONE).astype(np.int64)


def marker_windows(trace: Trace, rows: np.ndarray) -> StepWindows:
    """Windows of the marker ``rows`` (any order); no rows: the whole trace is one step."""
    ev = trace.events
    if not len(rows):
        if not len(ev):
            z = np.zeros(0, np.int64)
            return StepWindows([], z, z, z, z, z, z)
        start, end, names = np.array([ev.start_ns.min()]), np.array([ev.end_ns.max()]), ["whole trace"]
        thread = np.array([NONE], dtype=np.int64)
    else:
        rows = rows[np.argsort(ev.start_ns[rows], kind="stable")]
        start, end, names = ev.start_ns[rows], ev.end_ns[rows], trace.names_of(rows)
        thread = ev.tid[rows].astype(np.int64)
    nxt = np.append(start[1:], INT_MAX).astype(np.int64)
    cpu_end = np.append(start[1:], end[-1]).astype(np.int64)
    return StepWindows(names, start.astype(np.int64), end.astype(np.int64), nxt, cpu_end, cpu_end.copy(), thread)


def with_wall_end(windows: StepWindows, last_op_end_ns: int | None) -> StepWindows:
    """The windows with the last step's wall running to max(its marker end, its last GPU op)."""
    if not len(windows):
        return windows
    wall_end = windows.cpu_end_ns.copy()
    if last_op_end_ns is not None:
        wall_end[-1] = max(int(wall_end[-1]), int(last_op_end_ns))
    return replace(windows, wall_end_ns=wall_end)


@dataclass(frozen=True)
class DeviceOps:
    """One row per device op, sorted like the trace (by start). ``device`` is NONE on a
    CPU-only trace (one pseudo-device)."""

    activity: str  # "gpu" or "cpu-compute"
    rows: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    kind: np.ndarray
    device: np.ndarray
    is_kernel: np.ndarray
    launch_row: np.ndarray  # NONE: no launch partner in the trace
    enqueue_ns: np.ndarray  # when the GPU had the op: its launch call's end; INT_MIN without a launch
    step: np.ndarray  # step of the launch call (NONE: outside every step)
    outside: np.ndarray  # launched before the capture (see device_ops)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def gpu(self) -> bool:
        return self.activity == "gpu"


def device_ops(trace: Trace, links: Links, activity: str, rows: np.ndarray, windows: StepWindows) -> DeviceOps:
    """The device-op table of ``rows`` (see :class:`DeviceOps`).

    A GPU op belongs to the step whose CPU window holds its launch call's start. It was launched
    *before the capture* when its launch precedes the first step, or when it has no launch
    partner and either its correlation id is below the first captured launch call's (same
    process) or it starts before the first step. CPU-compute ops run synchronously: they belong
    to the step that holds their start, and the CPU "has" them when they start.
    """
    ev = trace.events
    s, e = ev.start_ns[rows], ev.end_ns[rows]
    kind = ev.kind[rows]
    if activity != "gpu":
        none = np.full(len(rows), NONE, dtype=np.int64)
        return DeviceOps(
            activity,
            rows,
            s,
            e,
            kind,
            none.astype(np.int32),
            np.ones(len(rows), dtype=bool),
            none,
            s.copy(),
            windows.step_of(s),
            np.zeros(len(rows), dtype=bool),
        )
    launch = links.launch_of[rows]
    linked = launch >= 0
    at = np.where(linked, ev.start_ns[np.maximum(launch, 0)], INT_MIN)
    first = windows.start_ns[0] if len(windows) else INT_MIN
    early_corr = ~linked & _before_first_launch(trace, rows)
    before = np.where(linked, at < first, early_corr | (s < first))
    enqueue = np.where(linked, ev.end_ns[np.maximum(launch, 0)], INT_MIN)
    step = np.where(linked, windows.step_of(at), NONE)
    return DeviceOps(activity, rows, s, e, kind, ev.device[rows], kind == Kind.KERNEL, launch, enqueue, step, before)


def _before_first_launch(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Per GPU-op row: is its correlation id below every captured host call's of its process?"""
    ev = trace.events
    api = ev.of_kind(*HOST_API_KINDS) & (ev.correlation != NONE)
    keys, first = _min_by_key(ev.link_key[api], ev.correlation[api])
    out = np.zeros(len(rows), dtype=bool)
    if not len(keys):
        return out
    k, c = ev.link_key[rows], ev.correlation[rows]
    pos = np.minimum(np.searchsorted(keys, k), len(keys) - 1)
    return (keys[pos] == k) & (c != NONE) & (c < first[pos])


def _min_by_key(key: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(key):
        return key, value
    uniq, inv = np.unique(key, return_inverse=True)
    out = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(out, inv, value)
    return uniq, out


def host_api_steps(trace: Trace, windows: StepWindows) -> tuple[np.ndarray, np.ndarray]:
    """(host API rows, full-length step index per trace row: NONE for other rows)."""
    ev = trace.events
    host_rows = np.flatnonzero(ev.of_kind(*HOST_API_KINDS))
    host_step = np.full(len(ev), NONE, dtype=row_dtype(len(ev)))  # a step index fits a row index
    host_step[host_rows] = windows.step_of(ev.start_ns[host_rows])
    return host_rows, host_step
