"""Nsight Systems SQLite exports (``nsys export --type sqlite``) in, :class:`Trace` out.

Read, one SQL query per table, whichever of these the export has:

- ``CUPTI_ACTIVITY_KIND_KERNEL`` / ``_MEMCPY`` / ``_MEMSET``: GPU ops (device, stream,
  correlation id, owning process; kernel names from ``StringIds``);
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` / ``_DRIVER``: CUDA API calls, classified by
  :func:`classify_api` into launch / graph launch / other runtime call;
- ``NVTX_EVENTS``: push/pop and start/end ranges (marks are skipped and counted);
- ``CUBLAS_EVENTS`` / ``CUDNN_EVENTS``: vendor-library API calls;
- ``StringIds``, ``PROCESSES``, ``TARGET_INFO_*``, ``META_DATA_*``: names and facts.

The file is opened read-only (``mode=ro&immutable=1``) and never written.

Correlation scope (METHOD.md §2): nsys serialises ids as ``globalTid = ... | pid << 24 | tid``
and ``globalPid = ... | pid << 24``. ``link_key`` is ``globalTid >> 24`` for API calls and
``globalPid >> 24`` for GPU ops (the hardware/VM bits above the pid included on both sides),
so ``(link_key, correlation)`` pairs a launch with its kernels only within one process. A
GPU table without ``globalPid`` (older exports) takes each op's process from the API call with
the same correlation id, when exactly one process has that id (:func:`_adopt_process`).

Hostile values: a row whose start/end (or another integer column) holds text, a real number or
a value beyond ±2**62 ns is skipped and counted by table, never read as 0; metadata values that
do not parse (``utcEpochNs = ''``, ``PROCESSES.pid = 'abc'``, deeply nested ``GpuInfo``) are
ignored.

Typed SQL queries and the metadata tables are read by :mod:`hostgap.readers.nsys_db`.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from dataclasses import dataclass

import numpy as np

from hostgap.errors import HostgapError
from hostgap.events import (
    GPU_OP_KINDS,
    HOST_API_KINDS,
    NONE,
    CopyKind,
    EventTable,
    Kind,
    NameTable,
    SkipCounter,
    Trace,
    TraceMeta,
)
from hostgap.readers.apis import api_base_name, classify_api  # noqa: F401  (one classification for every loader)
from hostgap.readers.nsys_db import (
    _base_time_ns,
    _columns,
    _devices,
    _export_facts,
    _fetch_ints,
    _int,
    _int_or_none,
    _intern_ids,
    _processes,
    _string_ids,
    _tables,
)

# ---------------------------------------------------------------- format constants

GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
API_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
LIBRARY_TABLES = ("CUBLAS_EVENTS", "CUDNN_EVENTS")
ACTIVITY_PREFIX = "CUPTI_ACTIVITY_KIND_"

NO_CUDA_TABLES = "SQLite file has no CUDA activity tables (CUPTI_ACTIVITY_KIND_*): not an Nsight Systems export"

# ENUM_CUDA_MEMCPY_OPER ids → (CopyKind, event name)
MEMCPY_KINDS: dict[int, tuple[CopyKind, str]] = {
    0: (CopyKind.OTHER, "Memcpy (unknown)"),
    1: (CopyKind.H2D, "Memcpy HtoD"),
    2: (CopyKind.D2H, "Memcpy DtoH"),
    3: (CopyKind.H2D, "Memcpy HtoA"),
    4: (CopyKind.D2H, "Memcpy AtoH"),
    5: (CopyKind.D2D, "Memcpy AtoA"),
    6: (CopyKind.D2D, "Memcpy AtoD"),
    7: (CopyKind.D2D, "Memcpy DtoA"),
    8: (CopyKind.D2D, "Memcpy DtoD"),
    9: (CopyKind.OTHER, "Memcpy HtoH"),
    10: (CopyKind.P2P, "Memcpy PtoP"),
    11: (CopyKind.H2D, "Memcpy HtoD (unified)"),
    12: (CopyKind.D2H, "Memcpy DtoH (unified)"),
    13: (CopyKind.D2D, "Memcpy DtoD (unified)"),
}
MEMSET_NAME = "Memset"

# ENUM_CUDA_MEM_KIND ids → label; copies and memsets are named like the PyTorch profiler
# names them, e.g. "Memcpy HtoD (Pageable -> Device)", "Memset (Device)".
MEMORY_KINDS: dict[int, str] = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
}

# ENUM_NSYS_EVENT_TYPE ids used when the export lacks the enum table.
NVTX_RANGE_TYPES = {59: "NvtxPushPopRange", 60: "NvtxStartEndRange", 70: "NvtxtPushPopRange", 71: "NvtxtStartEndRange"}
NVTX_MARK_TYPES = {34: "NvtxMark", 65: "NvtxtMark"}

MAX_ABS_NS = 2**62
"""Rows whose start or end is beyond this are skipped: end - start then always fits in int64."""

PID_BITS = 24
LOW_MASK = (1 << PID_BITS) - 1


@dataclass(frozen=True)
class _Part:
    """Columns of one source table, before concatenation (dict of equal-length arrays)."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["kind"])


