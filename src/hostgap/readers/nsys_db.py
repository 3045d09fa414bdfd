"""An Nsight Systems SQLite export as tables: typed SQL queries (a value that is not an integer
is counted, never read as a number), string ids, and the facts in its metadata tables (clock
base, processes, devices). The event tables built from them: :mod:`hostgap.readers.nsys`."""

from __future__ import annotations

import itertools
import json
import math
import re
import sqlite3

import numpy as np

from hostgap.events import NONE, DeviceInfo, NameTable

# ---------------------------------------------------------------- SQL helpers


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _int(cols: set[str], name: str, default: int = NONE) -> str:
    """SQL expression for an integer column: NULL, a missing column, or a value that is not an
    integer (text, real, blob: counted by :func:`_fetch_ints`) → ``default``."""
    if name not in cols:
        return str(default)
    return f'CASE typeof("{name}") WHEN \'integer\' THEN "{name}" ELSE {default} END'


def _fetch_ints(con: sqlite3.Connection, table: str, exprs: dict[str, str], where: str = "") -> dict[str, np.ndarray]:
    """One query; every selected expression must yield an integer. Returns int64 columns, plus
    ``bad``: 1 where start or end is not an integer (NULL, text, a real), and ``bad_id``: 1 where
    another column read by :func:`_int` held text, a real or a blob (read as unknown, never as
    a made-up number)."""
    times = [c for k in ("start", "end") if k in exprs for c in _INT_COLUMN.findall(exprs[k])]
    ids = [c for k, e in exprs.items() if k not in ("start", "end") for c in _INT_COLUMN.findall(e)]
    bad_time = " OR ".join(f"typeof(\"{c}\") != 'integer'" for c in times) or "0"
    bad_id = " OR ".join(f"typeof(\"{c}\") NOT IN ('integer', 'null')" for c in dict.fromkeys(ids)) or "0"
    exprs = {**exprs, "bad": f"({bad_time})", "bad_id": f"({bad_id})"}
    sql = f'SELECT {", ".join(exprs.values())} FROM "{table}" {where}'
    flat = np.fromiter(itertools.chain.from_iterable(con.execute(sql)), dtype=np.int64)
    rows = flat.reshape(-1, len(exprs))
    return {k: rows[:, i] for i, k in enumerate(exprs)}


_INT_COLUMN = re.compile(r'CASE typeof\("([^"]+)"\) WHEN')


def _string_ids(con: sqlite3.Connection, tables: set[str]) -> dict[int, str]:
    if "StringIds" not in tables:
        return {}
    out = {}
    for i, v in con.execute("SELECT id, value FROM StringIds"):
        i = _int_or_none(i)
        if i is not None and v is not None:
            out[i] = str(v)
    return out


def _intern_ids(ids: np.ndarray, label, names: NameTable) -> np.ndarray:
    """Name codes for an array of ids, calling ``label(id) -> str`` once per distinct id."""
    if len(ids) == 0:
        return np.zeros(0, dtype=np.int32)
    uniq, inverse = np.unique(ids, return_inverse=True)
    codes = names.codes([label(int(i)) for i in uniq])
    return codes[inverse.reshape(-1)]


# ---------------------------------------------------------------- metadata


def _kv(con, table: str) -> dict[str, str]:
    """First value of each name in a META_DATA_* table."""
    out: dict[str, str] = {}
    if not {"name", "value"} <= _columns(con, table):
        return out
    for n, v in con.execute(f'SELECT name, value FROM "{table}"'):
        if n is not None and n not in out:
            out[str(n)] = "" if v is None else str(v)
    return out


def _export_facts(con, tables) -> dict[str, object]:
    facts: dict[str, object] = {}
    if "META_DATA_EXPORT" in tables:
        kv = _kv(con, "META_DATA_EXPORT")
        for key, out in (("EXPORT_PRODUCT_VERSION", "nsys_version"), ("EXPORT_SCHEMA_VERSION", "schema_version")):
            if kv.get(key):
                facts[out] = kv[key]
    if "nsys_version" not in facts and "META_DATA_CAPTURE" in tables:
        version = _kv(con, "META_DATA_CAPTURE").get("NSYS_VERSION") or _kv(con, "META_DATA_CAPTURE").get("VERSION")
        if version:
            facts["nsys_version"] = version
    return facts


def _base_time_ns(con, tables) -> int | None:
    """Unix ns of trace time 0: nsys timestamps count from the session start, whose UTC time is
    ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``. None when the export normalised its times
    (``--ts-normalize``) or has no session start."""
    if "TARGET_INFO_SESSION_START_TIME" not in tables:
        return None
    if "utcEpochNs" not in _columns(con, "TARGET_INFO_SESSION_START_TIME"):
        return None
    row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
    start = _int_or_none(row[0]) if row is not None else None
    if start is None:
        return None
    shift = 0
    if "META_DATA_EXPORT" in tables:
        kv = _kv(con, "META_DATA_EXPORT")
        if kv.get("EXPORT_PARAM_TIME_NORMALIZE", "false").lower() == "true":
            return None
        given = _int_or_none(kv.get("EXPORT_PARAM_TIME_SHIFT", "0") or 0)
        if given is None:
            return None
        shift = given
    base = start - shift
    return base if -(2**63) <= base < 2**63 else None


