"""Measuring in the Python API: :func:`measure` (``hostgap measure``) and :func:`presets`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cached_property
from typing import IO, TYPE_CHECKING

from hostgap.api._results import Result, arrow_table, std_json
from hostgap.errors import HostgapError

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

Progress = Callable[[str, int, int], None]
"""``progress(phase, done_tokens, total_tokens)``."""


class RunResult(Result):
    """A stored run's results (``results.json``): measured, attached or watched. ``to_dict()`` is
    what ``hostgap show RUN --json`` prints."""

    kind = "run"

    def __init__(self, doc: dict):
        from hostgap.api._levers import with_levers

        super().__init__(with_levers(doc))

    @cached_property
    def levers(self) -> pa.Table:
        """The levers ranked by predicted gain (docs/advise.md), as Arrow (a watched run: its intervals'
        levers)."""
        from hostgap.api._levers import levers_table

        return levers_table(self._doc.get("levers") or [])

    @property
    def run_id(self) -> str | None:
        return self._doc.get("run_id")

    @property
    def run_dir(self) -> str | None:
        return self._doc.get("run_dir")

    @property
    def run_kind(self) -> str:
        """``measured``, ``attached`` or ``watched``."""
        from hostgap.store.save import run_kind

        return run_kind(self._doc)

    @property
    def valid(self) -> bool:
        from hostgap.checks import is_valid

        return is_valid(self._doc)

    @property
    def invalid_reasons(self) -> list[str]:
        return list(self._doc.get("invalid_reasons") or [])

    @property
    def verdict(self) -> dict:
        """The verdict (``verdict``: host-bound, balanced, device-bound, invalid, ...) and its basis."""
        v = self._doc.get("verdict")
        return v if isinstance(v, dict) else {"verdict": v}

    def to_json(self) -> str:
        return std_json(self._doc)

    def _console_for(self, file: IO[str] | None) -> Console:
        from hostgap.report.terminal import run_console

        return run_console(file)

    def print(self, file: IO[str] | None = None) -> None:
        con = self._console_for(file)
        self._render(con)
        con.file.flush()

    def _render(self, con: Console) -> None:
        from hostgap.report.run_view import render_run

        render_run(self._doc, con)

    def _repr_html_(self) -> str:
        from hostgap.report.notebook import result_html

        return result_html(self.run_kind, self._doc)

    def _summary(self) -> str:
        return f"{self.run_id} ({self.run_kind}), verdict {self.verdict.get('verdict')}"


class MeasureResult(RunResult):
    """One measurement (``hostgap measure``): ``to_dict()`` is its ``results.json`` and what
    ``measure --json`` prints.

    Named parts: ``split`` (per decode step: wall, device-active, host-exposed, host fraction,
    each with its 95 % interval), ``checks`` (the validity checks as rows), ``verdict``,
    ``valid``; tables: ``steps`` (the traced run's decode steps) and ``sweep`` (the differencing
    points per token count)."""

    kind = "measure"

    @property
    def split(self) -> dict:
        d = self._doc.get("differencing") or {}
        ci = d.get("ci") or {}
        keys = ("t_step_ns", "g_step_ns", "h_step_ns", "host_fraction")
        return {
            **{k: d.get(k) for k in keys},
            "ci": {k: ci.get(k) for k in keys if k in ci},
            "activity": d.get("activity"),
            "basis": d.get("basis"),
        }

    @property
    def checks(self) -> list[dict]:
        from hostgap.report.run_rows import check_rows

        return [{"check": a, "value": b, "basis": c} for a, b, c in check_rows(self._doc)]

    @cached_property
    def steps(self) -> pa.Table:
        from hostgap.report.terminal import step_csv_rows

        steps = self._doc.get("steps_decode") or []
        activity = (self._doc.get("differencing") or {}).get("activity") or "gpu"
        return arrow_table(step_csv_rows({"steps": steps, "activity": activity}))

    @cached_property
    def sweep(self) -> pa.Table:
        """Per token count N: the untraced wall and traced device-active time the fitted lines use."""
        import pyarrow as pa

        from hostgap.report.inputs import sweep_points
        from hostgap.store.rundir import read_json

        if not self.run_dir:
            raise HostgapError("sweep", "the run has no run directory")
        from pathlib import Path

        pts = sweep_points(self._doc, read_json(Path(self.run_dir) / "timings.json"))
        return pa.table({"n": pts["n"], "wall_ns": pts["wall_ns"], "device_ns": pts["gpu_ns"]})


class MeasureResults(Result):
    """Two engines measured side by side (``--engine hf,vllm``): one :class:`MeasureResult` each and
    their difference; ``to_dict()`` is the list ``measure --json`` prints."""

    kind = "measure_pair"

    def __init__(self, results: list[MeasureResult]):
        super().__init__([r.to_dict() for r in results])
        self.results = results

    def __iter__(self):
        return iter(self.results)

    def __getitem__(self, i: int) -> MeasureResult:
        return self.results[i]

    @property
    def difference(self) -> dict:
        return self._doc[0].get("engine_difference") or {}

    @property
    def valid(self) -> bool:
        """Every engine's measurement valid, and their difference a result (each with an
        interval): otherwise ``measure`` exits with status 3 (docs/measure.md, "Two engines")."""
        return all(r.valid for r in self.results) and self.difference.get("valid", True) is not False

    def to_json(self) -> str:
        return std_json(self._doc)

    def print(self, file: IO[str] | None = None) -> None:
        from hostgap.report.terminal import run_console

        con = run_console(file)
        self._render(con)
        con.file.flush()

    def _render(self, con: Console) -> None:
        from hostgap.report.run_view import render_engine_difference, render_run

        for r in self._doc:
            render_run(r, con)
        render_engine_difference(self.difference, con)

    def _summary(self) -> str:
        return " vs ".join(f"{r.run_id}" for r in self.results)


def measure(
    preset: str | None = None,
    *,
    model: str | None = None,
    engine: str | Sequence[str] = "hf",
    device: str = "auto",
    mode: str = "eager",
    batch: int = 1,
    prompt_len: int = 128,
    dtype: str = "auto",
    threads: int = 1,
    n1: int = 1,
    n2: int | None = None,
    repeats: int = 5,
    traced_repeats: int = 2,
    sweep: Sequence[int] | None = None,
    warmup: int = 2,
    estimator: str = "theil-sen",
    retries: int = 2,
    budget: float | None = None,
    seed: int = 0,
    keep_traces: str = "ends",
    gzip: bool = True,
    floor_file: str | None = None,
    kv_cache_gib: float | None = None,
    tp: int = 1,
    stacks: bool = False,
    output: str = "runs",
    db: str | None = None,
    store: bool = True,
    progress: Progress | None = None,
    argv: Sequence[str] | None = None,
) -> MeasureResult | MeasureResults:
    """Measure a real decode workload as ``hostgap measure`` does (same options and defaults;
    ``store=False`` is ``--no-db``): the differencing split with its checks, the traced anatomy
    and a verdict. Writes the run directory under ``output`` and records it in the runs
    database. ``engine="hf,vllm"`` (or a list of two) measures both side by side."""
    from hostgap.capture.protocol import orchestrate as protocol
    from hostgap.capture.protocol.engine import load_engine

    engines = tuple(x.strip() for x in engine.split(",") if x.strip()) if isinstance(engine, str) else tuple(engine)
    engines = engines or ("hf",)
    if len(engines) > 2 or len(set(engines)) != len(engines):
        raise HostgapError("--engine", f"one engine or two different ones (hf,vllm), got {','.join(engines)!r}")
    base = protocol.MeasureConfig(
        preset=preset,
        model_path=model,
        engine=engines[0],
        device=device,
        mode=mode,
        batch=batch,
        prompt_len=prompt_len,
        dtype=dtype,
        threads=threads,
        n1=n1,
        n2=n2,
        repeats=repeats,
        traced_repeats=traced_repeats,
        sweep=tuple(sweep) if sweep else None,
        warmup=warmup,
        estimator=estimator,
        seed=seed,
        stacks=stacks,
        keep_traces=keep_traces,
        trace_gzip=gzip,
        floor_file=floor_file,
        out=output,
        kv_cache_gib=kv_cache_gib,
        retries=retries,
        budget=budget,
        tp=tp,
        db=db,
        record=store,
    )
    cfgs = [replace(base, engine=name) for name in engines]
    for cfg in cfgs:  # every engine must load before the first one runs
        protocol.validate(cfg)
        load_engine(cfg.engine)
    args = list(argv) if argv is not None else sys.argv[1:]
    if len(cfgs) == 1:
        return MeasureResult(protocol.measure(cfgs[0], progress=progress, argv=args))
    return MeasureResults([MeasureResult(r) for r in protocol.measure_together(cfgs, progress=progress, argv=args)])


class PresetsResult(Result):
    """The workload presets (``hostgap presets``): exact parameter counts and weight bytes."""

    kind = "presets"

    @cached_property
    def table(self) -> pa.Table:
        return arrow_table(self._doc)

    def to_json(self) -> str:
        import json

        return json.dumps(self._doc, indent=2)

    def csv_rows(self) -> list[dict]:
        return self._doc

    def _render(self, con: Console) -> None:
        from hostgap.report.run_view import render_presets

        render_presets(self._doc, con)


def presets(dtype: str = "bfloat16") -> PresetsResult:
    """Every workload preset with its parameter count and weight bytes in ``dtype`` (nothing is built)."""
    from hostgap.model.arch import preset_rows

    return PresetsResult(preset_rows(dtype))
