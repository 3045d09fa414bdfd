"""TaxBreak: per-kernel host orchestration split into framework translation (ΔFT), vendor
library translation (ΔCT) and launch path (ΔKT), and the Host-Device Balance Index.

Source: TaxBreak (arXiv 2603.12465), as defined in METHOD.md §5. Per eagerly launched kernel,
on one CPU clock, with intervals that tile the launching thread and never count time twice:

- a *unit* is a top-level framework op on its thread (or a launch call with no enclosing op);
- ``T_py = unit.start − max(frame.start, end of the previous unit on the thread)``, charged to
  the unit's first launch; *frame* is the innermost Python event enclosing the unit, or — when
  the trace has no Python events — the start of the step that contains it;
- ``T_dispatch = launch.start − unit.start`` for the unit's first launch, ``launch.start − end
  of the previous launch call`` for later ones;
- ``T_launch = kernel.start − launch.start`` (queueing included when the stream was busy);
- ``I_lib`` from library API events when the trace has them, else from the kernel base name
  (:data:`LIBRARY_KERNEL`);
- ``ΔFT = T_py + (T_dispatch_base if I_lib else T_dispatch)``, ``ΔCT = I_lib · max(0,
  T_dispatch − T_dispatch_base)``, ``ΔKT = T_floor``, ``ΔKT_fw = max(0, T_launch − T_floor)``
  with queued kernels (stream busy at launch) excluded;
- ``T_Orchestrate = Σ(ΔFT + ΔCT) + N_launches · T_floor`` and
  ``HDBI = T_DeviceActive / (T_DeviceActive + T_Orchestrate)``.

A graph launch is one launch: it pays one floor; its replayed kernels count in device-active
time and get no host terms of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hostgap.anatomy.intervals import covered_each, merge
from hostgap.anatomy.link import Links, Nesting
from hostgap.anatomy.timeline import lane_prev_end
from hostgap.events import HOST_API_KINDS, NONE, Kind, Trace, distinct

INT_MIN = np.iinfo(np.int64).min

SYNC_API = re.compile(r"Synchronize|^(cuda|hip)Memcpy(_v\d+)?$|^cuMemcpy[DH]to[DH](_v\d+)?$|StreamQuery|EventQuery")
"""Runtime calls during which the host waits for the GPU (not host work)."""

LIBRARY_KERNEL = re.compile(
    r"^(cutlass_|cutlass::|sm\d+_xmma|sm\d+_gemm|sm\d+_|ampere_|volta_|turing_|hopper_|"
    r"blackwell_|xmma_|cublas|cublasLt|gemv|gemvx|gemv2|gemvNSP|gemmk1|gemmSN|splitKreduce|"
    r"nvjet|cudnn|implicit_convolve|dgrad|wgrad|fft|regular_fft|vector_fft|"
    r"Cijk_|rocblas|hipblaslt|miopen|MIOpen)",
    re.IGNORECASE,
)
"""Kernel base names that come from a vendor library front end (cuBLAS/cuBLASLt/cuDNN on
CUDA; rocBLAS/hipBLASLt (Tensile ``Cijk_``)/MIOpen on ROCm). The base name is the kernel name
before its template or parameter list, so ``pytorch_flash::flash_fwd_kernel<…cutlass::…>`` is
framework-native while ``cutlass::Kernel<…>`` (cuBLAS's CUTLASS kernels) is library."""


def base_name(kernel: str) -> str:
    """Qualified kernel name without return type, template arguments or parameter list.

    >>> base_name("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<cutlass::bfloat16_t>>(Params)")
    'pytorch_flash::flash_fwd_kernel'
    >>> base_name("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, float>(Params)")
    'internal::gemvx::kernel'
    """
    anon = "(anonymous namespace)"
    s = _strip_templates(kernel.strip()).replace(anon, "\0")
    cut = s.find("(")
    if cut > 0:
        s = s[:cut]
    parts = s.split()
    return (parts[-1] if parts else s).replace("\0", anon)


def _strip_templates(s: str) -> str:
    """Remove balanced ``<...>`` groups (template arguments), however nested."""
    out, depth = [], 0
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def is_library_kernel(kernel: str) -> bool:
    """Library front end when the base name or any of its ``::`` components matches
    :data:`LIBRARY_KERNEL` (``internal::gemvx::kernel`` is cuBLAS's GEMV)."""
    base = base_name(kernel)
    return bool(LIBRARY_KERNEL.match(base)) or any(LIBRARY_KERNEL.match(c) for c in base.split("::")[:-1])


@dataclass(frozen=True)
class KernelTaxes:
    """One row per launch (eager kernel launch or graph launch), arrays aligned.

    Times are int64 ns, except ``dkt_fw_ns`` (float, NaN where the kernel was queued)."""

    launch_row: np.ndarray
    graph: np.ndarray  # bool: a graph launch
    step: np.ndarray  # step index (NONE: outside every step)
    thread: np.ndarray
    gpu_row: np.ndarray  # first GPU op it enqueued
    gpu_ops: np.ndarray  # GPU ops it enqueued (1 for eager kernels)
    device_ns: np.ndarray  # kernel time it enqueued (sum over a graph's replayed kernels)
    unit_row: np.ndarray  # top-level op row, or the launch row itself for orphan launches
    op_row: np.ndarray  # innermost framework op (NONE if none)
    frame_row: np.ndarray  # Python frame (NONE if none)
    i_lib: np.ndarray
    first_in_unit: np.ndarray
    py_start_ns: np.ndarray
    py_end_ns: np.ndarray
    dispatch_start_ns: np.ndarray
    dispatch_end_ns: np.ndarray
    t_py_ns: np.ndarray
    t_dispatch_ns: np.ndarray
    t_launch_ns: np.ndarray
    queued: np.ndarray
    t_wrapper_ns: np.ndarray  # library launches: framework wrapper time inside T_dispatch (ΔFT)
    sync_ns: np.ndarray  # time blocked in synchronising calls inside its T_py/T_dispatch intervals
    dft_ns: np.ndarray
    dct_ns: np.ndarray
    dkt_fw_ns: np.ndarray
    dispatch_base_ns: float
    floor_ns: float

    def __len__(self) -> int:
        return len(self.launch_row)


def kernel_taxes(
    trace: Trace,
    links: Links,
    launch_step: np.ndarray,
    step_start_ns: np.ndarray,
    floor_ns: float,
    op_rows: np.ndarray,
    held: np.ndarray | None = None,
    step_thread: np.ndarray | None = None,
) -> KernelTaxes:
    """TaxBreak terms of every launch that enqueued GPU work.

    ``launch_step``: step index per trace row (for launch rows); ``step_start_ns``: CPU start
    of each step (the frame fallback); ``op_rows``: the GPU-op rows whose streams are read for
    the end of the previous op on a kernel's stream (:func:`lane_prev_end`) — a kernel is queued
    when that is after its launch call started (a stream that frees exactly at the launch start was free: not queued);
    ``held``: per trace row, GPU ops that waited on a dependency or on work outside the capture
    after their launch (:mod:`hostgap.anatomy.idle`) — queued too, so ΔKT_fw never charges an
    event or dependency wait as launch-path excess; ``step_thread``: the thread of each step's
    marker (NONE: any thread), where a frameless unit's T_py may start at the step start.
    """
    ev = trace.events
    kinds = ev.kind
    L = np.flatnonzero(((kinds == Kind.LAUNCH) | (kinds == Kind.GRAPH_LAUNCH)) & (links.gpu_ops_of_launch > 0))
    n = len(L)
    graph = kinds[L] == Kind.GRAPH_LAUNCH
    thread = ev.tid[L]
    l_start, l_end = ev.start_ns[L], ev.end_ns[L]

    # GPU work each launch enqueued: first op and total kernel time. Per launch, never per
    # trace row: a row-length array per quantity is most of this function's memory on a
    # large trace (L is sorted, so a GPU op's launch is found by a search in it)
    gpu = np.flatnonzero(links.launch_of >= 0)
    owner = np.searchsorted(L, links.launch_of[gpu])
    mine = owner < n
    mine[mine] = L[owner[mine]] == links.launch_of[gpu[mine]]
    gpu, owner = gpu[mine], owner[mine]
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, owner, ev.start_ns[gpu])
    is_kernel = kinds[gpu] == Kind.KERNEL
    device = np.bincount(owner[is_kernel], weights=ev.dur_ns[gpu][is_kernel], minlength=n)
    # first GPU op row per launch: the op with the smallest start among its ops
    order = np.lexsort((ev.start_ns[gpu], owner))
    gpu_row = np.full(n, NONE, dtype=np.int64)
    if len(gpu):
        first_pos = np.concatenate(([True], owner[order][1:] != owner[order][:-1]))
        gpu_row[owner[order][first_pos]] = gpu[order][first_pos]
    t_launch = first - l_start
    del gpu, owner, mine, first, is_kernel, order

    # units: top-level op, or the launch itself when no op encloses it
    top = links.top_op_of[L]
    orphan = top < 0
    unit = np.where(orphan, L, top)
    u_start = ev.start_ns[unit]

    # previous unit end on the thread (over all top-level ops and orphan launches)
    ops = links.ops
    tops = ops.rows[ops.parent < 0] if len(ops.rows) else np.zeros(0, np.int64)
    all_units = distinct(np.concatenate((tops, L[orphan])))
    del tops
    uo = np.lexsort((ev.start_ns[all_units], ev.tid[all_units]))
    au = all_units[uo]
    same_thread = np.concatenate(([False], ev.tid[au][1:] == ev.tid[au][:-1]))
    prev_end_of_unit = np.empty(len(au), dtype=np.int64)  # in all_units' order
    prev_end_of_unit[uo] = np.where(same_thread, np.concatenate(([0], ev.end_ns[au][:-1])), INT_MIN)
    # ... and whether that previous unit started in the same step (the count of step starts
    # at or before a unit's start is equal for two units exactly when they share a step)
    u_step = np.searchsorted(step_start_ns, ev.start_ns[au], side="right")
    same_step_of_unit = np.zeros(len(au), dtype=bool)
    same_step_of_unit[uo[1:]] = same_thread[1:] & (u_step[1:] == u_step[:-1])
    at = np.searchsorted(all_units, unit)  # every unit is one of all_units
    prev_end = prev_end_of_unit[at]
    same_step = same_step_of_unit[at]
    del all_units, uo, au, same_thread, u_step, prev_end_of_unit, same_step_of_unit, at

    # frame start: innermost Python frame, else the step's CPU start
    frame = np.where(orphan, NONE, links.frame_of[np.maximum(top, 0)])
    if orphan.any() and len(links.frames.rows):
        pos_f = links.frames.innermost(thread[orphan], l_start[orphan], l_end[orphan])
        frame[orphan] = np.where(pos_f >= 0, links.frames.rows[np.maximum(pos_f, 0)], NONE)
    step = launch_step[L].astype(np.int64)
    step_start = np.where(
        step >= 0, step_start_ns[np.maximum(step, 0)] if len(step_start_ns) else 0, np.iinfo(np.int64).min
    )
    # without a frame: the step start on the thread that carries the step marker; on another
    # thread the previous unit of the same step (its first unit: no T_py, the thread was idle)
    marker_thread = np.ones(n, dtype=bool)
    if step_thread is not None and len(step_thread):
        owner_thread = np.where(step >= 0, step_thread[np.maximum(step, 0)], NONE)
        marker_thread = (owner_thread == NONE) | (owner_thread == thread)
    frameless = np.where(marker_thread, step_start, INT_MIN)
    frame_start = np.where(frame >= 0, ev.start_ns[np.maximum(frame, 0)], frameless)
    prev_end = np.where((frame >= 0) | marker_thread | same_step, prev_end, INT_MIN)
    py_from = np.maximum(frame_start, prev_end)
    py_from = np.where(py_from == INT_MIN, u_start, py_from)
    py_from = np.minimum(py_from, u_start)

    # launches in unit order: first-in-unit and previous launch end
    lo = np.lexsort((l_start, unit))
    first_in_unit = np.ones(n, dtype=bool)
    prev_launch_end = np.zeros(n, dtype=np.int64)
    if n:
        same_unit = np.concatenate(([False], unit[lo][1:] == unit[lo][:-1]))
        first_in_unit[lo] = ~same_unit
        prev_launch_end[lo] = np.concatenate(([0], l_end[lo][:-1]))
    d_start = np.where(first_in_unit, u_start, prev_launch_end)
    d_start = np.minimum(d_start, l_start)
    # intervals stay inside the launch's step: the part of a unit that began in an earlier
    # step's window is that step's (its unattributed time), never this step's ΔFT
    lo_step = np.where(step >= 0, step_start, INT_MIN)
    py_start = np.maximum(np.where(first_in_unit, py_from, u_start), lo_step)
    py_end = np.maximum(u_start, lo_step)
    d_start = np.maximum(d_start, lo_step)
    # a library launch's translation (ΔCT) starts at the innermost op that encloses it; the
    # wrapper time before it (aten::linear around aten::addmm) is framework time (ΔFT)
    inner = links.op_of[L]
    inner_start = np.clip(np.where(inner >= 0, ev.start_ns[np.maximum(inner, 0)], d_start), d_start, l_start)
    # host time blocked in synchronising calls is its own part, neither ΔFT nor ΔCT (the calls
    # merged once per thread for all three spans)
    sync_py, sync_dispatch, sync_wrapper = _sync_inside(
        trace, thread, (py_start, py_end), (d_start, l_start), (d_start, inner_start)
    )
    t_py = py_end - py_start - sync_py
    t_dispatch = l_start - d_start - sync_dispatch
    wrapper = inner_start - d_start - sync_wrapper

    i_lib = _library_flags(trace, links, L, gpu_row, graph)
    native = ~i_lib & ~graph
    base = float(np.median(t_dispatch[native])) if native.any() else 0.0
    wrapper = np.where(i_lib, wrapper, 0)
    dft = t_py + np.where(i_lib, wrapper + np.rint(base).astype(np.int64), t_dispatch)
    dct = np.where(i_lib, np.maximum(0, t_dispatch - wrapper - np.rint(base).astype(np.int64)), 0)
    busy_at_launch = lane_prev_end(trace, op_rows, np.maximum(gpu_row, 0)) > l_start
    queued = busy_at_launch & (gpu_row >= 0)
    if held is not None:
        queued |= held[np.maximum(gpu_row, 0)] & (gpu_row >= 0)
    dkt_fw = np.where(queued, np.nan, np.maximum(0.0, t_launch - floor_ns))
    return KernelTaxes(
        launch_row=L,
        graph=graph,
        step=step,
        thread=thread,
        gpu_row=gpu_row,
        gpu_ops=links.gpu_ops_of_launch[L],
        device_ns=device.astype(np.int64),
        unit_row=unit,
        op_row=links.op_of[L],
        frame_row=frame,
        i_lib=i_lib,
        first_in_unit=first_in_unit,
        py_start_ns=py_start,
        py_end_ns=py_end,
        dispatch_start_ns=d_start,
        dispatch_end_ns=l_start,
        t_py_ns=t_py,
        t_dispatch_ns=t_dispatch,
        t_launch_ns=t_launch,
        queued=queued,
        t_wrapper_ns=wrapper,
        sync_ns=sync_py + sync_dispatch,
        dft_ns=dft,
        dct_ns=dct,
        dkt_fw_ns=dkt_fw,
        dispatch_base_ns=base,
        floor_ns=float(floor_ns),
    )


