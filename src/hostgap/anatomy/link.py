"""Links between events: launch → GPU op(s), launch → framework op → Python frame.

All joins are vectorised: launch → kernel is one sorted join on (link_key, correlation);
"which op encloses this launch" is a sorted-array search over properly nested intervals on
each thread, walking parent pointers level by level (a few dozen numpy passes at most, never
a Python loop per event).

Row links are held as int32 (:func:`row_dtype`; int64 only for a table of 2^31 rows or more):
on a large trace they are kept for the whole analysis, beside the event table itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hostgap.events import GPU_OP_KINDS, HOST_API_KINDS, NONE, Kind, Trace

PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")


def row_dtype(n: int) -> np.dtype:
    """The narrowest signed integer type that holds every row index of an n-row table and NONE."""
    return np.dtype(np.int32) if n < 2**31 else np.dtype(np.int64)


@dataclass(frozen=True)
class Nesting:
    """Properly nested intervals of one kind on each host thread, with parent pointers.

    ``rows`` are trace rows sorted by (thread, start, -end); ``parent[i]`` is the position (in
    ``rows``) of the innermost interval enclosing interval i, or NONE.
    """

    rows: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    parent: np.ndarray

    @staticmethod
    def build(trace: Trace, mask: np.ndarray) -> Nesting:
        ev = trace.events
        rows = np.flatnonzero(mask).astype(row_dtype(len(ev)))
        order = np.lexsort((-ev.end_ns[rows], ev.start_ns[rows], ev.tid[rows]))
        rows = rows[order]
        del order
        thread, start, end = ev.tid[rows], ev.start_ns[rows], ev.end_ns[rows]
        parent = np.full(len(rows), NONE, dtype=rows.dtype)
        for lo, hi in _runs(thread):
            p = _parents(start[lo:hi], end[lo:hi])
            parent[lo:hi] = np.where(p >= 0, p + lo, NONE)
        return Nesting(rows, thread, start, end, parent)

    def innermost(self, thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Position of the innermost interval on ``thread`` enclosing [start, end], or NONE."""
        out = np.full(len(start), NONE, dtype=self.parent.dtype)
        for lo, hi, th in self._thread_runs():  # no intervals: no runs; no queries: no q below
            q = np.flatnonzero(thread == th)
            if not len(q):
                continue
            idx = np.searchsorted(self.start[lo:hi], start[q], side="right") - 1
            idx = np.where(idx >= 0, idx + lo, NONE).astype(self.parent.dtype)
            # walk up while the candidate does not enclose the query: only the queries still
            # walking are looked at again (most stop at the first candidate)
            walk = np.flatnonzero(idx >= 0)
            q_end = end[q[walk]]
            for _ in range(256):
                bad = self.end[idx[walk]] < q_end
                if not bad.any():
                    break
                walk, q_end = walk[bad], q_end[bad]
                idx[walk] = self.parent[idx[walk]]
                live = idx[walk] >= 0
                walk, q_end = walk[live], q_end[live]
            out[q] = idx
        return out

    @cached_property
    def root(self) -> np.ndarray:
        """Position of the outermost ancestor of every interval (itself when top-level)."""
        root = np.where(self.parent >= 0, self.parent, np.arange(len(self.parent), dtype=self.parent.dtype))
        while True:
            nxt = root[root]
            if np.array_equal(nxt, root):
                return root
            root = nxt

    @cached_property
    def has_child(self) -> np.ndarray:
        out = np.zeros(len(self.rows), dtype=bool)
        p = self.parent[self.parent >= 0]
        out[p] = True
        return out

    def _thread_runs(self):
        for lo, hi in _runs(self.thread):
            yield lo, hi, self.thread[lo]


def _runs(values: np.ndarray):
    """(lo, hi) bounds of runs of equal consecutive values."""
    if not len(values):
        return
    cut = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = np.concatenate(([0], cut, [len(values)]))
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        yield int(lo), int(hi)


