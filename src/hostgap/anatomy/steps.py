"""Decode-step anatomy (METHOD.md §3, §5): for every engine step, its wall time, how much of it
the GPU was working, how much it waited on the host, and where the host time went.

Kernels belong to the step whose CPU window contains their **launch call** (never to the step
whose window their execution overlaps): GPU work is asynchronous and often starts after the
CPU marker has ended. A step's CPU window runs from its marker start to the next marker start
(the last step: to its marker end). Wall = marker start → next marker start; for the last step,
→ the end of its last GPU op (or of its marker, whichever is later).

On a CPU-only trace "GPU ops" are the CPU-compute analogue (:func:`timeline.cpu_compute_mask`)
and every GPU-only quantity (TaxBreak, HDBI, launch floor) is reported as not applicable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from hostgap import SCHEMA_VERSION
from hostgap.anatomy import taxbreak as tb
from hostgap.anatomy.floor import launch_floor
from hostgap.anatomy.intervals import covered_each, grouped_merge, grouped_union, merge, union_ns
from hostgap.anatomy.markers import COMPOSITION_FIELDS, composition, find_markers
from hostgap.anatomy.timeline import DEFAULT_GAP_THRESHOLD_NS, activity_rows, lane_prev_end
from hostgap.anatomy.verdict import verdict
from hostgap.events import HOST_API_KINDS, NONE, CopyKind, Kind, Trace
from hostgap.link import Links, link

INT_MIN = np.iinfo(np.int64).min

SYNC_API = re.compile(r"Synchronize|^(cuda|hip)Memcpy(_v\d+)?$|^cuMemcpy[DH]to[DH](_v\d+)?$|StreamQuery|EventQuery")
"""Runtime calls during which the host waits for the GPU (not host work)."""


@dataclass(frozen=True)
class AnatomyConfig:
    step_marker: str | None = None  # regex over host annotations; default: auto (markers.py)
    launch_floor_ns: float | None = None
    floor_file: str | None = None
    gap_threshold_ns: int = DEFAULT_GAP_THRESHOLD_NS
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

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "trace": self.trace,
            "activity": self.activity,
            "marker_family": self.marker_family,
            "steps": self.steps,
            "summary": self.summary,
            "taxbreak": self.taxbreak,
            "verdict": self.verdict,
            "top_ops": self.top_ops,
            "top_frames": self.top_frames,
            "unassigned": self.unassigned,
        }


def analyze(trace: Trace, config: AnatomyConfig = AnatomyConfig(), links: Links | None = None) -> Anatomy:
    """Per-step split, TaxBreak and verdict for one trace."""
    links = links if links is not None else link(trace)
    ev = trace.events
    activity, op_rows = activity_rows(trace)
    family, marker_rows = find_markers(trace, config.step_marker)
    m_start, m_end, m_names = _marker_windows(trace, marker_rows)
    n_steps = len(m_start)

    # step of every host call and GPU op (GPU ops by their launch call's start)
    host_rows = np.flatnonzero(ev.of_kind(*HOST_API_KINDS))
    host_step = np.full(len(ev), NONE, dtype=np.int64)
    host_step[host_rows] = _step_of(ev.start_ns[host_rows], m_start, m_end)
    if activity == "gpu":
        launch = links.launch_of[op_rows]
        when = np.where(launch >= 0, ev.start_ns[np.maximum(launch, 0)], INT_MIN)
        op_step = np.where(launch >= 0, _step_of(when, m_start, m_end), NONE)
    else:
        when = ev.start_ns[op_rows]
        op_step = _step_of(when, m_start, m_end)

    s, e = ev.start_ns[op_rows], ev.end_ns[op_rows]
    kind = ev.kind[op_rows]
    is_kernel = (kind == Kind.KERNEL) if activity == "gpu" else np.ones(len(op_rows), dtype=bool)
    active = grouped_union(op_step, s, e, n_steps)
    k_union = grouped_union(np.where(is_kernel, op_step, NONE), s, e, n_steps)
    in_step = op_step >= 0
    k_sum = _sum_by(op_step, (e - s) * is_kernel, n_steps)
    k_count = _sum_by(op_step, is_kernel.astype(np.int64), n_steps)
    first_op = _min_by(op_step, s, n_steps)
    last_op = _max_by(op_step, e, n_steps)

    wall_end = np.append(m_start[1:], 0) if n_steps else np.zeros(0, np.int64)
    if n_steps:
        wall_end[-1] = max(int(m_end[-1]), int(last_op[-1]) if last_op[-1] != INT_MIN else 0)
    wall = np.maximum(wall_end - m_start, 0)

    host_wait = _host_wait(trace, links, activity, op_rows, op_step, m_start, n_steps)
    api_idle = _api_in_idle(trace, host_rows, host_step, op_rows, m_start, wall_end, n_steps)
    copies = _copies(trace, op_rows, op_step, n_steps) if activity == "gpu" else None
    launches = _sum_by(host_step, (ev.kind == Kind.LAUNCH).astype(np.int64), n_steps)
    graph_launches = _sum_by(host_step, (ev.kind == Kind.GRAPH_LAUNCH).astype(np.int64), n_steps)
    lost = (ev.kind == Kind.LAUNCH) & (links.gpu_ops_of_launch == 0)
    lost_by_step = _sum_by(host_step, lost.astype(np.int64), n_steps)

    next_start = np.append(m_start[1:], np.iinfo(np.int64).max) if n_steps else np.zeros(0, np.int64)
    # host ran ahead: the step's GPU work starts after the next marker, or most of it runs there
    late = grouped_union(op_step, np.maximum(s, next_start[np.maximum(op_step, 0)]),
                         np.maximum(e, next_start[np.maximum(op_step, 0)]), n_steps)
    has_ops = first_op != np.iinfo(np.int64).max
    queued = has_ops & ((first_op >= next_start) | (2 * late > active))
    if activity != "gpu":
        queued[:] = False  # CPU compute runs synchronously inside the step that issued it
    # ... or its first op waited, after its marker ended, behind earlier steps' GPU work that
    # kept the device busy from the marker start on (the only sign left for the last step)
    if n_steps and activity == "gpu":
        seg_s, seg_e = merge(s, e)
        fo = np.where(has_ops, first_op, m_start)
        busy_before = covered_each(m_start, np.maximum(fo, m_start), seg_s, seg_e)
        queued |= has_ops & (fo > m_end) & (busy_before >= fo - m_start)
        # the last step has no next marker: queued when earlier steps' GPU work was still
        # pending at its marker start and most of its own GPU time runs after its marker ended
        last = n_steps - 1
        carried = bool(last > 0 and last_op[:last].max() > m_start[last])
        mine = op_step == last
        after = union_ns(np.maximum(s[mine], m_end[last]), np.maximum(e[mine], m_end[last]))
        queued[last] |= bool(has_ops[last] and carried and 2 * after > active[last])
    partial = lost_by_step > 0
    if n_steps and activity == "gpu":
        # the capture began mid-stream: work launched before the first marker still running
        launched = links.launch_of[op_rows]
        before = (launched >= 0) & (when < m_start[0])
        early = before & (e > m_start[0])
        partial[0] |= bool(early.any())

    floor = None
    taxes = None
    if activity == "gpu":
        names = [d.name for d in trace.meta.devices]
        floor = launch_floor(names, config.launch_floor_ns / 1000.0 if config.launch_floor_ns is not None else None,
                             config.floor_file)
        taxes = tb.kernel_taxes(trace, links, host_step, m_start, floor.ns, lane_prev_end(trace, op_rows))
    unattributed = _unattributed(trace, taxes, m_start, m_end, wall_end, n_steps)

    step_device = _step_devices(trace, op_rows, op_step, n_steps)
    step_tax = _per_step_taxes(taxes, n_steps) if taxes is not None else None
    steps = []
    for i in range(n_steps):
        kind_i, comp = composition(m_names[i])
        host_exposed = max(int(wall[i]) - int(active[i]), 0)
        row = {
            "index": i,
            "name": m_names[i],
            "kind": kind_i,
            "device": None if step_device[i] < 0 else int(step_device[i]),
            "start_ns": int(m_start[i]),
            "marker_end_ns": int(m_end[i]),
            "wall_ns": int(wall[i]),
            "gpu_active_ns": int(active[i]),
            "kernel_union_ns": int(k_union[i]),
            "kernel_sum_ns": int(k_sum[i]),
            "host_exposed_ns": host_exposed,
            "host_wait_ns": int(min(host_wait[i], wall[i])),
            "host_fraction": host_exposed / int(wall[i]) if wall[i] else None,
            "kernel_count": int(k_count[i]),
            "launches": int(launches[i]),
            "graph_launches": int(graph_launches[i]),
            "runtime_api_in_idle_ns": int(api_idle[i]),
            "queued": bool(queued[i]),
            "partial": bool(partial[i]),
            "first_gpu_start_ns": int(first_op[i]) if first_op[i] != np.iinfo(np.int64).max else None,
            "last_gpu_end_ns": int(last_op[i]) if last_op[i] != INT_MIN else None,
        }
        if copies is not None:
            row.update({k: int(v[i]) for k, v in copies.items()})
        row["taxbreak"] = None if step_tax is None else _step_taxbreak(step_tax, i, int(k_sum[i]), int(unattributed[i]))
        row.update(dict.fromkeys(COMPOSITION_FIELDS) if comp is None else comp)
        steps.append(row)

    summary = _summary(steps, config.warmup_steps)
    trace_tax = _trace_taxbreak(trace, taxes, floor, steps, op_rows, op_step, is_kernel, unattributed)
    v = _verdict(steps, summary, trace_tax)
    return Anatomy(
        trace=trace.meta.path,
        activity=activity,
        marker_family=family,
        steps=steps,
        summary=summary,
        taxbreak=trace_tax,
        verdict=v,
        top_ops=_top(trace, taxes, links, "op", n_steps, config.top) if taxes is not None
        else _top_cpu(trace, links, op_rows, m_start, m_end, n_steps, "op", config.top),
        top_frames=_top(trace, taxes, links, "frame", n_steps, config.top) if taxes is not None
        else _top_cpu(trace, links, op_rows, m_start, m_end, n_steps, "frame", config.top),
        unassigned={
            "gpu_ops_outside_steps": int(np.sum(~in_step)),
            "unlinked_gpu_ops": int(links.unlinked_gpu_ops),
            "launches_without_gpu_ops": int(lost.sum()),
        },
        kernels=taxes,
    )


# -- segmentation --------------------------------------------------------------------------


def _marker_windows(trace: Trace, rows: np.ndarray):
    ev = trace.events
    if not len(rows):  # whole trace is one step
        if not len(ev):
            return np.zeros(0, np.int64), np.zeros(0, np.int64), []
        return (np.array([ev.start_ns.min()]), np.array([ev.end_ns.max()]), ["whole trace"])
    order = np.argsort(ev.start_ns[rows], kind="stable")
    rows = rows[order]
    return ev.start_ns[rows], ev.end_ns[rows], trace.names_of(rows)


def _step_of(t: np.ndarray, m_start: np.ndarray, m_end: np.ndarray) -> np.ndarray:
    """Index of the step whose CPU window contains time t (NONE outside every step)."""
    if not len(m_start):
        return np.full(len(t), NONE, dtype=np.int64)
    i = np.searchsorted(m_start, t, side="right") - 1
    last = len(m_start) - 1
    ok = (i >= 0) & ((i < last) | (t <= m_end[last]))
    return np.where(ok, i, NONE).astype(np.int64)


def _sum_by(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    ok = group >= 0
    return np.bincount(group[ok], weights=values[ok], minlength=n).astype(np.int64)[:n] if n else np.zeros(0, np.int64)


def _min_by(group, values, n):
    out = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    ok = group >= 0
    np.minimum.at(out, group[ok], values[ok])
    return out


def _max_by(group, values, n):
    out = np.full(n, INT_MIN, dtype=np.int64)
    ok = group >= 0
    np.maximum.at(out, group[ok], values[ok])
    return out


def _step_devices(trace: Trace, op_rows, op_step, n) -> np.ndarray:
    """The device most of each step's GPU ops ran on (NONE when none)."""
    d = trace.events.device[op_rows].astype(np.int64)
    ok = (op_step >= 0) & (d >= 0)
    out = np.full(n, NONE, dtype=np.int64)
    if not ok.any() or not n:
        return out
    counts = np.zeros((n, int(d[ok].max()) + 1), dtype=np.int64)
    np.add.at(counts, (op_step[ok], d[ok]), 1)
    has = counts.sum(axis=1) > 0
    out[has] = counts[has].argmax(axis=1)
    return out


