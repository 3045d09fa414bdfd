"""Where a continuous-batching engine step goes (transformers' ``ContinuousBatchingManager``).

transformers' continuous-batching loop runs on one background thread; each iteration prepares
the next batch (admission, scheduling, KV-table indices, input tensors), runs the forward pass
and sampling, and updates the requests with the sampled tokens (output processing, block
release, delivery). hostgap's ``hf-cb`` engine annotates the forward part with the step
annotation (``hostgap.step#...``, the anatomy's step) and the loop's own parts with
``hostgap.cb.<part>`` sub-annotations. A step window W (one step annotation's start to the
next one's, the anatomy's step) then tiles exactly::

    compute      device-active time in W (GPU-active; on CPU the compute-op analogue)
    step_host    host time inside the step annotation, not compute: the forward's Python
                 and dispatch, the kwargs, sampling, the wait for the outputs
    loop_host    host time outside the step annotation, not compute: the loop's own work
                 between forward passes (update, admission, scheduling, input preparation)

    compute + step_host + loop_host == wall (per step, exactly; so also for their means)

Each host instant is charged to the innermost ``hostgap.cb.*`` annotation covering it
(:data:`PARTS`; ``other`` where none does), so both host parts break down by part and the
breakdowns add up to them. ``between`` = wall outside the step annotation = ``loop_host`` plus
the compute that ran there (on CPU the loop's own tensor work, e.g. filling the mask): in the
synchronous loop the device waits through all of it, which is what asynchronous batching
hides behind the next step.

Everything here is numpy over one loaded trace; no transformers needed.
"""

from __future__ import annotations

import numpy as np

from hostgap.analysis.vllm_split import active_segments, steady_steps
from hostgap.events import Kind

PREFIX = "hostgap.cb."
"""Name prefix of the loop's sub-annotations."""

PARTS = (
    "kwargs",
    "forward",
    "sample",
    "d2h",
    "admit",
    "schedule",
    "evict",
    "inputs",
    "kv_indices",
    "mask",
    "reset",
    "carry_over",
    "prepare",
    "update",
    "wait_outputs",
    "deliver",
    "other",
)
"""Host parts, in table order; each annotation ``hostgap.cb.<name>`` charges to the part
:data:`PART_OF` maps it to; ``other``: covered by no sub-annotation."""

PART_OF = {
    "kwargs": "kwargs",
    "forward_sample": "forward",
    "sample": "sample",
    "d2h": "d2h",
    "admit": "admit",
    "schedule": "schedule",
    "evict": "evict",
    "inputs": "inputs",
    "inputs.kv_indices": "kv_indices",
    "inputs.mask": "mask",
    "inputs.reset": "reset",
    "inputs.carry_over": "carry_over",
    "prepare": "prepare",
    "update": "update",
    "update.wait_outputs": "wait_outputs",
    "deliver": "deliver",
}
"""Sub-annotation name (after :data:`PREFIX`) -> part; unknown names charge to ``other``."""

DETAIL = {
    "kwargs": "model kwargs (async: H2D of the inputs)",
    "forward": "forward pass: Python and dispatch",
    "sample": "logits processing and sampling",
    "d2h": "outputs to the host (sync: waits for the device)",
    "admit": "new requests from the queue (admission)",
    "schedule": "scheduling and KV block allocation",
    "evict": "offloading (eviction) and restoring requests",
    "inputs": "input tensors: per-request loop, copies",
    "kv_indices": "KV-table read/write indices",
    "mask": "attention mask",
    "reset": "static input buffers reset",
    "carry_over": "async: tokens carried over from the previous batch",
    "prepare": "rest of the batch preparation",
    "update": "tokens to requests, completion, block release",
    "wait_outputs": "async: wait for the previous batch's outputs",
    "deliver": "finished requests to the caller",
    "other": "loop and step code outside every sub-annotation",
}

OTHER = PARTS.index("other")


