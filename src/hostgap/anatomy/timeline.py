"""The GPU timeline of every device and every window (METHOD.md §1, §3, §5).

Three GPU times, never confused: **busy** (union of kernel + memcpy + memset intervals),
**kernel union** (union of kernels only), **kernel sum** (plain sum of kernel durations).
Span = first GPU op start → last GPU op end; idle = span − busy.

A *window* (``ProfilerStep#N``) is a time range: GPU ops are clipped to it by time. Steps
(engine iterations) are another thing, handled in :mod:`hostgap.anatomy.steps`.

On a CPU-only trace there is no device activity; :func:`totals` then reports the CPU-compute
analogue (see :func:`cpu_compute_mask`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import numpy as np

from hostgap.anatomy.collectives import is_comm
from hostgap.anatomy.intervals import clip, grouped_running_max, grouped_union, union_ns
from hostgap.anatomy.link import Links, Nesting
from hostgap.events import GPU_OP_KINDS, Kind, Trace, distinct

DEFAULT_GAP_THRESHOLD_NS = 30_000
"""Idle gaps shorter than this that are not host-wait are kernel-wait (METHOD.md §5)."""

IDLE_CLASSES = ("host_wait", "kernel_wait", "other")


@dataclass(frozen=True)
class GpuTimes:
    """The time keys shared by devices, windows and steps (all int64 ns)."""

    span_ns: int
    busy_ns: int
    idle_ns: int
    kernel_sum_ns: int
    kernel_union_ns: int
    kernel_count: int
    memcpy_count: int
    memcpy_ns: int
    memcpy_bytes: int
    memset_count: int
    memset_ns: int
    memset_bytes: int

    def to_dict(self) -> dict:
        """The fields in declaration order (plain ints; far cheaper than ``asdict``, which
        deep-copies, for the thousands of windows of a long trace)."""
        return dict(self.__dict__)


def gpu_times(trace: Trace, rows: np.ndarray, lo: int | None = None, hi: int | None = None) -> GpuTimes:
    """Times over GPU-op ``rows``; with ``lo``/``hi`` the ops are clipped to [lo, hi] and the
    span is the window, else the span is first op start → last op end."""
    ev = trace.events
    kind = ev.kind[rows]
    s = ev.start_ns[rows]
    e = s + ev.dur_ns[rows]  # not ev.end_ns[rows]: that builds the whole column per call
    if lo is not None:
        assert hi is not None, "gpu_times: lo and hi come together"
        s, e = clip(s, e, lo, hi)
        inside = e > s
        inside |= (ev.dur_ns[rows] == 0) & (ev.start_ns[rows] >= lo) & (ev.start_ns[rows] <= hi)
        rows, kind, s, e = rows[inside], kind[inside], s[inside], e[inside]
        span = hi - lo
    else:
        span = int(e.max() - s.min()) if len(rows) else 0
    k = kind == Kind.KERNEL
    mc = kind == Kind.MEMCPY
    ms = kind == Kind.MEMSET
    busy = union_ns(s, e)
    nbytes = ev.bytes[rows]
    return GpuTimes(
        span_ns=int(span),
        busy_ns=busy,
        idle_ns=int(span - busy),
        kernel_sum_ns=int(np.sum(e[k] - s[k])),
        kernel_union_ns=union_ns(s[k], e[k]),
        kernel_count=int(k.sum()),
        memcpy_count=int(mc.sum()),
        memcpy_ns=int(np.sum(e[mc] - s[mc])),
        memcpy_bytes=int(nbytes[mc].sum()),
        memset_count=int(ms.sum()),
        memset_ns=int(np.sum(e[ms] - s[ms])),
        memset_bytes=int(nbytes[ms].sum()),
    )


@dataclass(frozen=True)
class IdleGaps:
    """Per-stream idle gaps between consecutive GPU ops, by class (count and total ns)."""

    threshold_ns: int
    count: dict[str, int]
    total_ns: dict[str, int]
    histogram: dict[str, list[int]] = field(default_factory=dict)  # log2-µs bins per class

    def to_dict(self) -> dict:
        return asdict(self)


def idle_gaps(trace: Trace, links: Links, rows: np.ndarray, threshold_ns: int = DEFAULT_GAP_THRESHOLD_NS) -> IdleGaps:
    """Classify the gap before each GPU op on its stream (METHOD.md §5):
    host-wait if the op's launch call started after the previous op on the stream ended
    (checked first); else kernel-wait if shorter than ``threshold_ns``; else other."""
    gap, cls = classify_gaps(trace, links, rows, threshold_ns)[1:3]
    count, total, hist = {}, {}, {}
    bins = gap_bins()
    for i, name in enumerate(IDLE_CLASSES):
        g = gap[cls == i]
        count[name] = int(len(g))
        total[name] = int(g.sum())
        hist[name] = np.histogram(g, bins=bins)[0].astype(int).tolist()
    return IdleGaps(threshold_ns, count, total, hist)


def gap_bins() -> np.ndarray:
    """Histogram edges for idle gaps: 0, 1 µs, 2 µs, 4 µs ... ~1 s (log2), then everything longer."""
    return np.concatenate(([0], 1000 * 2.0 ** np.arange(0, 21), [np.inf]))


def classify_gaps(trace: Trace, links: Links, rows: np.ndarray, threshold_ns: int):
    """(op row after each gap, gap ns, class index into IDLE_CLASSES, gap start, gap end)."""
    ev = trace.events
    empty = np.zeros(0, np.int64)
    if len(rows) < 2:
        return empty, empty, empty, empty, empty
    order = np.lexsort((ev.start_ns[rows], ev.stream[rows], ev.device[rows]))
    r = rows[order]
    s, e = ev.start_ns[r], ev.end_ns[r]
    lane, same = _lanes(trace, r)
    # running end within each lane (an op can end after a later-starting one on the lane)
    reach = grouped_running_max(e, lane)
    prev_end = np.concatenate(([0], reach[:-1]))
    gap = s - prev_end
    has_gap = same & (gap > 0)
    after = r[has_gap]
    g = gap[has_gap]
    launch = links.launch_of[after]
    launch_start = np.where(launch >= 0, ev.start_ns[np.maximum(launch, 0)], np.iinfo(np.int64).min)
    host_wait = (launch >= 0) & (launch_start > prev_end[has_gap])
    cls = np.where(host_wait, 0, np.where(g < threshold_ns, 1, 2))
    return after, g, cls, prev_end[has_gap], s[has_gap]


def _lanes(trace: Trace, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For GPU-op rows ``r`` sorted by (device, stream): a lane number per row (one per stream of
    a device) and whether the row is on the same lane as the row before it."""
    dev, stream = trace.events.device[r], trace.events.stream[r]
    same = np.zeros(len(r), dtype=bool)
    same[1:] = (dev[1:] == dev[:-1]) & (stream[1:] == stream[:-1])
    return np.cumsum(~same), same