# -- per-step parts --------------------------------------------------------------------------


def _host_wait(trace, links, activity, op_rows, op_step, m_start, n_steps) -> np.ndarray:
    """GPU-idle gaps (device-wide) that end at a step's GPU op and began before that op's
    launch call started: the GPU provably waited on this step's host work. A gap ends at every
    op that starts when it closes (ties included); only its part after the step's marker start
    is charged to the step, once per step (the caller caps the total at the step's wall)."""
    ev = trace.events
    out = np.zeros(n_steps, dtype=np.int64)
    if not len(op_rows):
        return out
    dev = ev.device[op_rows]
    for d in np.unique(dev):
        sel = np.flatnonzero(dev == d)
        r, st = op_rows[sel], op_step[sel]
        order = np.argsort(ev.start_ns[r], kind="stable")
        r, st = r[order], st[order]
        s = ev.start_ns[r]
        reach = np.maximum.accumulate(ev.end_ns[r])
        group = np.searchsorted(s, s, side="left")  # first op starting at the same instant
        gap_start = np.where(group > 0, reach[np.maximum(group - 1, 0)], s)
        opens = (group > 0) & (s > gap_start)
        if activity == "gpu":
            launch = links.launch_of[r]
            after_launch = (launch >= 0) & (ev.start_ns[np.maximum(launch, 0)] > gap_start)
        else:
            after_launch = np.ones(len(r), dtype=bool)
        hit = np.flatnonzero(opens & after_launch & (st >= 0))
        if not len(hit):
            continue
        _, first = np.unique(np.stack([group[hit], st[hit]]), axis=1, return_index=True)
        hit = hit[first]  # one charge per (gap, step)
        sh = st[hit]
        charged = s[hit] - np.maximum(gap_start[hit], m_start[sh])
        np.add.at(out, sh, np.maximum(charged, 0))
    return out


