"""``hostgap sweep``'s cells: planned from the grid options or a cells file, and measured into
the runs database here (:func:`hostgap.capture.protocol.sweep.run_sweep`) or as Ray tasks
(:func:`hostgap.capture.protocol.ray_backend.run_sweep_ray`)."""

from __future__ import annotations

from hostgap.capture.protocol.orchestrate import MeasureConfig
from hostgap.capture.protocol.sweep import CellProgress, Eta, SweepOutcome, cells_from_file, grid, run_sweep
from hostgap.errors import HostgapError


def plan(
    base: MeasureConfig,
    presets: tuple[str, ...] | None = None,
    batches: tuple[int, ...] | None = None,
    contexts: tuple[int, ...] | None = None,
    modes: tuple[str, ...] | None = None,
    engines: tuple[str, ...] | None = None,
    cells: str | None = None,
) -> list[MeasureConfig]:
    """``hostgap sweep``'s cells: the ``cells`` file's, else the grid of the others."""
    from hostgap.capture.protocol.engine import MODES

    for m in modes or ():
        if m not in MODES:
            raise HostgapError(f"--mode {m}", f"unknown mode; use {', '.join(MODES)}")
    if cells:
        return cells_from_file(base, cells)
    return grid(base, presets, batches, contexts, modes, engines)


def run_grid(
    cells: list[MeasureConfig],
    db: str | None = None,
    *,
    backend: str = "local",
    address: str | None = None,
    ray_retries: int = 2,
    on_cell: CellProgress | None = None,
    progress=None,
) -> tuple[SweepOutcome, str]:
    """Measure ``cells`` into the runs database ``db`` (here one after another, sharing built
    models, or as Ray tasks); (the outcome, the database's path)."""
    from hostgap.store.database import RunsDB

    model_cache: dict = {}
    kw = lambda cfg: {"model_cache": model_cache} if cfg.engine == "hf" else None  # noqa: E731
    with RunsDB(db) as rdb:
        if backend == "ray":  # cells run on the workers: no token bar here
            from hostgap.capture.protocol.ray_backend import run_sweep_ray

            outcome = run_sweep_ray(cells, rdb, address=address, retries=ray_retries, on_cell=on_cell)
        else:
            outcome = run_sweep(cells, rdb, on_cell=on_cell, progress=progress, engine_kw_for=kw)
        return outcome, str(rdb.path)


def base_config(opts: dict, sweep: tuple[int, ...] | None = None) -> MeasureConfig:
    """The settings every cell shares, from ``hostgap sweep``'s options (named as the command names them)."""
    return MeasureConfig(
        preset=opts.get("preset"),
        model_path=opts.get("model"),
        engine=opts.get("engine") or "hf",
        device=opts["device"],
        mode=opts["mode"],
        batch=opts["batch"],
        prompt_len=opts["prompt_len"],
        dtype=opts["dtype"],
        threads=opts["threads"],
        n1=opts["n1"],
        n2=opts["n2"],
        repeats=opts["repeats"],
        traced_repeats=opts["traced_repeats"],
        sweep=sweep,
        warmup=opts["warmup"],
        estimator=opts["estimator"],
        seed=opts["seed"],
        stacks=opts.get("stacks", False),
        keep_traces=opts["keep_traces"],
        trace_gzip=opts["gzip"],
        floor_file=opts.get("floor_file"),
        out=opts.get("out_old") or opts["out"],
        kv_cache_gib=opts.get("kv_cache_gib"),
        retries=opts.get("retries", 2),
        budget=opts.get("budget"),
        tp=1 if opts.get("tp") is None else opts["tp"],
    )


__all__ = ["Eta", "base_config", "plan", "run_grid"]
