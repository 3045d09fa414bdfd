"""Decode-step anatomy (METHOD.md §3, §5): for every engine step, its wall time, how much of it
the GPU was working, why it was idle (host, dependency, outside the capture, unexplained) and
where the host time went.

Kernels belong to the step whose CPU window contains their **launch call** (never to the step
whose window their execution overlaps): GPU work is asynchronous and often starts after the
CPU marker has ended. The step windows and the device-op table are built once
(:mod:`hostgap.anatomy.windows`) and read by every part: idle causes (:mod:`.idle`), the
queued/partial rules (:mod:`.flags`), TaxBreak (:mod:`.taxbreak`) and the verdict
(:mod:`.verdict`). The per-step JSON rows are the output, built last; the trace-level results
over them (steady-state summary, the trace's TaxBreak, host-time rankings) are :mod:`.summary`.

On a CPU-only trace "GPU ops" are the CPU-compute analogue (:func:`timeline.cpu_compute_mask`)
and every GPU-only quantity (TaxBreak, HDBI, launch floor) is reported as not applicable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hostgap.anatomy import taxbreak as tb
from hostgap.anatomy.collectives import launch_classes
from hostgap.anatomy.comm import StepComm, split_ops
from hostgap.anatomy.flags import PARTIAL_RULES, QUEUED_RULES, StepGpu, first_reason
from hostgap.anatomy.floor import launch_floor
from hostgap.anatomy.graphs import guard_verdict
from hostgap.anatomy.graphs import step_flags as graph_step_flags
from hostgap.anatomy.idle import BUSY, CAUSES, HOST, IdleAttribution, attribute
from hostgap.anatomy.intervals import covered_each, grouped_merge, grouped_union, merge
from hostgap.anatomy.link import Links, link
from hostgap.anatomy.markers import COMPOSITION_FIELDS, composition, step_markers
from hostgap.anatomy.summary import step_summary, top_host, top_host_cpu, trace_taxbreak
from hostgap.anatomy.timeline import DEFAULT_GAP_THRESHOLD_NS, activity_rows
from hostgap.anatomy.verdict import step_verdict
from hostgap.anatomy.windows import (
    INT_MAX,
    INT_MIN,
    DeviceOps,
    StepWindows,
    device_ops,
    host_api_steps,
    marker_windows,
    with_wall_end,
)
from hostgap.events import HOST_API_KINDS, NONE, CopyKind, Kind, Trace
from hostgap.version import SCHEMA_VERSION

SYNC_API = tb.SYNC_API


@dataclass(frozen=True)
class AnalysisOptions:
    """How a trace is analysed: the options of ``hostgap analyze`` / ``steps`` / ``kernels`` /
    ``report`` / ``compare`` and of :func:`hostgap.analyze`, one type for every caller
    (:func:`hostgap.analysis.trace.analyse_trace`). Times in ns here; the command line and the
    library take ``launch_floor_us`` and ``gap_threshold_us`` and convert."""

    step_marker: str | None = None  # regex over host annotations; default: auto (markers.py)
    launch_floor_ns: float | None = None
    floor_file: str | None = None
    gap_threshold_ns: int = DEFAULT_GAP_THRESHOLD_NS  # also the leading-gap tolerance (idle.py)
    warmup_steps: int = 1  # leading decode steps reported apart from the steady state
    top: int = 10


@dataclass(frozen=True)
class Anatomy:
    """The result of :func:`analyze`; ``to_dict()`` is the JSON contract (docs/json.md)."""

    trace: str
    activity: str
    marker_family: str
    steps: list[dict]
    summary: dict
    taxbreak: dict
    verdict: dict
    top_ops: list[dict]
    top_frames: list[dict]
    unassigned: dict
    kernels: tb.KernelTaxes | None = field(default=None, repr=False)
    idle_causes: dict = field(default_factory=dict)
    marker_note: str = ""
    comm: StepComm | None = field(default=None, repr=False)  # compute / communication split
    launch_class: np.ndarray | None = field(default=None, repr=False)  # per kernels row: CLASSES index

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "trace": self.trace,
            "activity": self.activity,
            "marker_family": self.marker_family,
            "marker_note": self.marker_note,
            "steps": self.steps,
            "summary": self.summary,
            "idle_causes": self.idle_causes,
            "communication": self.comm.totals() if self.comm is not None else None,
            "taxbreak": self.taxbreak,
            "verdict": self.verdict,
            "top_ops": self.top_ops,
            "top_frames": self.top_frames,
            "unassigned": self.unassigned,
        }


@dataclass(frozen=True)
class _StepParts:
    """Per-step arrays computed once from the device-op table."""

    gpu: StepGpu
    kernel_union_ns: np.ndarray
    kernel_sum_ns: np.ndarray
    kernel_count: np.ndarray


def analyze(trace: Trace, config: AnalysisOptions = AnalysisOptions(), links: Links | None = None) -> Anatomy:
    """Per-step split, idle causes, TaxBreak and verdict for one trace."""
    links = links if links is not None else link(trace)
    ev = trace.events
    activity, op_rows = activity_rows(trace)
    markers = step_markers(trace, config.step_marker)
    first = marker_windows(trace, markers.rows)
    ops = device_ops(trace, links, activity, op_rows, first)
    n_steps = len(first)
    parts = _step_parts(ops, n_steps)
    comm = split_ops(trace, ops, n_steps)
    # a last step without ops has INT_MIN here: with_wall_end's max leaves its marker end
    last = int(parts.gpu.last_ns[-1]) if n_steps else None
    win = with_wall_end(first, last)
    idle = attribute(trace, links, ops, win, config.gap_threshold_ns)

    host_rows, host_step = host_api_steps(trace, win)
    api_idle = _api_in_idle(trace, host_rows, host_step, ops, win)
    copies = _copies(trace, ops, n_steps) if ops.gpu else None
    launches = _sum_by(host_step, (ev.kind == Kind.LAUNCH).astype(np.int64), n_steps)
    graph_launches = _sum_by(host_step, (ev.kind == Kind.GRAPH_LAUNCH).astype(np.int64), n_steps)
    lost = (ev.kind == Kind.LAUNCH) & (links.gpu_ops_of_launch == 0)
    lost_by_step = _sum_by(host_step, lost.astype(np.int64), n_steps)
    if ops.gpu:  # CPU compute runs synchronously inside the step that issued it: never queued
        queued, queued_reason = first_reason(QUEUED_RULES, win, ops, parts.gpu)
    else:
        queued, queued_reason = np.zeros(n_steps, dtype=bool), [None] * n_steps
    partial, partial_reason = first_reason(PARTIAL_RULES, win, lost_by_step, ops)

    floor = taxes = None
    if ops.gpu:
        names = [d.name for d in trace.meta.devices]
        floor = launch_floor(
            names, config.launch_floor_ns / 1000.0 if config.launch_floor_ns is not None else None, config.floor_file
        )
        held = np.zeros(len(ev), dtype=bool)
        held[ops.rows[idle.held]] = True
        taxes = tb.kernel_taxes(trace, links, host_step, win.start_ns, floor.ns, op_rows, held, win.thread)
    unattributed = _unattributed(trace, taxes, win)

    step_device = _step_devices(ops, n_steps)
    step_tax = _per_step_taxes(taxes, n_steps) if taxes is not None else None
    steps = []
    for i in range(n_steps):
        row = _step_row(i, win, parts, idle, step_device[i], api_idle[i])
        row.update(comm.step_dict(i))
        row.update(
            {
                "launches": int(launches[i]),
                "graph_launches": int(graph_launches[i]),
                "queued": bool(queued[i]),
                "queued_reason": queued_reason[i],
                "partial": bool(partial[i]),
                "partial_reason": partial_reason[i],
            }
        )
        if copies is not None:
            row.update({k: int(v[i]) for k, v in copies.items()})
        row["taxbreak"] = (
            None if step_tax is None else _step_taxbreak(step_tax, i, int(parts.kernel_sum_ns[i]), int(unattributed[i]))
        )
        comp = composition(win.names[i])[1]
        row.update(dict.fromkeys(COMPOSITION_FIELDS) if comp is None else comp)
        steps.append(row)

    for row, flags in zip(steps, graph_step_flags(steps)):
        row["graph_flags"] = flags
    summary = step_summary(steps, config.warmup_steps)
    launch_class = launch_classes(trace, links, taxes.launch_row) if taxes is not None else None
    trace_tax = trace_taxbreak(trace, taxes, floor, steps, ops, unattributed, launch_class)
    v = guard_verdict(step_verdict(steps, summary["warmup"]["indices"], trace_tax.get("hdbi")), steps)
    if taxes is not None:
        top_ops = top_host(trace, taxes, "op", n_steps, config.top)
        top_frames = top_host(trace, taxes, "frame", n_steps, config.top)
    else:
        top_ops = top_host_cpu(trace, links, op_rows, win, "op", config.top)
        top_frames = top_host_cpu(trace, links, op_rows, win, "frame", config.top)
    return Anatomy(
        trace=trace.meta.path,
        activity=activity,
        marker_family=markers.family,
        marker_note=markers.note,
        steps=steps,
        summary=summary,
        idle_causes=_trace_idle(idle),
        taxbreak=trace_tax,
        verdict=v,
        top_ops=top_ops,
        top_frames=top_frames,
        unassigned={
            "gpu_ops_outside_steps": int(np.sum(ops.step < 0)),
            "unlinked_gpu_ops": int(links.unlinked_gpu_ops),
            "launches_without_gpu_ops": int(lost.sum()),
            "gpu_ops_before_capture": int(np.sum(ops.outside)),
        },
        kernels=taxes,
        comm=comm,
        launch_class=launch_class,
    )


def _step_parts(ops: DeviceOps, n: int) -> _StepParts:
    st, s, e, k = ops.step, ops.start_ns, ops.end_ns, ops.is_kernel
    gpu = StepGpu(grouped_union(st, s, e, n), _min_by(st, s, n), _max_by(st, e, n))
    return _StepParts(
        gpu,
        grouped_union(np.where(k, st, NONE), s, e, n),
        _sum_by(st, (e - s) * k, n),
        _sum_by(st, k.astype(np.int64), n),
    )


def _causes(row: np.ndarray) -> dict:
    return {f"{c}_ns": int(row[HOST + j]) for j, c in enumerate(CAUSES)}


def _step_row(i: int, win: StepWindows, parts: _StepParts, idle: IdleAttribution, device: int, api_idle: int) -> dict:
    """The JSON row of step i (without launches, flags, copies, TaxBreak, composition)."""
    wall = int(win.wall_ns[i])
    active = int(parts.gpu.active_ns[i])
    host_exposed = max(wall - active, 0)
    step = idle.step[i]
    devices = []
    for j, d in enumerate(idle.devices):
        if idle.in_step[i, j]:
            t = idle.per_device[j][i]
            devices.append(
                {
                    "device": None if d < 0 else int(d),
                    "busy_ns": int(t[BUSY]),
                    "idle_ns": int(wall - t[BUSY]),
                    "host_wait_ns": int(t[HOST]),
                    "idle_causes": _causes(t),
                }
            )
    first, last = parts.gpu.first_ns[i], parts.gpu.last_ns[i]
    return {
        "index": i,
        "name": win.names[i],
        "kind": composition(win.names[i])[0],
        "device": None if device < 0 else int(device),
        "start_ns": int(win.start_ns[i]),
        "marker_end_ns": int(win.marker_end_ns[i]),
        "wall_ns": wall,
        "gpu_active_ns": active,
        "kernel_union_ns": int(parts.kernel_union_ns[i]),
        "kernel_sum_ns": int(parts.kernel_sum_ns[i]),
        "host_exposed_ns": host_exposed,
        "host_wait_ns": int(step[HOST]),
        "host_fraction": host_exposed / wall if wall else None,
        "busy_ns": int(step[BUSY]),
        "idle_ns": int(wall - step[BUSY]),
        "idle_causes": _causes(step),
        "host_cause_fraction": int(step[HOST]) / wall if wall else None,
        "devices": devices,
        "kernel_count": int(parts.kernel_count[i]),
        "runtime_api_in_idle_ns": int(api_idle),
        "first_gpu_start_ns": int(first) if first != INT_MAX else None,
        "last_gpu_end_ns": int(last) if last != INT_MIN else None,
    }


def _trace_idle(idle: IdleAttribution) -> dict:
    """Step idle causes summed over the trace's steps (walls are disjoint)."""
    total = idle.step.sum(axis=0) if len(idle.step) else np.zeros(5, np.int64)
    return {"busy_ns": int(total[BUSY]), "idle_ns": int(total[HOST:].sum()), **_causes(total)}


