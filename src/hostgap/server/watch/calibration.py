"""``watch --calibration RUN``: find the profiled steps of a run and fit the step model.

RUN is, first that applies:

- a JSON file: ``hostgap steps --json`` output or ``hostgap attach --json`` output (an object
  with ``steps``), a plain list of step objects, or a saved :class:`Calibration` (``calibration``);
- a run directory holding ``results.json`` (an attach run: its ``steps``) or ``steps.json``;
- a run id (or unique prefix) in the runs database (``--db``) whose results carry ``steps``.

Several RUNs may be given (profiles at different loads): their decode steps are fitted together,
which is what lets the GPU-time line follow the batch rather than assume it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from hostgap.errors import HostgapError
from hostgap.server.watch.estimate import Calibration, fit_calibration


def steps_of(doc: object) -> list[dict] | None:
    """The step objects of a results/steps/attach document, or None when it has none."""
    if isinstance(doc, list) and all(isinstance(s, dict) for s in doc):
        return list(doc)
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("steps"), list):
        return list(doc["steps"])
    for key in ("analysis", "anatomy", "result"):
        inner = doc.get(key)
        if isinstance(inner, dict) and inner.get("kind") == "trace_set" and inner.get("ranks"):
            inner = inner["ranks"][0]  # rank 0's steps: every rank runs the same batch
        if isinstance(inner, dict) and isinstance(inner.get("steps"), list):
            return list(inner["steps"])
    if isinstance(doc.get("steps_decode"), list):  # a measured or attached run's decode steps
        return list(doc["steps_decode"])
    return None


def _read(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise HostgapError(str(path), f"cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise HostgapError(str(path), f"not valid JSON ({exc})") from None


def _from_db(ref: str, db: str | None) -> tuple[object, str] | None:
    from hostgap.store.database import RunsDB, default_path

    path = Path(db) if db else default_path()
    if not path.exists():
        return None
    with RunsDB(path) as runs:
        doc = runs.get(ref)
        if doc is None:
            matches = [r["run_id"] for r in runs.rows() if str(r["run_id"]).startswith(ref)]
            if len(matches) > 1:
                raise HostgapError(ref, f"run id prefix matches {len(matches)} runs; give more of it")
            doc = runs.get(matches[0]) if matches else None
    if doc is None:
        return None
    run_dir = doc.get("run_dir")
    if steps_of(doc) is None and run_dir and (Path(run_dir) / "steps.json").exists():
        return _read(Path(run_dir) / "steps.json"), str(doc.get("run_id", ref))
    return doc, str(doc.get("run_id", ref))


def _document(ref: str, db: str | None) -> tuple[object, str]:
    p = Path(ref)
    if p.is_dir():
        for name in ("results.json", "steps.json"):
            if (p / name).exists():
                doc = _read(p / name)
                if steps_of(doc) is not None or isinstance(doc, dict) and "calibration" in doc:
                    return doc, str(p)
        raise HostgapError(ref, "run directory without steps (results.json or steps.json with a 'steps' list)")
    if p.is_file():
        return _read(p), str(p)
    found = _from_db(ref, db)
    if found is None:
        raise HostgapError(ref, "not a file, a run directory or a run id in the runs database")
    return found


def read_run(ref: str, db: str | None = None) -> tuple[object, str]:
    """The document RUN names (a file, a run directory, a run id) and where it came from."""
    return _document(ref, db)


def load_band(ref: str, db: str | None = None):
    """The anomaly band fitted on the intervals of the watch RUN names (a stored watch: its run
    id, directory or results.json; or a ``watch --json`` document), which the operator vouches
    were fault-free (docs/watch.md, "Anomalies"); HostgapError (exit 2) otherwise."""
    from hostgap.server.watch.anomaly import fit_band

    p = Path(ref)
    if p.is_dir():
        if not (p / "results.json").exists():
            raise HostgapError(ref, "run directory without results.json: not a stored watch")
        doc, source = _read(p / "results.json"), str(p)
    elif p.is_file():
        doc, source = _read(p), str(p)
    else:
        found = _from_db(ref, db)
        if found is None:
            raise HostgapError(ref, "not a file, a run directory or a run id in the runs database")
        doc, source = found
    if not isinstance(doc, dict):
        raise HostgapError(ref, "not a watch: a stored watch or watch --json's document")
    w = doc["watch"] if isinstance(doc.get("watch"), dict) else doc
    rows = w.get("intervals")
    if not isinstance(rows, list):
        raise HostgapError(ref, "not a watch: no watched intervals")
    return fit_band(rows, str(doc.get("run_id") or source))


def load_calibration(refs: Sequence[str], db: str | None = None) -> Calibration:
    """The calibration of ``refs`` (see the module docstring); HostgapError (exit 2) when a RUN
    cannot be read or holds too few usable decode steps."""
    steps: list[dict] = []
    sources: list[str] = []
    activity: str | None = None
    for ref in refs:
        doc, source = _document(ref, db)
        if isinstance(doc, dict) and isinstance(doc.get("calibration"), dict) and len(refs) == 1:
            try:
                return Calibration.from_dict(doc["calibration"])
            except (TypeError, KeyError) as exc:
                raise HostgapError(ref, f"not a hostgap calibration ({exc})") from None
        found = steps_of(doc)
        if not found:
            raise HostgapError(
                ref,
                "holds no per-step table ('steps'); give an attach run, a run directory "
                "or `hostgap steps --json` output",
            )
        steps.extend(found)
        sources.append(source)
        if isinstance(doc, dict):
            activity = activity or doc.get("activity") or (doc.get("anatomy") or {}).get("activity")
    try:
        return fit_calibration(steps, ", ".join(sources), activity)
    except ValueError as exc:
        raise HostgapError(", ".join(refs), f"cannot calibrate: {exc}") from None
