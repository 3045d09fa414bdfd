"""Harvest co-batched engine steps: one row per step, with its composition and time split.

Two sources, one table:

- **live** (:func:`harvest_live`): a mixed workload on vLLM (requests with different prompt and
  output lengths; at each concurrency level the first ``c`` requests arrive together and every
  finished request is replaced at once, a closed loop), chunked prefill on and off. The Worker
  is profiled per level; the step anatomy of its trace gives wall, device-active (CPU-compute
  on CPU), host-exposed and host_wait; the Worker's scheduler records
  (:class:`~hostgap.capture.engines.vllm.StepRecorder`) give the per-request composition.
- **traces** (:func:`harvest_traces`): existing vLLM / SGLang traces; per-step composition
  comes from the step annotations (no per-request table: a trace does not name requests).

Step parsing and the time split are :func:`hostgap.anatomy.steps.analyze`; the table's columns,
its writer and the harvest from traces are :mod:`hostgap.analysis.harvest_table`; this module
runs the live workload and joins the Worker's records to the steps.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from hostgap.analysis.harvest_table import (
    COMPOSITION,
    EXTRA_COLUMNS,
    HARVEST_SCHEMA_VERSION,
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    Progress,
    _kinds,
    analyze_trace,
    harvest_traces,
    read_table,
    requests_path,
    step_rows,
    table_meta,
    write_table,
)
from hostgap.errors import HostgapError

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


# -- sources ------------------------------------------------------------------------------


def engine_options(cfg: HarvestConfig, chunked: bool):
    """The engine settings of one chunked-prefill setting of the grid."""
    from hostgap.capture.engines.vllm.common import VllmOptions

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
    from hostgap.capture.engines.vllm.common import prompt_ids

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
    from hostgap.capture.engines.vllm.common import validate_options
    from hostgap.capture.engines.vllm.runtime import VllmRuntime
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
