"""A real Prometheus for tests (Debian's package): on 127.0.0.1, a temporary data directory,
1 s scrape and rule evaluation, stopped when the test ends (also when it fails); and a tiny
127.0.0.1 exporter serving vLLM-format metrics whose counters grow at fixed rates."""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PROMETHEUS = shutil.which("prometheus")
MISSING = "prometheus not installed (Debian's prometheus package; scripts/test.sh installs it)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Rates:
    """Per second: engine steps, decode tokens (= ITL observations), the ITL sum, prompt tokens."""

    model: str
    steps: float
    decode: float
    itl_sum: float
    prompt: float
    running: float = 4.0


def vllm_text(r: Rates, t: float) -> str:
    lab = f'engine="0",model_name="{r.model}"'
    steps, decode, itl, prompt = r.steps * t, r.decode * t, r.itl_sum * t, r.prompt * t
    return "\n".join(
        [
            "# TYPE vllm:iteration_tokens_total histogram",
            f'vllm:iteration_tokens_total_bucket{{{lab},le="+Inf"}} {steps}',
            f"vllm:iteration_tokens_total_count{{{lab}}} {steps}",
            f"vllm:iteration_tokens_total_sum{{{lab}}} {decode + prompt}",
            "# TYPE vllm:inter_token_latency_seconds histogram",
            f'vllm:inter_token_latency_seconds_bucket{{{lab},le="+Inf"}} {decode}',
            f"vllm:inter_token_latency_seconds_count{{{lab}}} {decode}",
            f"vllm:inter_token_latency_seconds_sum{{{lab}}} {itl}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {decode}",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lab}}} {prompt}",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {r.running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} 0",
            "",
        ]
    )


@contextmanager
def exporter(rates: Rates) -> Iterator[str]:
    """HOST:PORT of a 127.0.0.1 server whose /metrics counters are ``rate × seconds since start``."""
    t0 = time.time()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = vllm_text(rates, time.time() - t0).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


@contextmanager
def prometheus(tmp: Path, targets: Sequence[str], rule_files: Sequence[Path] = ()) -> Iterator[str]:
    """The URL of a Prometheus scraping ``targets`` (job ``vllm``) every second, evaluating
    ``rule_files`` every second; stopped (SIGTERM, then SIGKILL) when the block ends."""
    assert PROMETHEUS is not None, MISSING
    port = free_port()
    rules = "".join(f"  - {p}\n" for p in rule_files)
    cfg = tmp / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
        + f"      - targets: [{', '.join(repr(t) for t in targets)}]\n"
    )
    log = open(tmp / "prometheus.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        process_group=0,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def query(url: str, expr: str) -> list[dict]:
    """An instant query's vector."""
    import json
    import urllib.parse

    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10) as r:
        return json.loads(r.read())["data"]["result"]
