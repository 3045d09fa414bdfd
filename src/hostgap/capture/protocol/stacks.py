"""What the host is doing: py-spy samples of the process tree, summarised as shares.

``--stacks`` runs one extra untraced long run (N2 tokens) while ``py-spy record`` samples this
process and its children (``--subprocesses --threads --idle --native``, raw collapsed
stacks). Each sample is classified by its innermost recognised frame:

``compute``
    native compute kernels running on the CPU (BLAS/GEMM, oneDNN, vectorised ATen loops,
    attention and softmax kernels): work a faster device would take over;
``waiting``
    synchronisation, IPC and sleep (device syncs and blocking copies, futex/condition waits,
    poll/epoll/select, sockets, ZeroMQ, sleeps);
``other``
    everything else: the Python interpreter, framework dispatch, allocation, the engine's own
    code. This is the host pipeline the papers blame (paper: 91 % of the residual in the host
    pipeline, dominated by socket poll/wait of the engine IPC; active compute < 2 %).

Shares are reported over the samples of the busiest Python thread (the one that ran the
decode loop) and over all Python threads of the tree. Native sampling pauses the process at
every sample (the run is several times slower): it is not timed and not used for W(N).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from hostgap.errors import HostgapError

WAITING = re.compile(
    r"synchroni[sz]e|cudaMemcpy(?!Async)|cuMemcpyDtoH(?!Async)|cuStreamSynchronize|cuEventSynchronize|"
    r"sched_yield|epoll_wait|\bpoll\b|\bselect\b|__poll|futex|pthread_cond_|sem_wait|nanosleep|"
    r"clock_nanosleep|time_sleep|\bsleep\b|\brecv|zmq|socket|_wait_for_tstate_lock|Condition\.wait|"
    r"\bwait \(|acquire \(|take_gil|PyThread_acquire_lock",
    re.IGNORECASE,
)
COMPUTE = re.compile(
    r"gemm|gemv|cblas|cpublas|\bblas|mkl_|dnnl|mkldnn|onednn|brgemm|openblas|sleef|Vectorized|"
    r"vec::|cpu_kernel|_kernel_impl|kernel_impl|VectorizedLoop2d|basic_loop|loop2d|"
    r"unary_kernel|binary_kernel|reduce_kernel|softmax|flash_attention|_scaled_dot_product|"
    r"index_copy_kernel|cat_serial_kernel|copy_kernel|fill_kernel|rms_norm|libgomp|GOMP_",
)

CLASSES = ("compute", "waiting", "other")
THREAD = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)")


def find_pyspy() -> str | None:
    """py-spy next to this Python (a venv) or on PATH."""
    local = Path(sys.executable).with_name("py-spy")
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("py-spy")


def classify(frames: list[str]) -> str:
    """Class of one sample from its frames (root first): the innermost recognised frame wins.

    >>> classify(["main (x.py:1)", "forward (m.py:3)", "at::native::cpublas::gemm (libtorch_cpu.so)"])
    'compute'
    >>> classify(["main (x.py:1)", "poll (libc.so.6)"])
    'waiting'
    >>> classify(["main (x.py:1)", "_call_impl (module.py:9)"])
    'other'
    """
    for f in reversed(frames):
        name = f.split(" (")[0] if " (" in f else f
        if WAITING.search(name) or WAITING.search(f):
            return "waiting"
        if COMPUTE.search(name):
            return "compute"
    return "other"


def parse_raw(text: str) -> dict[str, Counter]:
    """Collapsed stacks (``frame;frame;... count``) -> {thread: Counter(class -> samples)}.

    The thread is the ``thread (...)`` frame when py-spy ran with ``--threads``, else "all".
    """
    per_thread: dict[str, Counter] = defaultdict(Counter)
    for line in text.splitlines():
        line = line.strip()
        if not line or " " not in line:
            continue
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        frames = stack.split(";")
        thread = "all"
        for i, f in enumerate(frames[:3]):
            if f.startswith("thread ("):
                thread = f"{frames[0]}|{f}" if i else f
                frames = frames[i + 1 :]
                break
        per_thread[thread][classify(frames)] += n
    return per_thread


def shares(counts: Counter) -> dict:
    total = sum(counts.values())
    return {
        "samples": int(total),
        **{f"{c}_share": (counts[c] / total if total else None) for c in CLASSES},
    }


def summarise(text: str) -> dict:
    """Shares over the busiest thread (the decode loop) and over every thread."""
    per = parse_raw(text)
    if not per:
        return {"samples": 0, "note": "py-spy recorded no samples"}
    busiest = max(per, key=lambda t: sum(per[t].values()) - per[t]["waiting"])
    total: Counter[str] = Counter()
    for c in per.values():
        total.update(c)
    return {
        "main_thread": {"thread": busiest, **shares(per[busiest])},
        "all_threads": {"threads": len(per), **shares(total)},
        "classes": {"compute": COMPUTE.pattern, "waiting": WAITING.pattern, "other": "everything else"},
    }


def sample_during(fn: Callable[[], object], out_dir: Path, rate_hz: int = 100, native: bool = True) -> dict:
    """Run ``fn`` while py-spy samples this process tree; return the summary (and write the
    raw stacks to ``out_dir/pyspy.txt``)."""
    exe = find_pyspy()
    if exe is None:
        raise HostgapError("--stacks", "py-spy not found; install it: pip install py-spy")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / "pyspy.txt"
    cmd = [
        exe,
        "record",
        "--pid",
        str(os.getpid()),
        "--rate",
        str(rate_hz),
        "--format",
        "raw",
        "--idle",
        "--threads",
        "--subprocesses",
        "--output",
        str(raw),
    ]
    if native:
        cmd.append("--native")
    log = open(out_dir / "pyspy.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_started(proc, out_dir / "pyspy.log")
        t0 = time.perf_counter_ns()
        fn()
        wall = time.perf_counter_ns() - t0
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    if not raw.is_file():
        tail = (out_dir / "pyspy.log").read_text()[-300:].strip().splitlines()
        raise HostgapError("--stacks", f"py-spy wrote no samples ({tail[-1] if tail else 'no output'})")
    summary = summarise(raw.read_text())
    summary.update({"raw": "stacks/pyspy.txt", "rate_hz": rate_hz, "native": native, "sampled_wall_ns": wall})
    return summary


def _wait_started(proc: subprocess.Popen, log: Path, timeout_s: float = 15.0) -> None:
    """Wait until py-spy says it is sampling (or failed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log.read_text().strip().splitlines()
            raise HostgapError("--stacks", f"py-spy could not attach: {text[-1] if text else proc.returncode}")
        if "Sampling process" in log.read_text():
            return
        time.sleep(0.05)
