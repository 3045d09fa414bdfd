"""Tables of a trace the API derives as Arrow: the launch table's columns, TaxBreak summed per
framework op, and every GPU idle gap with its class."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from hostgap.anatomy.link import Links
    from hostgap.events import Trace

KERNEL_COLUMNS = [
    "step",
    "launch_api",
    "graph",
    "kernel",
    "class",
    "gpu_ops",
    "device_ns",
    "op",
    "inner_op",
    "frame",
    "thread",
    "launch_start_ns",
    "launch_dur_ns",
    "kernel_start_ns",
    "i_lib",
    "first_in_op",
    "t_py_ns",
    "t_dispatch_ns",
    "t_launch_ns",
    "t_wrapper_ns",
    "sync_ns",
    "queued",
    "dft_ns",
    "dct_ns",
    "dkt_ns",
    "dkt_fw_ns",
]
"""The columns of ``hostgap kernels`` (docs/json.md), in its order: an empty table has them too."""


NO_OP = "(no framework op)"
"""The op of launches issued outside every framework op (straight from Python or a library)."""


def taxbreak_by_op(kernels: pa.Table) -> pa.Table:
    """Host orchestration per framework op (the op that issued the launch, else the innermost
    op, else :data:`NO_OP`): launches, ΔFT, ΔCT and ΔKT summed, sorted by ΔFT + ΔCT, largest
    first; ``host_ns`` = ΔFT + ΔCT + ΔKT."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if kernels.num_rows == 0:
        return pa.table(
            {
                "op": pa.array([], pa.string()),
                "launches": pa.array([], pa.int64()),
                "dft_ns": pa.array([], pa.int64()),
                "dct_ns": pa.array([], pa.int64()),
                "dkt_ns": pa.array([], pa.float64()),
                "host_ns": pa.array([], pa.float64()),
            }
        )
    op = pc.if_else(pc.equal(kernels["op"], ""), kernels["inner_op"], kernels["op"])
    op = pc.if_else(pc.equal(op, ""), pa.scalar(NO_OP), op)
    t = pa.table(
        {
            "op": op,
            "dft_ns": kernels["dft_ns"],
            "dct_ns": kernels["dct_ns"],
            "dkt_ns": pc.cast(kernels["dkt_ns"], pa.float64()),
        }
    )
    g = t.group_by("op").aggregate([("op", "count"), ("dft_ns", "sum"), ("dct_ns", "sum"), ("dkt_ns", "sum")])
    g = pa.table(
        {
            "op": g["op"],
            "launches": g["op_count"],
            "dft_ns": g["dft_ns_sum"],
            "dct_ns": g["dct_ns_sum"],
            "dkt_ns": g["dkt_ns_sum"],
        }
    )
    host = pc.add(pc.add(pc.cast(g["dft_ns"], pa.float64()), pc.cast(g["dct_ns"], pa.float64())), g["dkt_ns"])
    g = g.append_column("host_ns", host)
    order = pc.sort_indices(
        pa.table({"k": pc.add(g["dft_ns"], g["dct_ns"]), "op": g["op"]}), [("k", "descending"), ("op", "ascending")]
    )
    return g.take(order)


def idle_gaps(trace: Trace, links: Links, threshold_ns: int) -> pa.Table:
    """One row per idle gap on a GPU stream: ``device``, ``stream``, ``start_ns``, ``end_ns``,
    ``gap_ns``, ``class`` (``host_wait``, ``kernel_wait`` or ``other``, as the overview counts
    them), and the op that ends it (``next_op``)."""
    import numpy as np
    import pyarrow as pa

    from hostgap.anatomy.timeline import IDLE_CLASSES, classify_gaps
    from hostgap.events import GPU_OP_KINDS

    ev = trace.events
    rows = np.flatnonzero(ev.of_kind(*GPU_OP_KINDS))
    after, gap, cls, start, end = classify_gaps(trace, links, rows, threshold_ns)
    return pa.table(
        {
            "device": ev.device[after],
            "stream": ev.stream[after],
            "start_ns": start,
            "end_ns": end,
            "gap_ns": gap,
            "class": pa.DictionaryArray.from_arrays(np.asarray(cls, dtype=np.int8), list(IDLE_CLASSES)),
            "next_op": pa.DictionaryArray.from_arrays(ev.name[after], list(trace.names)),
        }
    )