def _sync_inside(trace: Trace, thread: np.ndarray, *intervals) -> list[np.ndarray]:
    """For each (start, end) array pair (one entry per launch), the time inside it that the
    launch's thread spent in synchronising calls (:data:`SYNC_API`)."""
    ev = trace.events
    out = [np.zeros(len(thread), dtype=np.int64) for _ in intervals]
    sync = ev.of_kind(*HOST_API_KINDS)
    sync[sync] = trace.name_mask(SYNC_API.search)[sync]
    if not sync.any():
        return out
    for th in np.unique(thread):
        rows = np.flatnonzero(sync & (ev.tid == th))
        if not len(rows):
            continue
        seg_s, seg_e = merge(ev.start_ns[rows], ev.end_ns[rows])
        mine = thread == th
        for o, (lo, hi) in zip(out, intervals):
            o[mine] = covered_each(lo[mine], np.maximum(hi[mine], lo[mine]), seg_s, seg_e)
    return out


def _library_flags(trace: Trace, links: Links, L, gpu_row, graph) -> np.ndarray:
    ev = trace.events
    lib_api = ev.kind == Kind.LIBRARY
    if lib_api.any():
        nest = Nesting.build(trace, lib_api)
        pos = nest.innermost(ev.tid[L], ev.start_ns[L], ev.end_ns[L])
        return (pos >= 0) & ~graph
    by_name = np.fromiter((is_library_kernel(s) for s in trace.names), dtype=bool, count=len(trace.names))
    flags = np.zeros(len(L), dtype=bool)
    ok = gpu_row >= 0
    flags[ok] = by_name[ev.name[gpu_row[ok]]]
    return flags & ~graph