def _api_in_idle(trace, host_rows, host_step, op_rows, m_start, wall_end, n_steps) -> np.ndarray:
    """Runtime/driver API time that falls inside GPU-idle time, per step (METHOD.md §4 (a))."""
    ev = trace.events
    out = np.zeros(n_steps, dtype=np.int64)
    if not len(host_rows) or not n_steps:
        return out
    seg_s, seg_e = merge(ev.start_ns[op_rows], ev.end_ns[op_rows])
    r = host_rows[host_step[host_rows] >= 0]
    st = host_step[r]
    s = np.maximum(ev.start_ns[r], m_start[st])
    e = np.maximum(np.minimum(ev.end_ns[r], wall_end[st]), s)
    # calls on several threads can overlap: count the union of the step's calls once
    g, us, ue = grouped_merge(st, s, e)
    idle = (ue - us) - covered_each(us, ue, seg_s, seg_e)
    np.add.at(out, g, idle)
    return out


def _copies(trace, op_rows, op_step, n_steps) -> dict[str, np.ndarray]:
    ev = trace.events
    is_copy = ev.kind[op_rows] == Kind.MEMCPY
    ck = ev.copy_kind[op_rows]
    dur = ev.dur_ns[op_rows]
    nbytes = ev.bytes[op_rows]
    out = {}
    for label, code in (("h2d", CopyKind.H2D), ("d2h", CopyKind.D2H)):
        m = is_copy & (ck == code)
        out[f"{label}_bytes"] = _sum_by(op_step, nbytes * m, n_steps)
        out[f"{label}_ns"] = _sum_by(op_step, dur * m, n_steps)
        out[f"{label}_count"] = _sum_by(op_step, m.astype(np.int64), n_steps)
    return out


