"""Traces in the Python API: :func:`load`, :func:`analyze`, :func:`steps`, :func:`kernels`, and
the results they return."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from hostgap.api._results import Result, arrow_table
from hostgap.errors import HostgapError

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

    from hostgap.analysis.trace import TraceAnalysis
    from hostgap.anatomy.steps import AnalysisOptions
    from hostgap.events import Trace as EventsTrace

PathLike = str | os.PathLike


def options(
    step_marker: str | None = None,
    launch_floor_us: float | None = None,
    floor_file: str | None = None,
    gap_threshold_us: float = 30.0,
    top: int = 10,
) -> AnalysisOptions:
    """The analysis options from the command line's names and units (µs)."""
    from hostgap.anatomy.steps import AnalysisOptions

    if gap_threshold_us < 0:
        raise HostgapError("--gap-threshold-us", f"{gap_threshold_us:g}: give microseconds >= 0")
    if top < 0:
        raise HostgapError("--top", f"{top}: give a count >= 0")
    return AnalysisOptions(
        step_marker=step_marker,
        launch_floor_ns=launch_floor_us * 1000 if launch_floor_us is not None else None,
        floor_file=os.fspath(floor_file) if floor_file is not None else None,
        gap_threshold_ns=int(gap_threshold_us * 1000),
        top=top,
    )


class Trace:
    """A loaded trace (:func:`load`): its events as an Arrow table, its devices and metadata.

    ``events`` columns: ``kind`` (``kernel``, ``launch``, ``cpu_op``, ...), ``name``,
    ``start_ns``, ``end_ns``, ``dur_ns``, ``pid``, ``tid``, ``device``, ``stream``,
    ``correlation``, ``external_id``, ``bytes``; host events have ``device`` and ``stream`` -1.
    """

    def __init__(self, trace: EventsTrace):
        self._trace = trace

    @property
    def path(self) -> str:
        return self._trace.meta.path

    @property
    def format(self) -> str:
        """``kineto`` or ``nsys``."""
        return self._trace.meta.format

    def __len__(self) -> int:
        return len(self._trace.events)

    @property
    def devices(self) -> list[dict]:
        """One dict per GPU the trace names (index, name, memory, SMs, compute capability)."""
        from dataclasses import asdict

        return [asdict(d) for d in self._trace.meta.devices]

    @property
    def meta(self) -> dict:
        """What the trace says beyond its events: rank, world size, processes, skipped events."""
        m = self._trace.meta
        return {
            "path": m.path,
            "format": m.format,
            "base_time_ns": m.base_time_ns,
            "rank": m.rank,
            "world_size": m.world_size,
            "skipped": dict(m.skipped),
            "processes": dict(m.processes),
        }

    @cached_property
    def events(self) -> pa.Table:
        import numpy as np
        import pyarrow as pa

        from hostgap.events import Kind

        ev = self._trace.events
        kinds = [k.name.lower() for k in sorted(Kind, key=int)]  # values 0..n-1: a kind is its index
        return pa.table(
            {
                "kind": pa.DictionaryArray.from_arrays(np.asarray(ev.kind, dtype=np.int8), kinds),
                "name": pa.DictionaryArray.from_arrays(ev.name, list(self._trace.names)),
                "start_ns": ev.start_ns,
                "end_ns": ev.end_ns,
                "dur_ns": ev.dur_ns,
                "pid": ev.pid,
                "tid": ev.tid,
                "device": ev.device,
                "stream": ev.stream,
                "correlation": ev.correlation,
                "external_id": ev.external_id,
                "bytes": ev.bytes,
            }
        )

    def analyze(self, **options_kw: Any) -> TraceResult:
        """This trace analysed as :func:`analyze` does (same options), without loading it again."""
        return analyze(self._trace, **options_kw)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<hostgap Trace {self.path!r}: {self.format}, {len(self):,} events>"


def load(path: PathLike, *, jobs: int | None = None) -> Trace:
    """Load one trace file (Kineto JSON, plain or gzip, or an Nsight Systems SQLite export; the
    format from content). ``jobs``: threads that decode it (default: every core this process may
    use; the trace is the same whatever the number). Bad input raises
    :class:`~hostgap.HostgapError` with the one line the command line prints."""
    from hostgap.analysis.trace import analyse_trace

    return Trace(analyse_trace(path, jobs=jobs).trace)


@contextmanager
def _reporting_loads(on_bytes: Callable[[int, int | None], None] | None) -> Iterator[None]:
    """While the block runs, every trace decoded in this context calls ``on_bytes(bytes_read,
    file_size)`` now and then (the command line's progress bar); None: nothing."""
    from hostgap.analysis.trace import LOAD_PROGRESS

    token = LOAD_PROGRESS.set(on_bytes)
    try:
        yield
    finally:
        LOAD_PROGRESS.reset(token)


