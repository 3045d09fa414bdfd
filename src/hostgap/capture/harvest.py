"""Harvest co-batched engine steps: one row per step, with its composition and time split.

Two sources, one table:

- **live** (:func:`harvest_live`): a mixed workload on vLLM (requests with different prompt and
  output lengths; at each concurrency level the first ``c`` requests arrive together and every
  finished request is replaced at once, a closed loop), chunked prefill on and off. The Worker
  is profiled per level; the step anatomy of its trace gives wall, device-active (CPU-compute
  on CPU), host-exposed and host_wait; the Worker's scheduler records
  (:class:`~hostgap.capture.vllm_engine.StepRecorder`) give the per-request composition.
- **traces** (:func:`harvest_traces`): existing vLLM / SGLang traces; per-step composition
  comes from the step annotations (no per-request table: a trace does not name requests).

Step parsing and the time split are :func:`hostgap.anatomy.steps.analyze`; this module only
runs workloads, joins and writes tables.

Step table (one row per engine step that scheduled tokens): :data:`STEP_COLUMNS`. Request table
(``<stem>.requests.parquet``): :data:`REQUEST_COLUMNS`, one row per request per step, with
``q`` tokens scheduled this step and ``s`` = tokens in the KV cache after it (METHOD.md §3).
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from hostgap.capture.rundir import file_mode
from hostgap.errors import HostgapError

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


# -- workload -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    index: int
    prompt_len: int
    output_len: int


@dataclass(frozen=True)
class HarvestConfig:
    """A live harvest: the preset, the grid (concurrency x chunked prefill) and the mix."""

    preset: str = "tiny"
    concurrency: tuple[int, ...] = (1, 4, 16)
    chunked: tuple[bool, ...] = (True, False)
    requests: int | None = None  # per level; None: max(4, 2 x concurrency)
    prompt_len: tuple[int, int] = (8, 512)  # log-uniform range
    output_len: tuple[int, int] = (4, 48)  # uniform range
    budget: int = 128  # max_num_batched_tokens with chunked prefill on
    dtype: str = "bfloat16"
    mode: str = "eager"
    kv_cache_gib: float = 1.0
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def n_requests(self, c: int) -> int:
        return self.requests or max(4, 2 * c)

    @property
    def max_model_len(self) -> int:
        return 1 << max(9, math.ceil(math.log2(self.prompt_len[1] + self.output_len[1] + 1)))


def validate(cfg: HarvestConfig) -> None:
    from hostgap.model.arch import get_preset

    get_preset(cfg.preset)
    if not cfg.concurrency or min(cfg.concurrency) < 1:
        raise HostgapError("--concurrency", "give concurrency levels >= 1, e.g. 1,4,16")
    if not cfg.chunked:
        raise HostgapError("--chunked", "give on, off or on,off")
    lo, hi = cfg.prompt_len
    if not 1 <= lo <= hi:
        raise HostgapError("--prompt-len", f"need 1 <= MIN <= MAX, got {lo}:{hi}")
    lo, hi = cfg.output_len
    if not 1 <= lo <= hi:
        raise HostgapError("--output-len", f"need 1 <= MIN <= MAX, got {lo}:{hi}")
    if cfg.budget < 1:
        raise HostgapError("--budget", f"must be >= 1, got {cfg.budget}")
    if cfg.requests is not None and cfg.requests < 1:
        raise HostgapError("--requests", f"must be >= 1, got {cfg.requests}")


def make_requests(n: int, prompt_len: tuple[int, int], output_len: tuple[int, int], seed: int) -> list[Request]:
    """``n`` requests: prompt lengths log-uniform over ``prompt_len``, outputs uniform."""
    rng = random.Random(seed)
    lo, hi = prompt_len
    out = []
    for i in range(n):
        p = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        out.append(Request(i, min(max(p, lo), hi), rng.randint(*output_len)))
    return out


def run_closed_loop(runtime, requests: list[Request], concurrency: int, prompts: list[list[int]]) -> dict:
    """Keep ``concurrency`` requests in flight: the first ones arrive together, each finished
    request is replaced by the next at once. Returns {vLLM request id: Request}."""
    ids: dict[str, Request] = {}
    queue = list(range(len(requests)))
    with runtime.paused():
        for _ in range(min(concurrency, len(queue))):
            i = queue.pop(0)
            ids[runtime.add(prompts[i], requests[i].output_len)] = requests[i]
    done = 0
    while done < len(requests):
        for out in runtime.step():
            done += 1
            got = len(out.outputs[0].token_ids)
            want = ids[out.request_id].output_len
            if got != want:
                raise HostgapError("vllm", f"request {out.request_id}: asked for {want} tokens, got {got}")
            if queue:
                i = queue.pop(0)
                ids[runtime.add(prompts[i], requests[i].output_len)] = requests[i]
        if done < len(requests) and not runtime.unfinished():
            raise HostgapError("vllm", "the engine stopped with requests outstanding")
    return ids


# -- tables -------------------------------------------------------------------------------


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


def log_composition(record: list) -> dict:
    """The METHOD.md composition fields of one StepRecorder record (as vLLM annotates)."""
    f = dict.fromkeys(COMPOSITION, 0)
    for _rid, q, computed, ctx in record[2]:
        s = computed + q
        p = "ctx" if ctx else "gen"
        f[f"{p}_requests"] += 1
        f[f"{p}_q"] += q
        f[f"{p}_s"] += s
        f[f"{p}_qq"] += q * q
        f[f"{p}_qs"] += q * s
    return f


def join_requests(rows: list[dict], records: list, ids: dict, source: str) -> list[dict]:
    """Per-request rows for the step ``rows`` of one trace from the Worker's records of the same
    run: both are in step order; records that scheduled nothing are skipped as the rows were.
    Every pair must agree on the full composition, else HostgapError (never a silent shift)."""
    recs = [r for r in records if r[2]]
    if len(recs) != len(rows):
        raise HostgapError(source, f"trace has {len(rows)} steps with tokens, the Worker recorded {len(recs)}")
    out = []
    for row, rec in zip(rows, recs):
        comp = log_composition(rec)
        if any(comp[k] != row[k] for k in COMPOSITION):
            raise HostgapError(
                source,
                f"step {row['step']}: trace composition {_brief(row)} differs from the Worker's record {_brief(comp)}",
            )
        for rid, q, computed, ctx in rec[2]:
            req = ids.get(rid) or ids.get(rid.split("-", 1)[0])  # the Worker's ids carry a suffix
            out.append(
                {
                    "schema_version": HARVEST_SCHEMA_VERSION,
                    "source": source,
                    "step": row["step"],
                    "request": req.index if req else -1,
                    "phase": "prefill" if ctx else "decode",
                    "q": q,
                    "s": computed + q,
                    "prompt_len": req.prompt_len if req else None,
                    "output_len": req.output_len if req else None,
                }
            )
    return out


def _brief(f: dict) -> str:
    return "ctx {}/{}q/{}s gen {}/{}q/{}s".format(
        *(f[k] for k in ("ctx_requests", "ctx_q", "ctx_s", "gen_requests", "gen_q", "gen_s"))
    )


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
    from hostgap import __version__

    return {
        "schema_version": HARVEST_SCHEMA_VERSION,
        "table": kind,
        "hostgap": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **kw,
    }


# -- sources ------------------------------------------------------------------------------


def analyze_trace(path: Path) -> dict:
    from hostgap.anatomy.steps import AnatomyConfig, analyze
    from hostgap.load import load_trace

    return analyze(load_trace(str(path)), AnatomyConfig()).to_dict()


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


def engine_options(cfg: HarvestConfig, chunked: bool):
    """The engine settings of one chunked-prefill setting of the grid."""
    from hostgap.capture.vllm_common import VllmOptions

    budget = cfg.budget if chunked else max(cfg.max_model_len, 2048)
    return VllmOptions(
        mode=cfg.mode,
        dtype=cfg.dtype,
        kv_cache_gib=cfg.kv_cache_gib,
        max_model_len=cfg.max_model_len,
        max_num_seqs=max(cfg.concurrency),
        max_num_batched_tokens=budget,
        chunked_prefill=chunked,
        seed=cfg.seed,
    )


def harvest_level(
    rt, cfg: HarvestConfig, concurrency: int, keep_traces: Path | None = None
) -> tuple[list[dict], list[dict], int]:
    """One concurrency level on a started runtime (``record_steps`` and ``profile`` on):
    returns (step rows, request rows, empty steps dropped)."""
    o = rt.opts
    chunked = "on" if o.chunked_prefill else "off"
    source = f"live:{rt.arch.name}:chunked={chunked}:c={concurrency}"
    # the same requests with chunked prefill on and off, so the two compare step for step
    seed = cfg.seed * 1000 + concurrency * 2
    reqs = make_requests(cfg.n_requests(concurrency), cfg.prompt_len, cfg.output_len, seed)
    if max(r.prompt_len + r.output_len for r in reqs) > o.max_model_len:
        raise HostgapError("--prompt-len/--output-len", f"requests exceed the engine's max_model_len {o.max_model_len}")
    from hostgap.capture.vllm_common import prompt_ids

    prompts = prompt_ids(rt.arch.vocab, [r.prompt_len for r in reqs], seed)
    rt.take_steps()
    tokens = sum(r.prompt_len + r.output_len for r in reqs)
    with rt.profiling() as got, rt.waiting(f"harvest level c={concurrency}", rt.work_deadline_s(tokens)):
        ids = run_closed_loop(rt, reqs, concurrency, prompts)
    records = rt.take_steps()
    trace = got[0]
    extra = {
        "engine": "vllm",
        "preset": rt.arch.name,
        "concurrency": concurrency,
        "chunked_prefill": o.chunked_prefill,
        "max_num_batched_tokens": o.max_num_batched_tokens,
    }
    try:
        rows, dropped = step_rows(analyze_trace(trace), source, extra)
        req_rows = join_requests(rows, records, ids, source)
    finally:
        if keep_traces:
            keep_traces.mkdir(parents=True, exist_ok=True)
            os.replace(trace, keep_traces / f"{source.replace(':', '_').replace('=', '')}.json.gz")
        else:
            trace.unlink(missing_ok=True)
    return rows, req_rows, dropped


def write_live(rows: list[dict], req_rows: list[dict], out: Path, meta: dict) -> Path:
    write_table(rows, out, STEP_COLUMNS + EXTRA_COLUMNS, meta)
    return write_table(req_rows, requests_path(out), REQUEST_COLUMNS, {**meta, "table": "requests"})


def harvest_live(
    cfg: HarvestConfig, out: Path, keep_traces: Path | None = None, progress: Progress | None = None
) -> dict:
    """Run the grid on vLLM (one engine per chunked-prefill setting) and write the step table
    and the request table."""
    from hostgap.capture.vllm_common import validate_options
    from hostgap.capture.vllm_runtime import VllmRuntime
    from hostgap.model.arch import get_preset

    validate(cfg)
    arch = get_preset(cfg.preset)
    say = progress or (lambda _m: None)
    rows: list[dict] = []
    req_rows: list[dict] = []
    engines, dropped = [], 0
    worst = max(cfg.concurrency) * (cfg.prompt_len[1] + cfg.output_len[1])
    for chunked in cfg.chunked:
        validate_options(arch, engine_options(cfg, chunked), worst)
    with tempfile.TemporaryDirectory(prefix="hostgap-harvest-") as tmp:
        for chunked in cfg.chunked:
            opts = engine_options(cfg, chunked)
            say(
                f"starting vLLM ({cfg.preset}, chunked prefill {'on' if chunked else 'off'}, "
                f"budget {opts.max_num_batched_tokens} tokens/step)"
            )
            with VllmRuntime(
                arch,
                opts,
                Path(tmp) / f"chunked{int(chunked)}",
                profile=True,
                record_steps=True,
                failure_dir=failure_dir(out, chunked),
            ) as rt:
                say(f"engine up in {rt.startup_ns / 1e9:.1f} s")
                for c in cfg.concurrency:
                    r, q, d = harvest_level(rt, cfg, c, keep_traces)
                    rows, req_rows, dropped = rows + r, req_rows + q, dropped + d
                    say(f"{r[0]['source'] if r else c}: {cfg.n_requests(c)} requests, {len(r)} steps ({_kinds(r)})")
            engines.append({"chunked_prefill": chunked, **rt.describe()})
    meta = table_meta("steps", mode="live", config=cfg.to_dict(), engines=engines, dropped_empty_steps=dropped)
    rpath = write_live(rows, req_rows, out, meta)
    return {
        "steps": str(out),
        "requests": str(rpath),
        "rows": len(rows),
        "request_rows": len(req_rows),
        "dropped_empty_steps": dropped,
        "kinds": _kinds(rows),
        "engines": [
            {k: e[k] for k in ("chunked_prefill", "startup_ns", "shutdown_ns", "vllm_version")} for e in engines
        ],
    }


def failure_dir(out: Path, chunked: bool) -> Path:
    """Where an engine that fails keeps its log: ``<stem>.failed/chunked<0|1>`` beside the
    output (the engines' own directories are temporary).

    >>> str(failure_dir(Path("res/h.parquet"), True))
    'res/h.failed/chunked1'
    """
    out = Path(out)
    return out.with_name(f"{out.stem}.failed") / f"chunked{int(chunked)}"


def _kinds(rows: list[dict]) -> dict:
    out: dict[str, int] = {}
    for r in rows:
        out[r["kind"]] = out.get(r["kind"], 0) + 1
    return dict(sorted(out.items()))


__all__ = [
    "HarvestConfig",
    "Request",
    "make_requests",
    "harvest_live",
    "harvest_traces",
    "step_rows",
    "join_requests",
    "log_composition",
    "write_table",
    "requests_path",
    "read_table",
    "STEP_COLUMNS",
    "REQUEST_COLUMNS",
    "HARVEST_SCHEMA_VERSION",
]
