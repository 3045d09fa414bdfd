"""The trace-level parts of the step anatomy (:func:`hostgap.anatomy.steps.analyze` builds the
per-step rows, then calls these): the steady-state summary over the steps (prefill, warm-up and
flagged steps apart), the trace's TaxBreak with its split by launch class, and the rankings of
the framework ops and Python frames that cost the most host time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hostgap.anatomy import taxbreak as tb
from hostgap.anatomy.collectives import CLASSES
from hostgap.anatomy.intervals import covered_each, merge
from hostgap.anatomy.windows import DeviceOps, StepWindows

SUMMARY_KEYS = (
    "wall_ns",
    "gpu_active_ns",
    "host_exposed_ns",
    "host_wait_ns",
    "host_fraction",
    "kernel_sum_ns",
    "kernel_union_ns",
    "kernel_count",
    "launches",
    "compute_active_ns",
    "comm_active_ns",
    "comm_overlap_ns",
    "comm_count",
)


def _stats(values: list) -> dict | None:
    v = np.array([x for x in values if x is not None], dtype=float)
    if not len(v):
        return None
    p10, p50, p90 = np.percentile(v, [10, 50, 90])
    return {"median": float(p50), "p10": float(p10), "p90": float(p90), "min": float(v.min()), "n": int(len(v))}


def step_summary(steps: list[dict], warmup: int) -> dict:
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
    out: dict[str, Any] = {"steps": len(steps)}
    for name, rows in groups.items():
        out[name] = {"count": len(rows), "indices": [r["index"] for r in rows][:1000]}
        out[name].update({k: _stats([r[k] for r in rows]) for k in SUMMARY_KEYS})
        out[name]["queued"] = sum(r["queued"] for r in rows)
    return out


def trace_taxbreak(trace, taxes, floor, steps, ops: DeviceOps, unattributed, launch_class) -> dict:
    ev = trace.events
    n_steps = len(steps)
    kernel_rows = ops.rows[ops.is_kernel & (ops.step >= 0)]
    unique = int(len(np.unique(ev.name[kernel_rows]))) if len(kernel_rows) else 0
    total = int(len(kernel_rows))
    decode = [s for s in steps if s["kind"] in ("decode", "unknown") and not s["partial"]]
    per_step = float(np.median([s["kernel_count"] for s in decode])) if decode else None
    base: dict[str, Any] = {
        "applicable": taxes is not None,
        "kernels_per_step": per_step,
        "kernels_per_token": total / n_steps if n_steps else None,
        "unique_kernels": unique,
        "total_kernels": total,
        "unique_ratio": unique / total if total else None,
    }
    if taxes is None:
        base.update(
            {
                k: None
                for k in (
                    "ft_ns",
                    "ct_ns",
                    "kt_ns",
                    "kt_fw_ns",
                    "kt_fw_samples",
                    "py_ns",
                    "dispatch_ns",
                    "sync_ns",
                    "unattributed_ns",
                    "device_active_ns",
                    "orchestrate_ns",
                    "hdbi",
                    "launches",
                    "graph_launches",
                    "library_launches",
                    "queued_launches",
                    "dispatch_base_ns",
                    "launch_floor_ns",
                    "floor_source",
                    "by_class",
                )
            }
        )
        base["note"] = "no device activity: GPU terms (TaxBreak, HDBI, launch floor) do not apply"
        return base
    sel = taxes.step >= 0
    s = tb.sums(taxes, sel)
    device_active = int(sum(st["kernel_sum_ns"] for st in steps))
    orchestrate = s.ft_ns + s.ct_ns + s.kt_ns
    base.update(
        {
            "ft_ns": s.ft_ns,
            "ct_ns": s.ct_ns,
            "kt_ns": s.kt_ns,
            "kt_fw_ns": s.kt_fw_ns,
            "kt_fw_samples": s.kt_fw_samples,
            "py_ns": s.py_ns,
            "dispatch_ns": s.dispatch_ns,
            "sync_ns": s.sync_ns,
            "unattributed_ns": int(np.sum(unattributed)),
            "device_active_ns": device_active,
            "orchestrate_ns": orchestrate,
            "hdbi": tb.hdbi(device_active, orchestrate),
            "launches": int(np.sum(~taxes.graph[sel])),
            "graph_launches": int(np.sum(taxes.graph[sel])),
            "library_launches": int(np.sum(taxes.i_lib[sel])),
            "queued_launches": int(np.sum(taxes.queued[sel])),
            "dispatch_base_ns": taxes.dispatch_base_ns,
            "launch_floor_ns": floor.ns,
            "floor_source": floor.source,
            "by_class": {c: _class_taxes(taxes, sel & (launch_class == j)) for j, c in enumerate(CLASSES)},
        }
    )
    return base


def _class_taxes(taxes, sel) -> dict:
    """TaxBreak of one launch class (compute, communication, mixed): its launches, host terms
    and the kernel time those launches enqueued."""
    s = tb.sums(taxes, sel)
    return {
        "launches": int(np.sum(~taxes.graph[sel])),
        "graph_launches": int(np.sum(taxes.graph[sel])),
        "ft_ns": s.ft_ns,
        "ct_ns": s.ct_ns,
        "kt_ns": s.kt_ns,
        "orchestrate_ns": s.ft_ns + s.ct_ns + s.kt_ns,
        "device_ns": int(taxes.device_ns[sel].sum()),
    }


def top_host(trace, taxes, by: str, n_steps: int, top: int) -> list[dict]:
    """Host time charged (ΔFT + ΔCT) to top-level framework ops or to Python frames."""
    if taxes is None or not len(taxes) or not n_steps:
        return []
    sel = taxes.step >= 0
    rows = (taxes.unit_row if by == "op" else taxes.frame_row)[sel]
    return _rank(trace, rows, (taxes.dft_ns + taxes.dct_ns)[sel], by, n_steps, top)


def top_host_cpu(trace, links, compute_rows, win: StepWindows, by, top) -> list[dict]:
    """CPU-only traces: host time per top-level framework op = the time before it since the
    previous top-level op (or the step start) + its own time outside leaf compute ops."""
    ev = trace.events
    ops = links.ops
    n_steps = len(win)
    # no ops or no steps leave no top-level op inside a step: the check below returns []
    tops = ops.rows[ops.parent < 0]
    st = win.step_of(ev.start_ns[tops])
    tops, st = tops[st >= 0], st[st >= 0]
    if not len(tops):
        return []
    order = np.lexsort((ev.start_ns[tops], ev.tid[tops]))
    tops, st = tops[order], st[order]
    same = np.concatenate(([False], (ev.tid[tops][1:] == ev.tid[tops][:-1]) & (st[1:] == st[:-1])))
    prev_end = np.where(same, np.concatenate(([0], ev.end_ns[tops][:-1])), win.start_ns[st])
    before = np.maximum(ev.start_ns[tops] - prev_end, 0)
    seg_s, seg_e = merge(ev.start_ns[compute_rows], ev.end_ns[compute_rows])
    inside = ev.dur_ns[tops] - covered_each(ev.start_ns[tops], ev.end_ns[tops], seg_s, seg_e)
    rows = tops if by == "op" else links.frame_of[tops]
    return _rank(
        trace,
        rows,
        before + inside,
        by,
        n_steps,
        top,
        "CPU: time before the op since the previous op + time inside it outside compute ops",
    )


def _rank(trace, rows, charge, by: str, n_steps: int, top: int, basis: str | None = None) -> list[dict]:
    """The ``top`` names (of op or frame ``rows``, NONE: none) with the most host time ``charge``
    (ns per row): total, per step, row count (``launches``) and share of the total."""
    if not len(rows):
        return []
    ev = trace.events
    codes = np.where(rows >= 0, ev.name[np.maximum(rows, 0)], -1)
    uniq, inv = np.unique(codes, return_inverse=True)
    total = np.bincount(inv, weights=np.asarray(charge, dtype=float))
    count = np.bincount(inv)
    grand = max(float(total.sum()), 1.0)
    none = "(no Python frame in trace)" if by == "frame" else "(no op)"
    out = []
    for j in np.argsort(-total, kind="stable")[:top]:
        row = {
            "name": trace.names[uniq[j]] if uniq[j] >= 0 else none,
            "host_ns_per_step": float(total[j] / n_steps),
            "host_ns": int(total[j]),
            "launches": int(count[j]),
            "share": float(total[j] / grand),
        }
        if basis:
            row["basis"] = basis
        out.append(row)
    return out
