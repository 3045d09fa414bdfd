"""Causal idle attribution (docs/method.md §3 "Idle causes"): why the GPU was idle, per step and
per device, with causes that tile the idle time exactly.

Per device, the timeline is cut into busy time (the union of *all* its ops: any step's, and work
launched before the capture) and idle gaps. A gap [g0, g1) ends at the ops that start at g1.
Let P be the earliest time at which any op that starts at or after g1 had been handed to the GPU
(its launch call's end; −∞ for an op whose launch is not in the trace). Then:

- **host** = [g0, min(P, g1)): no later work had been launched yet, the GPU waited on the host;
- the rest [max(g0, P), g1): the GPU had work and did not start it. Its cause is
  **outside** the capture when that work was launched outside it (no launch in the trace, or
  launched before the first step); **dependency** when the work shows a wait: the op pending
  longest (earliest hand-over) is not one of the ops that end the gap (later work ran first: it
  was held by an event, another stream or device), or it or an op that ends the gap was launched
  right after a stream/event wait call on its thread, is a collective, is a peer copy, or is a
  later op of a graph replay that had already begun (the graph's own edges); **unexplained**
  else (e.g. a launch latency past the launch call's end);
- the device's first gap, when its op waited longer than the tolerance (the idle-gap threshold,
  30 µs by default) after its launch with nothing before it on the device: **outside**, whole
  (the device was busy with work the capture does not contain: a FULL-graph replay queued
  behind the previous step's work);
- after a device's last op: **host** (the host launched nothing more).

Ties: an op's launch call ending exactly at g0 makes the whole gap non-host (P = g0). For the
step as a whole, an instant is idle when every device of the step is idle, and its cause is the
first, in the order host, dependency, outside, unexplained, that any of those devices has then
(a device waiting on the host holds the step back even while another waits on a collective).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hostgap.anatomy.intervals import covered_each, merge
from hostgap.anatomy.link import Links
from hostgap.anatomy.windows import INT_MIN, DeviceOps, StepWindows
from hostgap.events import HOST_API_KINDS, NONE, CopyKind, Kind, Trace, distinct

CAUSES = ("host", "dependency", "outside", "unexplained")
BUSY, HOST, DEPENDENCY, OUTSIDE, UNEXPLAINED = range(5)
"""State codes; lower wins when devices are combined (busy anywhere = the step is busy)."""

COLLECTIVE = (
    "nccl",
    "rccl",
    "allreduce",
    "all_reduce",
    "allgather",
    "all_gather",
    "reducescatter",
    "reduce_scatter",
    "sendrecv",
    "alltoall",
    "cross_device_reduce",
)
"""Substrings (lower case) of collective kernel names: they wait for the other ranks."""


def is_collective(name: str) -> bool:
    low = name[:200].lower()  # the name's head says it; template arguments can run to kilobytes
    return any(c in low for c in COLLECTIVE)


STREAM_WAIT = re.compile(r"StreamWaitEvent|StreamWaitValue|WaitExternalSemaphore|cuStreamWait")
"""Host calls that make later work on a stream wait for an event."""


@dataclass(frozen=True)
class DeviceStates:
    """A device's timeline as disjoint pieces tiling [lo, hi): start, end, state code."""

    device: int
    start: np.ndarray
    end: np.ndarray
    code: np.ndarray


@dataclass(frozen=True)
class IdleAttribution:
    """Per step: time by state (columns BUSY..UNEXPLAINED) inside its wall, for the step as a
    whole (``step``, union basis) and per device (``per_device[j]`` for ``devices[j]``, with
    ``in_step[:, j]`` saying whether the device belongs to the step). ``held`` marks the device
    ops that ended a gap with a dependency or outside-the-capture part (their launch-to-start
    time includes a wait)."""

    devices: np.ndarray
    step: np.ndarray
    per_device: list[np.ndarray]
    in_step: np.ndarray
    held: np.ndarray


