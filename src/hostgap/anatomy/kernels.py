"""``hostgap kernels``: one row per launch with its TaxBreak intervals."""

from __future__ import annotations

from typing import cast

import numpy as np

from hostgap.anatomy.collectives import CLASSES
from hostgap.anatomy.steps import Anatomy
from hostgap.anatomy.taxbreak import KernelTaxes
from hostgap.events import Trace


def kernel_rows(trace: Trace, anatomy: Anatomy) -> list[dict]:
    """Rows for CSV/JSON. Empty for CPU-only traces (no launches). ``class``: what the launch
    enqueued, ``compute``, ``communication`` or ``mixed`` (:func:`hostgap.anatomy.collectives.launch_classes`)."""
    if anatomy.kernels is None:
        return []
    # set together with ``kernels`` (both from the launch taxes), so never None here
    return kernel_rows_of(trace, anatomy.kernels, cast(np.ndarray, anatomy.launch_class))


def kernel_rows_of(trace: Trace, k: KernelTaxes, launch_class: np.ndarray) -> list[dict]:
    """:func:`kernel_rows` from the launch table and the launch classes themselves (as the
    cache keeps them)."""
    ev = trace.events
    names = trace.names

    def name(row):
        return names[int(ev.name[row])] if row >= 0 else ""

    rows = []
    for i in range(len(k)):
        lr = int(k.launch_row[i])
        gr = int(k.gpu_row[i])
        fw = float(k.dkt_fw_ns[i])
        rows.append(
            {
                "step": int(k.step[i]),
                "launch_api": name(lr),
                "graph": bool(k.graph[i]),
                "kernel": name(gr) if not k.graph[i] else f"graph replay ({int(k.gpu_ops[i])} ops)",
                "class": CLASSES[int(launch_class[i])],
                "gpu_ops": int(k.gpu_ops[i]),
                "device_ns": int(k.device_ns[i]),
                "op": name(int(k.unit_row[i])) if int(k.unit_row[i]) != lr else "",
                "inner_op": name(int(k.op_row[i])),
                "frame": name(int(k.frame_row[i])),
                "thread": int(k.thread[i]),
                "launch_start_ns": int(ev.start_ns[lr]),
                "launch_dur_ns": int(ev.dur_ns[lr]),
                "kernel_start_ns": int(ev.start_ns[gr]) if gr >= 0 else None,
                "i_lib": int(k.i_lib[i]),
                "first_in_op": bool(k.first_in_unit[i]),
                "t_py_ns": int(k.t_py_ns[i]),
                "t_dispatch_ns": int(k.t_dispatch_ns[i]),
                "t_launch_ns": int(k.t_launch_ns[i]),
                "t_wrapper_ns": int(k.t_wrapper_ns[i]),
                "sync_ns": int(k.sync_ns[i]),
                "queued": bool(k.queued[i]),
                "dft_ns": int(k.dft_ns[i]),
                "dct_ns": int(k.dct_ns[i]),
                "dkt_ns": k.floor_ns,
                "dkt_fw_ns": None if fw != fw else fw,
            }
        )
    return rows
