"""Communication kernels as a class of their own (docs/multirank.md).

A device op is *communication* when its name is a collective or point-to-point transfer of a
communication library: NCCL / RCCL / MSCCL kernels (``ncclKernel_AllReduce_*``,
``ncclDevKernel_SendRecv``), the custom all-reduce kernels of vLLM and SGLang
(``cross_device_reduce_1stage``, ``custom_all_reduce``, ``one_shot_all_reduce`` ...), and on a
CPU-only trace the gloo / c10d operators (``gloo:all_reduce``, ``c10d::allreduce_``). Every other
device op is *compute* (memcpy and memset included: they keep the copy engines, not the
network, busy).

Per step (the step of the op's launch call, as everywhere in hostgap):

* ``compute_active_ns``: union of the step's compute ops;
* ``comm_active_ns``: union of its communication ops;
* ``comm_overlap_ns``: time both were running (``compute + comm - union(all)``), so
  ``compute_active_ns + comm_active_ns - comm_overlap_ns`` is the step's active time.

Each communication op also gets a *collective type* (``allreduce``, ``sendrecv`` ...) and an
ordinal among the ops of that type in its step: ``(step, type, ordinal)`` is how the same
collective is found on the other ranks (:mod:`hostgap.ranks.align`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hostgap.anatomy.intervals import grouped_union
from hostgap.anatomy.markers import step_markers
from hostgap.anatomy.timeline import activity_rows
from hostgap.anatomy.windows import DeviceOps, device_ops, marker_windows
from hostgap.events import Trace
from hostgap.link import Links, link

COMM_PATTERN = re.compile(
    r"nccl|rccl|msccl|gloo|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce",
    re.IGNORECASE)
"""Names of communication ops. ``broadcast`` alone is not enough (elementwise kernels say it)."""

COLLECTIVE_TYPES: tuple[tuple[str, re.Pattern], ...] = tuple(
    (name, re.compile(rx, re.IGNORECASE)) for name, rx in (
        ("allreduce", r"all_?reduce|cross_device_reduce"),
        ("reducescatter", r"reduce_?scatter"),
        ("allgather", r"all_?gather"),
        ("alltoall", r"all_?to_?all"),
        ("broadcast", r"broadcast"),
        ("sendrecv", r"send_?recv"),
        ("send", r"send"),
        ("recv", r"recv"),
        ("reduce", r"reduce"),
        ("barrier", r"barrier"),
    ))
"""First match wins: the more specific names come first (``reduce_scatter`` before ``reduce``)."""

TYPES = tuple(name for name, _ in COLLECTIVE_TYPES) + ("other",)


def is_comm(name: str) -> bool:
    """Whether an op name is a communication op.

    >>> is_comm("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")
    True
    >>> is_comm("void cross_device_reduce_2stage<__nv_bfloat16, 2>(...)")
    True
    >>> is_comm("ampere_sgemm_128x64_tn"), is_comm("elementwise_kernel_with_index<broadcast>")
    (False, False)
    """
    return COMM_PATTERN.search(name) is not None


def collective_type(name: str) -> str:
    """The collective a communication op performs (``other`` when its name does not say).

    >>> collective_type("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)")
    'sendrecv'
    >>> collective_type("ncclKernel_ReduceScatter_RING_LL_Sum_bf16"), collective_type("gloo:all_reduce")
    ('reducescatter', 'allreduce')
    """
    for label, rx in COLLECTIVE_TYPES:
        if rx.search(name):
            return label
    return "other"


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
        return {"compute_active_ns": int(self.compute_active_ns[i]), "comm_active_ns": int(self.comm_active_ns[i]),
                "comm_overlap_ns": int(self.comm_overlap_ns[i]), "comm_count": int(self.comm_count[i])}

    def totals(self) -> dict:
        """The trace's ``communication`` object: the per-step keys summed over the steps, and
        the communication ops launched in steps by collective type."""
        by_type = np.bincount(self.coll_type, minlength=len(TYPES))
        return {"compute_active_ns": int(self.compute_active_ns.sum()), "comm_active_ns": int(self.comm_active_ns.sum()),
                "comm_overlap_ns": int(self.comm_overlap_ns.sum()), "comm_count": int(self.comm_count.sum()),
                "by_type": {t: int(c) for t, c in zip(TYPES, by_type) if c}}


def comm_of_name(trace: Trace) -> np.ndarray:
    """Per name code of ``trace``: whether the name is a communication op (:func:`is_comm`)."""
    return np.fromiter((is_comm(s) for s in trace.names), dtype=bool, count=len(trace.names))


def op_classes(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is communication, collective type index) of each of ``rows``, evaluated once per name."""
    if not len(trace.names):
        return np.zeros(len(rows), bool), np.zeros(len(rows), np.int64)
    type_of_name = np.fromiter((TYPES.index(collective_type(s)) for s in trace.names), dtype=np.int64,
                               count=len(trace.names))
    codes = trace.events.name[rows]
    return comm_of_name(trace)[codes], type_of_name[codes]


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
    return StepComm(compute, comm_u, compute + comm_u - both, count, *_collectives(st[in_step], ctype[in_step],
                                                                                     s[in_step], e[in_step]))


def step_comm(trace: Trace, step_marker: str | None = None, links: Links | None = None) -> StepComm:
    """The compute / communication split of every step of ``trace`` (steps as in
    :func:`hostgap.anatomy.steps.analyze` with the same ``step_marker``, which reports it too)."""
    links = links if links is not None else link(trace)
    activity, op_rows = activity_rows(trace)
    windows = marker_windows(trace, step_markers(trace, step_marker).rows)
    return split_ops(trace, device_ops(trace, links, activity, op_rows, windows), len(windows))


CLASSES = ("compute", "communication", "mixed")
"""Launch classes: what a launch enqueued. ``mixed``: a graph launch replaying both kinds."""


def launch_classes(trace: Trace, links: Links, launch_rows: np.ndarray) -> np.ndarray:
    """Per launch row: index into :data:`CLASSES` of the GPU ops it enqueued (ops linked to it by
    ``links.launch_of``); a launch whose ops are all communication is ``communication``, one
    with both ``mixed``, any other ``compute``."""
    ev = trace.events
    gpu = np.flatnonzero(links.launch_of >= 0)
    comm = comm_of_name(trace)[ev.name[gpu]] if len(trace.names) else np.zeros(len(gpu), bool)
    owner = links.launch_of[gpu]
    n_comm = np.bincount(owner[comm], minlength=len(ev))
    n_other = np.bincount(owner[~comm], minlength=len(ev))
    c, o = n_comm[launch_rows], n_other[launch_rows]
    return np.where(c > 0, np.where(o > 0, 2, 1), 0).astype(np.int64)


def _collectives(step, ctype, start, end):
    """Sort communication ops by (step, type, start) and number them within (step, type)."""
    order = np.lexsort((start, ctype, step))
    step, ctype, start, end = step[order], ctype[order], start[order], end[order]
    new = np.ones(len(step), dtype=bool)
    new[1:] = (step[1:] != step[:-1]) | (ctype[1:] != ctype[:-1])
    first = np.maximum.accumulate(np.where(new, np.arange(len(step)), 0)) if len(step) else np.zeros(0, np.int64)
    ordinal = np.arange(len(step)) - first
    return (step.astype(np.int64), ctype, ordinal.astype(np.int64), start.astype(np.int64),
            (end - start).astype(np.int64))