# ---------------------------------------------------------------- entry point


def load_nsys(path: str) -> Trace:
    """Load an Nsight Systems SQLite export. Whole-file problems raise HostgapError;
    rows with negative durations, NVTX marks and unterminated ranges are skipped and
    counted in ``meta.skipped``."""
    path = os.fspath(path)
    con = _connect(path)
    try:
        return _load(con, path)
    except sqlite3.DatabaseError as e:
        raise HostgapError(path, f"cannot read SQLite export: {e}") from None
    except UnicodeDecodeError as e:  # a table or column name that is not UTF-8 (a corrupt file)
        raise HostgapError(
            path, f"cannot read SQLite export: a name is not UTF-8 ({e.reason} at byte {e.start})"
        ) from None
    finally:
        con.close()


def _connect(path: str) -> sqlite3.Connection:
    if not os.path.isfile(path):
        raise HostgapError(path, "no such file")
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
        con.text_factory = lambda b: b.decode("utf-8", "replace")  # a bad byte in a name is not fatal
        return con
    except sqlite3.Error as e:
        raise HostgapError(path, f"cannot open SQLite file: {e}") from None


def _load(con: sqlite3.Connection, path: str) -> Trace:
    tables = _tables(con)
    if not any(t.startswith(ACTIVITY_PREFIX) for t in tables):
        raise HostgapError(path, NO_CUDA_TABLES)
    strings = _string_ids(con, tables)
    names = NameTable()
    skipped = SkipCounter()
    parts: list[_Part] = []
    extra: dict[str, object] = {}
    for table in GPU_TABLES:
        if table in tables:
            parts.append(_gpu_ops(con, table, _columns(con, table), strings, names, skipped, extra))
    for table in API_TABLES:
        if table in tables:
            parts.append(_api_calls(con, table, _columns(con, table), strings, names, skipped))
    for table in LIBRARY_TABLES:
        if table in tables:
            parts.append(_library_calls(con, table, _columns(con, table), strings, names, skipped))
    if "NVTX_EVENTS" in tables:
        parts.append(_nvtx(con, _columns(con, "NVTX_EVENTS"), strings, names, skipped, tables))
    events = _concat(parts, extra)
    events.validate()
    extra.update(_export_facts(con, tables))
    extra["tables_read"] = [t for t in (*GPU_TABLES, *API_TABLES, *LIBRARY_TABLES, "NVTX_EVENTS") if t in tables]
    gpu = events.of_kind(*GPU_OP_KINDS)
    device_ids = sorted(int(d) for d in np.unique(events.device[gpu]) if d != NONE)
    meta = TraceMeta(
        path=path,
        format="nsys",
        base_time_ns=_base_time_ns(con, tables),
        devices=_devices(con, tables, device_ids),
        skipped=dict(skipped),
        processes=_processes(con, tables, np.unique(events.pid)),
        extra=extra,
    )
    return Trace(events=events, names=names.names(), meta=meta)


# ---------------------------------------------------------------- tables


