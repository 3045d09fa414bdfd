"""Which device ops are communication, and which collective each performs (docs/multirank.md).

A device op is *communication* when its name is a collective or point-to-point transfer of a
communication library: NCCL / RCCL / MSCCL kernels (``ncclKernel_AllReduce_*``,
``ncclDevKernel_SendRecv``), the custom all-reduce kernels of vLLM and SGLang
(``cross_device_reduce_1stage``, ``custom_all_reduce``, ``one_shot_all_reduce`` ...), and on a
CPU-only trace the gloo / c10d operators (``gloo:all_reduce``, ``c10d::allreduce_``). Every other
device op is *compute* (memcpy and memset included: they keep the copy engines, not the
network, busy).

The classifier works on names only; the per-step compute / communication split built on it is
:mod:`hostgap.anatomy.comm`, and trace sets (:mod:`hostgap.analysis.traceset`) use both.
"""

from __future__ import annotations

import re

import numpy as np

from hostgap.anatomy.link import Links
from hostgap.events import Trace, distinct

COMM_PATTERN = re.compile(
    r"nccl|rccl|msccl|gloo|c10d::|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce",
    re.IGNORECASE,
)
"""Names of communication ops. ``broadcast`` alone is not enough (elementwise kernels say it)."""

COLLECTIVE_TYPES: tuple[tuple[str, re.Pattern], ...] = tuple(
    (name, re.compile(rx, re.IGNORECASE))
    for name, rx in (
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
    )
)
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


def comm_of_name(trace: Trace) -> np.ndarray:
    """Per name code of ``trace``: whether the name is a communication op (:func:`is_comm`)."""
    return np.fromiter((is_comm(s) for s in trace.names), dtype=bool, count=len(trace.names))


def op_classes(trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is communication, collective type index) of each of ``rows``, evaluated once per name."""
    if not len(trace.names):
        return np.zeros(len(rows), bool), np.zeros(len(rows), np.int64)
    type_of_name = np.fromiter(
        (TYPES.index(collective_type(s)) for s in trace.names), dtype=np.int64, count=len(trace.names)
    )
    codes = trace.events.name[rows]
    return comm_of_name(trace)[codes], type_of_name[codes]


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
    # counted per distinct launch row, not per trace row (no row-length arrays on large traces)
    rows = distinct(launch_rows)
    pos = np.searchsorted(rows, owner)
    mine = pos < len(rows)
    mine[mine] = rows[pos[mine]] == owner[mine]
    n_comm = np.bincount(pos[mine & comm], minlength=len(rows))
    n_other = np.bincount(pos[mine & ~comm], minlength=len(rows))
    at = np.searchsorted(rows, launch_rows)
    c, o = n_comm[at], n_other[at]
    return np.where(c > 0, np.where(o > 0, 2, 1), 0).astype(np.int64)
