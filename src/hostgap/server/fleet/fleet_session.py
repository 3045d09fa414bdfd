"""``hostgap watch --prometheus URL``: the fleet view over history or live, read in chunks.

History (``--since`` or ``--start``/``--end``) is read chunk by chunk (a bounded number of
instance × interval cells at a time: a day of a thousand servers never sits in memory at once);
live (no ``--end``) follows the present, reading each interval once Prometheus has had ``lag``
seconds to scrape its end. Every row goes to the per-instance windows (:class:`FleetWindow`), to
``--jsonl`` and to the caller; the document keeps the most recent rows up to a bound.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from hostgap.errors import HostgapError
from hostgap.server.fleet.classes import ClassCalibration
from hostgap.server.fleet.promql import MAX_POINTS, Fetch
from hostgap.server.fleet.renew import ClassRenewal
from hostgap.server.fleet.view import FleetWindow, read, rows
from hostgap.server.watch.loop import Condition

CELL_BUDGET = 20_000
"""Instance × interval cells read at once (each a few dicts of the instance's series), for fleets
of up to 1,000 instances (see MIN_POINTS)."""
MIN_POINTS = 20
"""Intervals read at once however many instances there are: each series of a query answer costs
its labels once per read, so reads of fewer intervals would make that cost grow as the fleet's
size squared. Up to CELL_BUDGET / MIN_POINTS = 1,000 instances the cell budget holds; beyond,
a read holds MIN_POINTS intervals of every instance (bench/results/fleet-scale.md)."""
KEPT_ROWS = 20_000
"""Rows the document keeps (the most recent); --jsonl has them all."""
HISTORY_POINTS = 240
"""Intervals per instance a history without --interval is cut into."""
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str, option: str = "--since") -> float:
    """``90s``, ``2h``, ``1h30m``, or plain seconds."""
    t = str(text).strip()
    try:
        return float(t)
    except ValueError:
        pass
    parts = _DURATION.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise HostgapError(option, f"{text!r}: give a duration such as 90s, 2h or 1h30m")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def parse_time(text: str | float, option: str) -> float:
    """Unix seconds, or an RFC 3339 time (``2026-12-07T04:00:00Z``; no zone: UTC)."""
    if isinstance(text, int | float):
        return float(text)
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = _dt.datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise HostgapError(option, f"{text!r}: give unix seconds or a time such as 2026-12-07T04:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return when.timestamp()


@dataclass(frozen=True)
class FleetConfig:
    prometheus: str
    selector: str = ""
    start: float | None = None
    end: float | None = None
    interval_s: float | None = None
    duration_s: float | None = None
    hardware_label: str | None = None
    lag_s: float = 15.0
    """Live: how long after an interval's end it is read (Prometheus' scrape interval or more)."""

    def step_s(self, now: float) -> float:
        if self.interval_s is not None:
            return self.interval_s
        if self.start is not None and self.end is not None:
            return max(15.0, math.ceil((self.end - self.start) / HISTORY_POINTS))
        return 15.0


class FleetSession:
    """The fleet view's rows as they are read (iterate it), its window, its document."""

    def __init__(
        self,
        config: FleetConfig,
        classes: Sequence[ClassCalibration],
        fetch: Fetch,
        *,
        conditions: Sequence[Condition] = (),
        jsonl: IO[str] | None = None,
        on_note: Callable[[str], None] = lambda m: None,
        clock: Callable[[], float] = time.time,
        renewal: ClassRenewal | None = None,
    ):
        self.config = config
        self.classes = list(classes)
        self.renewal = renewal
        self.fetch = fetch
        self.jsonl = jsonl
        self.on_note = on_note
        self.clock = clock
        self.window = FleetWindow(conditions)
        self.kept: deque[dict] = deque(maxlen=KEPT_ROWS)
        self.count = 0
        self.stopped = threading.Event()
        now = clock()
        self.step_s = config.step_s(now)
        if self.step_s <= 0 or self.step_s > 86400:
            raise HostgapError("--interval", f"{self.step_s:g}: give seconds in (0, 86400]")
        start = config.start if config.start is not None else math.floor(now / self.step_s) * self.step_s
        if config.end is not None and config.end <= start:
            raise HostgapError("--end", "the end is not after the start")
        self.start = start
        self.started_at = now

    def stop(self) -> None:
        self.stopped.set()

    def close(self) -> None:
        """Stop, and cancel a class calibration still running (its attach's stop is sent)."""
        self.stop()
        if self.renewal is not None:
            self.renewal.close()

    def __iter__(self) -> Iterator[dict]:
        next_t = self.start + self.step_s
        while not self.stopped.is_set():
            if self.config.end is not None:
                last = self.config.end
            else:
                if self.config.duration_s is not None and self.clock() - self.started_at >= self.config.duration_s:
                    return
                ready = math.floor((self.clock() - self.config.lag_s) / self.step_s) * self.step_s
                if ready < next_t:
                    self.stopped.wait(min(self.step_s, max(0.05, next_t + self.config.lag_s - self.clock())))
                    continue
                last = ready
            while next_t <= last and not self.stopped.is_set():
                # until an instance has been seen, how many the fleet has is unknown: one
                # interval is read to learn it (a day of a thousand read at once is 240,000 cells)
                seen = len(self.window.windows)
                points = max(MIN_POINTS, min(MAX_POINTS - 1, CELL_BUDGET // seen)) if seen else 1
                chunk_end = min(last, next_t + (points - 1) * self.step_s)
                yield from self._read(next_t, chunk_end)
                next_t = chunk_end + self.step_s
            if self.config.end is not None:
                return

    def _read(self, t0: float, t1: float) -> Iterator[dict]:
        with _cycles_not_collected():
            cells = read(self.fetch, self.config.selector, t0, t1, self.step_s)
            chunk = rows(
                cells,
                self.renewal.classes() if self.renewal is not None else self.classes,
                url=self.config.prometheus,
                step_s=self.step_s,
                t_origin=self.start,
                hardware_label=self.config.hardware_label,
            )
            del cells
            if self.renewal is not None:
                self.renewal.observe(chunk)
            for row in chunk:
                self.window.add(row)
                self.kept.append(row)
                self.count += 1
                if self.jsonl is not None:
                    self.jsonl.write(json.dumps(row) + "\n")
            if self.jsonl is not None:
                self.jsonl.flush()
        yield from chunk

    def document(self, schema_version: int) -> dict:
        summ = self.window.summary()
        return {
            "schema_version": schema_version,
            "kind": "fleet_watch",
            "prometheus": self.config.prometheus,
            "match": "{" + self.config.selector + "}",
            "start": self.start,
            "end": self.config.end,
            "interval_s": self.step_s,
            "classes": [c.to_dict() for c in (self.renewal.classes() if self.renewal is not None else self.classes)],
            "renewal": self.renewal.to_dict() if self.renewal is not None else None,
            "summary": summ,
            "failed": [c["condition"] for c in summ["fail_if"] if c["holds"]],
            "intervals_total": self.count,
            "intervals_dropped": self.count - len(self.kept),
            "intervals": list(self.kept),
        }


@contextmanager
def _cycles_not_collected() -> Iterator[None]:
    """Python's cyclic collector held off while a chunk is read and summed up: its query answers,
    cells and rows are trees of dicts and lists (no cycle for the collector to find), and its full
    passes over them took a third of the view's CPU at a thousand instances (bench/results/
    fleet-scale.md). What the chunk frees is freed by reference counting as before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
