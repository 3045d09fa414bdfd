"""Named rules that flag a step ``queued`` (the host ran ahead of the GPU, so wall − GPU-active is
not host time) or ``partial`` (the capture lacks part of the step's work). Each rule is a pure
function of the step windows and the device-op table, tested alone; a step's ``queued_reason`` /
``partial_reason`` is the first rule that fires, in the order of :data:`QUEUED_RULES` /
:data:`PARTIAL_RULES` (docs/method.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hostgap.anatomy.intervals import covered_each, grouped_union, merge
from hostgap.anatomy.windows import INT_MAX, DeviceOps, StepWindows


@dataclass(frozen=True)
class StepGpu:
    """Per-step aggregates of the step's own device ops (what the rules read)."""

    active_ns: np.ndarray  # union of the step's ops
    first_ns: np.ndarray  # first op start (INT_MAX: none)
    last_ns: np.ndarray  # last op end (INT_MIN: none)

    @property
    def has_ops(self) -> np.ndarray:
        return self.first_ns != INT_MAX


def starts_after_next_marker(w: StepWindows, ops: DeviceOps, g: StepGpu) -> np.ndarray:
    """The step's first GPU op starts at or after the next step's marker."""
    return g.has_ops & (g.first_ns >= w.next_start_ns)


def mostly_after_next_marker(w: StepWindows, ops: DeviceOps, g: StepGpu) -> np.ndarray:
    """More than half of the step's GPU-active time lies after the next step's marker start."""
    st = np.maximum(ops.step, 0)
    nxt = w.next_start_ns[st] if len(w) else np.zeros(0, np.int64)
    late = grouped_union(ops.step, np.maximum(ops.start_ns, nxt), np.maximum(ops.end_ns, nxt), len(w))
    return g.has_ops & (2 * late > g.active_ns)


def waited_behind_earlier_work(w: StepWindows, ops: DeviceOps, g: StepGpu) -> np.ndarray:
    """The first op started after the step's marker ended, and the GPU was busy (with any work)
    from the marker start until then: it queued behind earlier steps' work."""
    seg_s, seg_e = merge(ops.start_ns, ops.end_ns)
    fo = np.where(g.has_ops, g.first_ns, w.start_ns)
    busy_before = covered_each(w.start_ns, np.maximum(fo, w.start_ns), seg_s, seg_e)
    return g.has_ops & (fo > w.marker_end_ns) & (busy_before >= fo - w.start_ns)


def last_step_behind_earlier_work(w: StepWindows, ops: DeviceOps, g: StepGpu) -> np.ndarray:
    """The last step (no next marker): earlier steps' GPU work was still pending at its marker
    start and most of its own GPU time runs after its marker ended."""
    out = np.zeros(len(w), dtype=bool)
    last = len(w) - 1
    if last < 1 or not g.has_ops[last]:
        return out
    carried = g.last_ns[:last].max() > w.start_ns[last]
    mine = ops.step == last
    end = w.marker_end_ns[last]
    after = grouped_union(
        np.zeros(int(mine.sum()), np.int64), np.maximum(ops.start_ns[mine], end), np.maximum(ops.end_ns[mine], end), 1
    )[0]
    out[last] = bool(carried and 2 * after > g.active_ns[last])
    return out


QUEUED_RULES = (
    starts_after_next_marker,
    mostly_after_next_marker,
    waited_behind_earlier_work,
    last_step_behind_earlier_work,
)


def launch_without_gpu_work(w: StepWindows, lost_launches: np.ndarray, ops: DeviceOps) -> np.ndarray:
    """A kernel launch call of the step has no GPU op in the trace (the capture ended first, or
    the trace dropped it)."""
    return lost_launches > 0


def work_launched_before_the_capture(w: StepWindows, lost_launches: np.ndarray, ops: DeviceOps) -> np.ndarray:
    """GPU work launched before the capture (or before the first step) runs inside the step's
    wall: part of the GPU time there belongs to no captured step."""
    return _overlaps(w, ops, ops.outside)


def gpu_work_without_launch(w: StepWindows, lost_launches: np.ndarray, ops: DeviceOps) -> np.ndarray:
    """A GPU op with no launch call in the trace (not launched before the capture) runs inside the
    step's wall."""
    return _overlaps(w, ops, (ops.launch_row < 0) & ~ops.outside & ops.gpu)


PARTIAL_RULES = (work_launched_before_the_capture, launch_without_gpu_work, gpu_work_without_launch)


def _overlaps(w: StepWindows, ops: DeviceOps, mask: np.ndarray) -> np.ndarray:
    seg_s, seg_e = merge(ops.start_ns[mask], ops.end_ns[mask])
    return covered_each(w.start_ns, w.wall_end_ns, seg_s, seg_e) > 0


def first_reason(rules, *args) -> tuple[np.ndarray, list[str | None]]:
    """(flag per step, name of the first rule that fired or None) over ``rules``."""
    hits = [rule(*args) for rule in rules]
    n = len(hits[0]) if hits else 0
    flag = np.zeros(n, dtype=bool)
    reason: list[str | None] = [None] * n
    for rule, hit in zip(rules, hits):
        for i in np.flatnonzero(hit & ~flag):
            reason[i] = rule.__name__
        flag |= hit
    return flag, reason
