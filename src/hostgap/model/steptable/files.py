"""STEPS input for attribution: harvested step tables and generic request/step tables.

Two layouts are accepted (``docs/attribution.md`` documents them with examples):

1. **Harvest table** (what ``hostgap harvest`` writes): one row per step with
   ``schema_version, source, step, kind, wall_ns, gpu_active_ns, host_exposed_ns, host_wait_ns,
   ctx_requests, ctx_q, ctx_s, ctx_qq, ctx_qs, gen_requests, gen_q, gen_s, gen_qq, gen_qs``
   (METHOD.md §3 names), optionally with a companion requests table
   (``<stem>.requests.parquet`` / ``<stem>.requests.csv``) holding one row per request:
   ``source, step, request, phase, q, s``.
2. **Generic table**: rows with ``step, q, s`` (one per request) and rows with ``step`` and a
   measured time, ``wall_ns`` or ``time_ms`` (one per step); a request row may carry its step's
   time too. Optional: ``source``, ``request``, ``phase``, ``gpu_active_ns``,
   ``host_exposed_ns``, ``host_wait_ns``.

Either becomes a :class:`Steps`: per-step aggregates (Σp, Σc, Σp², |B|, Σp·c — all the §8 model
needs) and, where the input has them, per-request (p, c) in step order.

This module reads and writes the files (:func:`load_steps`, :func:`write_steps`); the types are
:mod:`hostgap.model.steptable.rows`, building them from the columns of either layout is
:mod:`hostgap.model.steptable.layouts`. Everything public is importable from here.
"""

from __future__ import annotations

import os
import re

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.steptable.layouts import steps_from_generic, steps_from_harvest
from hostgap.model.steptable.rows import Requests, Steps

__all__ = [
    "REQUEST_COLUMNS",
    "STEP_COLUMNS",
    "Requests",
    "Steps",
    "companion_requests_path",
    "composition_from_vllm_annotation",
    "load_steps",
    "read_columns",
    "steps_from_generic",
    "steps_from_harvest",
    "write_steps",
]

STEP_COLUMNS = (
    "schema_version",
    "source",
    "step",
    "kind",
    "wall_ns",
    "gpu_active_ns",
    "host_exposed_ns",
    "host_wait_ns",
    "ctx_requests",
    "ctx_q",
    "ctx_s",
    "ctx_qq",
    "ctx_qs",
    "gen_requests",
    "gen_q",
    "gen_s",
    "gen_qq",
    "gen_qs",
)
"""Columns of the harvest layout (``queued`` is read too when present)."""

REQUEST_COLUMNS = ("source", "step", "request", "phase", "q", "s")
"""Columns of the companion requests table."""


# ---------------------------------------------------------------- file reading


def read_columns(path: str) -> dict[str, np.ndarray]:
    """Columns of a Parquet or CSV file (``.csv.gz`` too) as numpy arrays; strings as objects."""
    import pyarrow as pa

    if not os.path.exists(path):
        raise HostgapError(path, "no such file")
    lower = path.lower()
    try:
        if lower.endswith(".parquet") or lower.endswith(".pq"):
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        elif lower.endswith(".csv") or lower.endswith(".csv.gz"):
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(path)
        else:
            raise HostgapError(path, "unknown table format: expected .parquet, .csv or .csv.gz")
    except (pa.ArrowInvalid, OSError) as e:
        raise HostgapError(path, f"cannot read table: {str(e).splitlines()[0]}") from None
    out = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            out[name] = np.array([("" if v is None else v) for v in col.to_pylist()], dtype=object)
        elif pa.types.is_boolean(col.type):
            out[name] = np.array([bool(v) for v in col.to_pylist()])
        elif pa.types.is_null(col.type):
            out[name] = np.full(len(col), np.nan)
        else:
            try:
                out[name] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
            except pa.ArrowInvalid:
                out[name] = np.array([("" if v is None else str(v)) for v in col.to_pylist()], dtype=object)
    return out


def companion_requests_path(path: str) -> str | None:
    """``run.parquet`` → ``run.requests.parquet`` (or ``.csv``) when that file exists."""
    stem = re.sub(r"(\.csv\.gz|\.csv|\.parquet|\.pq)$", "", path, flags=re.I)
    for ext in (".requests.parquet", ".requests.csv", ".requests.csv.gz"):
        if os.path.exists(stem + ext):
            return stem + ext
    return None


