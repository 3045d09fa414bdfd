"""Running servers in the Python API: :func:`attach` (profile one for N steps) and :func:`watch`
(its metrics per interval, an iterator)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from functools import cached_property
from typing import IO, TYPE_CHECKING

from hostgap.api._measure import RunResult
from hostgap.api._results import Result, arrow_table

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console

    from hostgap.api._fleet import FleetWatch
    from hostgap.api._traces import TraceResult, TraceSetResult
    from hostgap.server.watch.session import WatchSession

Note = Callable[[str], None]


def _silent(_msg: str) -> None:
    return None


class AttachResult(RunResult):
    """One attach (``hostgap attach``): ``to_dict()`` is its ``--json`` object (docs/attach.md),
    the stored run plus ``steps``. Named parts: ``verdict``, ``step_medians`` (the runs
    database's numbers: medians over the steady decode steps), ``batches_seen``, ``profiling``
    (settings and the profiler's measured cost), ``analysis`` (the trace's analysis, as
    :func:`analyze` returns it); table: ``steps``."""

    kind = "attach"

    def __init__(self, result: dict):
        from hostgap.report.attach_view import json_document

        super().__init__(json_document(result))
        self.result = {**result, "levers": self._doc.get("levers")} if "levers" in self._doc else result

    @property
    def run_kind(self) -> str:
        return "attached"

    @property
    def step_medians(self) -> dict:
        return self._doc.get("step_medians") or {}

    @property
    def batches_seen(self) -> dict:
        return self._doc.get("batches_seen") or {}

    @property
    def profiling(self) -> dict:
        return self._doc.get("profiling") or {}

    @cached_property
    def analysis(self) -> TraceResult | TraceSetResult:
        from hostgap.api._traces import TraceResult, TraceSetResult

        doc = self._doc.get("analysis") or {}
        return TraceSetResult(doc) if doc.get("kind") == "trace_set" else TraceResult(doc)

    @cached_property
    def steps(self) -> pa.Table:
        from hostgap.report.terminal import step_csv_rows
        from hostgap.server.attach.steps_seen import first_rank

        return arrow_table(step_csv_rows(first_rank(self._doc.get("analysis") or {})))

    def csv_rows(self) -> list[dict]:
        from hostgap.report.terminal import step_csv_rows
        from hostgap.server.attach.steps_seen import first_rank

        return step_csv_rows(first_rank(self._doc.get("analysis") or {}))

    def to_json(self) -> str:
        return Result.to_json(self)

    def print(self, file: IO[str] | None = None) -> None:
        Result.print(self, file)

    def _render(self, con: Console) -> None:
        from hostgap.report.attach_view import render

        render(self.result, con)


def attach(
    url: str,
    *,
    steps: int = 16,
    skip: int = 4,
    load: int | None = None,
    prompt_len: int = 32,
    output_len: int = 256,
    model: str | None = None,
    trace_dir: str | None = None,
    wait: float = 120.0,
    idle: float = 20.0,
    baseline: float = 3.0,
    output: str = "runs",
    db: str | None = None,
    step_marker: str | None = None,
    on_note: Note = _silent,
) -> AttachResult:
    """Profile a running vLLM or SGLang server for ``steps`` engine steps through its own
    profiler routes (``load=C``: under C concurrent streaming requests of its own), analyse the
    trace as :func:`analyze` does and store the run, as ``hostgap attach`` does (same options;
    seconds for ``wait``, ``idle`` and ``baseline``). ``on_note`` receives the progress lines."""
    from hostgap.server.attach.loadgen import LoadSpec
    from hostgap.server.attach.profile import AttachConfig
    from hostgap.server.attach.profile import attach as run_attach

    spec = LoadSpec(load, prompt_len, output_len, model=model) if load is not None else None
    cfg = AttachConfig(
        url,
        steps=steps,
        skip=skip,
        load=spec,
        trace_dir=trace_dir,
        wait_s=wait,
        idle_s=idle,
        output=output,
        db=db,
        step_marker=step_marker,
        baseline_s=baseline,
    )
    return AttachResult(run_attach(cfg, on_note))


class Watch(Result):
    """A watch of a running server (:func:`watch`): iterate it for one dict per interval (the
    rows ``watch --jsonl`` writes); it ends after ``duration`` (or ``max_intervals``), on
    :meth:`close`, or when the caller stops iterating and closes it. Then ``to_dict()`` is the
    ``watch --json`` object (intervals and the window's summary), ``run_id`` the stored run,
    ``intervals`` the rows as an Arrow table and ``failed`` the ``fail_if`` conditions that held.
    ``rows`` and ``intervals`` hold the most recent intervals (docs/watch.md, "Long runs"); the
    summary covers the whole watch."""

    kind = "watch"

    def __init__(self, session: WatchSession):
        super().__init__(None)
        self._session = session
        self._shown = 0

    def __iter__(self) -> Iterator[dict]:
        return iter(self._session)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> dict:
        """End the watch: gauges and files closed, the window summed up, the run stored."""
        self._doc = self._session.close()
        return self._doc

    def to_dict(self) -> dict:
        return self._doc if self._doc is not None else self.close()

    @property
    def engine(self) -> str | None:
        return self._session.engine

    @property
    def rows(self) -> list[dict]:
        """The intervals seen so far."""
        return self._session.rows

    @property
    def intervals(self) -> pa.Table:
        return arrow_table(self._session.rows)

    @property
    def summary(self) -> dict:
        return self.to_dict()["summary"]

    @property
    def levers(self) -> pa.Table:
        """The levers of the watched intervals, ranked by predicted gain (docs/advise.md, "A
        watched run"), as Arrow; empty (no row) where no interval carries an estimate."""
        from hostgap.api._levers import levers_of, levers_table

        return levers_table(levers_of(self.to_dict())["levers"])

    @property
    def run_id(self) -> str | None:
        return self.to_dict().get("run_id")

    @property
    def failed(self) -> list[str]:
        return self._session.failed

    def table_line(self, row: dict) -> str:
        """The live table's line of ``row``, the interval just seen (the header before the first
        line), as ``hostgap watch`` prints it."""
        from hostgap.report.watch_view import HEADER, table_line

        rows = self._session.window.recent  # a bounded deque: no copy per line
        latest = bool(rows) and rows[-1] is row
        previous = rows[-2] if latest and len(rows) > 1 else None
        line = table_line(row, previous)
        self._shown += 1
        return f"{HEADER}\n{line}" if self._shown == 1 else line

    def print(self, file: IO[str] | None = None) -> None:
        """The window's summary lines, as ``hostgap watch`` prints them at the end."""
        from hostgap.report.watch_view import summary_lines

        out = file if file is not None else sys.stdout
        for line in summary_lines(self.summary):
            print(line, file=out)

    def _summary(self) -> str:
        return f"{self._session.config.url} ({self.engine}), {len(self._session.rows)} intervals"


def watch(
    url: str | None = None,
    *,
    prometheus: str | None = None,
    match: str | None = None,
    since: str | float | None = None,
    start: str | float | None = None,
    end: str | float | None = None,
    hardware_label: str | None = None,
    interval: float | None = None,
    duration: float | None = None,
    calibration: str | Sequence[str] = (),
    calibrate: bool | None = None,
    calibrate_steps: int = 32,
    recalibrate_after: float = 3600.0,
    trace_dir: str | None = None,
    timeout: float | None = None,
    fail_if: str | None = None,
    jsonl: str | None = None,
    serve: str | int | None = None,
    db: str | None = None,
    output: str = "runs",
    store: bool = True,
    max_intervals: int | None = None,
    on_note: Note = _silent,
    band_from: str | None = None,
) -> Watch | FleetWatch:
    """Watch a running vLLM or SGLang server's Prometheus metrics every ``interval`` seconds, as
    ``hostgap watch`` does (same options; ``store=False`` is ``--no-store``): an iterator of one
    dict per interval with the decode telemetry and the host-exposed share with its basis and
    interval (and the ``calibration`` it used). ``calibrate``: True is ``--calibrate``, False
    ``--no-calibrate``, None the default (vLLM without ``calibration``: the watch calibrates on
    the server's own traffic; ``trace_dir`` as attach's). ``serve``: ``"HOST:PORT"`` or a port on 127.0.0.1. The opening
    scrape happens here (a server without metrics raises :class:`~hostgap.HostgapError` at once).

    ``band_from``: a stored watch of this server under normal traffic (run id, directory or
    ``watch --json`` file) whose intervals fit the anomaly band (``watch --band-from``).

    ``prometheus="http://host:9090"`` (no ``url``): the fleet view instead, every instance that
    Prometheus holds read through its HTTP API (``match``, ``since`` or ``start``/``end``,
    ``hardware_label``: :func:`hostgap.api._fleet.fleet_watch`; ``calibrate=True``: renew each
    class's calibration live); returns a ``FleetWatch``."""
    from hostgap.errors import HostgapError
    from hostgap.server.watch.session import WatchSession

    if prometheus is not None:
        if url is not None:
            raise HostgapError(url, "give a server URL or --prometheus, not both")
        if band_from is not None:
            raise HostgapError("--band-from", "a band is fitted for one server's watch, not the fleet view")
        from hostgap.api._fleet import fleet_watch

        return fleet_watch(
            prometheus,
            match=match,
            since=since,
            start=start,
            end=end,
            interval=interval,
            duration=duration,
            calibration=calibration,
            db=db,
            hardware_label=hardware_label,
            fail_if=fail_if,
            jsonl=jsonl,
            calibrate=bool(calibrate),
            calibrate_steps=calibrate_steps,
            recalibrate_after=recalibrate_after,
            trace_dir=trace_dir,
            output=output,
            store=store,
            on_note=on_note,
        )
    if url is None:
        raise HostgapError("watch", "give the server's URL (or --prometheus URL for a fleet)")
    if any(x is not None for x in (match, since, start, end, hardware_label)):
        raise HostgapError("watch", "--match, --since, --start, --end and --hardware-label need --prometheus")

    refs = [calibration] if isinstance(calibration, str) else list(calibration)
    return Watch(
        WatchSession(
            url,
            interval_s=5.0 if interval is None else interval,
            duration_s=duration,
            calibrations=refs,
            calibrate=calibrate,
            calibrate_steps=calibrate_steps,
            recalibrate_after_s=recalibrate_after,
            trace_dir=trace_dir,
            timeout_s=timeout,
            fail_if=fail_if,
            jsonl=jsonl,
            serve=serve,
            db=db,
            output=output,
            store=store,
            max_intervals=max_intervals,
            on_note=on_note,
            band_from=band_from,
        )
    )
