"""End to end: `hostgap measure` on the tiny preset (CPU), and a sweep interrupted and resumed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hostgap.capture.differencing import linear_fit  # noqa: E402
from hostgap.cli import cli  # noqa: E402
from hostgap.store import RunsDB  # noqa: E402

N2 = 64


def _measure(tmp: Path, db: Path) -> dict:
    r = CliRunner().invoke(cli, [
        "measure", "-p", "tiny", "--device", "cpu", "--n2", str(N2), "--repeats", "9",
        "--out", str(tmp / "runs"), "--db", str(db), "--json", "-q",
    ], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output[r.output.index("{"):])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("measure")
    db = tmp / "runs.sqlite"
    result = _measure(tmp, db)
    if result["differencing"]["r2_wall"] < 0.99:
        # Wall times on a shared 2-core machine jitter 1.5-2x when other work runs; one fresh
        # measurement is allowed before the linearity assertion judges the method.
        result = _measure(tmp, db)
    return result, Path(result["run_dir"]), db


@pytest.mark.slow
def test_kernel_count_is_exactly_linear(tiny_run):
    _result, run_dir, _db = tiny_run
    timings = json.loads((run_dir / "timings.json").read_text())
    k = {int(n): [s["kernel_count"] for s in v] for n, v in timings["traced"].items()}
    assert all(len(set(v)) == 1 for v in k.values())  # every repeat issues the same ops
    ns = sorted(k)
    per_step = (k[ns[-1]][0] - k[ns[0]][0]) // (ns[-1] - ns[0])
    assert per_step > 0
    for n in ns:
        assert k[n][0] == k[ns[0]][0] + per_step * (n - ns[0])
    for n, v in timings["traced"].items():
        assert all(s["step_annotations"] == int(n) for s in v)  # one annotation per step


@pytest.mark.slow
def test_min_of_repeats_wall_is_linear(tiny_run):
    result, run_dir, _db = tiny_run
    timings = json.loads((run_dir / "timings.json").read_text())
    w = {int(n): min(v) for n, v in timings["untraced_wall_ns"].items()}
    assert len(w) >= 5 and max(w) / min(w) >= 10  # a decade of N
    fit = linear_fit(list(w), list(w.values()))
    assert fit.r2 >= 0.99
    assert result["differencing"]["r2_wall"] == pytest.approx(fit.r2)


@pytest.mark.slow
def test_split_and_invariants(tiny_run):
    result, run_dir, db = tiny_run
    d = result["differencing"]
    assert d["activity"] == "cpu-compute" and "analogue" in d["activity_label"]
    assert 0 < d["host_fraction"] < 1
    assert 0 < d["g_step_ns"] < d["t_step_ns"]
    assert d["h_step_ns"] == pytest.approx(d["t_step_ns"] - d["g_step_ns"])
    for key in ("t_step_ns", "g_step_ns", "h_step_ns", "host_fraction"):
        lo, hi = d["ci"][key]
        assert lo <= hi
    assert d["ci"]["t_step_ns"][0] <= d["t_step_ns"] <= d["ci"]["t_step_ns"][1]
    assert d["k_step"] == int(d["k_step"]) and d["k_step"] > 0
    assert d["profiler_inflation"] > -0.5
    assert d["kv_range"] == [128 + 1, 128 + N2 - 1]
    timings = json.loads((run_dir / "timings.json").read_text())
    for v in timings["traced"].values():
        for s in v:
            assert s["kernel_union_ns"] <= s["kernel_sum_ns"]
            assert 0 < s["busy_ns"] <= s["wall_ns"]
    assert result["hdbi"] is None and result["verdict"]["verdict"] in ("host-bound", "balanced", "device-bound")
    steps = result["steps_decode"]
    assert len(steps) == N2 - 1 and all(s["kind"] == "decode" and s["wall_ns"] > 0 for s in steps)
    for s in steps:
        assert s["gpu_active_ns"] <= s["wall_ns"]
    # contract keys for fit/regimes
    for key in ("schema_version", "run_id", "preset", "arch", "device", "device_name", "mode", "engine",
                "batch", "prompt_len", "dtype", "n1", "n2", "threads", "repeats", "differencing",
                "taxbreak", "steps_decode", "verdict", "anatomy_summary"):
        assert key in result
    for key in ("t_step_ns", "g_step_ns", "h_step_ns", "k_step", "host_fraction", "kernel_sum_step_ns",
                "ci", "r2_wall", "r2_gpu", "slope_agreement", "profiler_inflation", "copies_per_step",
                "activity"):
        assert key in d


@pytest.mark.slow
def test_run_directory_and_db(tiny_run):
    result, run_dir, db = tiny_run
    for name in ("config.json", "manifest.json", "timings.json", "results.json"):
        assert (run_dir / name).is_file()
    traces = sorted(p.name for p in (run_dir / "traces").iterdir())
    assert traces == ["trace_n1_r0.json.gz", f"trace_n{N2}_r0.json.gz"]  # --keep-traces ends
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["packages"]["torch"] and manifest["cpu"]["model"] and manifest["command"]
    on_disk = json.loads((run_dir / "results.json").read_text())
    with RunsDB(db) as d:
        assert d.get(result["run_id"]) == on_disk
    shown = CliRunner().invoke(cli, ["show", result["run_id"], "--db", str(db)])
    assert shown.exit_code == 0 and "host-exposed" in shown.output and "CPU compute" in shown.output


def _count(db: Path) -> int:
    try:
        con = sqlite3.connect(db, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_sweep_resumes_after_interrupt(tmp_path):
    db, out = tmp_path / "runs.sqlite", tmp_path / "runs"
    args = [sys.executable, "-m", "hostgap", "sweep", "-p", "tiny", "-b", "1,2,3", "-L", "16",
            "--device", "cpu", "--n2", "8", "--repeats", "2", "--traced-repeats", "1",
            "--warmup", "1", "--db", str(db), "--out", str(out)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 240
    while _count(db) < 1 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert p.poll() is None, p.communicate()
    p.send_signal(signal.SIGINT)
    _out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    done = _count(db)
    assert 1 <= done < 3
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert all((d / "results.json").is_file() for d in dirs)  # no half-written run left
    again = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"{3 - done} measured, {done} already done" in again.stderr
    with RunsDB(db) as d:
        keys = [r["cell_key"] for r in d.results()]
    assert len(keys) == 3 == len(set(keys))
    assert sorted(r["batch"] for r in RunsDB(db).results()) == [1, 2, 3]