def dependency_evidence(trace: Trace, links: Links, ops: DeviceOps) -> np.ndarray:
    """Per device op: does it show that it waited on something other than the host?
    (On a CPU-only trace an op is "handed over" when it starts, so it never waits and the
    evidence is never read.)"""
    ev = trace.events
    collective = trace.name_mask(is_collective)[ops.rows] & ops.is_kernel
    linked = ops.launch_row >= 0
    launch = np.maximum(ops.launch_row, 0)
    # (a blocking copy call returns only after its copy ran: the copy is never pending after
    # its hand-over, so it needs no rule of its own; the wait it imposes is the host's)
    peer = (ops.kind == Kind.MEMCPY) & (ev.copy_kind[ops.rows] == CopyKind.P2P)
    after_wait = linked & _after_stream_wait(trace)[launch]
    # a graph replay's later ops follow the graph's own edges (event, stream and host nodes)
    graph = linked & (ev.kind[launch] == Kind.GRAPH_LAUNCH)
    first = np.full(len(ev), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, launch[linked], ops.start_ns[linked])
    in_graph = graph & (ops.start_ns > first[launch])
    return collective | peer | after_wait | in_graph


def _after_stream_wait(trace: Trace) -> np.ndarray:
    """Full-length mask: host API calls whose previous host API call on the thread is a stream
    wait (the wait applies to the work enqueued next)."""
    ev = trace.events
    out = np.zeros(len(ev), dtype=bool)
    api = np.flatnonzero(ev.of_kind(*HOST_API_KINDS))
    if len(api) < 2:
        return out
    api = api[np.lexsort((ev.start_ns[api], ev.tid[api]))]
    wait = trace.name_mask(STREAM_WAIT.search)[api]
    same = ev.tid[api][1:] == ev.tid[api][:-1]
    out[api[1:]] = same & wait[:-1]
    return out


def device_states(
    ops: DeviceOps, sel: np.ndarray, dep: np.ndarray, lo: int, hi: int, tolerance_ns: int
) -> tuple[DeviceStates, np.ndarray]:
    """The timeline of the ops ``sel`` (indices into ``ops``, all on one device) over [lo, hi),
    and the indices (into ``ops``) of the ops that ended a gap whose non-host part is a
    dependency or lies outside the capture."""
    sel = sel[np.argsort(ops.start_ns[sel], kind="stable")]
    s, e = ops.start_ns[sel], ops.end_ns[sel]
    enq = ops.enqueue_ns[sel]
    seg_s, seg_e = merge(s, e)
    k = len(seg_s)
    g0 = np.concatenate(([lo], seg_e))
    g1 = np.concatenate((seg_s, [hi]))
    # earliest hand-over among the ops that start at or after each gap's end (the last gap: none)
    first = np.searchsorted(s, seg_s, side="left")
    last = np.searchsorted(s, seg_s, side="right")
    sufmin = np.minimum.accumulate(enq[::-1])[::-1]
    pending = np.append(sufmin[first], hi)
    cut = np.clip(pending, g0, g1)
    # the op that had been waiting longest (earliest hand-over) when each gap ended
    held_op = _record_at_or_after(enq, sufmin)[first]
    other = held_op >= last  # it is not among the ops that end the gap: held behind a dependency
    rest = np.full(k + 1, UNEXPLAINED, dtype=np.int8)
    waits = _any_in(dep[sel], first, last) | dep[sel][held_op] | other
    rest[:k] = np.where(waits, DEPENDENCY, UNEXPLAINED)
    outside = _any_in(ops.outside[sel], first, last) | ops.outside[sel][held_op] | (pending[:k] == INT_MIN)
    rest[:k] = np.where(outside, OUTSIDE, rest[:k])
    host = np.full(k + 1, HOST, dtype=np.int8)
    lead_out = bool(k and g1[0] - cut[0] > tolerance_ns)
    if lead_out:
        # the device's first op waited long after its launch with nothing before it in the
        # trace: the device was busy with work the capture does not contain
        host[0] = rest[0] = OUTSIDE
    starts = np.concatenate((seg_s, g0, cut))
    ends = np.concatenate((seg_e, cut, g1))
    codes = np.concatenate((np.full(k, BUSY, np.int8), host, rest))
    keep = ends > starts
    order = np.argsort(starts[keep], kind="stable")
    # ops that end a gap after waiting in it, with a wait of their own (evidence, outside work,
    # or the long first wait): their launch-to-start time is not launch path
    gap_of = np.searchsorted(seg_s, s, side="left")
    ends_gap = (gap_of < k) & (s == seg_s[np.minimum(gap_of, max(k - 1, 0))]) & (s > g0[np.minimum(gap_of, k)])
    own = dep[sel] | ops.outside[sel] | (lead_out & (gap_of == 0))
    held = sel[ends_gap & (enq < s) & own]
    dev = int(ops.device[sel[0]]) if len(sel) else NONE
    return DeviceStates(dev, starts[keep][order], ends[keep][order], codes[keep][order]), held