def load_steps(path: str, requests_path: str | None = None) -> Steps:
    """Read STEPS (either layout); HostgapError naming the file on anything malformed."""
    cols = read_columns(path)
    if not cols or len(next(iter(cols.values()))) == 0:
        raise HostgapError(path, "table has no rows")
    if "ctx_requests" in cols or "gen_requests" in cols or "kind" in cols:
        req_path = requests_path or companion_requests_path(path)
        req_cols = read_columns(req_path) if req_path else None
        return steps_from_harvest(cols, req_cols, origin=path, req_origin=req_path or "")
    if "q" in cols and "s" in cols and "step" in cols:
        return steps_from_generic(cols, origin=path)
    raise HostgapError(
        path,
        "not a STEPS table: expected the harvest columns (ctx_requests, "
        "gen_requests, ...) or a generic table with step, q, s and wall_ns "
        "or time_ms (see docs/attribution.md)",
    )


# ------------------------------------------------------- vLLM step annotations

_DETAILED = re.compile(
    r"execute_(?:\d+_)?context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
    r"_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
)


def composition_from_vllm_annotation(name: str) -> dict[str, int] | None:
    """METHOD.md §3 composition fields from a detailed vLLM step annotation; None otherwise.

    >>> composition_from_vllm_annotation(
    ...     "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)")
    ... # doctest: +NORMALIZE_WHITESPACE
    {'ctx_requests': 0, 'ctx_q': 0, 'ctx_s': 0, 'ctx_qq': 0, 'ctx_qs': 0,
     'gen_requests': 32, 'gen_q': 32, 'gen_s': 55086, 'gen_qq': 32, 'gen_qs': 55086}

    The short form (``execute_context_1(7)_generation_3(3)``) lacks s and is not enough for
    attribution, so it gives None.
    """
    m = _DETAILED.search(name)
    if m is None:
        return None
    keys = ("ctx_requests", "ctx_q", "ctx_s", "ctx_qq", "ctx_qs", "gen_requests", "gen_q", "gen_s", "gen_qq", "gen_qs")
    return dict(zip(keys, (int(g) for g in m.groups())))


# ---------------------------------------------------------------- writing


def write_steps(steps: Steps, path: str, kind_names: bool = True) -> list[str]:
    """Write ``steps`` in the harvest layout (plus ``<stem>.requests.<ext>``); returns paths.

    Files are written to a temporary name and renamed, so a failure leaves nothing half-written.
    """
    import pyarrow as pa

    from hostgap.version import SCHEMA_VERSION

    n = len(steps)
    kind = np.where(~steps.is_prefill, "decode", np.where(steps.n_prefill >= steps.n_requests, "prefill", "mixed"))
    parts = _split_parts(steps)
    table = pa.table(
        {
            "schema_version": np.full(n, SCHEMA_VERSION, np.int64),
            "source": [steps.sources[i] for i in steps.source_idx],
            "step": steps.step,
            "kind": kind.tolist(),
            "wall_ns": steps.wall_ns,
            "gpu_active_ns": steps.gpu_active_ns,
            "host_exposed_ns": steps.host_exposed_ns,
            "host_wait_ns": steps.host_wait_ns,
            **parts,
        }
    )
    written = [_write_table(table, path)]
    if steps.requests is not None:
        r = steps.requests
        si = r.step_index
        rt = pa.table(
            {
                "source": [steps.sources[steps.source_idx[i]] for i in si],
                "step": steps.step[si],
                "request": r.request.tolist(),
                "phase": np.where(r.prefill, "prefill", "decode").tolist(),
                "q": r.p.astype(np.int64),
                "s": r.c.astype(np.int64),
            }
        )
        stem = re.sub(r"(\.csv|\.parquet)$", "", path)
        ext = ".csv" if path.endswith(".csv") else ".parquet"
        written.append(_write_table(rt, stem + ".requests" + ext))
    return written


def _split_parts(steps: Steps) -> dict:
    """ctx_*/gen_* columns; needs per-request rows unless every step is one phase only."""
    n = len(steps)
    if steps.requests is None:
        raise HostgapError(steps.origin, "writing the harvest layout needs per-request rows")
    r = steps.requests
    si = r.step_index
    out = {}
    for pre, mask in (("ctx", r.prefill), ("gen", ~r.prefill)):
        w = mask.astype(float)
        out[f"{pre}_requests"] = np.bincount(si, weights=w, minlength=n).astype(np.int64)
        for name, v in (("q", r.p), ("s", r.c), ("qq", r.p * r.p), ("qs", r.p * r.c)):
            out[f"{pre}_{name}"] = np.bincount(si, weights=w * v, minlength=n).astype(np.int64)
    return out


def _write_table(table, path: str) -> str:
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        if path.endswith(".csv"):
            pcsv.write_csv(table, tmp)
        else:
            pq.write_table(table, tmp)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise HostgapError(path, f"cannot write: {e.strerror or e}") from None
    return path
