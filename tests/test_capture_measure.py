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

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hostgap.cli import cli  # noqa: E402
from hostgap.stats.differencing import linear_fit  # noqa: E402
from hostgap.store.database import RunsDB  # noqa: E402

N2 = 64


def _measure(tmp: Path, db: Path, *extra: str) -> dict:
    r = CliRunner().invoke(
        cli,
        [
            "measure",
            "-p",
            "tiny",
            "--device",
            "cpu",
            "--n2",
            str(N2),
            "--repeats",
            "7",
            "--out",
            str(tmp / "runs"),
            "--db",
            str(db),
            "--json",
            "-q",
            *extra,
        ],
        catch_exceptions=False,
    )
    result = json.loads(r.output[r.output.index("{") :])
    # valid: exit 0; invalid (a busy machine, a failed check): exit 3 with its reasons
    assert r.exit_code == (0 if result["valid"] else 3), r.output[-2000:]
    return result


def assert_result_or_invalid(result: dict) -> None:
    """A measurement is a number in range, or it is marked invalid with its reasons: never an
    out-of-range number presented as valid."""
    d = result["differencing"]
    if not result["valid"]:
        assert result["invalid_reasons"] and result["verdict"]["verdict"] == "invalid"
        return
    assert result["invalid_reasons"] == []
    assert 0 <= d["host_fraction"] <= 1
    assert 0 <= d["g_step_ns"] <= d["t_step_ns"] and d["h_step_ns"] >= 0
    assert d["r2_wall"] >= 0.99 and d["r2_gpu"] >= 0.99
    assert result["verdict"]["verdict"] in ("host-bound", "balanced", "device-bound")
    for key in ("t_step_ns", "g_step_ns", "h_step_ns", "host_fraction"):
        lo, hi = d["ci"][key]
        assert lo <= d[key] <= hi


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("measure")
    db = tmp / "runs.sqlite"
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
    w = {int(n): float(np.median(v)) for n, v in timings["untraced_wall_ns"].items()}
    assert len(w) >= 5 and max(w) / min(w) >= 10  # a decade of N
    fit = linear_fit(list(w), list(w.values()))
    assert result["differencing"]["r2_wall"] == pytest.approx(fit.r2)
    if result["valid"]:  # a valid measurement passed the linearity check
        assert fit.r2 >= 0.99


@pytest.mark.slow
def test_split_and_invariants(tiny_run):
    result, run_dir, db = tiny_run
    d = result["differencing"]
    assert d["activity"] == "cpu-compute" and "analogue" in d["activity_label"]
    assert_result_or_invalid(result)
    # one basis: the CPU compute analogue is the traced compute share of the untraced wall
    assert d["basis"] == "traced-share x untraced-wall"
    assert d["g_step_ns"] == pytest.approx(d["compute_share"] * d["t_step_ns"])
    # the share is the centre of its own paired test (stats.confidence.paired_ratio), inside its
    # interval, and agrees with the other estimate of it, the ratio of the two traced slopes
    lo, hi = d["ci"]["compute_share"]
    assert lo <= d["compute_share"] <= hi
    assert d["compute_share"] == pytest.approx(d["traced_g_step_ns"] / d["traced_t_step_ns"], rel=0.1)
    assert d["h_step_ns"] == pytest.approx(d["t_step_ns"] - d["g_step_ns"])
    assert d["ci"]["t_step_ns"][0] <= d["t_step_ns"] <= d["ci"]["t_step_ns"][1]
    assert d["k_step"] == int(d["k_step"]) and d["k_step"] > 0
    assert d["profiler_inflation"] > -0.5
    assert d["kv_range"] == [128 + 1, 128 + N2 - 1]
    timings = json.loads((run_dir / "timings.json").read_text())
    for v in timings["traced"].values():
        for s in v:
            assert s["kernel_union_ns"] <= s["kernel_sum_ns"]
            assert 0 < s["busy_ns"] <= s["wall_ns"]
    assert result["hdbi"] is None and "anatomy_verdict" not in result  # one verdict per run
    a = result["agreement"]
    assert a["difference"] == pytest.approx(a["anatomy"] - a["differencing"])
    assert a["agree"] == (abs(a["difference"]) <= a["tolerance"])
    steps = result["steps_decode"]
    assert len(steps) == N2 - 1 and all(s["kind"] == "decode" and s["wall_ns"] > 0 for s in steps)
    for s in steps:
        assert s["gpu_active_ns"] <= s["wall_ns"]
    # contract keys for fit/regimes
    for key in (
        "schema_version",
        "run_id",
        "preset",
        "arch",
        "device",
        "device_name",
        "mode",
        "engine",
        "batch",
        "prompt_len",
        "dtype",
        "n1",
        "n2",
        "threads",
        "repeats",
        "differencing",
        "taxbreak",
        "steps_decode",
        "verdict",
        "anatomy_summary",
    ):
        assert key in result
    for key in (
        "t_step_ns",
        "g_step_ns",
        "h_step_ns",
        "k_step",
        "host_fraction",
        "kernel_sum_step_ns",
        "ci",
        "r2_wall",
        "r2_gpu",
        "slope_agreement",
        "profiler_inflation",
        "copies_per_step",
        "activity",
    ):
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
    args = [
        sys.executable,
        "-m",
        "hostgap",
        "sweep",
        "-p",
        "tiny",
        "-b",
        "1,2,3",
        "-L",
        "16",
        "--device",
        "cpu",
        "--n2",
        "8",
        "--repeats",
        "2",
        "--traced-repeats",
        "1",
        "--warmup",
        "1",
        "--db",
        str(db),
        "--out",
        str(out),
    ]
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


@pytest.mark.slow
def test_default_workload_with_a_busy_core(tmp_path):
    """The real default workload (tiny preset) while a busy loop occupies a core: a valid result
    in range, or one marked invalid, never an out-of-range number presented as valid."""
    hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        time.sleep(0.5)  # the loop is running before the measurement starts
        result = _measure(tmp_path, tmp_path / "runs.sqlite", "--retries", "1")
    finally:
        hog.kill()
        hog.wait()
    assert_result_or_invalid(result)
    d = result["differencing"]
    assert d["attempts"] in (1, 2) and isinstance(d["contended"], bool)
    assert d["contended"] == bool(d["contention_flags"])
    if d["contended"]:  # still busy after the retry: that is a reason, not a number
        assert any(r.startswith("machine busy") for r in result["invalid_reasons"])
    with RunsDB(tmp_path / "runs.sqlite") as db:
        row = db.rows(run_id=result["run_id"])[0]
    assert row["valid"] == int(result["valid"]) and row["contended"] == int(d["contended"])
