"""Stand-in /metrics servers for the watch tests.

SGLang does not install on these CPU machines, so its metrics are built here: :func:`sglang_text`
renders the series SGLang's scheduler and tokenizer manager export (names, types and labels as
documented for sglang 0.5.20+: ``sglang:scheduler_stage_seconds_total{category}``,
``sglang:scheduler_idle_seconds_total``, ``sglang:forward_execution_seconds_total{category}`` and
``sglang:fwd_occupancy`` only with ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``,
``sglang:realtime_tokens_total{mode}``, ``sglang:cuda_graph_passes_total{mode}``,
``sglang:inter_token_latency_seconds``, the scheduler gauges) through ``prometheus_client``'s
own writer, the library SGLang exports them with. The numbers are chosen by hand so every
expected value in the tests can be worked out on paper.

:class:`MetricsStandIn` is a 127.0.0.1 HTTP server that answers ``GET /metrics`` with the next
item of a script: a text, or an action (``"404"``, ``"500"``, ``"hang"``, ``"close"``, ``"late"``:
the item after it, ``hang_s`` late); the last
item repeats. Use it as a context manager (the server thread is always stopped).
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

SGLANG_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.040, 0.060, 0.1)


@dataclass
class SglangState:
    """Cumulative counters of one SGLang scheduler rank at one moment (seconds and tokens)."""

    stages: dict[str, float] = field(
        default_factory=lambda: {
            "recv_requests": 1.0,
            "get_next_batch": 2.0,
            "run_batch": 10.0,
            "process_batch_result": 3.0,
        }
    )
    idle_s: float = 4.0
    forward_s: dict[str, float] = field(default_factory=lambda: {"decode": 6.0, "extend": 1.0})
    decode_passes: float = 1000.0
    decode_tokens: float = 8000.0
    prefill_tokens: float = 500.0
    itl: tuple[tuple[float, int], ...] = ((0.015, 8000),)
    running: float = 8.0
    queued: float = 0.0
    occupancy_pct: float = 60.0

    def advanced(
        self,
        *,
        stages: dict[str, float],
        idle_s: float,
        forward_decode_s: float,
        passes: float,
        batch: float,
        itl_s: float,
    ) -> SglangState:
        """This state after ``passes`` decode passes of ``batch`` sequences each."""
        tokens = passes * batch
        return SglangState(
            stages={k: v + stages.get(k, 0.0) for k, v in self.stages.items()},
            idle_s=self.idle_s + idle_s,
            forward_s={**self.forward_s, "decode": self.forward_s["decode"] + forward_decode_s},
            decode_passes=self.decode_passes + passes,
            decode_tokens=self.decode_tokens + tokens,
            prefill_tokens=self.prefill_tokens,
            itl=(*self.itl, (itl_s, int(tokens))),
            running=batch,
            queued=self.queued,
            occupancy_pct=self.occupancy_pct,
        )


def sglang_text(ranks: Sequence[SglangState], *, device_timer: bool, model: str = "tiny") -> str:
    """The /metrics text of an SGLang server whose scheduler ranks are ``ranks`` (tp_rank 0, 1…).

    Without ``device_timer`` the forward-time counter is registered but never incremented
    (HELP and TYPE lines only) and ``sglang:fwd_occupancy`` is NaN, as SGLang writes them."""
    reg = CollectorRegistry()
    lab = list(SGLANG_LABELS)
    stage = Counter(
        "sglang:scheduler_stage_seconds", "Scheduler loop wall time by stage.", lab + ["category"], registry=reg
    )
    idle = Counter("sglang:scheduler_idle_seconds", "Scheduler idle wall time.", lab, registry=reg)
    fwd = Counter(
        "sglang:forward_execution_seconds",
        "Total time that GPU is busy executing model forward passes.",
        lab + ["category"],
        registry=reg,
    )
    passes = Counter(
        "sglang:cuda_graph_passes",
        "Total number of forward passes categorized by CUDA graph.",
        lab + ["mode"],
        registry=reg,
    )
    realtime = Counter("sglang:realtime_tokens", "Total number of tokens processed.", lab + ["mode"], registry=reg)
    occupancy = Gauge("sglang:fwd_occupancy", "GPU forward time over wall time (%).", lab, registry=reg)
    running = Gauge("sglang:num_running_reqs", "The number of running requests.", lab, registry=reg)
    queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", lab, registry=reg)
    gen = Gauge("sglang:gen_throughput", "The generation throughput (token/s).", lab, registry=reg)
    itl = Histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        ["model_name"],
        buckets=ITL_BUCKETS,
        registry=reg,
    )
    for rank, st in enumerate(ranks):
        labels = {
            "model_name": model,
            "engine_type": "unified",
            "tp_rank": str(rank),
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        for cat, seconds in st.stages.items():
            stage.labels(**labels, category=cat).inc(seconds)
        idle.labels(**labels).inc(st.idle_s)
        if device_timer:
            for cat, seconds in st.forward_s.items():
                fwd.labels(**labels, category=cat).inc(seconds)
        occupancy.labels(**labels).set(st.occupancy_pct if device_timer else float("nan"))
        passes.labels(**labels, mode="decode_none").inc(st.decode_passes)
        realtime.labels(**labels, mode="decode").inc(st.decode_tokens)
        realtime.labels(**labels, mode="prefill_compute").inc(st.prefill_tokens)
        realtime.labels(**labels, mode="prefill_cache").inc(0)
        running.labels(**labels).set(st.running)
        queued.labels(**labels).set(st.queued)
        gen.labels(**labels).set(533.0)
    # the tokenizer manager observes one histogram for the whole server
    first = ranks[0]
    child = itl.labels(model_name=model)
    for value, count in first.itl:
        for _ in range(count):
            child.observe(value)
    return generate_latest(reg).decode()


# -------------------------------------------------------------------------- HTTP stand-in


class MetricsStandIn:
    """``GET /metrics`` answers with the next item of ``script`` (text or an action word)."""

    def __init__(self, script: Sequence[str], *, path: str = "/metrics", hang_s: float = 30.0):
        self.script = list(script)
        self.path = path
        self.hang_s = hang_s
        self.served = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        handler = self._handler()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def next_item(self) -> str:
        with self._lock:
            item = self.script[min(self.served, len(self.script) - 1)]
            self.served += 1
            return item

    def _handler(self):
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != standin.path:
                    self.send_error(404)
                    return
                item = standin.next_item()
                if item in ("404", "500"):
                    self.send_error(int(item))
                elif item == "hang":
                    standin._stop.wait(standin.hang_s)
                elif item == "late":  # the next item of the script, hang_s late
                    standin._stop.wait(standin.hang_s)
                    self._send(standin.next_item())
                elif item == "close":
                    self.close_connection = True
                    self.connection.shutdown(2)
                else:
                    self._send(item)

            def _send(self, item: str) -> None:
                body = item.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def __enter__(self) -> MetricsStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