def hdbi(device_active_ns: float, orchestrate_ns: float) -> float | None:
    """T_DeviceActive / (T_DeviceActive + T_Orchestrate); None when there is no kernel time."""
    if device_active_ns <= 0:
        return None
    return float(device_active_ns / (device_active_ns + orchestrate_ns))


@dataclass(frozen=True)
class TaxSums:
    ft_ns: int
    ct_ns: int
    kt_ns: int
    kt_fw_ns: int
    launches: int
    kt_fw_samples: int
    py_ns: int
    dispatch_ns: int
    sync_ns: int


def sums(taxes: KernelTaxes, select: np.ndarray) -> TaxSums:
    """Sums of the TaxBreak terms over the selected launches (boolean mask)."""
    fw = taxes.dkt_fw_ns[select]
    ok = ~np.isnan(fw)
    n = int(select.sum())
    return TaxSums(
        ft_ns=int(taxes.dft_ns[select].sum()),
        ct_ns=int(taxes.dct_ns[select].sum()),
        kt_ns=int(round(n * taxes.floor_ns)),
        kt_fw_ns=int(round(fw[ok].sum())),
        launches=n,
        kt_fw_samples=int(ok.sum()),
        py_ns=int(taxes.t_py_ns[select].sum()),
        dispatch_ns=int(taxes.t_dispatch_ns[select].sum()),
        sync_ns=int(taxes.sync_ns[select].sum()),
    )