def lane_prev_end(trace: Trace, rows: np.ndarray, at: np.ndarray | None = None) -> np.ndarray:
    """For each GPU-op row in ``rows``, when the previous work on its stream ended (int64 min for
    the first op of a stream and for rows not given): a full-length array, or with ``at`` (trace
    rows) the values of those rows only, without a full-length array."""
    ev = trace.events
    lowest = np.iinfo(np.int64).min
    if not len(rows):
        return np.full(len(ev) if at is None else len(at), lowest, dtype=np.int64)
    order = np.lexsort((ev.start_ns[rows], ev.stream[rows], ev.device[rows]))
    r = rows[order]
    del order
    lane, same = _lanes(trace, r)
    reach = grouped_running_max(ev.end_ns[r], lane)
    prev = np.where(same, np.concatenate(([0], reach[:-1])), lowest)
    del lane, same, reach
    if at is None:
        out = np.full(len(ev), lowest, dtype=np.int64)
        out[r] = prev
        return out
    by_row = np.argsort(r)
    r, prev = r[by_row], prev[by_row]
    pos = np.minimum(np.searchsorted(r, at), len(r) - 1)
    return np.where(r[pos] == at, prev[pos], lowest)


@dataclass(frozen=True)
class LaunchStats:
    """Per launch API: call duration and launch-to-start delay (kernel start − call start)."""

    api: str
    count: int
    gpu_ops: int
    api_dur_ns: dict[str, float]
    delay_ns: dict[str, float]


def launch_stats(trace: Trace, links: Links) -> list[LaunchStats]:
    ev = trace.events
    launches = np.flatnonzero(ev.of_kind(Kind.LAUNCH, Kind.GRAPH_LAUNCH))
    gpu = np.flatnonzero(links.launch_of >= 0)
    out: list[LaunchStats] = []
    if not len(launches):
        return out
    api_name = ev.name[launches]
    first_op_start = np.full(len(ev), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_op_start, links.launch_of[gpu], ev.start_ns[gpu])
    for code in np.unique(api_name):
        rows = launches[api_name == code]
        linked = rows[first_op_start[rows] != np.iinfo(np.int64).max]
        delay = first_op_start[linked] - ev.start_ns[linked]
        out.append(
            LaunchStats(
                api=trace.names[code],
                count=int(len(rows)),
                gpu_ops=int(links.gpu_ops_of_launch[rows].sum()),
                api_dur_ns=_dist(ev.dur_ns[rows]),
                delay_ns=_dist(delay),
            )
        )
    return sorted(out, key=lambda x: -x.count)