def _unattributed(trace, taxes, m_start, m_end, wall_end, n_steps):
    """Host time on the launching thread inside each step's CPU window that no TaxBreak interval
    (T_py, T_dispatch, the launch call) and no synchronising call covers."""
    ev = trace.events
    out = np.zeros(n_steps, dtype=np.int64)
    if taxes is None or not len(taxes) or not n_steps:
        return out
    thread = np.bincount(np.unique(taxes.thread, return_inverse=True)[1]).argmax()
    main = np.unique(taxes.thread)[thread]
    sync = trace.name_mask(SYNC_API.search) & ev.of_kind(*HOST_API_KINDS) & (ev.tid == main)
    lr = taxes.launch_row
    covered_s = np.concatenate((taxes.py_start_ns, taxes.dispatch_start_ns, ev.start_ns[lr], ev.start_ns[sync]))
    covered_e = np.concatenate((taxes.py_end_ns, taxes.dispatch_end_ns, ev.end_ns[lr], ev.end_ns[sync]))
    seg_s, seg_e = merge(covered_s, np.maximum(covered_e, covered_s))
    # the launching thread works on a step from its marker start to the next marker start
    # (the last step: to its marker end), not while the GPU drains
    cpu_end = np.append(m_start[1:], m_end[-1])
    win_s = m_start
    win_e = np.maximum(np.minimum(wall_end, cpu_end), m_start)
    covered = covered_each(win_s, win_e, seg_s, seg_e)
    return np.maximum(win_e - win_s - covered, 0)


