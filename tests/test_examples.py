"""The scripts in examples/ run as a user would run them, against traces built here (a host-bound
and a device-bound decode loop), a stand-in SGLang server and a stand-in metrics server; and the
README's Python snippet runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import annotation, kernel, launch, write_kineto
from metrics_standin import MetricsStandIn
from test_server_attach import standin  # noqa: F401 (the fixture)
from test_server_watch import texts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def decode_trace(path: Path, host_us: float, steps: int = 6) -> Path:
    """``steps`` decode steps of four 10 µs kernels each, launched ``host_us`` apart: the host
    gaps make the step host-bound when large, device-bound when small."""
    events, t, corr = [], 0.0, 0
    for i in range(steps):
        start = t
        for _ in range(4):
            corr += 1
            events.append(launch(ts=t, dur=2.0, corr=corr))
            events.append(kernel(f"gemv{corr % 2}", ts=t + 3.0, dur=10.0, corr=corr))
            t += max(host_us, 2.0) + 1.0
        t += 12.0
        events.append(annotation(f"ProfilerStep#{i}", ts=start, dur=t - start))
        t += 1.0
    return write_kineto(path, events, gz=path.suffix == ".gz")


def run_example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOSTGAP_DB": str(cwd / "runs.sqlite")}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=240
    )


@pytest.fixture
def traces(tmp_path) -> tuple[Path, Path]:
    return decode_trace(tmp_path / "fast.json", 1.0), decode_trace(tmp_path / "slow.json", 40.0)


def test_steps_in_pandas(traces, tmp_path):
    fast, slow = traces
    r = run_example("steps_in_pandas.py", str(fast), str(slow), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"{slow}: host-bound" in r.stdout
    table = r.stdout.split("host_exposed_ns")[1]
    assert str(fast) in table and str(slow) in table


def test_compare_traces_gates(traces, tmp_path):
    fast, slow = traces
    worse = run_example("compare_traces.py", str(fast), str(slow), cwd=tmp_path)
    assert worse.returncode == 1, worse.stderr
    assert "regressed: host_fraction>+5%" in worse.stdout
    same = run_example("compare_traces.py", str(fast), str(fast), cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert "no regression" in same.stdout


def test_attach_gate(standin, traces, tmp_path):  # noqa: F811
    s = standin("sglang")
    fast, slow = traces
    r = run_example("attach_gate.py", s.url, str(slow), str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    assert "attached " in r.stdout and ("FAIL:" in r.stdout) == (r.returncode == 1)


def test_watch_to_dataframe(tmp_path):
    with MetricsStandIn(texts(6)) as srv:
        r = run_example("watch_to_dataframe.py", srv.url, "0.6", "0.15", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "host share 0.4" in r.stdout and "steps_per_s" in r.stdout


def test_readme_snippet_runs_as_written(tmp_path):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "the README has a Python snippet"
    decode_trace(tmp_path / "trace.json.gz", 40.0)  # the file the snippet names
    for code in blocks:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=240)
        assert r.returncode == 0, r.stderr
