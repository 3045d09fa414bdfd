"""The harvest's step table: one row per engine step with its composition and time split, from
a trace's step anatomy; written and read as Parquet (or CSV), and built from existing vLLM /
SGLang traces (:func:`harvest_traces`). The live harvest on a vLLM engine
(:mod:`hostgap.capture.engines.harvest_live`) writes the same table, with a request table beside it.

Step table (one row per engine step that scheduled tokens): :data:`STEP_COLUMNS`. Request table
(``<stem>.requests.parquet``): :data:`REQUEST_COLUMNS`, one row per request per step, with
``q`` tokens scheduled this step and ``s`` = tokens in the KV cache after it (METHOD.md §3).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hostgap.errors import HostgapError
from hostgap.store.rundir import file_mode

HARVEST_SCHEMA_VERSION = 1


COMPOSITION = (
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


STEP_COLUMNS = (
    "schema_version",
    "source",
    "step",
    "kind",
    "wall_ns",
    "gpu_active_ns",
    "host_exposed_ns",
    "host_wait_ns",
    *COMPOSITION,
)
"""The contract columns, in order. Extra columns follow them (:data:`EXTRA_COLUMNS`)."""


EXTRA_COLUMNS = (
    "activity",
    "engine",
    "preset",
    "concurrency",
    "chunked_prefill",
    "max_num_batched_tokens",
    "kernel_count",
    "kernel_sum_ns",
    "host_fraction",
    "queued",
    "partial",
    "start_ns",
)


REQUEST_COLUMNS = ("schema_version", "source", "step", "request", "phase", "q", "s", "prompt_len", "output_len")


INT_COLUMNS = {
    "schema_version",
    "step",
    "wall_ns",
    "gpu_active_ns",
    "host_exposed_ns",
    "host_wait_ns",
    *COMPOSITION,
    "concurrency",
    "max_num_batched_tokens",
    "kernel_count",
    "kernel_sum_ns",
    "start_ns",
    "request",
    "q",
    "s",
    "prompt_len",
    "output_len",
}


BOOL_COLUMNS = {"chunked_prefill", "queued", "partial"}


FLOAT_COLUMNS = {"host_fraction"}


Progress = Callable[[str], None]


def step_rows(anatomy: dict, source: str, extra: dict | None = None) -> tuple[list[dict], int]:
    """Table rows from an anatomy dict (``analyze(...).to_dict()``); steps that scheduled no
    tokens (vLLM's empty ``execute_0_...`` iterations) are left out. Returns (rows, dropped)."""
    rows, dropped = [], 0
    for s in anatomy["steps"]:
        if s.get("kind") == "unknown" and not _tokens(s):
            dropped += 1
            continue
        row = {"schema_version": HARVEST_SCHEMA_VERSION, "source": source, "step": s["index"], "kind": s.get("kind")}
        for c in (
            "wall_ns",
            "gpu_active_ns",
            "host_exposed_ns",
            "host_wait_ns",
            *COMPOSITION,
            "kernel_count",
            "kernel_sum_ns",
            "host_fraction",
            "queued",
            "partial",
        ):
            row[c] = s.get(c)
        row["start_ns"] = s.get("start_ns")
        row["activity"] = anatomy.get("activity")
        row.update(extra or {})
        rows.append(row)
    return rows, dropped


def _tokens(s: dict) -> int:
    return int(s.get("ctx_q") or 0) + int(s.get("gen_q") or 0)


def write_table(rows: list[dict], path: Path, columns: tuple[str, ...], meta: dict) -> Path:
    """Parquet (or CSV when ``path`` ends in .csv), written to a temp file then renamed.
    Contract columns first, in order; any other keys follow sorted."""
    import pyarrow as pa

    path = Path(path)
    names = list(columns) + sorted({k for r in rows for k in r} - set(columns))
    arrays = []
    for c in names:
        vals = [r.get(c) for r in rows]
        typ = (
            pa.int64()
            if c in INT_COLUMNS
            else pa.bool_()
            if c in BOOL_COLUMNS
            else pa.float64()
            if c in FLOAT_COLUMNS
            else pa.string()
        )
        if typ == pa.string():
            vals = [None if v is None else str(v) for v in vals]
        arrays.append(pa.array(vals, type=typ))
    table = pa.Table.from_arrays(arrays, names=names)
    table = table.replace_schema_metadata({"hostgap": json.dumps(meta, default=str)})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    os.close(fd)
    try:
        if path.suffix == ".csv":
            import pyarrow.csv as pacsv

            pacsv.write_csv(table, tmp)
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        os.chmod(tmp, file_mode())  # mkstemp's 0600 is not what a results file should have
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def requests_path(path: Path) -> Path:
    """``<stem>.requests.<ext>`` beside the step table."""
    path = Path(path)
    return path.with_name(f"{path.stem}.requests{path.suffix}")


def read_table(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(str(path)).to_pylist()


def table_meta(kind: str, **kw) -> dict:
    from hostgap.version import __version__

    return {
        "schema_version": HARVEST_SCHEMA_VERSION,
        "table": kind,
        "hostgap": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **kw,
    }


def analyze_trace(path: Path) -> dict:
    from hostgap.analysis.trace import analyse_trace

    return analyse_trace(path).anatomy().to_dict()


def harvest_traces(paths: list[str], out: Path, progress: Progress | None = None) -> dict:
    """The step table of existing traces (one ``source`` per file: its file name)."""
    rows, dropped, sources = [], 0, []
    for p in paths:
        a = analyze_trace(Path(p))
        if a["marker_family"] not in ("vllm", "sglang", "hostgap"):
            raise HostgapError(
                p,
                f"no engine step annotations (vLLM execute_..., SGLang step[...]); "
                f"found marker family {a['marker_family']!r}",
            )
        r, d = step_rows(a, Path(p).name, {"engine": a["marker_family"]})
        rows += r
        dropped += d
        sources.append({"source": Path(p).name, "path": str(p), "steps": len(r), "activity": a["activity"]})
        if progress:
            progress(f"{p}: {len(r)} steps")
    if not rows:
        raise HostgapError(", ".join(paths), "no engine steps with tokens in these traces")
    meta = table_meta("steps", mode="traces", sources=sources, dropped_empty_steps=dropped)
    write_table(rows, out, STEP_COLUMNS + EXTRA_COLUMNS, meta)
    return {
        "steps": str(out),
        "requests": None,
        "rows": len(rows),
        "request_rows": 0,
        "dropped_empty_steps": dropped,
        "sources": sources,
        "kinds": _kinds(rows),
    }


def _kinds(rows: list[dict]) -> dict:
    out: dict[str, int] = {}
    for r in rows:
        out[r["kind"]] = out.get(r["kind"], 0) + 1
    return dict(sorted(out.items()))
