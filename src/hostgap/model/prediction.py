"""One decode step of a preset predicted (``hostgap predict``, :func:`hostgap.predict`): the setup
it rests on and why (``basis``), the step model's device, collective and host time, the what-ifs
beside it, whether the cell fits in memory, and the measured runs of the same cell with the
prediction's error. :func:`predict_cell` builds it; ``to_dict()`` is ``predict --json``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model import cell as cell_model
from hostgap.model.cell import MemoryCheck, Setup
from hostgap.model.fitting import measured as fitting
from hostgap.model.fitting.measured import MeasuredCell
from hostgap.model.stepmodel import StepPrediction
from hostgap.model.whatif import registry as scenarios
from hostgap.model.whatif.change import WhatIf
from hostgap.version import SCHEMA_VERSION


@dataclass(frozen=True)
class CellPrediction:
    """A prediction with everything ``predict`` prints: ``step`` (the cell's), ``what_ifs`` (each
    with the measured runs of its own cell in ``what_if_measured``, same order), ``measured``
    (runs of this cell), ``memory`` (weights + KV cache against the device) and ``basis``."""

    preset: str
    setup: Setup
    basis: str
    step: StepPrediction
    what_ifs: tuple[WhatIf, ...]
    memory: MemoryCheck
    measured: tuple[MeasuredCell, ...]
    what_if_measured: tuple[tuple[MeasuredCell, ...], ...]
    model: str | None = None  # the fitted model file given, if any

    @property
    def on_defaults(self) -> bool:
        """True where the prediction rests on hostgap's defaults (no model, or a model without
        a group for this cell)."""
        return not self.model or "default" in self.basis

    def to_dict(self) -> dict:
        s = self.setup
        return {
            "schema_version": SCHEMA_VERSION,
            "preset": self.preset,
            "device": s.device.name,
            "cell": s.cell.to_dict(),
            "mode": s.mode,
            "basis": self.basis,
            "prediction": self.step.to_dict(),
            "memory": self.memory.to_dict(),
            "measured": [measured_dict(c, self.step) for c in self.measured],
            "what_ifs": [
                {**w.to_dict(), "measured": [measured_dict(c, w.scenario) for c in ms]}
                for w, ms in zip(self.what_ifs, self.what_if_measured)
            ],
        }


def error_total(p: StepPrediction, c: MeasuredCell) -> float:
    """Relative error of the predicted step against the measured one: (predicted - measured) / measured."""
    return (p.total_ns - c.t_step_ns) / c.t_step_ns


def measured_dict(c: MeasuredCell, p: StepPrediction) -> dict:
    """A measured run beside prediction ``p``, as ``predict --json`` lists it."""
    return {
        "run_id": c.run_id,
        "t_step_ns": c.t_step_ns,
        "g_step_ns": c.g_step_ns,
        "h_step_ns": c.h_step_ns,
        "host_fraction": c.host_fraction,
        "error_total": error_total(p, c),
    }


def predict_cell(
    preset: str,
    *,
    batch: int = 1,
    context: int = 2048,
    tp: int = 1,
    dtype: str = "bfloat16",
    engine: str = "vllm",
    mode: str = "eager",
    device: str = "h100-sxm",
    device_file: str | Path | None = None,
    model: str | Path | None = None,
    kernels_per_step: float | None = None,
    what_ifs: Sequence[str] = (),
    results: Sequence[str | Path] = (),
    db: str | None = None,
    tp_form: str | None = None,
) -> CellPrediction:
    """Predict one decode step of ``preset`` (:func:`~hostgap.model.whatif.registry.build_setup`), run
    each what-if on it, and place the measured runs of the same cell (``results`` files and the
    runs database ``db``) beside it. Measured runs that count their kernels set the kernels per
    step (their median) unless ``kernels_per_step`` is given. Every what-if is parsed before any
    work, so a misspelt one is the first error."""
    setup, basis = scenarios.build_setup(
        preset, device=device, batch=batch, context=context, tp=tp, dtype=dtype, mode=mode, engine=engine,
        device_file=device_file, model=model, kernels_per_step=kernels_per_step,
    )  # fmt: skip
    if tp_form:
        setup = replace(setup, tp_form=tp_form)
    for spec in what_ifs:
        scenarios.parse(spec)
    step, wis = _run(setup, what_ifs)
    docs = fitting.load_results(results, db) if (results or db) else []
    loop = measured_loop(docs, setup) if setup.cell.engine == "hf-cb" else None
    if loop is not None:
        ns, ids = loop
        host = replace(setup.host, serial_ns=ns, per_seq_ns=0.0, source=f"serial part measured ({', '.join(ids)})")
        setup = replace(setup, host=host)
        basis += (
            f"; serial part {ns / 1e6:.3f} ms per step: the continuous-batching loop's work between forward "
            f"passes, measured ({len(ids)} run(s) at batch {setup.cell.batch}: {', '.join(ids)})"
        )
        step, wis = _run(setup, what_ifs)
    measured = measured_match(docs, setup, mode, dtype)
    ks = [c.k_step for c in measured if c.k_step == c.k_step and c.k_step > 0]
    if kernels_per_step is None and ks:
        setup = replace(setup, kernels_per_step=float(np.median(ks)))
        basis += f"; kernels per step {np.median(ks):g} from {len(ks)} measured run(s)"
        step, wis = _run(setup, what_ifs)
    return CellPrediction(
        preset,
        setup,
        basis,
        step,
        wis,
        cell_model.memory_check(setup.arch, setup.cell, setup.device),
        tuple(measured),
        tuple(tuple(_scenario_measured(w, docs, setup, mode, dtype)) for w in wis),
        os.fspath(model) if model else None,
    )


def _run(setup: Setup, what_ifs: Sequence[str]) -> tuple[StepPrediction, tuple[WhatIf, ...]]:
    return cell_model.predict(setup), tuple(scenarios.run(setup, s) for s in what_ifs)


def measured_loop(docs: list[dict], setup: Setup) -> tuple[float, list[str]] | None:
    """The serial part of an ``hf-cb`` step measured by ``hostgap measure --engine hf-cb``: the
    median over the given runs of the same model and batch (any device: it is host work) of
    ``engine_facts.cb_split.between_ns``, the wall between forward passes that the device waits
    through in the synchronous loop; None where no such run is given."""
    values, ids = [], []
    for d in docs:
        split = (d.get("engine_facts") or {}).get("cb_split") or {}
        between = split.get("between_ns")
        c = fitting.cell_from_results(d, str(d.get("run_id", "")))
        if not isinstance(between, (int, float)) or not between >= 0 or c.engine != "hf-cb":
            continue
        if c.batch != setup.cell.batch or c.arch is None or c.arch.name != setup.arch.name:
            continue
        values.append(float(between))
        ids.append(str(d.get("run_id", "")))
    return (float(np.median(values)), ids) if values else None


def measured_match(docs: list[dict], setup: Setup, mode: str, dtype: str) -> list[MeasuredCell]:
    """The usable runs of ``setup``'s cell: same model, batch, TP degree, mode, engine, dtype
    and device, and a KV length within 5 % (at least 64 tokens). A run's unset mode, engine
    and dtype count as eager, vLLM and ``dtype``."""
    out = []
    for d in docs:
        c = fitting.cell_from_results(d, str(d.get("run_id", "")))
        if (
            not c.usable
            or c.arch is None
            or c.arch.name != setup.arch.name
            or c.batch != setup.cell.batch
            or c.tp != setup.cell.tp
        ):
            continue
        if (c.mode or "eager") != mode or (c.engine or "vllm") != setup.cell.engine or (c.dtype or dtype) != dtype:
            continue
        try:
            if fitting.device_for(c).name != setup.device.name:
                continue
        except HostgapError:
            continue
        ctx = c.context or 0
        if abs(ctx - setup.cell.context) <= max(64, 0.05 * setup.cell.context):
            out.append(c)
    return out


def _scenario_measured(w: WhatIf, docs: list[dict], setup: Setup, mode: str, dtype: str) -> list[MeasuredCell]:
    """Measured runs of the what-if's own cell (graph mode; fp8 weights), when given."""
    if w.name == "graphs" and mode != "graph":
        return measured_match(docs, setup, "graph", dtype)
    if w.name == "fp8" and dtype != "fp8":
        return measured_match(docs, setup, mode, "fp8")
    return []