def combine(states: list[DeviceStates]) -> DeviceStates:
    """The union-basis timeline of several devices that tile the same range: at each instant the
    lowest code (busy anywhere wins, then host, dependency, outside, unexplained)."""
    cuts = distinct(np.concatenate([d.start for d in states]))
    code = np.full(len(cuts), UNEXPLAINED, dtype=np.int8)
    for d in states:
        code = np.minimum(code, d.code[np.searchsorted(d.start, cuts, side="right") - 1])
    end = np.append(cuts[1:], int(states[0].end[-1]))  # every device's timeline ends at the same hi
    return DeviceStates(NONE, cuts, end, code)


def time_by_state(d: DeviceStates, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(len(lo), 5): time of each window [lo, hi) spent in each state."""
    out = np.zeros((len(lo), 5), dtype=np.int64)
    for c in range(5):
        m = d.code == c
        out[:, c] = covered_each(lo, hi, d.start[m], d.end[m])
    return out


def attribute(trace: Trace, links: Links, ops: DeviceOps, windows: StepWindows, tolerance_ns: int) -> IdleAttribution:
    """Busy time and idle causes inside every step's wall, per device and for the step as a whole."""
    n = len(windows)
    w_lo, w_hi = windows.start_ns, windows.wall_end_ns
    devices = distinct(ops.device)
    held = np.zeros(len(ops), dtype=bool)
    if not n:
        return IdleAttribution(devices, np.zeros((0, 5), np.int64), [], np.zeros((0, len(devices)), bool), held)
    lo = int(min(w_lo.min(), ops.start_ns.min())) if len(ops) else int(w_lo.min())
    hi = int(max(w_hi.max(), ops.end_ns.max())) if len(ops) else int(w_hi.max())
    dep = dependency_evidence(trace, links, ops)
    states = []
    for d in devices:
        st, h = device_states(ops, np.flatnonzero(ops.device == d), dep, lo, hi, tolerance_ns)
        states.append(st)
        held[h] = True
    per_device = [time_by_state(st, w_lo, w_hi) for st in states]
    # the devices of a step: those its own ops ran on (all devices when it launched none)
    in_step = np.zeros((n, len(devices)), dtype=bool)
    mine = ops.step >= 0
    in_step[ops.step[mine], np.searchsorted(devices, ops.device[mine])] = True
    in_step[~in_step.any(axis=1)] = True
    step = np.zeros((n, 5), dtype=np.int64)
    if not len(devices):  # no device ops at all: every step is idle, the host launched nothing
        step[:, HOST] = w_hi - w_lo
        return IdleAttribution(devices, step, per_device, in_step, held)
    groups, inverse = np.unique(in_step, axis=0, return_inverse=True)
    for g, members in enumerate(groups):
        idx = np.flatnonzero(inverse.ravel() == g)
        union = combine([states[j] for j in np.flatnonzero(members)])
        step[idx] = time_by_state(union, w_lo[idx], w_hi[idx])
    return IdleAttribution(devices, step, per_device, in_step, held)


def _record_at_or_after(values: np.ndarray, sufmin: np.ndarray) -> np.ndarray:
    """For each position f, the first position j >= f where values[j] is the suffix minimum
    (the op that achieves sufmin[f])."""
    n = len(values)
    idx = np.where(values == sufmin, np.arange(n), n)
    return np.minimum.accumulate(idx[::-1])[::-1] if n else idx


def _any_in(flag: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per range [lo, hi): does ``flag`` hold anywhere in it?"""
    cs = np.concatenate(([0], np.cumsum(flag, dtype=np.int64)))
    return cs[hi] - cs[lo] > 0
