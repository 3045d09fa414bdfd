"""A scripted vLLM metrics stand-in for long watches: a clock that never sleeps and a reader
that builds each scrape from the stand-in's state (no HTTP, no text parsing), so tens of
thousands of intervals run in seconds. Faults come by interval number (:data:`FAULTS`): each
has the interval status the documentation promises (docs/watch.md, "Faults").

Used by tests/test_server_watch_soak.py and bench/watch_soak.py.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from hostgap.server.metrics import Histogram, Scrape, ScrapeFailed
from hostgap.server.watch.loop import Clock

INTERVAL_S = 5.0
BATCH = 4
STEPS = 400  # steps per interval
ITL_S = 0.010
FAULTS = {
    "restart": "reset",  # counters start again, process start time moves forward
    "hang": "no-scrape",  # the scrape times out (the clock moves by the timeout)
    "down": "no-scrape",  # refused
    "back": "ok",  # the first interval after a failure: the gap is one longer interval
    "rename": "reset",  # the model's series are renamed (a new model_name): nothing to difference this once
    "add": "ok",  # a second engine index appears (a new LoRA adapter's gauge label too)
    "wall_step": "ok",  # the watching host's wall clock steps back an hour
    "server_clock": "ok",  # the server's clock steps: its process start time goes back
    "nan": "ok",  # a NaN where the server has not set a sum: no number, no crash
    "idle": "idle",  # no step in the interval
}


class FakeClock(Clock):
    """Monotonic and wall time that advance only when the loop waits (or a scrape hangs)."""

    def __init__(self) -> None:
        object.__setattr__(self, "t", [1000.0, 1.8e9])
        object.__setattr__(self, "monotonic", lambda: self.t[0])
        object.__setattr__(self, "wall", lambda: self.t[1])

    def advance(self, seconds: float) -> None:
        self.t[0] += seconds
        self.t[1] += seconds

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        self.advance(seconds)
        return stop.is_set()


@dataclass
class SoakServer:
    """The stand-in's cumulative state (per engine index: steps, generated and prompt tokens,
    inter-token latency count and sum); :meth:`read` is the watch's reader."""

    clock: FakeClock
    faults: dict[int, str] = field(default_factory=dict)  # scrape number -> fault
    scrapes: int = 0
    started: float = 1.7e9
    model: str = "m1"
    engines: dict[str, list[float]] = field(default_factory=lambda: {"0": [0.0] * 5})
    lora: int = 0
    seen: list[str] = field(default_factory=list)  # the fault of each scrape, in order

    def read(self, url: str, timeout_s: float) -> Scrape:
        self.scrapes += 1
        fault = self.faults.get(self.scrapes, "")
        self.seen.append(fault)
        if fault == "hang":
            self.clock.advance(timeout_s)
            raise ScrapeFailed(url, f"timed out after {timeout_s:g} s")
        if fault == "down":
            raise ScrapeFailed(url, "cannot connect ([Errno 111] Connection refused)")
        self._step(fault)
        return self._scrape(url, fault)

    def _step(self, fault: str) -> None:
        if fault == "restart":
            self.engines = {k: [0.0] * 5 for k in self.engines}
            self.started += 3600.0
        if fault == "rename":
            self.model = f"m{self.scrapes}"
        if fault == "add":
            self.engines[str(len(self.engines))] = [0.0] * 5
        if fault == "server_clock":
            self.started -= 3600.0
        if fault == "wall_step":
            self.clock.t[1] -= 3600.0
        self.lora += 1
        if fault == "idle":
            return
        for e in self.engines.values():
            for k, v in enumerate((STEPS, STEPS * BATCH, 100, STEPS * BATCH, STEPS * BATCH * ITL_S)):
                e[k] += v

    def _scrape(self, url: str, fault: str) -> Scrape:
        counters: dict = {"vllm:generation_tokens_total": {}, "vllm:prompt_tokens_total": {}}
        gauges: dict = {
            "process_start_time_seconds": {(): self.started},
            "vllm:lora_requests_info": {(("running_lora_adapters", f"a{self.lora}"),): 1.0},
            "vllm:num_requests_running": {},
        }
        hist: dict = {"vllm:iteration_tokens_total": {}, "vllm:inter_token_latency_seconds": {}}
        for engine, (steps, gen, prompt, itl_n, itl_sum) in self.engines.items():
            lab = (("engine", engine), ("model_name", self.model))
            hist["vllm:iteration_tokens_total"][lab] = Histogram((), steps, gen + prompt)
            total = math.nan if fault == "nan" else itl_sum
            hist["vllm:inter_token_latency_seconds"][lab] = Histogram((), itl_n, total)
            counters["vllm:generation_tokens_total"][lab] = gen
            counters["vllm:prompt_tokens_total"][lab] = prompt
            gauges["vllm:num_requests_running"][lab] = float(BATCH)
        return Scrape(url, self.clock.wall(), self.clock.monotonic(), 0.0, counters, gauges, hist)


def fault_plan(intervals: int, every: int = 97) -> dict[int, str]:
    """Scrape number -> fault: one fault of each kind in turn every ``every`` scrapes (a ``hang``
    and a ``down`` are followed by the interval that comes ``back``). Scrape 1 is the opening one."""
    kinds = ["restart", "hang", "down", "rename", "add", "wall_step", "server_clock", "nan", "idle"]
    plan: dict[int, str] = {}
    k = 0
    for n in range(every, intervals, every):
        kind = kinds[k % len(kinds)]
        plan[n] = kind
        if kind in ("hang", "down"):
            plan[n + 1] = "back"
        k += 1
    return plan