def _per_step_taxes(taxes, n) -> dict[str, np.ndarray]:
    """TaxBreak sums per step, all at once (bincount over the launch table)."""
    st = taxes.step
    fw = np.nan_to_num(taxes.dkt_fw_ns, nan=0.0)
    launches = _sum_by(st, np.ones(len(st), dtype=np.int64), n)
    return {
        "ft_ns": _sum_by(st, taxes.dft_ns, n),
        "ct_ns": _sum_by(st, taxes.dct_ns, n),
        "kt_ns": np.rint(launches * taxes.floor_ns).astype(np.int64),
        "kt_fw_ns": _sum_by(st, fw, n),
        "py_ns": _sum_by(st, taxes.t_py_ns, n),
        "dispatch_ns": _sum_by(st, taxes.t_dispatch_ns, n),
        "launches": launches,
    }


def _step_taxbreak(per_step: dict, i: int, device_active: int, unattributed: int) -> dict:
    row = {k: int(v[i]) for k, v in per_step.items()}
    orchestrate = row["ft_ns"] + row["ct_ns"] + row["kt_ns"]
    row.update({"unattributed_ns": unattributed, "device_active_ns": device_active,
                "orchestrate_ns": orchestrate, "hdbi": tb.hdbi(device_active, orchestrate)})
    return row


# -- summary, verdict, rankings -------------------------------------------------------------

SUMMARY_KEYS = ("wall_ns", "gpu_active_ns", "host_exposed_ns", "host_wait_ns", "host_fraction",
                "kernel_sum_ns", "kernel_union_ns", "kernel_count", "launches")


def _stats(values: list) -> dict | None:
    v = np.array([x for x in values if x is not None], dtype=float)
    if not len(v):
        return None
    p10, p50, p90 = np.percentile(v, [10, 50, 90])
    return {"median": float(p50), "p10": float(p10), "p90": float(p90), "min": float(v.min()), "n": int(len(v))}


