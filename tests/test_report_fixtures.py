"""Builders shared by the report tests (no tests here): hand-made GPU decode traces, a
measured-run directory around one, and headless Chromium helpers."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hostgap.stats.differencing import Series, difference

EVIL_KERNEL = "<script>document.title='pwned'</script>"
EVIL_OP = "aten::<img src=x onerror=\"document.title='pwned2'\">"
HOST_PID, HOST_TID = 100, 1
H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]


def _x(cat, name, ts, dur, pid, tid, **args):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {k: v for k, v in args.items() if v is not None},
    }


def decode_events(
    n_steps: int = 6,
    kernels: int = 3,
    spacing_us: float = 20.0,
    kernel_us: float = 8.0,
    evil: bool = False,
    step_us: float | None = None,
) -> list[dict]:
    """``n_steps`` ProfilerStep windows; in each, ``kernels`` times: a Python frame enclosing an
    aten op enclosing a cudaLaunchKernel, whose kernel starts 6 µs after the launch. Host
    spacing between ops sets the host share."""
    ev = []
    corr = 0
    step_us = step_us or (10 + kernels * spacing_us + 20)
    names = ["gemm_kernel", EVIL_KERNEL if evil else "attention_kernel", "elementwise_kernel"]
    ops = ["aten::linear", EVIL_OP if evil else "aten::mul", "aten::add"]
    for i in range(n_steps):
        s = i * step_us
        ev.append(_x("user_annotation", f"ProfilerStep#{i}", s, step_us - 10, HOST_PID, HOST_TID))
        for k in range(kernels):
            corr += 1
            op_ts = s + 5 + k * spacing_us
            ev.append(_x("python_function", "<built-in function linear>", op_ts - 2, 16, HOST_PID, HOST_TID))
            ev.append(_x("cpu_op", ops[k % 3], op_ts, 12, HOST_PID, HOST_TID))
            ev.append(_x("cuda_runtime", "cudaLaunchKernel", op_ts + 4, 4, HOST_PID, HOST_TID, correlation=corr))
            ev.append(_x("kernel", names[k % 3], op_ts + 10, kernel_us, 0, 7, device=0, stream=7, correlation=corr))
    return ev


def write_trace(path: Path, events: list[dict], gz: bool = False) -> str:
    doc = {"schemaVersion": 1, "deviceProperties": H100, "traceEvents": events}
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return str(path)


def make_run_dir(
    folder: Path,
    run_id: str = "20261130-000000-micro-hf-cuda-eager-b1-abc123",
    host_ms: float = 3.0,
    gpu_ms: float = 1.0,
    **trace_kw,
) -> Path:
    """A run directory as ``hostgap measure`` lays it out: results.json (differencing of a
    linear synthetic sweep), timings.json and the anatomy trace."""
    run = folder / run_id
    (run / "traces").mkdir(parents=True)
    write_trace(run / "traces" / "trace_n8_r0.json.gz", decode_events(**trace_kw), gz=True)
    ns = [1, 2, 4, 8]
    wall = {n: [int(1e6 * (5 + (host_ms + gpu_ms) * n) + j * 1000) for j in range(3)] for n in ns}
    busy = {n: [int(1e6 * (0.5 + gpu_ms * n))] for n in ns}
    series = Series(
        wall_ns=wall,
        traced_wall_ns=wall,
        busy_ns=busy,
        kernel_sum_ns=busy,
        kernel_union_ns=busy,
        kernel_count={n: [3 * n] for n in ns},
    )
    d = difference(series, 1, 8, prompt_len=16).to_dict()
    d.update({"activity_label": "GPU-active", "kernels_per_output_token": 3.0, "unique_kernels": 3})
    results = {
        "schema_version": 1,
        "run_id": run_id,
        "created": "2026-11-30T00:00:00Z",
        "preset": "micro",
        "engine": "hf",
        "mode": "eager",
        "batch": 1,
        "prompt_len": 16,
        "dtype": "bfloat16",
        "device": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "n1": 1,
        "n2": 8,
        "differencing": d,
        "hdbi": None,
        "verdict": {"verdict": "host-bound", "basis": "host_fraction", "host_fraction": d["host_fraction"], "note": ""},
        "anatomy_trace": "traces/trace_n8_r0.json.gz",
        "run_dir": str(run),
        "cell_key": run_id,
    }
    timings = {
        "schema_version": 1,
        "untraced_wall_ns": {str(n): v for n, v in wall.items()},
        "traced": {str(n): [{"busy_ns": b} for b in v] for n, v in busy.items()},
    }
    (run / "results.json").write_text(json.dumps(results))
    (run / "timings.json").write_text(json.dumps(timings))
    return run


# -- headless Chromium ---------------------------------------------------------------------

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    pytest.skip("headless Chromium not installed (Debian: apt-get install -y chromium); render tests skipped")


def run_chromium(html_path: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp / f"chromium-profile-{len(list(tmp.iterdir()))}"
    profile.mkdir()
    cmd = [
        chromium(),
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *extra,
        Path(html_path).resolve().as_uri(),
    ]
    env = {**os.environ, "HOME": str(tmp)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def console_problems(stderr: str) -> list[str]:
    """Lines of Chromium's log that report page errors (console messages, uncaught errors,
    blocked loads); the browser's own dbus/GPU noise is ignored."""
    bad = ("Uncaught", ":CONSOLE(", "Refused to", "Failed to load resource", "net::ERR_")
    return [ln for ln in stderr.splitlines() if any(b in ln for b in bad)]