class TraceResult(Result):
    """One trace analysed: ``to_dict()`` is ``hostgap analyze --json`` (docs/json.md).

    Named parts: ``verdict``, ``summary`` (the steady-state split), ``taxbreak`` (the trace's
    TaxBreak), ``devices``; tables: ``steps`` (one row per engine step, the ``steps --csv``
    columns), ``kernels`` (one row per launch, the ``kernels`` columns), ``taxbreak_by_op``
    (host orchestration summed per framework op), ``idle_gaps`` (one row per GPU idle gap with
    its class).
    """

    kind = "trace"

    def __init__(self, doc: dict, analysis: TraceAnalysis | None = None):
        from hostgap.api._levers import with_levers

        super().__init__(with_levers(doc))
        self._analysis = analysis

    @cached_property
    def levers(self) -> pa.Table:
        """The levers ranked by predicted gain (docs/advise.md), as Arrow."""
        from hostgap.api._levers import levers_table

        return levers_table(self._doc.get("levers") or [])

    @property
    def path(self) -> str:
        return self._doc["trace"]

    @property
    def verdict(self) -> dict:
        return self._doc.get("verdict") or {}

    @property
    def summary(self) -> dict:
        return self._doc.get("summary") or {}

    @property
    def taxbreak(self) -> dict:
        return self._doc.get("taxbreak") or {}

    @property
    def devices(self) -> list[dict]:
        return self._doc.get("devices") or []

    @property
    def host_fraction(self) -> float | None:
        return (self.verdict or {}).get("host_fraction")

    @cached_property
    def steps(self) -> pa.Table:
        from hostgap.report.terminal import step_csv_rows

        return arrow_table(step_csv_rows(self._doc))

    def _need_trace(self, what: str) -> TraceAnalysis:
        if self._analysis is None:
            raise HostgapError(
                self.path, f"{what} needs the trace in this process: analyse it with hostgap.analyze(path)"
            )
        return self._analysis

    @cached_property
    def kernels(self) -> pa.Table:
        from hostgap.api._tables import KERNEL_COLUMNS

        return arrow_table(self._need_trace("the kernels table").kernel_rows(), KERNEL_COLUMNS)

    @cached_property
    def taxbreak_by_op(self) -> pa.Table:
        from hostgap.api._tables import taxbreak_by_op

        return taxbreak_by_op(self.kernels)

    @cached_property
    def idle_gaps(self) -> pa.Table:
        from hostgap.api._tables import idle_gaps

        a = self._need_trace("the idle-gap table")
        return idle_gaps(a.trace, a.links, a.options.gap_threshold_ns)

    def csv_rows(self) -> list[dict]:
        """``analyze --csv``: one row per device and per window."""
        from hostgap.report.terminal import overview_csv_rows

        return overview_csv_rows(self._doc)

    def _render(self, con: Console) -> None:
        from hostgap.report.terminal import render_anatomy, render_overview

        render_overview(self._doc, con)
        render_anatomy(self._doc, con)

    def _summary(self) -> str:
        return f"{self.path}, {len(self._doc.get('steps') or [])} steps, verdict {self.verdict.get('verdict')}"


class TraceSetResult(Result):
    """A trace set (several ranks of one job, docs/multirank.md): ``to_dict()`` is ``hostgap
    analyze DIR --json``. ``ranks``: one document per rank; tables: ``rank_table`` (one row per
    rank) and ``steps`` (the cross-rank step table)."""

    kind = "trace_set"

    def __init__(self, doc: dict):
        from hostgap.api._levers import with_levers

        super().__init__(with_levers(doc))

    @cached_property
    def levers(self) -> pa.Table:
        """The levers of the rank the others wait for, ranked by predicted gain (docs/advise.md)."""
        from hostgap.api._levers import levers_table

        return levers_table(self._doc.get("levers") or [])

    @property
    def ranks(self) -> list[dict]:
        return self._doc["ranks"]

    @property
    def cross_rank(self) -> dict:
        return self._doc["cross_rank"]

    @cached_property
    def steps(self) -> pa.Table:
        from hostgap.report.traceset_view import cross_rank_csv_rows

        return arrow_table(cross_rank_csv_rows(self._doc))

    @cached_property
    def rank_table(self) -> pa.Table:
        return arrow_table(
            {k: v for k, v in r.items() if not isinstance(v, (list, dict)) or k == "verdict"} for r in self.ranks
        )

    def csv_rows(self) -> list[dict]:
        from hostgap.report.traceset_view import cross_rank_csv_rows

        return cross_rank_csv_rows(self._doc)

    def _render(self, con: Console) -> None:
        from hostgap.report.traceset_view import render_trace_set

        render_trace_set(self._doc, con)

    def _summary(self) -> str:
        return f"{len(self.ranks)} ranks of {self.cross_rank.get('world_size')}"


class TraceResults(Result):
    """Several unrelated traces analysed at once (``hostgap analyze A B`` prints a list)."""

    kind = "traces"

    def __init__(self, results: list[TraceResult]):
        super().__init__([r.to_dict() for r in results])
        self.results = results

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, i: int) -> TraceResult:
        return self.results[i]

    def csv_rows(self) -> list[dict]:
        return [row for r in self.results for row in r.csv_rows()]

    def _render(self, con: Console) -> None:
        for r in self.results:
            r._render(con)

    def _summary(self) -> str:
        return f"{len(self.results)} traces"