def _dist(x: np.ndarray) -> dict[str, float]:
    if not len(x):
        return {"n": 0}
    q = np.percentile(x, [10, 50, 90, 95, 99])
    return {
        "n": int(len(x)),
        "mean": float(np.mean(x)),
        "min": float(np.min(x)),
        "p10": float(q[0]),
        "p50": float(q[1]),
        "p90": float(q[2]),
        "p95": float(q[3]),
        "p99": float(q[4]),
        "max": float(np.max(x)),
    }


def top_kernels(trace: Trace, rows: np.ndarray, n: int = 10) -> list[dict]:
    """Kernels grouped by name, ranked by total time."""
    ev = trace.events
    k = rows[ev.kind[rows] == Kind.KERNEL]
    if not len(k):
        return []
    codes, inv = np.unique(ev.name[k], return_inverse=True)
    total = np.bincount(inv, weights=ev.dur_ns[k]).astype(np.int64)
    count = np.bincount(inv)
    grand = max(int(total.sum()), 1)
    order = np.argsort(-total)[:n]
    return [
        {
            "name": trace.names[codes[i]],
            "class": "communication" if is_comm(trace.names[codes[i]]) else "compute",
            "count": int(count[i]),
            "total_ns": int(total[i]),
            "mean_ns": float(total[i] / count[i]),
            "share": float(total[i] / grand),
        }
        for i in order
    ]


# -- CPU-only traces ---------------------------------------------------------------------

CPU_NON_COMPUTE = re.compile(
    r"^aten::(view|_?reshape|_reshape_alias|as_strided|slice|select|unsqueeze|squeeze|t|"
    r"transpose|permute|expand|expand_as|empty|empty_like|empty_strided|new_empty|detach|"
    r"detach_|alias|_unsafe_view|resolve_conj|resolve_neg|lift_fresh|is_nonzero|size|stride|"
    r"contiguous|result_type|numel|dim|is_floating_point|broadcast_tensors|split|chunk|"
    r"unbind|narrow|view_as|unflatten|flatten|_has_compatible_shallow_copy_type|"
    r"set_|resize_|item|_local_scalar_dense|to|_to_copy_noop|lift|_nested_tensor_from_mask)$"
)
"""Leaf aten ops that only touch tensor metadata: not counted as CPU compute."""


CPU_KERNEL_OPS = re.compile(
    r"^aten::(mm|addmm|addmm_|bmm|baddbmm|addmv|mv|dot|addbmm|_scaled_dot_product\w*|"
    r"scaled_dot_product_attention|_flash_attention\w*|_efficient_attention\w*|cat|_cat|"
    r"index_select|embedding_bag|native_layer_norm|_fused_rms_norm|native_group_norm|_softmax|"
    r"_log_softmax|convolution|_convolution|mkldnn_\w+|_weight_int\w+|linear_\w+|"
    r"mean|sum|prod|amax|amin|max|min|var|std|var_mean|norm|linalg_vector_norm|cumsum|topk|sort|"
    r"argmax|argmin)$"
)
"""Ops that run their own compute kernel even when they call other (non-metadata) ops, e.g. the
CPU ``addmm`` copies the bias with ``aten::copy_`` and then runs the GEMM in its own body."""


