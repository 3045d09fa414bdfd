"""Communication kernels as a class of their own: the compute / communication split per step
(docs/multirank.md). Which op is communication is :mod:`hostgap.anatomy.collectives`.

Per step (the step of the op's launch call, as everywhere in hostgap):

* ``compute_active_ns``: union of the step's compute ops;
* ``comm_active_ns``: union of its communication ops;
* ``comm_overlap_ns``: time both were running (``compute + comm - union(all)``), so
  ``compute_active_ns + comm_active_ns - comm_overlap_ns`` is the step's active time.

Each communication op also gets a *collective type* (``allreduce``, ``sendrecv`` ...) and an
ordinal among the ops of that type in its step: ``(step, type, ordinal)`` is how the same
collective is found on the other ranks (:mod:`hostgap.analysis.align`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hostgap.anatomy.collectives import TYPES, op_classes
from hostgap.anatomy.intervals import grouped_union
from hostgap.anatomy.link import Links, link
from hostgap.anatomy.markers import step_markers
from hostgap.anatomy.timeline import activity_rows
from hostgap.anatomy.windows import DeviceOps, device_ops, marker_windows
from hostgap.events import Trace


@dataclass(frozen=True)
class StepComm:
    """Compute / communication split per step and one entry per communication op in a step.

    The per-step arrays have one value per step; the ``coll_*`` arrays one per communication op
    launched inside a step, sorted by (step, type, start)."""

    compute_active_ns: np.ndarray
    comm_active_ns: np.ndarray
    comm_overlap_ns: np.ndarray
    comm_count: np.ndarray
    coll_step: np.ndarray
    coll_type: np.ndarray  # index into TYPES
    coll_ordinal: np.ndarray  # 0, 1, ... among the ops of that type in that step
    coll_start_ns: np.ndarray
    coll_dur_ns: np.ndarray

    def step_dict(self, i: int) -> dict:
        """The per-step keys of a step row."""
        return {
            "compute_active_ns": int(self.compute_active_ns[i]),
            "comm_active_ns": int(self.comm_active_ns[i]),
            "comm_overlap_ns": int(self.comm_overlap_ns[i]),
            "comm_count": int(self.comm_count[i]),
        }

    def totals(self) -> dict:
        """The trace's ``communication`` object: the per-step keys summed over the steps, and
        the communication ops launched in steps by collective type."""
        by_type = np.bincount(self.coll_type, minlength=len(TYPES))
        return {
            "compute_active_ns": int(self.compute_active_ns.sum()),
            "comm_active_ns": int(self.comm_active_ns.sum()),
            "comm_overlap_ns": int(self.comm_overlap_ns.sum()),
            "comm_count": int(self.comm_count.sum()),
            "by_type": {t: int(c) for t, c in zip(TYPES, by_type) if c},
        }


def split_ops(trace: Trace, ops: DeviceOps, n: int) -> StepComm:
    """The compute / communication split of ``n`` steps from the device-op table ``ops``
    (:func:`hostgap.anatomy.windows.device_ops`; ``ops.step`` < 0: outside every step)."""
    comm, ctype = op_classes(trace, ops.rows)
    st, s, e = ops.step, ops.start_ns, ops.end_ns
    none = np.full(len(st), -1, dtype=st.dtype)
    compute = grouped_union(np.where(comm, none, st), s, e, n)
    comm_u = grouped_union(np.where(comm, st, none), s, e, n)
    both = grouped_union(st, s, e, n)
    in_step = comm & (st >= 0)
    count = np.bincount(st[in_step], minlength=n)[:n].astype(np.int64) if n else np.zeros(0, np.int64)
    return StepComm(
        compute,
        comm_u,
        compute + comm_u - both,
        count,
        *_collectives(st[in_step], ctype[in_step], s[in_step], e[in_step]),
    )


def step_comm(trace: Trace, step_marker: str | None = None, links: Links | None = None) -> StepComm:
    """The compute / communication split of every step of ``trace`` (steps as in
    :func:`hostgap.anatomy.steps.analyze` with the same ``step_marker``, which reports it too)."""
    links = links if links is not None else link(trace)
    activity, op_rows = activity_rows(trace)
    windows = marker_windows(trace, step_markers(trace, step_marker).rows)
    return split_ops(trace, device_ops(trace, links, activity, op_rows, windows), len(windows))


def _collectives(step, ctype, start, end):
    """Sort communication ops by (step, type, start) and number them within (step, type)."""
    order = np.lexsort((start, ctype, step))
    step, ctype, start, end = step[order], ctype[order], start[order], end[order]
    new = np.ones(len(step), dtype=bool)
    new[1:] = (step[1:] != step[:-1]) | (ctype[1:] != ctype[:-1])
    first = np.maximum.accumulate(np.where(new, np.arange(len(step)), 0)) if len(step) else np.zeros(0, np.int64)
    ordinal = np.arange(len(step)) - first
    return (
        step.astype(np.int64),
        ctype,
        ordinal.astype(np.int64),
        start.astype(np.int64),
        (end - start).astype(np.int64),
    )
