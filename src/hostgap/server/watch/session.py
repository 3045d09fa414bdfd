"""One watch from start to stored run: the options checked, the opening scrape, the calibration
(given with ``--calibration``, or taken by the watch itself: :mod:`hostgap.server.watch.selfcal`),
the ``--jsonl`` file and the ``--serve`` gauges opened, the intervals handed out one by one
(:func:`hostgap.server.watch.loop.intervals`) and summed up as they come
(:class:`hostgap.server.watch.window.Window`: memory stays flat however long the watch runs),
the run stored every :data:`CHECKPOINT_S` seconds and at the end
(:func:`hostgap.store.save.save_run`). ``hostgap watch`` and :func:`hostgap.watch` are this
class; what they print is :mod:`hostgap.report.watch_view`."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from hostgap.errors import HostgapError
from hostgap.server.metrics import metrics_url, scrape
from hostgap.server.watch import loop as w
from hostgap.server.watch.window import Window
from hostgap.store.rundir import RunDir

CHECKPOINT_S = 600.0
"""A long watch's run is stored (results.json and the database row rewritten) this often, so a
watch that is killed loses at most this much of its summary."""


def _quiet(_msg: str) -> None:
    return None


class WatchSession:
    """A watch of ``url``; iterate it for the interval rows. :meth:`close` (also on leaving a
    ``with`` block) ends it: cancels a running calibration (its stop is sent), closes the
    gauges and the ``--jsonl`` file, sums up the window and stores the run. Options are
    ``hostgap watch``'s; ``calibrate`` None is the default (vLLM without ``--calibration``:
    calibrate). ``read`` and ``clock`` are injected by tests."""

    def __init__(
        self,
        url: str,
        *,
        interval_s: float = 5.0,
        duration_s: float | None = None,
        calibrations: Sequence[str] = (),
        calibrate: bool | None = None,
        calibrate_steps: int = 32,
        recalibrate_after_s: float = 3600.0,
        trace_dir: str | None = None,
        timeout_s: float | None = None,
        fail_if: str | None = None,
        jsonl: str | None = None,
        serve: str | int | None = None,
        db: str | None = None,
        output: str = "runs",
        store: bool = True,
        max_intervals: int | None = None,
        on_note: Callable[[str], None] = _quiet,
        read: w.Reader = scrape,
        clock: w.Clock = w.SYSTEM_CLOCK,
        selfcal_options: dict | None = None,
        band_from: str | None = None,
    ):
        from hostgap.server.watch.calibration import load_band, load_calibration

        _check(interval_s, duration_s, timeout_s, calibrate_steps, recalibrate_after_s)
        metrics_url(url)
        address = _address(serve)
        self.conditions = w.parse_conditions(fail_if) if fail_if else []
        self.calibration = load_calibration(calibrations, db) if calibrations else None
        self.band = load_band(band_from, db) if band_from else None
        self.config = w.WatchConfig(
            url=url,
            interval_s=interval_s,
            duration_s=duration_s,
            timeout_s=timeout_s,
            calibration=self.calibration,
            max_intervals=max_intervals,
            band=self.band,
        )
        self.db, self.output, self.store = db, output, store
        self.on_note = on_note
        if self.band is not None:
            b = self.band
            on_note(
                f"anomaly band: fitted on {b.intervals} fault-free intervals of {b.source} (batches "
                f"{b.batches[0]:.1f}-{b.batches[1]:.1f}): ln(period / expected) = {b.intercept:+.3f} "
                f"{b.batch_coef:+.3f} ln(batch) {b.prefill_coef:+.3f} prefill share, top +{b.margin:.3f}"
            )
        self.read, self.clock = read, clock
        self.window = Window(self.conditions)
        self.stop = threading.Event()
        self.document: dict | None = None
        self.run_id: str | None = None
        self._run: RunDir | None = None
        self._stored_at = clock.monotonic()
        self._stack = ExitStack()
        self.first = w.first_scrape(self.config, read)
        self.selfcal = None
        if calibrate or (calibrate is None and not calibrations):
            options = {"trace_dir": trace_dir, **(selfcal_options or {})}
            self.selfcal = self._selfcal(calibrate, calibrate_steps, recalibrate_after_s, options)
        if self.selfcal is not None:
            self.config = dataclasses.replace(self.config, calibrating=True)
        try:
            self._sink: IO[str] | None = self._stack.enter_context(_open_jsonl(jsonl)) if jsonl else None
            self.exporter = None
            if address is not None:
                self.exporter = self._serve(address)
            if self.selfcal is not None:
                self._stack.callback(self.selfcal.close)
        except BaseException:
            self._stack.close()
            raise
        self._opening_notes(interval_s, duration_s)

    def _selfcal(self, calibrate: bool | None, steps: int, max_age_s: float, options: dict):
        from hostgap.server.watch.recalibrate import Policy
        from hostgap.server.watch.selfcal import SelfCalibration

        if self.first.engine != "vllm":
            if calibrate:
                self.on_note(f"--calibrate: {self.first.engine} needs no calibration (see docs/watch.md)")
            return None
        interval = self.config.interval_s
        policy = Policy(max_age_s=max_age_s, min_gap_s=max(30.0, 6 * interval), retry_s=max(30.0, 6 * interval))
        for key in ("min_gap_s", "retry_s", "persist"):
            if key in options:
                policy = dataclasses.replace(policy, **{key: options.pop(key)})
        return SelfCalibration(
            _server_url(self.first.url),
            policy=policy,
            steps=steps,
            output=self.output,
            db=self.db,
            store=self.store,
            initial=self.calibration,
            on_note=self.on_note,
            clock=self.clock.monotonic,
            **options,
        )

    def _serve(self, address):
        from hostgap.server.watch.exporter import Exporter, engine_labels
        from hostgap.server.watch.listener import exposure_note

        exporter = Exporter(address, engine_labels(self.first))
        self._stack.callback(exporter.close)
        self.on_note(f"serving hostgap gauges on {exporter.url}")
        exposed = exposure_note(address, exporter.port)
        if exposed:
            self.on_note(exposed)
        return exporter

    def _opening_notes(self, interval_s: float, duration_s: float | None) -> None:
        cal = self.calibration
        if cal is not None:
            self.on_note(
                f"calibration {cal.source}: {cal.steps} decode steps at batch {list(cal.batches)}, "
                f"GPU time per step {cal.gpu_intercept_s * 1e3:.3g} ms + {cal.gpu_slope_s * 1e3:.3g} ms x batch, "
                f"held-out error {cal.block_rel_err:.1%}"
            )
        if self.selfcal is not None:
            self.on_note(
                f"calibrating on the server's own traffic: {self.selfcal.steps} steps profiled at the start, "
                "when the batch or the prefill share leaves the calibrated range, after a restart and every "
                f"{self.selfcal.trigger.policy.max_age_s:g} s (--no-calibrate: telemetry only)"
            )
        self.on_note(
            f"watching {self.first.url} ({self.first.engine}) every {interval_s:g} s"
            f"{f' for {duration_s:g} s' if duration_s else ' until Ctrl-C'}"
        )

    @property
    def engine(self) -> str | None:
        return self.first.engine

    @property
    def rows(self) -> list[dict]:
        """The intervals kept in full (the last ``window.RECENT_ROWS``; ``--jsonl`` has all)."""
        return self.window.rows

    def current_calibration(self):
        return self.selfcal.current() if self.selfcal is not None else self.calibration

    def __iter__(self) -> Iterator[dict]:
        for row in w.intervals(
            self.config,
            self.on_note,
            self.stop,
            first=self.first,
            read=self.read,
            clock=self.clock,
            calibration=self.current_calibration,
        ):
            self._take(row)
            yield row

    def _take(self, row: dict) -> None:
        cal = self.selfcal
        if cal is not None:
            cal.observe(row)
        self.window.add(row)
        if self._sink is not None:
            self._sink.write(json.dumps(row) + "\n")
            self._sink.flush()
        if self.exporter is not None:
            age = cal.age_s() if cal is not None else None
            stale = cal.stale if cal is not None else (self.engine == "vllm" and self.calibration is None)
            self.exporter.update(row, calibration_age_s=age, stale=stale)
        if self.store and self.clock.monotonic() - self._stored_at >= CHECKPOINT_S:
            self._checkpoint()

    def __enter__(self) -> WatchSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> dict:
        """End the watch (idempotent): the document ``watch --json`` prints, the run stored
        unless ``store`` is false or no interval was seen."""
        if self.document is not None:
            return self.document
        self.stop.set()
        self._stack.close()
        doc = self._document()
        if self.store and self.window.count:
            doc["run_id"], doc["run_dir"] = self._save(doc)
            self.on_note(f"stored run {doc['run_id']} ({doc['run_dir']})")
        self.document = doc
        return doc

    def _document(self) -> dict:
        cal = self.current_calibration()
        return {
            "schema_version": w.SCHEMA_VERSION,
            "engine": self.first.engine,
            "url": self.first.url,
            "interval_s": self.config.interval_s,
            "calibration": cal.to_dict() if cal else None,
            "calibrations": self.selfcal.to_dict() if self.selfcal is not None else None,
            "anomaly_band": self.band.to_dict() if self.band is not None else None,
            "intervals": self.window.rows,
            "intervals_total": self.window.count,
            "summary": self.window.summary(),
        }

    @property
    def failed(self) -> list[str]:
        """The ``--fail-if`` conditions that held over the window (after :meth:`close`)."""
        doc = self.close()
        return [c["condition"] for c in doc["summary"]["fail_if"] if c["holds"]]

    def _checkpoint(self) -> None:
        self._stored_at = self.clock.monotonic()
        try:
            self._save(self._document())
        except HostgapError as exc:
            self.on_note(f"could not store the run so far: {exc.problem}")

    def _save(self, doc: dict) -> tuple[str, str]:
        """Store the run (the first call creates it; later ones rewrite it: results.json and the
        database row are replaced, so the database holds one bounded row per watch)."""
        from hostgap.store.save import save_run

        engine = self.first.engine
        if self._run is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            self.run_id = f"{stamp}-watch-{engine}-{uuid.uuid4().hex[:6]}"
            run = RunDir.create(Path(self.output) / self.run_id)
            run.path.joinpath("traces").rmdir()  # a watch keeps no traces
            self._run = run
        run = self._run
        kept = self.window.retained()
        stored: dict = {
            "run_id": self.run_id,
            "kind": "watch",
            "mode": "watch",
            "engine": engine,
            "server_url": self.first.url,
            "valid": True,
            "invalid_reasons": [],
            "schema_version": w.SCHEMA_VERSION,
            "run_dir": str(run.path.resolve()),
            "watch": {
                "interval_s": self.config.interval_s,
                "calibration": doc["calibration"],
                "calibrations": doc["calibrations"],
                "anomaly_band": doc["anomaly_band"],
                "summary": doc["summary"],
                **kept,
            },
        }
        series = "".join(json.dumps(r) + "\n" for r in kept["intervals"])
        path = save_run(stored, run, self.db, files={"watch.jsonl": series})
        return str(self.run_id), path


def _check(
    interval_s: float, duration_s: float | None, timeout_s: float | None, steps: int, recalibrate_after_s: float
) -> None:
    if interval_s <= 0 or interval_s > 3600:
        raise HostgapError("--interval", f"{interval_s:g}: give seconds in (0, 3600]")
    if duration_s is not None and duration_s < interval_s:
        raise HostgapError("--duration", f"{duration_s:g} s is shorter than one interval ({interval_s:g} s)")
    if timeout_s is not None and timeout_s <= 0:
        raise HostgapError("--timeout", f"{timeout_s:g}: give seconds > 0")
    if not isinstance(steps, int) or steps < 8:
        raise HostgapError("--calibrate-steps", f"{steps!r}: give a whole number >= 8")
    if recalibrate_after_s <= 0:
        raise HostgapError("--recalibrate-after", f"{recalibrate_after_s:g}: give seconds > 0")


def _address(serve: str | int | None):
    if serve is None:
        return None
    from hostgap.server.watch.listener import parse_address

    return parse_address(serve)


def _server_url(metrics: str) -> str:
    """The server's base URL (profile routes) from its /metrics address."""
    return metrics[: -len("/metrics")] if metrics.endswith("/metrics") else metrics


def _open_jsonl(path: str) -> IO[str]:
    try:
        return open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by the session's ExitStack
    except OSError as exc:
        raise HostgapError(path, f"cannot write the --jsonl file ({exc.strerror or exc})") from None
