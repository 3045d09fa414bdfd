"""The regime map (``hostgap regimes``): measured cells (or the published ones) placed by host
fraction on the verdict's thresholds, the boundaries where a setting crosses into host-bound,
the runs left out as invalid measurements and those measured on a busy machine; with
``predict``, the model's host fraction beside each cell. Also the published figures' document
(``regimes --published``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN, classify
from hostgap.checks import reasons
from hostgap.errors import HostgapError
from hostgap.model import cell as cell_model
from hostgap.model.fitting import measured as fitting
from hostgap.model.fitting.measured import Boundary, RegimeCell
from hostgap.model.whatif.registry import build_setup
from hostgap.version import SCHEMA_VERSION


@dataclass(frozen=True)
class RegimeMap:
    """Cells, boundaries, ``invalid`` ({run_id: reasons} left out) and ``busy`` (run ids
    measured on a busy machine); ``predicted``: each cell carries the model's host fraction."""

    cells: tuple[RegimeCell, ...]
    boundaries: tuple[Boundary, ...]
    invalid: dict[str, list[str]]
    busy: frozenset[str]
    predicted: bool

    def to_dict(self) -> dict:
        """``regimes --json``."""
        return {
            "schema_version": SCHEMA_VERSION,
            "thresholds": {"host_bound_min": HOST_BOUND_MIN, "device_bound_max": DEVICE_BOUND_MAX},
            "cells": [dict(c.__dict__, contended=c.run_id in self.busy) for c in self.cells],
            "boundaries": [b.__dict__ for b in self.boundaries],
            "invalid": [{"run_id": k, "reasons": v} for k, v in self.invalid.items()],
        }


def regime_map(
    results: Sequence[str | Path] = (),
    db: str | None = None,
    *,
    paper_cells: bool = False,
    predict: bool = False,
    model: str | Path | None = None,
) -> RegimeMap:
    """The map of the measured runs in ``results`` files and the runs database ``db`` (hostgap's
    own where neither is given), or of the published cells shipped with hostgap
    (``paper_cells``). Invalid measurements are left out; ``predict`` adds the model's host
    fraction (``model``: a ``hostgap fit`` JSON, default the shipped defaults)."""
    invalid: dict[str, list[str]] = {}
    busy: set[str] = set()
    if paper_cells:
        from hostgap.model.fitting import calibrate

        cells = calibrate.regime_cells()
    else:
        docs = fitting.load_results(results, db if (results or db) else fitting.default_db())
        invalid, busy = validity(docs)
        cells = fitting.regime_cells([d for d in docs if str(d.get("run_id", "")) not in invalid])
    if predict:
        cells = [predicted(c, model) for c in cells]
    if not cells:
        raise HostgapError("--results", "no measured cell with a host fraction, batch and prompt length")
    return RegimeMap(tuple(cells), tuple(fitting.boundaries(cells)), invalid, frozenset(busy), predict)


def validity(docs: list[dict]) -> tuple[dict[str, list[str]], set[str]]:
    """({run_id: reasons} of invalid measurements, {run_id} measured on a busy machine); a
    result from before validity existed is judged by its numbers."""
    invalid: dict[str, list[str]] = {}
    busy: set[str] = set()
    for d in docs:
        rid, diff = str(d.get("run_id", "")), d.get("differencing") or {}
        why = list(d.get("invalid_reasons") or []) if "valid" in d else reasons(diff)
        if ("valid" in d and not d["valid"]) or why:
            invalid[rid] = why or ["checks failed"]
        if diff.get("contended"):
            busy.add(rid)
    return invalid, busy


def predicted(c: RegimeCell, model: str | Path | None = None) -> RegimeCell:
    """``c`` with the model's host fraction for the same cell (NaN where it cannot be predicted:
    an unknown model, device or cell, or a model file that cannot be read)."""
    try:
        setup, _ = build_setup(
            c.model,
            device=c.device,
            batch=c.batch,
            context=max(c.context or c.prompt_len, 1),
            tp=c.tp,
            dtype=c.dtype,
            mode=c.mode if c.mode in ("eager", "graph") else "eager",
            engine=c.engine if c.engine in ("vllm", "hf", "hf-cb") else "vllm",
            model=model,
        )
    except HostgapError:
        return c
    f = cell_model.predict(setup).host_fraction
    return replace(c, predicted_host_fraction=f, predicted_regime=classify(f))


def published_document() -> dict:
    """``regimes --published --json``: every published figure placed on the model, and the
    graph-launch fit."""
    from hostgap.model import energy_paper, published

    return {
        "schema_version": SCHEMA_VERSION,
        "figures": published.table(),
        "graph_launch": published.graph_fit(),
        "energy": energy_paper.document(),
    }