def _parents(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Parent positions for intervals sorted by (start, -end), assumed properly nested.

    depth_i = number of earlier intervals still open at start_i; the parent of i is the last
    earlier interval at depth_i - 1 (in a proper nesting it is necessarily still open).
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.arange(n)
    # closed_i = #{j < i : end_j <= start_i}. Counting over all j also counts zero-length
    # intervals that start at start_i and sort at or after i (i itself, when zero-length):
    # they are the last ones of their same-start group, so subtract them.
    closed = np.searchsorted(np.sort(end), start, side="right")
    zero_starts = np.sort(start[end == start])
    zc = np.searchsorted(zero_starts, start, "right") - np.searchsorted(zero_starts, start, "left")
    group_end = np.searchsorted(start, start, side="right")
    closed -= np.maximum(0, group_end - np.maximum(idx, group_end - zc))
    depth = np.maximum(idx - np.minimum(closed, idx), 0)
    key_order = np.lexsort((idx, depth))
    keys = depth[key_order] * (n + 1) + idx[key_order]
    query = (depth - 1) * (n + 1) + idx
    pos = np.searchsorted(keys, query, side="left") - 1
    parent = np.full(n, NONE, dtype=np.int64)
    ok = (depth > 0) & (pos >= 0)
    cand = key_order[pos[ok]]
    good = depth[cand] == depth[ok] - 1
    sel = np.flatnonzero(ok)[good]
    parent[sel] = cand[good]
    # guard against improperly nested input: a parent must enclose its child
    bad = (parent >= 0) & ((start[np.maximum(parent, 0)] > start) | (end[np.maximum(parent, 0)] < end))
    parent[bad] = NONE
    return parent


@dataclass(frozen=True)
class Launches:
    """The launch join: which host call enqueued each GPU op."""

    launch_of: np.ndarray  # GPU op row -> host API row that enqueued it
    gpu_ops_of_launch: np.ndarray  # host API row -> number of GPU ops it enqueued
    unlinked_gpu_ops: int  # GPU ops (kernel/memcpy/memset) without a launch partner


@dataclass(frozen=True)
class Enclosing:
    """What encloses each host call: its framework ops and their Python frames. ``frame_of`` is
    None where the trace has no Python frames (:attr:`Links.frame_of` is then NONE everywhere)."""

    op_of: np.ndarray  # host API row -> innermost enclosing CPU_OP row
    top_op_of: np.ndarray  # host API row -> outermost enclosing CPU_OP row
    frame_of: np.ndarray | None  # CPU_OP row -> innermost enclosing PYTHON row
    ops: Nesting  # nesting of CPU_OP events per thread
    frames: Nesting  # nesting of PYTHON events per thread


class Links:
    """Row-indexed links over a whole trace (arrays of trace rows; NONE where absent): the
    launch join and the enclosures. The enclosures may be given as a function that returns them
    (computed elsewhere meanwhile, :func:`hostgap.parallel.beside`), called once, when a part
    that needs them is first read: the launch join alone serves the GPU timeline and the steps'
    split, the enclosures only TaxBreak and the host rankings."""

    def __init__(self, launches: Launches, enclosing: Enclosing | Callable[[], Enclosing]) -> None:
        self.launches = launches
        self._enclosing = enclosing

    @cached_property
    def enclosing(self) -> Enclosing:
        e = self._enclosing
        return e if isinstance(e, Enclosing) else e()

    @property
    def launch_of(self) -> np.ndarray:
        return self.launches.launch_of

    @property
    def gpu_ops_of_launch(self) -> np.ndarray:
        return self.launches.gpu_ops_of_launch

    @property
    def unlinked_gpu_ops(self) -> int:
        return self.launches.unlinked_gpu_ops

    @property
    def op_of(self) -> np.ndarray:
        return self.enclosing.op_of

    @property
    def top_op_of(self) -> np.ndarray:
        return self.enclosing.top_op_of

    @cached_property
    def frame_of(self) -> np.ndarray:
        f = self.enclosing.frame_of
        if f is not None:
            return f
        # no Python frames (most GPU traces): every row NONE, read-only, without its memory
        n = len(self.launches.launch_of)
        return np.broadcast_to(np.array(NONE, dtype=row_dtype(n)), (n,))

    @property
    def ops(self) -> Nesting:
        return self.enclosing.ops

    @property
    def frames(self) -> Nesting:
        return self.enclosing.frames


def link(trace: Trace) -> Links:
    """Build every link for ``trace`` (see :class:`Links`)."""
    return Links(launch_links(trace), enclosing_links(trace))


def launch_links(trace: Trace) -> Launches:
    """The launch join: each GPU op's launch, each launch's GPU op count."""
    ev = trace.events
    n = len(ev)
    rdt = row_dtype(n)
    gpu = ev.of_kind(*GPU_OP_KINDS)
    launch_of = np.full(n, NONE, dtype=rdt)
    gpu_rows = np.flatnonzero(gpu & (ev.correlation != NONE))
    api_rows = np.flatnonzero(ev.of_kind(*HOST_API_KINDS) & (ev.correlation != NONE))
    # (no GPU op or no host call: the join finds nothing, no guard needed)
    order = np.lexsort((ev.correlation[api_rows], ev.link_key[api_rows]))
    a_rows = api_rows[order]
    del api_rows, order
    pos = _search_pairs(ev.link_key[a_rows], ev.correlation[a_rows], ev.link_key[gpu_rows], ev.correlation[gpu_rows])
    hit = pos >= 0
    launch_of[gpu_rows[hit]] = a_rows[pos[hit]]
    del gpu_rows, a_rows, pos, hit
    linked = launch_of[launch_of >= 0]
    counts = np.bincount(linked, minlength=n).astype(rdt, copy=False) if n else np.zeros(0, rdt)
    del linked
    return Launches(launch_of, counts, int(np.sum(gpu & (launch_of == NONE))))


def enclosing_links(trace: Trace) -> Enclosing:
    """Each host call's enclosing framework ops, each top-level op's Python frame."""
    ev = trace.events
    n = len(ev)
    rdt = row_dtype(n)
    op_of = np.full(n, NONE, dtype=rdt)
    top_op_of = np.full(n, NONE, dtype=rdt)
    # legacy traces record ProfilerStep#N ranges as ops (category "Operator"): step markers,
    # never the framework op that encloses a launch
    ops = Nesting.build(trace, (ev.kind == Kind.CPU_OP) & ~trace.name_mask(PROFILER_STEP.match))
    host_api = np.flatnonzero(ev.of_kind(*HOST_API_KINDS))
    # (innermost finds nothing when either side is empty: no guards needed)
    pos = ops.innermost(ev.tid[host_api], ev.start_ns[host_api], ev.end_ns[host_api])
    hit = pos >= 0
    host_api, pos = host_api[hit], pos[hit]
    del hit
    op_of[host_api] = ops.rows[pos]
    top_op_of[host_api] = ops.rows[ops.root[pos]]
    del host_api, pos
    frames = Nesting.build(trace, ev.kind == Kind.PYTHON)
    frame_of = None
    if len(frames.rows):
        frame_of = np.full(n, NONE, dtype=rdt)
        top = ops.rows[ops.parent < 0]
        pos = frames.innermost(ev.tid[top], ev.start_ns[top], ev.end_ns[top])
        hit = pos >= 0
        frame_of[top[hit]] = frames.rows[pos[hit]]
    return Enclosing(op_of, top_op_of, frame_of, ops, frames)


def _search_pairs(a_key, a_corr, q_key, q_corr) -> np.ndarray:
    """Positions in (a_key, a_corr) — sorted lexicographically — of each query pair, or NONE."""
    out = np.full(len(q_key), NONE, dtype=np.int64)
    for key in np.unique(q_key):
        lo, hi = np.searchsorted(a_key, key, "left"), np.searchsorted(a_key, key, "right")
        if lo == hi:
            continue
        q = np.flatnonzero(q_key == key)
        corr = a_corr[lo:hi]
        p = np.searchsorted(corr, q_corr[q])
        p = np.minimum(p, hi - lo - 1)
        ok = corr[p] == q_corr[q]
        out[q[ok]] = p[ok] + lo
    return out