def analyze(
    traces: PathLike | Sequence[PathLike] | EventsTrace,
    *,
    step_marker: str | None = None,
    launch_floor_us: float | None = None,
    floor_file: str | None = None,
    gap_threshold_us: float = 30.0,
    top: int = 10,
    jobs: int | None = None,
    backend: str = "local",
    address: str | None = None,
    cache: bool = True,
) -> TraceResult | TraceSetResult | TraceResults:
    """Analyse one trace, a rank set (a directory, or files that carry ranks) or several unrelated
    traces, as ``hostgap analyze`` does (same options, same defaults; ``cache=False`` is
    ``--no-cache``). One trace analysed in this process keeps it for the ``kernels`` and
    ``idle_gaps`` tables."""
    from hostgap.analysis import traceset as ts
    from hostgap.analysis.trace import TraceAnalysis, analyse_trace
    from hostgap.events import Trace as EventsTrace
    from hostgap.readers import sniff

    if backend not in ("local", "ray"):
        raise HostgapError("--backend", f"{backend!r}: use local or ray")
    if address and backend != "ray":
        raise HostgapError("--address", "needs --backend ray")
    opts = options(step_marker, launch_floor_us, floor_file, gap_threshold_us, top)
    if isinstance(traces, EventsTrace):
        return _single(TraceAnalysis(traces, opts))
    paths = [os.fspath(traces)] if isinstance(traces, (str, os.PathLike)) else [os.fspath(p) for p in traces]
    if not paths:
        raise HostgapError("analyze", "no trace given")
    files, had_dir = ts.expand(paths)
    if len(files) == 1 and not had_dir and backend == "local":
        analysis = analyse_trace(files[0], opts, cache=cache, jobs=jobs)
        # a Kineto file is one process's trace; an nsys export may hold several (a trace set)
        if sniff(files[0]) == "kineto" or len(ts.split_processes(analysis.trace)) == 1:
            return _single(analysis)
    doc = ts.analyse(paths, opts, jobs=jobs, backend=backend, address=address, cache=cache)
    if isinstance(doc, dict) and doc.get("kind") == "trace_set":
        return TraceSetResult(doc)
    docs = doc if isinstance(doc, list) else [doc]
    return TraceResults([TraceResult(d) for d in docs]) if len(docs) > 1 else TraceResult(docs[0])


def _single(analysis: TraceAnalysis) -> TraceResult:
    return TraceResult(analysis.document(), analysis)


class StepsResult(Result):
    """``hostgap steps``: the step anatomy of one trace (``to_dict()`` is ``steps --json``);
    ``table`` the ``--csv`` rows."""

    kind = "steps"

    @cached_property
    def table(self) -> pa.Table:
        from hostgap.report.terminal import step_csv_rows

        return arrow_table(step_csv_rows(self._doc))

    def csv_rows(self) -> list[dict]:
        from hostgap.report.terminal import step_csv_rows

        return step_csv_rows(self._doc)

    def _render(self, con: Console) -> None:
        from hostgap.report.terminal import render_steps

        render_steps(self._doc, con)

    def _summary(self) -> str:
        return f"{self._doc['trace']}, {len(self._doc['steps'])} steps"


def steps(
    trace: PathLike | EventsTrace,
    *,
    step_marker: str | None = None,
    launch_floor_us: float | None = None,
    floor_file: str | None = None,
    jobs: int | None = None,
    cache: bool = True,
) -> StepsResult:
    """One row per engine step of ``trace`` (``hostgap steps``)."""
    from hostgap.analysis.trace import analyse_trace

    a = analyse_trace(trace, options(step_marker, launch_floor_us, floor_file), cache=cache, jobs=jobs)
    return StepsResult(a.anatomy_dict())


class KernelsResult(Result):
    """``hostgap kernels``: one row per launch with its TaxBreak intervals; ``to_dict()`` is the
    ``--json`` list, ``table`` the same rows as Arrow."""

    kind = "kernels"

    def __init__(self, rows: list[dict], trace: str):
        super().__init__(rows)
        self.trace = trace

    @cached_property
    def table(self) -> pa.Table:
        from hostgap.api._tables import KERNEL_COLUMNS

        return arrow_table(self._doc, KERNEL_COLUMNS)

    def csv_rows(self) -> list[dict]:
        return self._doc

    def _render(self, con: Console) -> None:
        from hostgap.report.terminal import render_kernels

        render_kernels(self._doc, con, self.trace)

    def _summary(self) -> str:
        return f"{self.trace}, {len(self._doc)} launches"


def kernels(
    trace: PathLike | EventsTrace,
    *,
    step_marker: str | None = None,
    launch_floor_us: float | None = None,
    floor_file: str | None = None,
    jobs: int | None = None,
    cache: bool = True,
) -> KernelsResult:
    """One row per launch (eager kernel or graph launch) with its TaxBreak intervals (``hostgap kernels``)."""
    from hostgap.analysis.trace import analyse_trace

    a = analyse_trace(trace, options(step_marker, launch_floor_us, floor_file), cache=cache, jobs=jobs)
    return KernelsResult(a.kernel_rows(), a.path)