def step_tiling(
    start_ns: np.ndarray,
    wall_ns: np.ndarray,
    marker_end_ns: np.ndarray,
    seg_start: np.ndarray,
    seg_end: np.ndarray,
    ann_start: np.ndarray,
    ann_end: np.ndarray,
    ann_part: np.ndarray,
) -> dict[str, np.ndarray]:
    """Per step (int64 ns): ``compute_step_ns`` / ``compute_loop_ns`` (device-active inside /
    outside the step annotation), ``host_ns`` of shape (steps, 2, len(PARTS)) — host time
    inside (index 1) and outside (index 0) the step annotation by part — and ``wall_ns``.

    Windows are ``[start, start + wall)``, disjoint and sorted; the annotation end is clipped to
    its window; ``seg_*``: merged device-active segments; ``ann_*``: sub-annotations (part
    indices into :data:`PARTS`), properly nested as on one thread (where two overlap without
    nesting, the later-starting one wins)."""
    start = np.asarray(start_ns, dtype=np.int64)
    end = start + np.asarray(wall_ns, dtype=np.int64)
    m_end = np.clip(np.asarray(marker_end_ns, dtype=np.int64), start, end)
    n = len(start)
    host = np.zeros((n, 2, len(PARTS)), dtype=np.int64)
    out: dict[str, np.ndarray] = {
        "compute_step_ns": np.zeros(n, np.int64),
        "compute_loop_ns": np.zeros(n, np.int64),
        "host_ns": host,
        "wall_ns": end - start,
    }
    if n == 0:
        return out
    lo, hi = start[0], end[-1]
    ann_s = np.clip(np.asarray(ann_start, dtype=np.int64), lo, hi)
    ann_e = np.clip(np.asarray(ann_end, dtype=np.int64), lo, hi)
    seg_s = np.clip(np.asarray(seg_start, dtype=np.int64), lo, hi)
    seg_e = np.clip(np.asarray(seg_end, dtype=np.int64), lo, hi)
    bounds = np.unique(np.concatenate((start, end, m_end, ann_s, ann_e, seg_s, seg_e)))
    left, length = bounds[:-1], np.diff(bounds)
    step = np.searchsorted(start, left, side="right") - 1  # pieces start at or after start[0]
    inside = left < end[step]
    j = np.searchsorted(seg_s, left, side="right") - 1
    compute = (j >= 0) & (left < np.append(seg_e, lo)[j])  # j = -1 reads the sentinel: never
    in_marker = left < m_end[step]
    label = _paint(bounds, ann_s, ann_e, np.asarray(ann_part, dtype=np.int64))
    keep = inside & ~compute
    host_flat = np.bincount(
        (step * 2 + in_marker) * len(PARTS) + label,
        weights=np.where(keep, length, 0),
        minlength=n * 2 * len(PARTS),
    )
    host[:] = np.rint(host_flat).astype(np.int64).reshape(n, 2, len(PARTS))
    busy = np.where(inside & compute, length, 0)
    out["compute_step_ns"] = np.rint(np.bincount(step, busy * in_marker, minlength=n)).astype(np.int64)
    out["compute_loop_ns"] = np.rint(np.bincount(step, busy * ~in_marker, minlength=n)).astype(np.int64)
    return out


def _paint(bounds: np.ndarray, ann_s: np.ndarray, ann_e: np.ndarray, part: np.ndarray) -> np.ndarray:
    """The part of the innermost annotation covering each piece ``[bounds[i], bounds[i+1])``
    (:data:`OTHER` where none does): annotations painted outermost first (by start, longer
    first at equal starts: at one start the later end is the longer), so an inner one paints over
    its parent. One slice per annotation."""
    label = np.full(len(bounds) - 1, OTHER, dtype=np.int64)
    order = np.lexsort((-ann_e, ann_s))
    first = np.searchsorted(bounds, ann_s[order])
    last = np.searchsorted(bounds, ann_e[order])
    for a, b, p in zip(first.tolist(), last.tolist(), part[order].tolist()):
        label[a:b] = p
    return label


