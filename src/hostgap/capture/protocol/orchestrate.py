"""The measuring protocol: warm-up, untraced W(N), traced G(N)/K(N), sweep, differencing.

One :class:`MeasureConfig` describes a run; :func:`measure` executes it against any
:class:`~hostgap.capture.protocol.engine.Engine` and returns the results dict (``results.json``), having
written the run directory. Order of work:

1. warm-up: two untraced generate calls and one short traced call (profiler start-up), discarded;
2. untraced runs: R repeats of every N in the sweep (N1, N2 and points over the decade below
   N2), interleaved across N in a shuffled order so slow drift does not bias one N;
3. traced runs (torch.profiler, CPU activity plus CUDA on a GPU, no stacks, one annotation per
   step): every sweep N once, N1 and N2 ``traced_repeats`` times; each trace is reduced to its
   totals (:func:`hostgap.anatomy.timeline.totals`) right away;
4. optional py-spy stack sampling over one extra untraced N2 run (``stacks``);
5. contention check (:func:`hostgap.capture.protocol.validity.contention`): when the machine was busy
   during the runs, steps 1-4 are repeated, at most ``retries`` times; a measurement that stays
   contended is reported invalid rather than as a number;
6. differencing (:mod:`hostgap.stats.differencing`) and the per-step anatomy of the first
   N2 trace (:func:`hostgap.anatomy.steps.analyze`), then the validity checks.

Steps 1-5 live in :mod:`hostgap.capture.protocol.interleave`, which also runs them for several engines
measured together (:func:`measure_together`: runs interleaved, one contention retry for all).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import cast

from hostgap.capture.protocol.engine import Workload, load_engine
from hostgap.capture.protocol.interleave import Side, measure_until_quiet
from hostgap.capture.protocol.results import RESULTS_SCHEMA_VERSION, anatomy_of, build_results, cell_key
from hostgap.capture.protocol.validity import contention_of, in_thread
from hostgap.capture.protocol.validity import disturbed as _disturbed
from hostgap.capture.protocol.validity import preempted_share as _preempted_share
from hostgap.errors import HostgapError
from hostgap.model.arch import Arch, get_preset
from hostgap.stats.differencing import ESTIMATORS, difference, series_from_raw, sweep_points
from hostgap.stats.engine_diff import engine_difference
from hostgap.store import rundir
from hostgap.store.save import save_run

__all__ = [  # the run's pieces live in the modules they come from; these names are the API here
    "RESULTS_SCHEMA_VERSION",
    "MeasureConfig",
    "Progress",
    "cell_key",
    "contention_of",
    "disturbed",
    "in_thread",
    "make_arch",
    "make_workload",
    "measure",
    "measure_together",
    "new_run_id",
    "plan",
    "preempted_share",
    "resolve",
    "series_from_raw",
    "validate",
]

Progress = Callable[[str, int, int], None]
"""``progress(phase, done_tokens, total_tokens)``."""


@dataclass(frozen=True)
class MeasureConfig:
    """Everything that defines a measurement (resolved values are written to config.json)."""

    preset: str | None = None  # None: tiny on CPU, llama-3.2-1b on CUDA
    model_path: str | None = None
    engine: str = "hf"
    device: str = "auto"
    mode: str = "eager"
    batch: int = 1
    prompt_len: int = 128
    dtype: str = "auto"
    threads: int = 1
    n1: int = 1
    n2: int | None = None  # None: 128 on CPU, 64 on CUDA
    repeats: int = 5
    traced_repeats: int = 2
    sweep: tuple[int, ...] | None = None  # None: sweep_points(n1, n2)
    warmup: int = 2
    estimator: str = "theil-sen"
    seed: int = 0
    stacks: bool = False
    keep_traces: str = "ends"  # "all", "ends" (N1 and N2 first repeat), "none"
    trace_gzip: bool = True
    floor_file: str | None = None
    out: str = "runs"  # parent directory of run directories
    run_dir: str | None = None  # exact run directory (overrides out)
    n_boot: int = 2000
    kv_cache_gib: float | None = None  # vLLM engine: KV-cache space (GiB); None: the engine's default
    tp: int = 1  # vLLM engine: tensor-parallel ranks (one Worker and one trace per rank)
    retries: int = 2  # re-measurements when the machine was busy (contention)
    budget: float | None = None  # seconds for the runs, re-measurements included; None: per engine (capture.converge)
    db: str | None = None  # runs database the run is recorded in (None: $HOSTGAP_DB or the default)
    record: bool = False  # add the run to the runs database (a sweep records its cells itself)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sweep"] = list(self.sweep) if self.sweep else None
        del d["db"], d["record"]  # where it was recorded, not what was measured
        return d


def validate(cfg: MeasureConfig) -> None:
    """Reject bad input before anything heavy runs (one line, exit 2 at the CLI)."""
    if cfg.n1 < 1:
        raise HostgapError("--n1", f"must be >= 1, got {cfg.n1}")
    if cfg.n2 is not None and cfg.n1 >= cfg.n2:
        raise HostgapError("--n1/--n2", f"need N1 < N2, got N1={cfg.n1}, N2={cfg.n2}")
    for name in ("batch", "prompt_len", "threads", "repeats", "traced_repeats"):
        if getattr(cfg, name) < 1:
            raise HostgapError(f"--{name.replace('_', '-')}", f"must be >= 1, got {getattr(cfg, name)}")
    if cfg.keep_traces not in ("all", "ends", "none"):
        raise HostgapError("--keep-traces", "use all, ends or none")
    if cfg.estimator not in ESTIMATORS:
        raise HostgapError("--estimator", f"use one of {', '.join(ESTIMATORS)}")
    if cfg.retries < 0:
        raise HostgapError("--retries", f"must be >= 0, got {cfg.retries}")
    if cfg.budget is not None and not cfg.budget > 0:
        raise HostgapError("--budget", f"must be a positive number of seconds, got {cfg.budget}")
    if cfg.tp < 1:
        raise HostgapError("--tp", f"must be >= 1, got {cfg.tp}")
    if cfg.tp > 1 and cfg.engine != "vllm":
        raise HostgapError("--tp", f"tensor parallel runs on the vllm engine only, not {cfg.engine}")
    if cfg.preset and cfg.model_path:
        raise HostgapError("--model", "give either a preset or --model PATH, not both")
    if cfg.preset:
        get_preset(cfg.preset)
    if cfg.floor_file and not os.path.isfile(cfg.floor_file):
        raise HostgapError(cfg.floor_file, "no such floor file")
    if cfg.stacks:
        from hostgap.capture.protocol.stacks import find_pyspy

        if find_pyspy() is None:
            raise HostgapError("--stacks", "py-spy not found; install it: pip install py-spy")
    if cfg.sweep and any(n < 1 for n in cfg.sweep):
        raise HostgapError("--sweep", "token counts must be >= 1")


def resolve(cfg: MeasureConfig) -> MeasureConfig:
    """Fill the device-dependent defaults (device, preset, dtype, N2, sweep)."""
    from hostgap.capture.protocol.workload import resolve_device, resolve_dtype

    device = resolve_device(cfg.device)
    preset = cfg.preset or (None if cfg.model_path else ("tiny" if device == "cpu" else "llama-3.2-1b"))
    n2 = cfg.n2 or (128 if device == "cpu" else 64)
    if cfg.n1 >= n2:
        raise HostgapError("--n1/--n2", f"need N1 < N2, got N1={cfg.n1}, N2={n2}")
    sweep = tuple(sorted(set(cfg.sweep) | {cfg.n1, n2})) if cfg.sweep else tuple(sweep_points(cfg.n1, n2))
    if max(sweep) > n2 or min(sweep) < cfg.n1:
        raise HostgapError("--sweep", f"token counts must lie within N1..N2 ({cfg.n1}..{n2})")
    if cfg.mode == "graph" and device != "cuda" and cfg.engine != "vllm":
        # (vLLM on CPU: graph mode means its torch.compile path, which works there)
        hint = " (use --mode static on CPU)" if cfg.engine == "hf" else ""
        raise HostgapError("--mode graph", f"CUDA graphs need a CUDA device{hint}")
    from hostgap.capture.protocol.converge import default_budget

    return replace(
        cfg,
        device=device,
        preset=preset,
        n2=n2,
        sweep=sweep,
        dtype=resolve_dtype(cfg.dtype, device),
        budget=cfg.budget if cfg.budget is not None else default_budget(cfg.engine),
    )


def make_arch(cfg: MeasureConfig) -> Arch:
    from hostgap.capture.protocol.workload import arch_from_checkpoint, with_context

    # a resolved config (resolve()): N2 is filled, and so is the preset when no model path is given
    arch = arch_from_checkpoint(cfg.model_path) if cfg.model_path else get_preset(cast(str, cfg.preset))
    need = cfg.prompt_len + cast(int, cfg.n2)
    if arch.family == "gpt2" and need > arch.max_positions:
        raise HostgapError(f"preset {arch.name}", f"prompt + N2 = {need} exceeds its {arch.max_positions} positions")
    return with_context(arch, need) if not cfg.model_path else arch


def make_workload(cfg: MeasureConfig, arch: Arch) -> Workload:
    return Workload(
        preset=cfg.preset or "local",
        arch=arch,
        batch=cfg.batch,
        prompt_len=cfg.prompt_len,
        device=cfg.device,
        mode=cfg.mode,
        dtype=cfg.dtype,
        threads=cfg.threads,
        model_path=cfg.model_path,
        seed=cfg.seed,
        max_new_tokens=cast(int, cfg.n2),  # filled by resolve()
        extra={
            "trace_gzip": cfg.trace_gzip,
            **({"kv_cache_gib": cfg.kv_cache_gib} if cfg.kv_cache_gib is not None else {}),
            **({"tp": cfg.tp} if cfg.tp > 1 else {}),
        },
    )


def new_run_id(cfg: MeasureConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    name = (cfg.preset or "local").replace("/", "_")
    return f"{stamp}-{name}-{cfg.engine}-{cfg.device}-{cfg.mode}-b{cfg.batch}-{uuid.uuid4().hex[:6]}"


# -- the run ------------------------------------------------------------------------------


@dataclass
class _Tally:
    """Progress in generated tokens (the unit of work)."""

    total: int
    progress: Progress | None
    done: int = 0
    phase: str = ""

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self._emit()

    def add(self, n: int) -> None:
        self.done += n
        self._emit()

    def _emit(self) -> None:
        if self.progress:
            self.progress(self.phase, min(self.done, self.total), self.total)


def plan(cfg: MeasureConfig) -> dict:
    """Which N each phase runs, and how many tokens that is (for the progress bar and ETA)."""
    # a resolved config (resolve()): N2 and the sweep are filled
    n2 = cast(int, cfg.n2)
    sweep = list(cast(tuple[int, ...], cfg.sweep))
    traced = [(n, r) for n in sweep for r in range(cfg.traced_repeats if n in (cfg.n1, n2) else 1)]
    warm = [min(n2, 16)] * cfg.warmup
    untraced = [n for _ in range(cfg.repeats) for n in sweep]
    tokens = sum(warm) + 2 + sum(untraced) + sum(n for n, _ in traced) + (n2 if cfg.stacks else 0)
    return {"warmup": warm, "untraced": untraced, "traced": traced, "tokens": tokens}


def measure(
    cfg: MeasureConfig, progress: Progress | None = None, argv: list[str] | None = None, engine_kw: dict | None = None
) -> dict:
    """Run the protocol for ``cfg``; write the run directory; return the results dict.

    ``cfg`` may be unresolved (``device="auto"`` ...); it is validated and resolved first.
    """
    return measure_together([cfg], progress, argv, engine_kw)[0]


def measure_together(
    cfgs: list[MeasureConfig],
    progress: Progress | None = None,
    argv: list[str] | None = None,
    engine_kw: dict | None = None,
) -> list[dict]:
    """Measure one workload on several engines (``cfgs`` differ in ``engine`` only), their runs
    interleaved (:mod:`hostgap.capture.protocol.interleave`); one run directory and results dict per
    engine. With two engines each results dict carries ``engine_difference``
    (:func:`hostgap.stats.engine_diff.engine_difference`)."""
    for cfg in cfgs:
        validate(cfg)
        rundir.check_writable(Path(cfg.run_dir).parent if cfg.run_dir else Path(cfg.out))
    if len(cfgs) > 1 and any(c.run_dir for c in cfgs):
        raise HostgapError("run_dir", "several engines need one run directory each (use out)")
    resolved = [resolve(c) for c in cfgs]
    if len({(c.n1, c.n2, c.sweep, c.repeats, c.traced_repeats) for c in resolved}) > 1:
        raise HostgapError("--engine", "engines measured together need the same token counts and repeats")
    sides = []
    try:
        from hostgap.capture.protocol.energy_run import meter_for

        meter = meter_for(resolved[0])
        for cfg in resolved:
            sides.append(_side(cfg, Side, engine_kw))
            sides[-1].meter = meter
        tally = _Tally(sum(s.plan["tokens"] for s in sides), progress)
        with contextlib.ExitStack() as stack:
            for s in sides:  # closed in reverse order, every one even when another fails
                stack.callback(s.engine.close)
            for s in sides:
                tally.set_phase("build" if len(sides) == 1 else f"build [{s.cfg.engine}]")
                t0 = time.perf_counter()
                s.engine.prepare()
                s.build_s = time.perf_counter() - t0
            outs = _out_of_memory_is_user_error(resolved[0], lambda: measure_until_quiet(sides, tally))
            described = [s.engine.describe() for s in sides]
        tally.set_phase("analyse")
        results = []
        for s, (n2_trace, raw), describe in zip(sides, outs, described):
            results.append(_finish(s, raw, _described_after_close(s.engine, describe), n2_trace, argv))
        del outs
        if len(results) == 2:
            diff = engine_difference(*results)
            for r in results:
                r["engine_difference"] = diff
        for s, r in zip(sides, results):
            if s.cfg.keep_traces == "none":
                s.run.remove_traces()  # the N2 trace was kept only for the anatomy
            save_run(r, s.run, s.cfg.db, to_db=s.cfg.record)
    except BaseException:
        for s in sides:
            s.run.remove_if_incomplete()  # a failed or interrupted run leaves no half-written directory
        raise
    tally.set_phase("done")
    return results


def _side(cfg: MeasureConfig, side_cls, engine_kw: dict | None):
    """Build one engine's side (engine constructed, not started; run directory created)."""
    from hostgap.capture.protocol.workload import check_fits

    arch = make_arch(cfg)
    run_root = Path(cfg.run_dir) if cfg.run_dir else None
    run_id = run_root.name if run_root else new_run_id(cfg)
    run_root = run_root or Path(cfg.out) / run_id
    work = make_workload(cfg, arch)
    cached = {}
    if cfg.engine == "hf" and engine_kw and engine_kw.get("model_cache"):
        from hostgap.capture.protocol.workload import cached_bytes

        cached = cached_bytes(engine_kw["model_cache"], work)
    check_fits(
        arch,
        cfg.dtype,
        cfg.batch,
        cfg.prompt_len + cast(int, cfg.n2),  # filled by resolve()
        cfg.device,
        source=f"--model {cfg.model_path}" if cfg.model_path else None,
        **cached,
    )
    kw = dict(engine_kw or {})
    if cfg.engine == "vllm" and "runtime" not in kw:
        kw.setdefault("run_dir", str(run_root))  # vLLM's cache, config and log inside the run
    engine = load_engine(cfg.engine)(work, **kw)
    run = rundir.RunDir.create(run_root)
    run.write_json(
        "config.json",
        {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "run_id": run_id,
            "config": cfg.to_dict(),
            "workload": work.to_dict(),
        },
    )
    return side_cls(cfg=cfg, engine=engine, plan=plan(cfg), run=run, run_id=run_id, arch=arch)


