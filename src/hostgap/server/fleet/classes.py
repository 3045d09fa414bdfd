"""One calibration per class of servers: (engine, model, hardware).

Servers of one class run the same engine on the same model on the same hardware, so one step model
(:class:`~hostgap.server.watch.estimate.Calibration`) fitted on attach runs of any of them
describes them all. ``class_calibrations`` groups the given runs (or every attach run of a runs
database) by class and fits each class's decode steps together; the class's ``name`` (its runs'
ids, newest last) is the ``calibration`` label every series computed with it carries, so which
calibration an instance uses is said by its own series.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hostgap.errors import HostgapError
from hostgap.server.watch.calibration import read_run, steps_of
from hostgap.server.watch.estimate import Calibration, fit_calibration


@dataclass(frozen=True)
class ClassCalibration:
    """A class of servers and the step model all its instances are read with."""

    engine: str
    model: str
    hardware: str | None
    name: str
    calibration: Calibration
    profiles: tuple[tuple[str, tuple[dict, ...]], ...] = field(default=(), compare=False, repr=False)
    """Each fitted run's name and its steps (none for a saved calibration): what a renewal at a
    new load is fitted together with (:mod:`hostgap.server.fleet.renew`)."""

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.engine, self.model, self.hardware)

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "model": self.model,
            "hardware": self.hardware,
            "calibration": self.name,
            "steps": self.calibration.steps,
            "batches": list(self.calibration.batches),
            "block_rel_err": self.calibration.block_rel_err,
        }


def _run_name(doc: object, source: str) -> str:
    run_id = doc.get("run_id") if isinstance(doc, dict) else None
    return str(run_id) if run_id else Path(source).stem or source


def _class_of(doc: object, ref: str) -> tuple[str, str, str | None]:
    if not isinstance(doc, dict):
        raise HostgapError(ref, "a bare step list names no engine or model: give an attach run")
    engine, model = doc.get("engine"), doc.get("model")
    if not engine or not model:
        raise HostgapError(ref, "names no engine and model ('engine', 'model'): give an attach run")
    hardware = doc.get("hardware") or doc.get("device")
    return str(engine), str(model), str(hardware) if hardware else None


def class_calibrations(refs: Sequence[str] = (), db: str | None = None) -> list[ClassCalibration]:
    """The classes of ``refs`` (attach runs, run directories, saved calibrations with their
    engine and model) or, with no refs, of every attach run in the runs database ``db``; each
    class's runs fitted together. HostgapError when a run names no class or a class cannot be
    fitted."""
    if not refs:
        refs = _attach_runs(db)
        if not refs:
            raise HostgapError(db or "runs database", "holds no attach run to calibrate a class on")
    grouped: dict[tuple[str, str, str | None], list[tuple[str, object, str]]] = {}
    for ref in refs:
        doc, source = read_run(ref, db)
        grouped.setdefault(_class_of(doc, ref), []).append((ref, doc, source))
    out = []
    for key, members in sorted(grouped.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        names = [_run_name(doc, source) for _, doc, source in members]
        cal = _fit(members)
        saved = any(isinstance(doc, dict) and "calibration" in doc for _, doc, _ in members)
        found = [() if saved else tuple(steps_of(doc) or ()) for _, doc, _ in members]
        profiles = () if saved else tuple(zip(names, found, strict=True))
        out.append(ClassCalibration(*key, name="+".join(names), calibration=cal, profiles=profiles))
    return out


def _fit(members: list[tuple[str, object, str]]) -> Calibration:
    refs = ", ".join(ref for ref, _, _ in members)
    saved = [doc["calibration"] for _, doc, _ in members if isinstance(doc, dict) and "calibration" in doc]
    if saved:
        if len(members) > 1:
            raise HostgapError(refs, "a saved calibration is a class's whole calibration: give it alone")
        try:
            return Calibration.from_dict(saved[0])
        except (TypeError, KeyError) as exc:
            raise HostgapError(refs, f"not a hostgap calibration ({exc})") from None
    steps: list[dict] = []
    for ref, doc, _ in members:
        found = steps_of(doc)
        if not found:
            raise HostgapError(ref, "holds no per-step table ('steps'): give an attach run")
        steps.extend(found)
    try:
        return fit_calibration(steps, refs)
    except ValueError as exc:
        raise HostgapError(refs, f"cannot calibrate: {exc}") from None


def _attach_runs(db: str | None) -> list[str]:
    from hostgap.store.database import RunsDB, default_path

    path = Path(db) if db else default_path()
    if not path.exists():
        raise HostgapError(str(path), "no runs database there")
    with RunsDB(path) as runs:
        return [str(r["run_id"]) for r in reversed(runs.rows(mode="attach"))]


LABEL_VALUE = re.compile(r'["\\\n]')


def quoted(value: str) -> str:
    """A PromQL label value in double quotes (backslash, quote and newline escaped)."""
    return '"' + LABEL_VALUE.sub(lambda m: {"\n": "\\n"}.get(m.group(), "\\" + m.group()), value) + '"'