def _keep_non_negative(cols: dict[str, np.ndarray], reason: str, skipped: SkipCounter) -> dict[str, np.ndarray]:
    """Drop (and count, by reason) rows holding a non-integer value, a start or end beyond
    ±:data:`MAX_ABS_NS`, or an end before the start. ``reason`` is "negative duration (<table>)";
    the other two reasons name the same table."""
    table = reason[reason.index("(") :]
    malformed = cols.pop("bad") != 0
    skipped.add(
        f"non-integer id read as unknown {table} (event kept)", int(((cols.pop("bad_id") != 0) & ~malformed).sum())
    )
    huge = ~malformed & (
        (np.abs(cols["start"]) >= MAX_ABS_NS)
        | (np.abs(cols["end"]) >= MAX_ABS_NS)
        | (cols["start"] == np.iinfo(np.int64).min)
        | (cols["end"] == np.iinfo(np.int64).min)
    )
    negative = ~malformed & ~huge & (cols["end"] < cols["start"])
    skipped.add(f"start or end not an integer {table}", int(malformed.sum()))
    skipped.add(f"timestamp out of range {table}", int(huge.sum()))
    skipped.add(reason, int(negative.sum()))
    drop = malformed | huge | negative
    if drop.any():
        cols = {k: v[~drop] for k, v in cols.items()}
    return cols


def _process_key(global_id: np.ndarray) -> np.ndarray:
    return np.where(global_id >= 0, global_id >> PID_BITS, NONE)


def _os_pid(global_id: np.ndarray) -> np.ndarray:
    return np.where(global_id >= 0, (global_id >> PID_BITS) & LOW_MASK, NONE)


def _os_tid(global_tid: np.ndarray) -> np.ndarray:
    return np.where(global_tid >= 0, global_tid & LOW_MASK, NONE)


def _base_columns(kind, cols, pid, tid, device, stream, correlation, link_key, name, nbytes, copy_kind) -> dict:
    n = len(cols["start"])
    full = lambda v: np.full(n, v, dtype=np.int64) if np.isscalar(v) else v  # noqa: E731
    return {
        "kind": full(int(kind)) if not isinstance(kind, np.ndarray) else kind,
        "start_ns": cols["start"],
        "dur_ns": cols["end"] - cols["start"],
        "pid": full(pid),
        "tid": full(tid),
        "device": full(device),
        "stream": full(stream),
        "correlation": full(correlation),
        "link_key": full(link_key),
        "external_id": full(NONE),
        "name": name,
        "bytes": full(nbytes),
        "copy_kind": full(copy_kind),
    }


def _gpu_ops(con, table, cols, strings, names, skipped, extra) -> _Part:
    exprs = {
        "start": _int(cols, "start", 0),
        "end": _int(cols, "end", 0),
        "device": _int(cols, "deviceId"),
        "stream": _int(cols, "streamId"),
        "correlation": _int(cols, "correlationId"),
        "gpid": _int(cols, "globalPid"),
    }
    short = table.removeprefix(ACTIVITY_PREFIX).lower()
    if table == "CUPTI_ACTIVITY_KIND_KERNEL":
        exprs |= {"name": _int(cols, "demangledName"), "short": _int(cols, "shortName"), "graph": _graph_expr(cols)}
    else:
        exprs |= {
            "bytes": _int(cols, "bytes", 0),
            "copy": _int(cols, "copyKind", 0),
            "src": _int(cols, "srcKind"),
            "dst": _int(cols, "dstKind"),
            "mem": _int(cols, "memKind"),
        }
    c = _keep_non_negative(_fetch_ints(con, table, exprs), f"negative duration ({short})", skipped)
    nbytes: int | np.ndarray
    copy: int | np.ndarray
    if table == "CUPTI_ACTIVITY_KIND_KERNEL":
        kind, nbytes, copy = Kind.KERNEL, 0, int(CopyKind.OTHER)
        name = _kernel_names(c["name"], c["short"], strings, names)
        extra["graph_kernels"] = int((c["graph"] != NONE).sum())
    elif table == "CUPTI_ACTIVITY_KIND_MEMCPY":
        kind, nbytes = Kind.MEMCPY, c["bytes"]
        copy, name = _copy_kinds_and_names(c["copy"], c["src"], c["dst"], names)
    else:
        kind, nbytes, copy = Kind.MEMSET, c["bytes"], int(CopyKind.OTHER)
        name = _intern_ids(
            c["mem"], lambda m: f"{MEMSET_NAME} ({MEMORY_KINDS[m]})" if m in MEMORY_KINDS else MEMSET_NAME, names
        )
    return _Part(
        _base_columns(
            kind,
            c,
            _os_pid(c["gpid"]),
            c["stream"],
            c["device"],
            c["stream"],
            c["correlation"],
            _process_key(c["gpid"]),
            name,
            nbytes,
            copy,
        )
    )