def _finish(s, raw: dict, describe: dict, n2_trace, argv) -> dict:
    """Manifest, timings and the results dict of one side (results.json is written later)."""
    from hostgap.store import manifest as mf

    s.run.write_json("manifest.json", mf.manifest(argv, extra={"engine": describe, "run_id": s.run_id}))
    s.run.write_json("timings.json", raw)
    return _results(s.cfg, s.arch, s.run_id, raw, describe, s.run, s.build_s, n2_trace)


def _described_after_close(engine, before: dict) -> dict:
    """The engine's facts again after close (shutdown time is known only then)."""
    try:
        after = engine.describe()
    except Exception:  # an engine whose describe needs live state: keep what it said before
        return before
    return {**before, **after} if isinstance(after, dict) else before


def _out_of_memory_is_user_error(cfg: MeasureConfig, fn):
    """An allocation failure during the runs (prefill activations, KV growth) is one line."""
    try:
        return fn()
    except MemoryError:
        raise HostgapError(f"preset {cfg.preset}", "out of memory during the runs (host)") from None
    except RuntimeError as e:
        if "out of memory" not in str(e).lower():
            raise
        raise HostgapError(
            f"preset {cfg.preset}",
            f"out of memory during the runs (batch {cfg.batch}, prompt {cfg.prompt_len}, N2 {cfg.n2}): "
            f"{str(e).splitlines()[0][:160]}",
        ) from None


