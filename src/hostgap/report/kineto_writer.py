"""Write an event table back out as a Kineto (Chrome trace) JSON file.

Used by ``hostgap trim`` (a smaller valid trace for fixtures and bug reports, :func:`write_trimmed`)
for both Kineto and Nsight Systems inputs, and by ``hostgap overlay`` (:func:`write_overlay`). Timestamps are written as µs with three decimals, which loads back
to the same integer nanoseconds.
"""

from __future__ import annotations

import gzip
import os
import tempfile
from dataclasses import dataclass

import msgspec
import numpy as np

from hostgap.errors import HostgapError
from hostgap.events import NONE, Kind, Trace
from hostgap.store.rundir import file_mode

CATEGORY = {
    Kind.KERNEL: "kernel",
    Kind.MEMCPY: "gpu_memcpy",
    Kind.MEMSET: "gpu_memset",
    Kind.GPU_ANNOTATION: "gpu_user_annotation",
    Kind.LAUNCH: "cuda_runtime",
    Kind.GRAPH_LAUNCH: "cuda_runtime",
    Kind.RUNTIME: "cuda_runtime",
    Kind.CPU_OP: "cpu_op",
    Kind.PYTHON: "python_function",
    Kind.ANNOTATION: "user_annotation",
    Kind.LIBRARY: "cuda_runtime",
}


def kineto_events(trace: Trace, rows: np.ndarray) -> list[dict]:
    ev = trace.events
    out = []
    names = trace.names
    for r in rows.tolist():
        k = Kind(int(ev.kind[r]))
        args = {}
        if ev.correlation[r] != NONE:
            args["correlation"] = int(ev.correlation[r])
        if ev.external_id[r] != NONE:
            args["External id"] = int(ev.external_id[r])
        gpu = k <= Kind.GPU_ANNOTATION
        if gpu:
            args["device"] = int(ev.device[r])
            args["stream"] = int(ev.stream[r])
        if k in (Kind.MEMCPY, Kind.MEMSET):
            args["bytes"] = int(ev.bytes[r])
        out.append(
            {
                "ph": "X",
                "cat": CATEGORY[k],
                "name": names[int(ev.name[r])],
                "pid": int(ev.device[r]) if gpu else int(ev.pid[r]),
                "tid": int(ev.stream[r]) if gpu else int(ev.tid[r]),
                "ts": _us(int(ev.start_ns[r])),
                "dur": _us(int(ev.dur_ns[r])),
                "args": args,
            }
        )
    return out


def _us(ns: int) -> float:
    return float(f"{ns // 1000}.{ns % 1000:03d}") if ns >= 0 else -_us(-ns)


def trace_document(trace: Trace, rows: np.ndarray) -> dict:
    meta = trace.meta
    doc: dict = {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": d.index,
                "name": d.name if d.name_source == "trace" else "",
                **({"totalGlobalMem": d.memory_bytes} if d.memory_bytes else {}),
            }
            for d in meta.devices
        ],
        "traceEvents": kineto_events(trace, rows),
    }
    if meta.base_time_ns is not None:
        doc["baseTimeNanoseconds"] = meta.base_time_ns
    if meta.rank is not None:
        doc["distributedInfo"] = {"rank": meta.rank, "world_size": meta.world_size}
    return doc


def write_json_gz(doc: dict, path: str) -> None:
    """Write atomically: a temp file in the same folder, renamed over ``path`` when complete."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        raise HostgapError(path, "output folder does not exist")
    data = msgspec.json.encode(doc)
    if path.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".hostgap-", suffix=".tmp")
    except OSError as e:
        raise HostgapError(path, f"cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, file_mode())  # mkstemp makes 0600; give the usual file mode
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise HostgapError(path, f"cannot write ({e.strerror})") from None


@dataclass(frozen=True)
class Trimmed:
    """What ``hostgap trim`` wrote: steps ``first:end`` (end exclusive), ``kept`` of ``total`` events."""

    first: int
    end: int
    kept: int
    total: int


def write_trimmed(trace_path: str, step_range: str, output: str, step_marker: str | None = None) -> Trimmed:
    """``hostgap trim``: a smaller valid trace (Kineto JSON, whatever the input format) holding
    only steps ``step_range`` (``A:B``, Python slice rules) and the GPU work that belongs to them
    (:func:`hostgap.anatomy.trim.trim_rows`)."""
    from hostgap.analysis.trace import analyse_trace
    from hostgap.anatomy.markers import find_markers
    from hostgap.anatomy.trim import parse_range, trim_rows

    t = analyse_trace(trace_path).trace
    _, markers = find_markers(t, step_marker)
    a, b = parse_range(step_range, max(len(markers), 1))
    rows = trim_rows(t, a, b, step_marker)
    write_json_gz(trace_document(t, rows), output)
    return Trimmed(a, b, len(rows), len(t.events))