def _summary(steps: list[dict], warmup: int) -> dict:
    """Steady state over decode steps (median, p10, p90, min); prefill, warm-up and flagged
    (queued or partial) steps reported apart. Steps of unknown kind count as decode."""
    groups: dict[str, list[dict]] = {"steady": [], "prefill": [], "warmup": [], "flagged": []}
    decode_seen = 0
    decode_total = sum(1 for s in steps if s["kind"] in ("decode", "unknown"))
    for s in steps:
        is_decode = s["kind"] in ("decode", "unknown")
        if is_decode and decode_seen < warmup and decode_total > warmup + 1:
            groups["warmup"].append(s)  # the capture's leading decode steps, flagged or not
        elif s["partial"] or s["queued"]:
            groups["flagged"].append(s)
        elif not is_decode:
            groups["prefill"].append(s)
        else:
            groups["steady"].append(s)
        decode_seen += is_decode
    out = {"steps": len(steps)}
    for name, rows in groups.items():
        out[name] = {"count": len(rows), "indices": [r["index"] for r in rows][:1000]}
        out[name].update({k: _stats([r[k] for r in rows]) for k in SUMMARY_KEYS})
        out[name]["queued"] = sum(r["queued"] for r in rows)
    return out


def _trace_taxbreak(trace, taxes, floor, steps, op_rows, op_step, is_kernel, unattributed) -> dict:
    ev = trace.events
    n_steps = len(steps)
    kernel_rows = op_rows[is_kernel & (op_step >= 0)]
    unique = int(len(np.unique(ev.name[kernel_rows]))) if len(kernel_rows) else 0
    total = int(len(kernel_rows))
    decode = [s for s in steps if s["kind"] in ("decode", "unknown") and not s["partial"]]
    per_step = float(np.median([s["kernel_count"] for s in decode])) if decode else None
    base = {
        "applicable": taxes is not None,
        "kernels_per_step": per_step,
        "kernels_per_token": total / n_steps if n_steps else None,
        "unique_kernels": unique,
        "total_kernels": total,
        "unique_ratio": unique / total if total else None,
    }
    if taxes is None:
        base.update({k: None for k in ("ft_ns", "ct_ns", "kt_ns", "kt_fw_ns", "kt_fw_samples", "py_ns",
                                       "dispatch_ns", "unattributed_ns", "device_active_ns",
                                       "orchestrate_ns", "hdbi", "launches", "graph_launches",
                                       "library_launches", "queued_launches", "dispatch_base_ns",
                                       "launch_floor_ns", "floor_source")})
        base["note"] = "no device activity: GPU terms (TaxBreak, HDBI, launch floor) do not apply"
        return base
    sel = taxes.step >= 0
    s = tb.sums(taxes, sel)
    device_active = int(sum(st["kernel_sum_ns"] for st in steps))
    orchestrate = s.ft_ns + s.ct_ns + s.kt_ns
    base.update({
        "ft_ns": s.ft_ns, "ct_ns": s.ct_ns, "kt_ns": s.kt_ns, "kt_fw_ns": s.kt_fw_ns,
        "kt_fw_samples": s.kt_fw_samples, "py_ns": s.py_ns, "dispatch_ns": s.dispatch_ns,
        "unattributed_ns": int(np.sum(unattributed)), "device_active_ns": device_active,
        "orchestrate_ns": orchestrate, "hdbi": tb.hdbi(device_active, orchestrate),
        "launches": int(np.sum(~taxes.graph[sel])), "graph_launches": int(np.sum(taxes.graph[sel])),
        "library_launches": int(np.sum(taxes.i_lib[sel])),
        "queued_launches": int(np.sum(taxes.queued[sel])),
        "dispatch_base_ns": taxes.dispatch_base_ns,
        "launch_floor_ns": floor.ns, "floor_source": floor.source,
    })
    return base