def disturbed(wall_ns: int, thread_ns: int) -> bool:
    """Whether a run spent more than 5 % of its wall preempted
    (:func:`hostgap.capture.protocol.validity.disturbed`).

    >>> disturbed(100, 99), disturbed(100, 80)
    (False, True)
    """
    return bool(_disturbed(wall_ns, thread_ns))


def preempted_share(raw: dict) -> float | None:
    """Share of untraced runs that spent more than 5 % of their wall preempted."""
    return _preempted_share(raw.get("untraced_wall_ns", {}), raw.get("untraced_thread_ns", {}))


def _results(
    cfg: MeasureConfig, arch: Arch, run_id: str, raw: dict, describe: dict, run, build_s: float, n2_trace=None
) -> dict:
    series = series_from_raw(raw)
    first_traced: dict = next(iter(next(iter(raw["traced"].values()))), {})
    activity = first_traced.get("activity", "gpu")
    diff = difference(
        series,
        cfg.n1,
        cast(int, cfg.n2),  # filled by resolve()
        estimator=cfg.estimator,
        activity=activity,
        n_boot=cfg.n_boot,
        seed=cfg.seed,
        prompt_len=cfg.prompt_len,
    )
    floor_file = cfg.floor_file if cfg.device == "cuda" else None  # no launch floor on a CPU
    anatomy = None
    if raw["anatomy_trace"]:
        anatomy = anatomy_of(run.path / raw["anatomy_trace"], floor_file, n2_trace)
    from hostgap.capture.protocol.energy_run import energy_results

    out = build_results(
        schema_version=RESULTS_SCHEMA_VERSION,
        run_id=run_id,
        cfg=cfg,
        arch=arch,
        diff=diff,
        anatomy=anatomy,
        describe=describe,
        raw=raw,
        run_dir=str(run.path),
        build_s=build_s,
    )
    out["energy"] = energy_results(raw, cfg, diff)
    return out
