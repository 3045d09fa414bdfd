"""Levers ranked by predicted gain in the Python API: :func:`advise` and :class:`AdviseResult`
(``hostgap advise``, docs/advise.md)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import hostgap
from hostgap.api._levers import levers_table
from hostgap.api._results import Result
from hostgap.errors import HostgapError

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console


class AdviseResult(Result):
    """One input's levers: ``to_dict()`` is ``hostgap advise --json`` (``schema_version``,
    ``input``, ``today``, ``notes``, ``levers``); ``levers`` the rows as Arrow, ranked."""

    kind = "advise"

    @cached_property
    def levers(self) -> pa.Table:
        return levers_table(self._doc["levers"])

    def csv_rows(self) -> list[dict]:
        from hostgap.report.advise_view import csv_rows

        return csv_rows(self._doc)

    def _render(self, con: Console) -> None:
        from hostgap.report.advise_view import render

        render(self._doc, con)

    def _summary(self) -> str:
        top = next((r for r in self._doc["levers"] if r["applicable"]), None)
        return f"{self._doc['input']}: top lever {top['lever'] if top else 'none'}"


class AdviseResults(Result):
    """Several inputs' levers: ``to_dict()`` is the list ``advise --json`` prints for them."""

    kind = "advise"

    def __init__(self, results: list[AdviseResult]):
        super().__init__([r.to_dict() for r in results])
        self.results = results

    @cached_property
    def levers(self) -> pa.Table:
        return levers_table([{"input": d["input"], **r} for d in self._doc for r in d["levers"]])

    def csv_rows(self) -> list[dict]:
        return [row for r in self.results for row in r.csv_rows()]

    def _render(self, con: Console) -> None:
        for r in self.results:
            r._render(con)


def _document(arg: str, cache: bool) -> dict:
    """The document an input stands for: a stored run's results (run directory, results JSON, run
    id), else a trace or rank set analysed."""
    from pathlib import Path

    from hostgap.store.database import find_run

    p = Path(arg)
    if (p.is_dir() and (p / "results.json").is_file()) or (p.is_file() and _is_results(p)) or not p.exists():
        return find_run(arg, None)
    from hostgap.api._traces import analyze

    return analyze(arg, cache=cache).to_dict()


def _is_results(p) -> bool:
    """A run's results JSON (not a Kineto trace: those hold ``traceEvents``)."""
    if p.suffix != ".json" or p.stat().st_size > 64 << 20:
        return False
    import json

    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and "run_id" in doc and "traceEvents" not in doc


def advise_document(doc: dict, label: str, preset: str | None = None, gpu: str | None = None) -> dict:
    """``advise --json`` of one document (a trace's analysis or a run's results)."""
    from hostgap.model.levers.baseline import baseline
    from hostgap.model.levers.ranked import document

    out = document(baseline(doc, preset, gpu), gpu)
    return {"schema_version": hostgap.SCHEMA_VERSION, "input": label, **out}


def advise(
    inputs: str | os.PathLike | Sequence[str | os.PathLike] | Result | dict,
    *,
    preset: str | None = None,
    gpu: str | None = None,
    cache: bool = True,
) -> AdviseResult | AdviseResults:
    """The levers of each input, ranked by predicted gain (``hostgap advise``): a trace (Kineto
    or nsys), a rank directory, a run directory, ``results.json`` or run id of a measured,
    attached or watched run, or a result of this API. ``preset`` names the model's architecture
    where the input does not (needed by ``batch``, ``fp8``, ``tp``, ``spec``); ``gpu`` predicts for
    another GPU's spec. Bad input raises :class:`~hostgap.HostgapError`."""
    if preset is not None:
        from hostgap.model.arch import get_preset

        get_preset(preset)
    if gpu is not None:
        from hostgap.model.devices import find_device

        find_device(gpu)
    items: list[Any]
    if isinstance(inputs, (str, os.PathLike, Result, dict)):
        items = [inputs]
    else:
        items = list(inputs)
    if not items:
        raise HostgapError("INPUT", "give a trace, a rank directory, a run directory or a run id")
    out = []
    for it in items:
        if isinstance(it, Result):
            doc, label = it.to_dict(), getattr(it, "path", None) or it.kind
        elif isinstance(it, dict):
            doc, label = it, str(it.get("run_id") or it.get("trace") or "document")
        else:
            doc, label = _document(os.fspath(it), cache), os.fspath(it)
        if isinstance(doc, list):
            raise HostgapError(label, "several documents: advise on one trace or run at a time")
        out.append(AdviseResult(advise_document(doc, label, preset, gpu)))
    return out[0] if len(out) == 1 else AdviseResults(out)