def _verdict(steps: list[dict], summary: dict, tax: dict) -> dict:
    """Verdict over the steady decode steps, queued ones included; when most of them are
    queued (the host ran ahead), host_wait / wall is the basis instead of the host fraction."""
    exclude = set(summary["warmup"]["indices"])
    pool = [s for s in steps if s["kind"] in ("decode", "unknown") and not s["partial"]
            and s["index"] not in exclude]
    if not pool:
        pool = [s for s in steps if not s["partial"]] or steps
    if not pool:
        return verdict(None).to_dict() | {"steps_used": 0}
    queued = sum(s["queued"] for s in pool) * 2 > len(pool)
    use = pool if queued else ([s for s in pool if not s["queued"]] or pool)
    hf = _median([s["host_fraction"] for s in use])
    hw = _median([s["host_wait_ns"] / s["wall_ns"] for s in use if s["wall_ns"]])
    v = verdict(hf, hw, tax.get("hdbi"), queued=queued).to_dict()
    v["steps_used"] = len(use)
    return v


def _median(values: list) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None


def _top(trace, taxes, links, by: str, n_steps: int, top: int) -> list[dict]:
    """Host time charged (ΔFT + ΔCT) to top-level framework ops or to Python frames."""
    if taxes is None or not len(taxes) or not n_steps:
        return []
    ev = trace.events
    sel = taxes.step >= 0
    charge = (taxes.dft_ns + taxes.dct_ns)[sel]
    if by == "op":
        rows = taxes.unit_row[sel]
    else:
        rows = taxes.frame_row[sel]
    has = rows >= 0
    codes = np.where(has, ev.name[np.maximum(rows, 0)], -1)
    uniq, inv = np.unique(codes, return_inverse=True)
    total = np.bincount(inv, weights=charge)
    count = np.bincount(inv)
    order = np.argsort(-total)[:top]
    grand = max(float(total.sum()), 1.0)
    out = []
    for j in order:
        name = trace.names[uniq[j]] if uniq[j] >= 0 else ("(no Python frame in trace)" if by == "frame" else "(no op)")
        out.append({"name": name, "host_ns_per_step": float(total[j] / n_steps), "host_ns": int(total[j]),
                    "launches": int(count[j]), "share": float(total[j] / grand)})
    return out


def _top_cpu(trace, links, compute_rows, m_start, m_end, n_steps, by, top) -> list[dict]:
    """CPU-only traces: host time per top-level framework op = the time before it since the
    previous top-level op (or the step start) + its own time outside leaf compute ops."""
    ev = trace.events
    ops = links.ops
    if not len(ops.rows) or not n_steps:
        return []
    tops = ops.rows[ops.parent < 0]
    st = _step_of(ev.start_ns[tops], m_start, m_end)
    tops, st = tops[st >= 0], st[st >= 0]
    if not len(tops):
        return []
    order = np.lexsort((ev.start_ns[tops], ev.tid[tops]))
    tops, st = tops[order], st[order]
    same = np.concatenate(([False], (ev.tid[tops][1:] == ev.tid[tops][:-1]) & (st[1:] == st[:-1])))
    prev_end = np.where(same, np.concatenate(([0], ev.end_ns[tops][:-1])), m_start[st])
    before = np.maximum(ev.start_ns[tops] - prev_end, 0)
    seg_s, seg_e = merge(ev.start_ns[compute_rows], ev.end_ns[compute_rows])
    inside = ev.dur_ns[tops] - covered_each(ev.start_ns[tops], ev.end_ns[tops], seg_s, seg_e)
    charge = (before + inside).astype(float)
    rows = tops if by == "op" else links.frame_of[tops]
    codes = np.where(rows >= 0, ev.name[np.maximum(rows, 0)], -1)
    uniq, inv = np.unique(codes, return_inverse=True)
    total = np.bincount(inv, weights=charge)
    count = np.bincount(inv)
    grand = max(float(total.sum()), 1.0)
    out = []
    for j in np.argsort(-total)[:top]:
        name = trace.names[uniq[j]] if uniq[j] >= 0 else ("(no Python frame in trace)" if by == "frame" else "(no op)")
        out.append({"name": name, "host_ns_per_step": float(total[j] / n_steps), "host_ns": int(total[j]),
                    "launches": int(count[j]), "share": float(total[j] / grand),
                    "basis": "CPU: time before the op since the previous op + time inside it outside compute ops"})
    return out
