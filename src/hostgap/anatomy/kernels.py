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
    cache keeps them). Columns become Python lists first: one conversion per column, not one
    numpy scalar per field of every row (a 2 GB trace has half a million launches)."""
    ev = trace.events
    names = trace.names
    n = len(k)
    name_ids = np.asarray(ev.name)

    def col(a) -> list:
        return np.asarray(a)[:n].tolist()

    def names_at(rows: np.ndarray) -> list[str]:
        rows = np.asarray(rows, dtype=np.int64)
        ids = np.where(rows >= 0, name_ids[np.maximum(rows, 0)] if len(name_ids) else 0, -1).tolist()
        return [names[int(j)] if j >= 0 else "" for j in ids]

    lr, gr, unit = (np.asarray(a, dtype=np.int64) for a in (k.launch_row, k.gpu_row, k.unit_row))
    graph, gpu_ops = col(k.graph), col(k.gpu_ops)
    launch_api, kernel_names, unit_names = names_at(lr), names_at(gr), names_at(unit)
    inner, frame = names_at(k.op_row), names_at(k.frame_row)
    starts, durs = np.asarray(ev.start_ns), np.asarray(ev.dur_ns)
    launch_start = starts[lr].tolist() if n else []
    launch_dur = durs[lr].tolist() if n else []
    kernel_start = starts[np.maximum(gr, 0)].tolist() if n else []
    gr_l, own_op = gr.tolist(), (unit != lr).tolist()
    classes = [CLASSES[c] for c in col(launch_class)]
    step, device, thread, i_lib = col(k.step), col(k.device_ns), col(k.thread), col(k.i_lib)
    first, t_py, t_disp = col(k.first_in_unit), col(k.t_py_ns), col(k.t_dispatch_ns)
    t_launch, t_wrap, sync, queued = col(k.t_launch_ns), col(k.t_wrapper_ns), col(k.sync_ns), col(k.queued)
    dft, dct, fws = col(k.dft_ns), col(k.dct_ns), col(k.dkt_fw_ns)
    floor = k.floor_ns
    return [
        {
            "step": int(step[i]),
            "launch_api": launch_api[i],
            "graph": bool(graph[i]),
            "kernel": kernel_names[i] if not graph[i] else f"graph replay ({int(gpu_ops[i])} ops)",
            "class": classes[i],
            "gpu_ops": int(gpu_ops[i]),
            "device_ns": int(device[i]),
            "op": unit_names[i] if own_op[i] else "",
            "inner_op": inner[i],
            "frame": frame[i],
            "thread": int(thread[i]),
            "launch_start_ns": int(launch_start[i]),
            "launch_dur_ns": int(launch_dur[i]),
            "kernel_start_ns": int(kernel_start[i]) if gr_l[i] >= 0 else None,
            "i_lib": int(i_lib[i]),
            "first_in_op": bool(first[i]),
            "t_py_ns": int(t_py[i]),
            "t_dispatch_ns": int(t_disp[i]),
            "t_launch_ns": int(t_launch[i]),
            "t_wrapper_ns": int(t_wrap[i]),
            "sync_ns": int(sync[i]),
            "queued": bool(queued[i]),
            "dft_ns": int(dft[i]),
            "dct_ns": int(dct[i]),
            "dkt_ns": floor,
            "dkt_fw_ns": None if fws[i] != fws[i] else float(fws[i]),
        }
        for i in range(n)
    ]