def cpu_compute_mask(trace: Trace) -> np.ndarray:
    """CPU-compute analogue of GPU kernels, for traces without device activity.

    A framework op counts when it is not a metadata-only op (:data:`CPU_NON_COMPUTE`) and
    either calls no other non-metadata op (it is where the work happens: ``aten::add``,
    ``aten::copy_``) or is a known kernel-bearing op (:data:`CPU_KERNEL_OPS`: ``aten::addmm``
    runs its GEMM in its own body besides a ``copy_`` child). Wrappers such as ``aten::linear``
    or ``aten::matmul`` do not count themselves; their children do. The union of the counted
    intervals is the time the CPU spent computing (the CPU runs kernels synchronously inside the
    op); the rest of the step is framework and Python (host) time. Only the outermost counted op
    of a nest is returned, so on one thread kernel sum = kernel union. A counted op's own dispatch
    (well under a µs) is included, so this is an upper bound.
    """
    ev = trace.events
    ops = Nesting.build(trace, ev.kind == Kind.CPU_OP)
    mask = np.zeros(len(ev), dtype=bool)
    if not len(ops.rows):
        return mask
    metadata = trace.name_mask(CPU_NON_COMPUTE.match)[ops.rows]
    kernel_bearing = trace.name_mask(CPU_KERNEL_OPS.match)[ops.rows]
    has_work_child = np.zeros(len(ops.rows), dtype=bool)
    child = (ops.parent >= 0) & ~metadata
    has_work_child[ops.parent[child]] = True
    counted = ~metadata & (~has_work_child | kernel_bearing)
    # keep the outermost counted op of each nest (addmm, not also its copy_): on one thread
    # the counted intervals then never overlap and their sum equals their union
    # pointer jumping: after round r, ``inside`` covers the 2**r nearest ancestors and ``up``
    # points 2**r levels up, so a nest of depth d takes log2(d) vectorised rounds, not d
    has_parent = ops.parent >= 0
    inside = np.zeros(len(counted), dtype=bool)
    inside[has_parent] = counted[ops.parent[has_parent]]
    up = ops.parent.copy()
    while (up >= 0).any():
        live = np.flatnonzero(up >= 0)
        inside[live] |= inside[up[live]]
        up[live] = up[up[live]]
    mask[ops.rows[counted & ~inside]] = True
    return mask


@dataclass(frozen=True)
class Totals:
    """Whole-trace device activity, for the differencing method's G(N) and K(N).

    ``activity`` says what the numbers measure: ``"gpu"`` (kernels/copies on a GPU) or
    ``"cpu-compute"`` (the CPU analogue, :func:`cpu_compute_mask`; copies are then zero).
    """

    activity: str
    busy_ns: int
    kernel_sum_ns: int
    kernel_union_ns: int
    kernel_count: int
    copy_ns: int
    h2d_bytes: int
    d2h_bytes: int


def activity_rows(trace: Trace) -> tuple[str, np.ndarray]:
    """("gpu", GPU op rows) or ("cpu-compute", CPU-compute rows) for a CPU-only trace."""
    ev = trace.events
    gpu = np.flatnonzero(ev.of_kind(*GPU_OP_KINDS))
    if len(gpu):
        return "gpu", gpu
    return "cpu-compute", np.flatnonzero(cpu_compute_mask(trace))


def totals(trace: Trace) -> Totals:
    """Busy, kernel sum/union, kernel count and copies over the whole trace."""
    ev = trace.events
    activity, rows = activity_rows(trace)
    s, e = ev.start_ns[rows], ev.end_ns[rows]
    if activity == "gpu":
        k = ev.kind[rows] == Kind.KERNEL
        c = ev.kind[rows] == Kind.MEMCPY
        ck = ev.copy_kind[rows]
        return Totals(
            activity,
            union_ns(s, e),
            int(np.sum(e[k] - s[k])),
            union_ns(s[k], e[k]),
            int(k.sum()),
            int(np.sum(e[c] - s[c])),
            int(ev.bytes[rows][c & (ck == 1)].sum()),
            int(ev.bytes[rows][c & (ck == 2)].sum()),
        )
    busy = union_ns(s, e)
    return Totals(activity, busy, int(np.sum(e - s)), busy, int(len(rows)), 0, 0, 0)


# -- windows -----------------------------------------------------------------------------

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Window:
    name: str
    device: int
    source: str  # "gpu_user_annotation" or "cpu_annotation"
    start_ns: int
    end_ns: int
    times: GpuTimes