def sub_annotations(trace, step_tids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``hostgap.cb.*`` annotations of a trace (start, end, part index), on the threads in
    ``step_tids`` when given (the loop thread: the one that carries the step annotations)."""
    ev = trace.events
    rows = np.flatnonzero(trace.name_mask(lambda s: s.startswith(PREFIX)) & ev.of_kind(Kind.ANNOTATION))
    if step_tids is not None:
        rows = rows[np.isin(ev.tid[rows], step_tids)]
    code = np.array([PARTS.index(PART_OF.get(s[len(PREFIX) :], "other")) for s in trace.names_of(rows)], np.int64)
    return ev.start_ns[rows], ev.end_ns[rows], code


def step_threads(trace) -> np.ndarray:
    """Thread ids that carry hostgap's step annotations."""
    ev = trace.events
    rows = trace.name_mask(lambda s: s.startswith("hostgap.step#")) & ev.of_kind(Kind.ANNOTATION)
    return np.unique(ev.tid[rows])


def split_of_trace(trace, steps: list[dict] | None = None, warmup: int = 1) -> dict | None:
    """The tiled split of an ``hf-cb`` trace (:func:`summarize` of :func:`step_tiling`) over
    its steady decode steps; None without decode steps. ``steps``: the anatomy's step rows of
    this trace (analysed here when not given)."""
    steady = steady_steps(trace, steps, warmup)
    if steady is None:
        return None
    a_s, a_e, a_p = sub_annotations(trace, step_threads(trace))
    tiling = step_tiling(*steady, *active_segments(trace), a_s, a_e, a_p)
    return summarize(tiling, annotated=len(a_s) > 0)


def summarize(tiling: dict[str, np.ndarray], annotated: bool = True) -> dict:
    """Means per step (integer sums over the same steps, divided once, so they add up exactly):
    ``step_ns = compute_ns + step_host_ns + loop_host_ns``; ``between_ns = loop_host_ns +
    compute_loop_ns``; ``step_parts`` / ``loop_parts``: the host parts by part (non-zero ones,
    and ``other`` always), adding up to ``step_host_ns`` / ``loop_host_ns``; shares of the step.
    ``annotated``: whether the trace had sub-annotations (else every host instant is ``other``)."""
    n = len(tiling["wall_ns"])
    host = tiling["host_ns"].sum(axis=0)  # (2, parts): [outside, inside] the step annotation
    c_step, c_loop = int(tiling["compute_step_ns"].sum()), int(tiling["compute_loop_ns"].sum())
    total = int(tiling["wall_ns"].sum())
    sums = {
        "compute_ns": c_step + c_loop,
        "step_host_ns": int(host[1].sum()),
        "loop_host_ns": int(host[0].sum()),
    }
    return {
        "basis": "traced N2 run, the loop thread's annotations: mean per steady decode step "
        "(one step annotation start to the next)",
        "steps": n,
        "step_ns": total / n,
        **{k: v / n for k, v in sums.items()},
        "compute_loop_ns": c_loop / n,
        "between_ns": (c_loop + sums["loop_host_ns"]) / n,
        "step_parts": _parts(host[1], n),
        "loop_parts": _parts(host[0], n),
        "shares": {k: (v / total if total else None) for k, v in sums.items()},
        "annotated": annotated,
    }


def _parts(row: np.ndarray, n: int) -> dict[str, float]:
    return {p: int(v) / n for p, v in zip(PARTS, row.tolist()) if v or p == "other"}


LABELS = {
    "compute_ns": "compute",
    "step_host_ns": "host in the step",
    "loop_host_ns": "loop host between steps",
}
ROW_DETAIL = {
    "compute_ns": "device-active in the step",
    "step_host_ns": "forward Python/dispatch, kwargs, sampling",
    "loop_host_ns": "update, admission, scheduling, inputs",
}


def rows(split: dict | None) -> list[tuple[str, str, str]]:
    """Label / value / basis rows for the measure table (empty without a split)."""
    if not split:
        return []
    if "unavailable" in split:
        return [("loop split", "-", str(split["unavailable"])[:120])]

    def ms(v):
        return f"{v / 1e6:.3f} ms"

    out = [("loop split (traced)", ms(split["step_ns"]), f"mean of {split['steps']} decode steps; parts add up to it")]
    for k in LABELS:
        out.append((f"  {LABELS[k]}", ms(split[k]), f"{split['shares'][k] * 100:.1f} % · {ROW_DETAIL[k]}"))
        if k == "loop_host_ns":
            top = sorted(split["loop_parts"].items(), key=lambda kv: -kv[1])[:3]
            text = " · ".join(f"{p} {v / 1e6:.3f}" for p, v in top) + " ms"
            out.append(("    largest loop parts", text, "host by hostgap.cb.* part"))
    out.append(("  between forward passes", ms(split["between_ns"]), "loop host + compute outside the step"))
    return out
