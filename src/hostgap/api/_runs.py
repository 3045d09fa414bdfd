"""Stored runs and their comparison in the Python API: :func:`runs`, :func:`run`,
:func:`compare` and :func:`write_report`."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import IO, TYPE_CHECKING

from hostgap.api._measure import MeasureResult, RunResult
from hostgap.api._results import Result, arrow_table
from hostgap.errors import HostgapError

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

    from hostgap.report.inputs import Input

Progress = Callable[[str], None]
Ref = str | os.PathLike | Result


class RunsTable(Result):
    """The runs database listed (``hostgap runs``), newest first: ``to_dict()`` is the list
    ``runs --json`` prints, ``table`` the same rows as Arrow; ``database`` the file read and
    ``total`` how many runs it holds."""

    kind = "runs"

    def __init__(self, rows: list[dict], database: str, total: int):
        super().__init__(rows)
        self.database, self.total = database, total

    @cached_property
    def table(self) -> pa.Table:
        return arrow_table(self._doc)

    def to_json(self) -> str:
        return json.dumps(self._doc, indent=2)

    def csv_rows(self) -> list[dict]:
        return self._doc

    def to_csv(self, file: IO[str] | None = None) -> None:
        import csv
        import sys

        if self._doc:
            w = csv.DictWriter(file or sys.stdout, fieldnames=list(self._doc[0]))
            w.writeheader()
            w.writerows(self._doc)

    def print(self, file: IO[str] | None = None) -> None:
        from hostgap.report.terminal import run_console

        con = run_console(file)
        self._render(con)
        con.file.flush()

    def _render(self, con: Console) -> None:
        from hostgap.report.run_view import render_runs

        render_runs(self._doc, con)

    def _summary(self) -> str:
        return f"{len(self._doc)} of {self.total} runs in {self.database}"


def runs(db: str | None = None, *, limit: int = 50, preset: str | None = None, device: str | None = None) -> RunsTable:
    """The newest ``limit`` runs of the runs database (``db``, else ``$HOSTGAP_DB``, else the
    default), optionally only one preset or device (``hostgap runs``)."""
    from hostgap.store.database import RunsDB

    with RunsDB(db) as d:
        rows = d.rows(limit=limit, preset=preset, device=device)
        total = d.count()
    return RunsTable(rows, str(d.path), total)


def run(ref: str | os.PathLike, db: str | None = None) -> RunResult:
    """One stored run by id (or unique prefix) in the runs database, or by its run directory or
    ``results.json``: measured runs as :class:`MeasureResult`, attached and watched ones as
    :class:`RunResult` (``to_dict()`` is ``hostgap show RUN --json``)."""
    from hostgap.store.database import find_run
    from hostgap.store.save import run_kind

    doc = find_run(os.fspath(ref), db)
    return MeasureResult(doc) if run_kind(doc) == "measured" else RunResult(doc)


class Comparison(Result):
    """Two runs or traces side by side (``hostgap compare A B``): ``to_dict()`` is its ``--json``;
    ``metrics`` the rows (A, B, B − A with its sign, absolute and relative, and for two
    measured runs the interval of the change); ``failed`` whether a ``fail_if`` condition held."""

    kind = "comparison"

    def __init__(self, doc: dict, inputs: tuple[Input, Input]):
        super().__init__(doc)
        self.inputs = inputs

    @property
    def failed(self) -> bool:
        return bool(self._doc["failed"])

    @property
    def held(self) -> list[str]:
        """The ``fail_if`` conditions that held."""
        return [r["condition"] for r in self._doc["fail_if"] if r["holds"]]

    @cached_property
    def metrics(self) -> pa.Table:
        return arrow_table(self._doc["metrics"])

    def csv_rows(self) -> list[dict]:
        from hostgap.report.compare import csv_rows

        return csv_rows(self._doc)

    def fail_lines(self) -> list[str]:
        from hostgap.report.compare import fail_lines

        return fail_lines(self._doc)

    @property
    def notes(self) -> list[tuple[str, str]]:
        """(input, note) for what either input lacks (a missing trace, timings, run directory)."""
        return [(i.source, n) for i in self.inputs for n in i.notes]

    def _render(self, con: Console) -> None:
        from hostgap.report.compare import render

        render(self._doc, con)

    def _summary(self) -> str:
        return f"{self._doc['a'].get('label')} vs {self._doc['b'].get('label')} ({self._doc['basis']})"


def _ref(x: Ref) -> str:
    """A run or trace reference: a path or id, or a result that names its run or trace."""
    if isinstance(x, Result):
        doc = x.to_dict()
        if isinstance(doc, dict):
            for key in ("run_dir", "trace"):
                if doc.get(key):
                    return str(doc[key])
        raise HostgapError(repr(x), "this result names no run directory or trace to compare")
    return os.fspath(x)


def compare(
    a: Ref,
    b: Ref,
    *,
    fail_if: str | None = None,
    outside_noise: bool = False,
    basis: str = "auto",
    step_marker: str | None = None,
    launch_floor_us: float | None = None,
    floor_file: str | None = None,
    db: str | None = None,
    progress: Progress | None = None,
) -> Comparison:
    """Compare B with the baseline A (runs by id or directory, results files, traces, or results of
    this API), as ``hostgap compare`` does; ``fail_if`` conditions as its ``--fail-if``."""
    from hostgap.report.compare import compare as do_compare
    from hostgap.report.compare import parse_conditions
    from hostgap.report.inputs import resolve

    conds = parse_conditions(fail_if) if fail_if else None
    if outside_noise and not fail_if:
        raise HostgapError("--outside-noise", "applies to --fail-if conditions; give --fail-if too")
    opts = _report_options(step_marker, launch_floor_us, floor_file)
    ia, ib = resolve(_ref(a), opts, progress, db), resolve(_ref(b), opts, progress, db)
    return Comparison(do_compare(ia, ib, basis, conds, outside_noise), (ia, ib))


def _report_options(step_marker, launch_floor_us, floor_file):
    from hostgap.anatomy.steps import AnalysisOptions

    return AnalysisOptions(
        step_marker=step_marker,
        launch_floor_ns=launch_floor_us * 1000 if launch_floor_us else None,
        floor_file=os.fspath(floor_file) if floor_file else None,
    )


class Report(Result):
    """A written HTML report (:func:`write_report`): ``to_dict()`` is ``report --json`` (the
    numbers the page shows), ``path`` the file, ``notes`` what the inputs lack."""

    kind = "report"

    def __init__(self, data: dict, path: str, size_bytes: int, notes: list[tuple[str, str]]):
        super().__init__(data)
        self.path, self.size_bytes, self.notes = path, size_bytes, notes

    def _render(self, con: Console) -> None:
        con.print(f"wrote {self.path} ({self.size_bytes / 1e6:.2f} MB, {len(self._doc['figures'])} figures)")

    def _repr_html_(self) -> str:
        import html

        return f"<p>hostgap report written to <code>{html.escape(self.path)}</code></p>"

    def _summary(self) -> str:
        return self.path


def write_report(
    inputs: Ref | Sequence[Ref],
    output: str | os.PathLike,
    *,
    title: str | None = None,
    max_bars: int = 300,
    step_marker: str | None = None,
    launch_floor_us: float | None = None,
    floor_file: str | None = None,
    db: str | None = None,
    progress: Progress | None = None,
) -> Report:
    """One self-contained HTML report of ``inputs`` (runs, traces, trace-set directories) written
    to ``output`` atomically, as ``hostgap report`` does."""
    from hostgap.report.compose import compose
    from hostgap.store.save import write_text_atomic

    if max_bars < 10:
        raise HostgapError("--max-bars", "must be at least 10")
    refs = [inputs] if isinstance(inputs, (str, os.PathLike, Result)) else list(inputs)
    page = compose(
        [_ref(r) for r in refs],
        _report_options(step_marker, launch_floor_us, floor_file),
        title=title,
        max_bars=max_bars,
        db=db,
        progress=progress,
    )
    path = os.fspath(output)
    write_text_atomic(path, page.html)
    notes = [(i.source, n) for i in page.inputs for n in i.notes]
    return Report(page.data, path, len(page.html.encode()), notes)