# -- a CPU run -----------------------------------------------------------------------------


def cpu_decode_events(n_steps: int = 6, ops: int = 3, spacing_us: float = 20.0, op_us: float = 8.0) -> list[dict]:
    """A CPU-only decode trace: ``n_steps`` ProfilerStep windows, in each ``ops`` compute ops
    (``aten::add``, no children, so each is CPU-compute) each inside a Python frame whose name
    carries the address of the object it ran on -- a different address every call, as CPython
    prints them -- and no GPU events at all."""
    ev = []
    step_us = 10 + ops * spacing_us + 20
    for i in range(n_steps):
        s = i * step_us
        ev.append(_x("user_annotation", f"ProfilerStep#{i}", s, step_us - 10, HOST_PID, HOST_TID))
        for k in range(ops):
            op_ts = s + 5 + k * spacing_us
            addr = 0x7D67A1B2C000 + 0x40 * (i * ops + k)
            ev.append(
                _x(
                    "python_function",
                    f"<built-in method add of Tensor object at {addr:#x}>",
                    op_ts - 2,
                    op_us + 4,
                    HOST_PID,
                    HOST_TID,
                )
            )
            ev.append(_x("cpu_op", "aten::add", op_ts, op_us, HOST_PID, HOST_TID))
    return ev


def make_cpu_run_dir(
    folder: Path,
    run_id: str = "20261130-000000-micro-hf-cpu-eager-b1-cpu123",
    host_ms: float = 2.0,
    cpu_ms: float = 1.0,
    **trace_kw,
) -> Path:
    """A CPU run directory as ``hostgap measure`` lays it out (activity ``cpu-compute``)."""
    run = make_run_dir(folder, run_id, host_ms=host_ms, gpu_ms=cpu_ms)
    write_trace(run / "traces" / "trace_n8_r0.json.gz", cpu_decode_events(**trace_kw), gz=True)
    res = json.loads((run / "results.json").read_text())
    res["device"], res["device_name"], res["dtype"] = "cpu", "AMD EPYC (test)", "float32"
    res["differencing"].update(
        {
            "activity": "cpu-compute",
            "activity_label": "CPU compute (device-active analogue)",
            "h2d_bytes_per_step": 0,
            "d2h_bytes_per_step": 0,
        }
    )
    res["verdict"]["note"] = "CPU run"
    (run / "results.json").write_text(json.dumps(res))
    return run