def _copy_kinds_and_names(copy: np.ndarray, src: np.ndarray, dst: np.ndarray, names: NameTable):
    """CopyKind per row and a name per distinct (copyKind, srcKind, dstKind)."""
    if len(copy) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    uniq, inverse = np.unique(np.stack([copy, src, dst], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    kinds, labels = [], []
    for k, s, d in uniq.tolist():
        kind, label = MEMCPY_KINDS.get(k, (CopyKind.OTHER, f"Memcpy (kind {k})"))
        if s in MEMORY_KINDS and d in MEMORY_KINDS:
            label = f"{label} ({MEMORY_KINDS[s]} -> {MEMORY_KINDS[d]})"
        kinds.append(int(kind))
        labels.append(label)
    return np.array(kinds, dtype=np.int64)[inverse], names.codes(labels)[inverse]


def _graph_expr(cols: set[str]) -> str:
    """Non-NONE when the kernel ran as a node of a CUDA graph (graphNodeId or graphId set)."""
    parts = [f'CASE typeof("{c}") WHEN \'integer\' THEN "{c}" END' for c in ("graphNodeId", "graphId") if c in cols]
    return f"coalesce({', '.join(parts)}, {NONE})" if parts else str(NONE)


def _kernel_names(demangled: np.ndarray, short: np.ndarray, strings: dict[int, str], names: NameTable) -> np.ndarray:
    """Demangled name (with templates) when the export has it, else the short name."""
    if len(demangled) == 0:
        return np.zeros(0, dtype=np.int32)
    pairs = np.stack([demangled, short], axis=1)
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    labels = [strings.get(int(d)) or strings.get(int(s)) or f"kernel (string id {int(d)})" for d, s in uniq]
    return names.codes(labels)[inverse.reshape(-1)]


def _api_calls(con, table, cols, strings, names, skipped) -> _Part:
    exprs = {
        "start": _int(cols, "start", 0),
        "end": _int(cols, "end", 0),
        "gtid": _int(cols, "globalTid"),
        "correlation": _int(cols, "correlationId"),
        "name": _int(cols, "nameId"),
    }
    label = table.removeprefix(ACTIVITY_PREFIX).lower()
    c = _keep_non_negative(_fetch_ints(con, table, exprs), f"negative duration ({label})", skipped)
    if len(c["name"]):
        uniq, inverse = np.unique(c["name"], return_inverse=True)
        base = [api_base_name(strings.get(int(i), f"{label} call (string id {int(i)})")) for i in uniq]
        kinds = np.array([int(classify_api(b)) for b in base], dtype=np.int8)[inverse.reshape(-1)]
        name = names.codes(base)[inverse.reshape(-1)]
    else:
        kinds, name = np.zeros(0, dtype=np.int8), np.zeros(0, dtype=np.int32)
    return _Part(
        _base_columns(
            kinds,
            c,
            _os_pid(c["gtid"]),
            _os_tid(c["gtid"]),
            NONE,
            NONE,
            c["correlation"],
            _process_key(c["gtid"]),
            name,
            0,
            int(CopyKind.OTHER),
        )
    )


def _library_calls(con, table, cols, strings, names, skipped) -> _Part:
    exprs = {
        "start": _int(cols, "start", 0),
        "end": _int(cols, "end", 0),
        "gtid": _int(cols, "globalTid"),
        "name": _int(cols, "nameId"),
    }
    library = table.removesuffix("_EVENTS").lower()
    c = _keep_non_negative(_fetch_ints(con, table, exprs), f"negative duration ({library})", skipped)
    name = _intern_ids(c["name"], lambda i: strings.get(i, f"{library} call (string id {i})"), names)
    return _Part(
        _base_columns(
            Kind.LIBRARY,
            c,
            _os_pid(c["gtid"]),
            _os_tid(c["gtid"]),
            NONE,
            NONE,
            NONE,
            _process_key(c["gtid"]),
            name,
            0,
            int(CopyKind.OTHER),
        )
    )


def _nvtx(con, cols, strings, names, skipped, tables) -> _Part:
    """Ranges become ANNOTATION events, named by ``text`` or, when absent, ``StringIds[textId]``."""
    range_types, mark_types = _nvtx_types(con, tables)
    exprs = {
        "start": _int(cols, "start", 0),
        "end": _int(cols, "end"),
        "etype": _int(cols, "eventType"),
        "gtid": _int(cols, "globalTid"),
        "text_id": _int(cols, "textId"),
        "end_null": '("end" IS NULL)' if "end" in cols else "1",
        "inline": '("text" IS NOT NULL)' if "text" in cols else "0",
    }
    c = _fetch_ints(con, "NVTX_EVENTS", exprs, "ORDER BY rowid")
    n = len(c["start"])
    c["text"] = np.empty(n, dtype=object)
    if "text" in cols:  # same row order as the integer columns (rowid)
        c["text"][:] = [r[0] for r in con.execute("SELECT text FROM NVTX_EVENTS ORDER BY rowid")]
    is_range = np.isin(c["etype"], np.array(sorted(range_types), dtype=np.int64))
    is_mark = np.isin(c["etype"], np.array(sorted(mark_types), dtype=np.int64))
    skipped.add("nvtx mark", int(is_mark.sum()))
    skipped.add("nvtx record that is not a range", int((~is_range & ~is_mark).sum()))
    open_range = is_range & (c["end_null"] == 1)
    skipped.add("nvtx range without end", int(open_range.sum()))
    keep = is_range & ~open_range
    c = _keep_non_negative({k: v[keep] for k, v in c.items()}, "negative duration (nvtx)", skipped)
    inline = c["inline"] == 1
    name = np.empty(len(inline), dtype=np.int32)
    name[inline] = names.codes([str(t) for t in c["text"][inline]])
    name[~inline] = _intern_ids(
        c["text_id"][~inline],
        lambda i: strings.get(i, "NVTX range" if i == NONE else f"NVTX range (string id {i})"),
        names,
    )
    return _Part(
        _base_columns(
            Kind.ANNOTATION,
            c,
            _os_pid(c["gtid"]),
            _os_tid(c["gtid"]),
            NONE,
            NONE,
            NONE,
            _process_key(c["gtid"]),
            name,
            0,
            int(CopyKind.OTHER),
        )
    )


def _nvtx_types(con, tables) -> tuple[set[int], set[int]]:
    """Event-type ids of NVTX ranges and marks, from ENUM_NSYS_EVENT_TYPE when present."""
    ranges, marks = set(NVTX_RANGE_TYPES), set(NVTX_MARK_TYPES)
    if "ENUM_NSYS_EVENT_TYPE" in tables and "name" in _columns(con, "ENUM_NSYS_EVENT_TYPE"):
        for i, n in con.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
            i = _int_or_none(i)
            if i is None or n is None or not str(n).startswith("Nvtx"):
                continue
            if str(n).endswith(("PushPopRange", "StartEndRange")):
                ranges.add(int(i))
            elif str(n).endswith("Mark"):
                marks.add(int(i))
    return ranges, marks


def _concat(parts: list[_Part], extra: dict) -> EventTable:
    parts = [p for p in parts if len(p)]
    if not parts:
        return EventTable.empty()
    columns = {k: np.concatenate([np.asarray(p.columns[k]) for p in parts]) for k in parts[0].columns}
    _adopt_process(columns, extra)
    return EventTable.from_columns(columns)


def _adopt_process(columns: dict[str, np.ndarray], extra: dict) -> None:
    """GPU ops without a process (no ``globalPid`` column, or NULL) take the process of the API
    call with the same correlation id, when exactly one process has an API call with that id;
    correlation ids are unique within a process, so the pair found is the launch. Counted in
    ``extra`` (``gpu_ops_process_from_correlation``, ``gpu_ops_without_process``)."""
    kind, corr, key = columns["kind"], columns["correlation"], columns["link_key"]
    orphan = np.isin(kind, GPU_OP_KINDS) & (key == NONE) & (corr != NONE)
    if not orphan.any():
        return
    api = np.isin(kind, HOST_API_KINDS) & (key != NONE) & (corr != NONE)
    pairs = np.unique(np.stack([corr[api], key[api]], axis=1), axis=0)  # sorted by (corr, key)
    q = corr[orphan]
    lo = np.searchsorted(pairs[:, 0], q, side="left")
    hi = np.searchsorted(pairs[:, 0], q, side="right")
    one = (hi - lo) == 1  # exactly one process issued this correlation id
    rows = np.flatnonzero(orphan)[one]
    found = pairs[lo[one], 1]
    key[rows] = found
    columns["pid"][rows] = found & LOW_MASK
    extra["gpu_ops_process_from_correlation"] = int(one.sum())
    extra["gpu_ops_without_process"] = int((~one).sum())
