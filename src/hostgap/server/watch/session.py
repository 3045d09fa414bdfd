"""One watch from start to stored run: the options checked, the opening scrape, the calibration,
the ``--jsonl`` file and the ``--serve`` gauges opened, the intervals handed out one by one
(:func:`hostgap.server.watch.loop.intervals`), and at the end the window's summary and the run
stored (:func:`hostgap.store.save.save_run`). ``hostgap watch`` and :func:`hostgap.watch` are
this class; what they print is :mod:`hostgap.report.watch_view`."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from hostgap.errors import HostgapError
from hostgap.server.metrics import metrics_url
from hostgap.server.watch import loop as w


def _quiet(_msg: str) -> None:
    return None


class WatchSession:
    """A watch of ``url``; iterate it for the interval rows. :meth:`close` (also on leaving a
    ``with`` block) ends it: closes the gauges and the ``--jsonl`` file, sums up the window and
    stores the run. Options are ``hostgap watch``'s."""

    def __init__(
        self,
        url: str,
        *,
        interval_s: float = 5.0,
        duration_s: float | None = None,
        calibrations: Sequence[str] = (),
        timeout_s: float | None = None,
        fail_if: str | None = None,
        jsonl: str | None = None,
        serve_port: int | None = None,
        db: str | None = None,
        output: str = "runs",
        store: bool = True,
        max_intervals: int | None = None,
        on_note: Callable[[str], None] = _quiet,
    ):
        from hostgap.server.watch.calibration import load_calibration

        if interval_s <= 0 or interval_s > 3600:
            raise HostgapError("--interval", f"{interval_s:g}: give seconds in (0, 3600]")
        if duration_s is not None and duration_s < interval_s:
            raise HostgapError("--duration", f"{duration_s:g} s is shorter than one interval ({interval_s:g} s)")
        if timeout_s is not None and timeout_s <= 0:
            raise HostgapError("--timeout", f"{timeout_s:g}: give seconds > 0")
        metrics_url(url)
        self.conditions = w.parse_conditions(fail_if) if fail_if else []
        self.calibration = load_calibration(calibrations, db) if calibrations else None
        self.config = w.WatchConfig(
            url=url,
            interval_s=interval_s,
            duration_s=duration_s,
            timeout_s=timeout_s,
            calibration=self.calibration,
            max_intervals=max_intervals,
        )
        self.db, self.output, self.store = db, output, store
        self.on_note = on_note
        self.rows: list[dict] = []
        self.stop = threading.Event()
        self.document: dict | None = None
        self._stack = ExitStack()
        self.first = w.first_scrape(self.config)
        try:
            self._sink: IO[str] | None = self._stack.enter_context(_open_jsonl(jsonl)) if jsonl else None
            self.exporter = None
            if serve_port is not None:
                from hostgap.server.watch.exporter import Exporter, engine_labels

                self.exporter = Exporter(serve_port, engine_labels(self.first))
                self._stack.callback(self.exporter.close)
                on_note(f"serving hostgap gauges on http://127.0.0.1:{self.exporter.port}/metrics")
        except BaseException:
            self._stack.close()
            raise
        cal = self.calibration
        if cal is not None:
            on_note(
                f"calibration {cal.source}: {cal.steps} decode steps at batch {list(cal.batches)}, "
                f"GPU time per step {cal.gpu_intercept_s * 1e3:.3g} ms + {cal.gpu_slope_s * 1e3:.3g} ms x batch, "
                f"held-out error {cal.block_rel_err:.1%}"
            )
        on_note(
            f"watching {self.first.url} ({self.first.engine}) every {interval_s:g} s"
            f"{f' for {duration_s:g} s' if duration_s else ' until Ctrl-C'}"
        )

    @property
    def engine(self) -> str | None:
        return self.first.engine

    def __iter__(self) -> Iterator[dict]:
        for row in w.intervals(self.config, self.on_note, self.stop, first=self.first):
            self.rows.append(row)
            if self._sink is not None:
                self._sink.write(json.dumps(row) + "\n")
                self._sink.flush()
            if self.exporter is not None:
                self.exporter.update(row)
            yield row

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
        summ = w.summary(self.rows, self.conditions)
        cal = self.calibration
        doc: dict = {
            "schema_version": w.SCHEMA_VERSION,
            "engine": self.first.engine,
            "url": self.first.url,
            "interval_s": self.config.interval_s,
            "calibration": cal.to_dict() if cal else None,
            "intervals": self.rows,
            "summary": summ,
        }
        if self.store and self.rows:
            doc["run_id"], doc["run_dir"] = self._store(doc)
            self.on_note(f"stored run {doc['run_id']} ({doc['run_dir']})")
        self.document = doc
        return doc

    @property
    def failed(self) -> list[str]:
        """The ``--fail-if`` conditions that held over the window (after :meth:`close`)."""
        doc = self.close()
        return [c["condition"] for c in doc["summary"]["fail_if"] if c["holds"]]

    def _store(self, doc: dict) -> tuple[str, str]:
        from hostgap.store.rundir import RunDir
        from hostgap.store.save import save_run

        engine = self.first.engine
        run_id = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-watch-{engine}-{uuid.uuid4().hex[:6]}"
        stored: dict = {
            "run_id": run_id,
            "kind": "watch",
            "mode": "watch",
            "engine": engine,
            "server_url": self.first.url,
            "valid": True,
            "invalid_reasons": [],
            "schema_version": w.SCHEMA_VERSION,
            "watch": {
                "interval_s": self.config.interval_s,
                "calibration": doc["calibration"],
                "intervals": self.rows,
                "summary": doc["summary"],
            },
        }
        run = RunDir.create(Path(self.output) / run_id)
        run.path.joinpath("traces").rmdir()  # a watch keeps no traces
        stored["run_dir"] = str(run.path.resolve())
        series = "".join(json.dumps(r) + "\n" for r in self.rows)
        path = save_run(stored, run, self.db, files={"watch.jsonl": series})
        return run_id, path


def _open_jsonl(path: str) -> IO[str]:
    try:
        return open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by the session's ExitStack
    except OSError as exc:
        raise HostgapError(path, f"cannot write the --jsonl file ({exc.strerror or exc})") from None
