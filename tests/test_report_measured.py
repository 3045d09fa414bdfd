"""End to end on a real measurement: ``hostgap measure`` (tiny preset, CPU), then ``report``,
``compare`` and ``overlay`` on its run directory (slow: the measurement takes ~30-60 s)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from test_report_html import parse


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    r = CliRunner().invoke(
        cli,
        [
            "measure",
            "-p",
            "tiny",
            "--no-db",
            "--out",
            str(out),
            "--n2",
            "16",
            "-r",
            "2",
            "--traced-repeats",
            "1",
            "--sweep",
            "1,4,8,16",
            "--retries",
            "0",
            "-q",
        ],
    )
    assert r.exit_code in (0, 3), r.output[-3000:]  # 3: marked invalid (a busy machine); reportable too
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run


@pytest.mark.slow
def test_report_of_a_measured_run(run_dir, tmp_path):
    out = tmp_path / "run.html"
    r = CliRunner().invoke(cli, ["report", str(run_dir), "-o", str(out), "--json", "-q"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    results = json.loads((run_dir / "results.json").read_text())
    key = data["inputs"][0]["key"]
    assert key["basis"] == "differencing"
    assert key["values"]["wall_ns"] == pytest.approx(results["differencing"]["t_step_ns"])
    assert key["verdict"] == results["verdict"]["verdict"]
    page = parse(out.read_text(encoding="utf-8"))
    for fid in data["figures"]:
        assert fid in page.figures and page.figures[fid]["caption"]
    assert page.figures["fig-differencing-0"]["svg"]
    assert page.figures["fig-timeline-0"]["svg"]
    # CPU run: device-active is the CPU-compute analogue, named so
    assert "CPU-compute (device-active analogue)" in out.read_text(encoding="utf-8")
    assert out.stat().st_size < 3_000_000


@pytest.mark.slow
def test_compare_run_against_its_own_trace_and_overlay(run_dir, tmp_path):
    results = json.loads((run_dir / "results.json").read_text())
    trace = run_dir / results["anatomy_trace"]
    r = CliRunner().invoke(cli, ["compare", str(run_dir), str(trace), "--json", "-q"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["basis"] == "steps"  # a run against a bare trace: both on their steady steps
    m = {row["metric"]: row for row in doc["metrics"]}
    assert m["wall_ns"]["delta"] == 0 and m["kernel_count"]["delta"] == 0
    o = CliRunner().invoke(cli, ["overlay", str(trace), "-o", str(tmp_path / "o.json.gz"), "-q"])
    assert o.exit_code == 0, o.output