def _sum_by(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    ok = group >= 0
    return np.bincount(group[ok], weights=values[ok], minlength=n).astype(np.int64)[:n] if n else np.zeros(0, np.int64)


def _min_by(group, values, n):
    out = np.full(n, INT_MAX, dtype=np.int64)
    ok = group >= 0
    np.minimum.at(out, group[ok], values[ok])
    return out


def _max_by(group, values, n):
    out = np.full(n, INT_MIN, dtype=np.int64)
    ok = group >= 0
    np.maximum.at(out, group[ok], values[ok])
    return out


def _step_devices(ops: DeviceOps, n) -> np.ndarray:
    """The device most of each step's GPU ops ran on (NONE when none)."""
    d = ops.device.astype(np.int64)
    ok = (ops.step >= 0) & (d >= 0)
    out = np.full(n, NONE, dtype=np.int64)
    if not ok.any() or not n:
        return out
    counts = np.zeros((n, int(d[ok].max()) + 1), dtype=np.int64)
    np.add.at(counts, (ops.step[ok], d[ok]), 1)
    has = counts.sum(axis=1) > 0
    out[has] = counts[has].argmax(axis=1)
    return out


# -- per-step parts --------------------------------------------------------------------------


def _api_in_idle(trace, host_rows, host_step, ops: DeviceOps, win: StepWindows) -> np.ndarray:
    """Runtime/driver API time that falls inside GPU-idle time, per step (METHOD.md §4 (a))."""
    ev = trace.events
    n = len(win)
    out = np.zeros(n, dtype=np.int64)
    if not len(host_rows) or not n:
        return out
    seg_s, seg_e = merge(ops.start_ns, ops.end_ns)
    r = host_rows[host_step[host_rows] >= 0]
    st = host_step[r]
    s = np.maximum(ev.start_ns[r], win.start_ns[st])
    e = np.maximum(np.minimum(ev.end_ns[r], win.wall_end_ns[st]), s)
    del r
    # calls on several threads can overlap: count the union of the step's calls once
    g, us, ue = grouped_merge(st, s, e)
    del st, s, e
    np.add.at(out, g, (ue - us) - covered_each(us, ue, seg_s, seg_e))
    return out


def _copies(trace, ops: DeviceOps, n_steps) -> dict[str, np.ndarray]:
    ev = trace.events
    is_copy = ops.kind == Kind.MEMCPY
    ck = ev.copy_kind[ops.rows]
    dur = ops.end_ns - ops.start_ns
    nbytes = ev.bytes[ops.rows]
    out = {}
    for label, code in (("h2d", CopyKind.H2D), ("d2h", CopyKind.D2H)):
        m = is_copy & (ck == code)
        out[f"{label}_bytes"] = _sum_by(ops.step, nbytes * m, n_steps)
        out[f"{label}_ns"] = _sum_by(ops.step, dur * m, n_steps)
        out[f"{label}_count"] = _sum_by(ops.step, m.astype(np.int64), n_steps)
    return out


def _unattributed(trace, taxes, win: StepWindows):
    """Host time on the launching thread inside each step's CPU window that no TaxBreak interval
    (T_py, T_dispatch, the launch call) and no synchronising call covers."""
    ev = trace.events
    n_steps = len(win)
    if taxes is None or not len(taxes) or not n_steps:
        return np.zeros(n_steps, dtype=np.int64)
    threads, count = np.unique(taxes.thread, return_counts=True)
    main = threads[count.argmax()]
    sync = trace.name_mask(SYNC_API.search) & ev.of_kind(*HOST_API_KINDS) & (ev.tid == main)
    lr = taxes.launch_row
    covered_s = np.concatenate((taxes.py_start_ns, taxes.dispatch_start_ns, ev.start_ns[lr], ev.start_ns[sync]))
    covered_e = np.concatenate((taxes.py_end_ns, taxes.dispatch_end_ns, ev.end_ns[lr], ev.end_ns[sync]))
    seg_s, seg_e = merge(covered_s, covered_e)
    # the launching thread works on a step from its marker start to the next marker start
    # (the last step: to its marker end), not while the GPU drains
    win_e = np.minimum(win.wall_end_ns, win.cpu_end_ns)
    return win_e - win.start_ns - covered_each(win.start_ns, win_e, seg_s, seg_e)


def _per_step_taxes(taxes, n) -> dict[str, np.ndarray]:
    """TaxBreak sums per step, all at once (bincount over the launch table)."""
    st = taxes.step
    fw = np.nan_to_num(taxes.dkt_fw_ns, nan=0.0)
    graph = _sum_by(st, taxes.graph.astype(np.int64), n)
    eager = _sum_by(st, (~taxes.graph).astype(np.int64), n)
    return {
        "ft_ns": _sum_by(st, taxes.dft_ns, n),
        "ct_ns": _sum_by(st, taxes.dct_ns, n),
        # every launch call pays one floor: a graph launch once, however many kernels it replays
        "kt_ns": np.rint((eager + graph) * taxes.floor_ns).astype(np.int64),
        "kt_fw_ns": _sum_by(st, fw, n),
        "py_ns": _sum_by(st, taxes.t_py_ns, n),
        "dispatch_ns": _sum_by(st, taxes.t_dispatch_ns, n),
        "sync_ns": _sum_by(st, taxes.sync_ns, n),
        # the same meaning as the step's and the trace's keys: eager calls, graph calls apart
        "launches": eager,
        "graph_launches": graph,
    }


def _step_taxbreak(per_step: dict, i: int, device_active: int, unattributed: int) -> dict:
    row: dict[str, Any] = {k: int(v[i]) for k, v in per_step.items()}
    orchestrate = row["ft_ns"] + row["ct_ns"] + row["kt_ns"]
    row.update(
        {
            "unattributed_ns": unattributed,
            "device_active_ns": device_active,
            "orchestrate_ns": orchestrate,
            "hdbi": tb.hdbi(device_active, orchestrate),
        }
    )
    return row
