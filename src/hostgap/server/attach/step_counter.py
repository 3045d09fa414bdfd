"""Counting a server's engine steps while attach waits, and showing it.

Two sources, first that applies:

- the load hostgap drives itself: it counts the tokens its requests streamed (the server's
  running usage, else one per chunk), so with C requests decoding, steps ~= tokens / C
  (:class:`LoadCounter`);
- the server's Prometheus ``/metrics``: vLLM's ``vllm:iteration_tokens_total`` histogram counts
  one observation per engine step (:class:`MetricsCounter`), parsed with ``prometheus_client``.

A counter answers ``None`` when it cannot tell; attach then waits on files or time instead.
"""

from __future__ import annotations

import sys
import time

from hostgap.server.attach.loadgen import LoadGenerator
from hostgap.server.httpcall import Unreachable, call

STEP_COUNT_SAMPLES = ("vllm:iteration_tokens_total_count",)
"""Samples that count engine steps (one observation per step)."""


class LoadCounter:
    """Steps from the tokens of hostgap's own load (decode steps at batch C)."""

    def __init__(self, load: LoadGenerator):
        self.load = load

    def count(self) -> int | None:
        with self.load._lock:
            tokens = self.load.stats.tokens
        return tokens // max(1, self.load.spec.concurrency)


class MetricsCounter:
    """Steps from the server's ``/metrics`` (None when it has no step counter)."""

    def __init__(self, url: str, timeout_s: float = 5.0):
        self.url = url
        self.timeout_s = timeout_s
        self.available = True

    def count(self) -> int | None:
        if not self.available:
            return None
        try:
            status, body = call("GET", self.url + "/metrics", timeout_s=self.timeout_s)
        except Unreachable:
            return None
        if status != 200:
            self.available = False
            return None
        value = step_count(body.decode("utf-8", "replace"))
        if value is None:
            self.available = False
        return value


def step_count(text: str) -> int | None:
    """Sum of the step-count samples of a Prometheus exposition text (all label sets), or None.

    >>> step_count('# TYPE vllm:iteration_tokens_total histogram\\n'
    ...            'vllm:iteration_tokens_total_count{engine="0"} 12.0\\n')
    12
    """
    from prometheus_client.parser import text_string_to_metric_families

    total, seen = 0.0, False
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in STEP_COUNT_SAMPLES:
                    total += s.value
                    seen = True
    except ValueError:
        return None
    return int(total) if seen else None


PROGRESS_EVERY_S = 10.0
"""Where the bar cannot redraw a line (not a terminal), how often the wait is said instead."""


class Bar:
    """Progress while attach waits: a one-line display redrawn on stderr in a terminal;
    elsewhere, with ``say``, one line every :data:`PROGRESS_EVERY_S` seconds (a log, a watch's
    notes) so a wait is never silent."""

    def __init__(self, total: int, label: str, enabled: bool | None = None, say=None, clock=time.monotonic):
        self.total = total
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.say = say
        self.clock = clock
        self.t0 = clock()
        self._said = self.t0
        self._last = ""

    def show(self, done: int | None, note: str = "") -> None:
        if not self.enabled:
            now = self.clock()
            if self.say is not None and now - self._said >= PROGRESS_EVERY_S:
                self._said = now
                seen = "steps not counted" if done is None else f"{min(self.total, max(0, done))}/{self.total} steps"
                self.say(f"{self.label}: {seen} after {now - self.t0:.0f} s {note}".rstrip())
            return
        width = 24
        if done is None:
            line = f"{self.label}: waiting {self.clock() - self.t0:4.0f} s {note}"
        else:
            k = min(self.total, max(0, done))
            fill = int(width * k / max(1, self.total))
            line = f"{self.label} [{'#' * fill}{'.' * (width - fill)}] {k}/{self.total} {note}"
        if line != self._last:
            sys.stderr.write("\r" + line[:120].ljust(len(self._last[:120])))
            sys.stderr.flush()
            self._last = line

    def close(self) -> None:
        if self.enabled and self._last:
            sys.stderr.write("\n")
            sys.stderr.flush()