def windows(trace: Trace) -> list[Window]:
    """Every ``ProfilerStep#N`` window on every device with GPU activity: the GPU-side
    ``gpu_user_annotation`` range when the trace has one for that device, else the CPU range."""
    ev = trace.events
    is_step = trace.name_mask(PROFILER_STEP.match)
    gpu_rows = np.flatnonzero(ev.of_kind(*GPU_OP_KINDS))
    devices = distinct(ev.device[gpu_rows])
    out: list[Window] = []
    gpu_ann = np.flatnonzero(is_step & (ev.kind == Kind.GPU_ANNOTATION))
    cpu_ann = np.flatnonzero(is_step & (ev.kind == Kind.ANNOTATION))
    end_ns = ev.end_ns
    for dev in devices:
        rows = gpu_rows[ev.device[gpu_rows] == dev]
        # each window looks only at the ops that can reach it (sorted starts, longest op), so
        # thousands of windows cost windows x log(ops), not windows x ops
        by_start = rows[np.argsort(ev.start_ns[rows], kind="stable")]
        starts = ev.start_ns[by_start]
        longest = int(ev.dur_ns[rows].max()) if len(rows) else 0
        mine = gpu_ann[ev.device[gpu_ann] == dev]
        chosen = _choose_ranges(ev.name[mine], mine, ev.name[cpu_ann], cpu_ann)
        chosen = chosen[np.argsort(ev.start_ns[chosen], kind="stable")]
        lo, hi = ev.start_ns[chosen], end_ns[chosen]
        first = np.searchsorted(starts, lo - longest, "left")
        last = np.searchsorted(starts, hi, "right")
        for r, lo_r, hi_r, times in zip(
            chosen.tolist(), lo.tolist(), hi.tolist(), window_times(trace, by_start, first, last, lo, hi)
        ):
            src = "gpu_user_annotation" if ev.kind[r] == Kind.GPU_ANNOTATION else "cpu_annotation"
            out.append(Window(trace.name_of(r), int(dev), src, lo_r, hi_r, times))
    return out


def _choose_ranges(
    gpu_names: np.ndarray, gpu_rows: np.ndarray, cpu_names: np.ndarray, cpu_rows: np.ndarray
) -> np.ndarray:
    """Every GPU-side range, plus the CPU ranges left over: the k-th GPU-side range of a name
    stands for the k-th CPU range of that name (rows in trace order), so a name's CPU ranges
    past its GPU count are kept. Vectorised: thousands of distinct step names cost one sort."""
    order = np.argsort(cpu_names, kind="stable")  # stable: trace order within a name
    names = cpu_names[order]
    starts_of_name = np.searchsorted(names, names, "left")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - starts_of_name
    uniq, n_gpu = np.unique(gpu_names, return_counts=True)
    where = np.searchsorted(uniq, cpu_names)
    found = where < len(uniq)
    found[found] = uniq[where[found]] == cpu_names[found]
    covered = np.zeros(len(cpu_names), dtype=np.int64)
    covered[found] = n_gpu[where[found]]
    return np.concatenate((gpu_rows, cpu_rows[rank >= covered])).astype(np.int64)


def window_times(
    trace: Trace, rows: np.ndarray, first: np.ndarray, last: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> list[GpuTimes]:
    """:func:`gpu_times` of many windows at once: window ``j`` is [lo[j], hi[j]] over the ops
    ``rows[first[j]:last[j]]``. One vectorised pass over (window, op) pairs, so thousands of
    windows cost no Python loop per window; the result equals ``gpu_times`` window by window."""
    ev = trace.events
    n = len(lo)
    counts = (last - first).astype(np.int64)
    win = np.repeat(np.arange(n, dtype=np.int64), counts)
    # position of each pair inside its window's slice, added to the slice's first op
    offset = np.arange(len(win), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    op = rows[np.repeat(first, counts) + offset]
    start, dur = ev.start_ns[op], ev.dur_ns[op]
    w_lo, w_hi = lo[win], hi[win]
    s = np.minimum(np.maximum(start, w_lo), w_hi)
    e = np.maximum(np.minimum(start + dur, w_hi), s)
    inside = (e > s) | ((dur == 0) & (start >= w_lo) & (start <= w_hi))
    win, op, s, e = win[inside], op[inside], s[inside], e[inside]
    kind = ev.kind[op]
    nbytes = ev.bytes[op]

    def total(mask, values):
        out = np.zeros(n, dtype=np.int64)
        np.add.at(out, win[mask], values[mask])
        return out

    every = np.ones(len(win), dtype=bool)
    length = e - s
    k, mc, ms = kind == Kind.KERNEL, kind == Kind.MEMCPY, kind == Kind.MEMSET
    span = hi - lo
    busy = grouped_union(win, s, e, n)
    cols = dict(
        span_ns=span,
        busy_ns=busy,
        idle_ns=span - busy,
        kernel_sum_ns=total(k, length),
        kernel_union_ns=grouped_union(np.where(k, win, -1), s, e, n),
        kernel_count=total(k, every.astype(np.int64)),
        memcpy_count=total(mc, every.astype(np.int64)),
        memcpy_ns=total(mc, length),
        memcpy_bytes=total(mc, nbytes.astype(np.int64)),
        memset_count=total(ms, every.astype(np.int64)),
        memset_ns=total(ms, length),
        memset_bytes=total(ms, nbytes.astype(np.int64)),
    )
    lists = {key: value.tolist() for key, value in cols.items()}
    return [GpuTimes(**{key: lists[key][j] for key in lists}) for j in range(n)]