def _processes(con, tables, pids: np.ndarray) -> dict[int, str]:
    """OS pid → process name, for the processes that own events."""
    if "PROCESSES" not in tables or not {"pid", "name"} <= _columns(con, "PROCESSES"):
        return {}
    seen = {int(p) for p in pids if p != NONE}
    out: dict[int, str] = {}
    for pid, name in con.execute("SELECT pid, name FROM PROCESSES"):
        pid = _int_or_none(pid)
        if pid is not None and pid in seen and name:
            out.setdefault(pid, str(name))
    return out


def _devices(con, tables, device_ids: list[int]) -> tuple[DeviceInfo, ...]:
    found = (
        _gpu_table_devices(con, tables, device_ids) or _cuda_device_table(con, tables) or _system_env_gpus(con, tables)
    )
    return tuple(
        found.get(i) or DeviceInfo(i, f"GPU {i} (name not in export)", name_source="missing") for i in device_ids
    )


def _rows(con, table: str) -> list[dict[str, object]]:
    cur = con.execute(f'SELECT * FROM "{table}"')
    keys = [d[0] for d in cur.description]
    return [dict(zip(keys, r)) for r in cur]


def _int_or_none(v) -> int | None:
    """An int64 from an integer, an integral finite real or a decimal string; None otherwise
    (``''``, ``'abc'``, ``9e999``, ``2.5``, bytes)."""
    if isinstance(v, float):
        v = int(v) if math.isfinite(v) and v.is_integer() else None
    elif isinstance(v, str):
        t = v.strip()
        v = int(t) if t.isascii() and 0 < len(t) <= 20 and t.lstrip("+-").isdigit() else None
    if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63:
        return v
    return None


def _info(index: int, row: dict[str, object]) -> DeviceInfo | None:
    name = row.get("name") or row.get("chipName")
    if not name:
        return None
    major, minor = _int_or_none(row.get("computeMajor")), _int_or_none(row.get("computeMinor"))
    if major is None:
        major, minor = _int_or_none(row.get("computeCapabilityMajor")), _int_or_none(row.get("computeCapabilityMinor"))
    return DeviceInfo(
        index=index,
        name=str(name),
        memory_bytes=_int_or_none(row.get("totalMemory")),
        sm_count=_int_or_none(row.get("smCount") or row.get("numMultiprocessors")),
        compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
    )


def _gpu_table_devices(con, tables, device_ids: list[int]) -> dict[int, DeviceInfo]:
    """TARGET_INFO_GPU rows by GPU id; a CUDA device id is mapped to its GPU id through
    TARGET_INFO_CUDA_DEVICE (cudaId → gpuId) when that mapping is the same in every process."""
    if "TARGET_INFO_GPU" not in tables:
        return {}
    gpus = {_int_or_none(r.get("id")): r for r in _rows(con, "TARGET_INFO_GPU")}
    cuda_to_gpu: dict[int, int] = {}
    if "TARGET_INFO_CUDA_DEVICE" in tables:
        pairs = {
            (_int_or_none(r.get("cudaId")), _int_or_none(r.get("gpuId"))) for r in _rows(con, "TARGET_INFO_CUDA_DEVICE")
        }
        by_cuda: dict[int, set[int]] = {}
        for cuda, gpu in pairs:
            if cuda is not None and gpu is not None:
                by_cuda.setdefault(cuda, set()).add(gpu)
        cuda_to_gpu = {c: next(iter(g)) for c, g in by_cuda.items() if len(g) == 1}
    out = {}
    for i in device_ids:
        row = gpus.get(cuda_to_gpu.get(i, i))
        info = _info(i, row) if row else None
        if info:
            out[i] = info
    return out


def _cuda_device_table(con, tables) -> dict[int, DeviceInfo]:
    """Older exports: TARGET_INFO_CUDA_DEVICE rows with their own ``name``."""
    if "TARGET_INFO_CUDA_DEVICE" not in tables or "name" not in _columns(con, "TARGET_INFO_CUDA_DEVICE"):
        return {}
    out = {}
    for r in _rows(con, "TARGET_INFO_CUDA_DEVICE"):
        i = _int_or_none(r.get("cudaId"))
        if i is None:
            continue
        info = _info(i, r)
        if info and i not in out:
            out[i] = info
    return out


def _system_env_gpus(con, tables) -> dict[int, DeviceInfo]:
    """TARGET_INFO_SYSTEM_ENV ``GpuInfo``: a JSON list of GPUs with names, when not empty."""
    if "TARGET_INFO_SYSTEM_ENV" not in tables or not {"name", "value"} <= _columns(con, "TARGET_INFO_SYSTEM_ENV"):
        return {}
    row = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'GpuInfo' LIMIT 1").fetchone()
    try:
        doc = json.loads(row[0]) if row and isinstance(row[0], str) and row[0] else None
    except (ValueError, RecursionError):  # malformed or nested beyond the parser's limit
        return {}
    items = (
        doc
        if isinstance(doc, list)
        else next((v for v in doc.values() if isinstance(v, list)), [])
        if isinstance(doc, dict)
        else []
    )
    out = {}
    for pos, item in enumerate(x for x in items if isinstance(x, dict)):
        i = _int_or_none(item.get("cudaId", item.get("index", item.get("id", pos))))
        if i is None:
            continue
        info = _info(i, item)
        if info and i not in out:
            out[i] = info
    return out
