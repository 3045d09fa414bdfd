"""CPU runs in CPU words, Python frames merged across object addresses, and one basis per
``compare`` table with units in its labels. Fast: a hand-built CPU run beside a hand-built GPU
run (the 2-GPU corpus trace is exercised in test_report_parts.py).
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.report.words import merge_frames, normalise_frame
from test_report_fixtures import make_cpu_run_dir, make_run_dir


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("words")
    cpu, gpu = make_cpu_run_dir(d), make_run_dir(d)
    out = d / "report.html"
    res = CliRunner().invoke(cli, ["report", str(cpu), str(gpu), "-o", str(out), "--json", "-q"])
    assert res.exit_code == 0, res.output
    return {"html": out.read_text(encoding="utf-8"), "data": json.loads(res.stdout)}


def _section(html: str, i: int) -> str:
    start = html.index(f"<section id='input-{i}'>")
    return html[start : html.index("</section>", start)]


def test_cpu_run_uses_cpu_words(cpu_report):
    sec = _section(cpu_report["html"], 0)
    for gpu_word in ("GPU idle", "r2 gpu", "sum minus union step ns", "GPU-active", "check: r2"):
        assert gpu_word not in sec, gpu_word
    assert "CPU-compute" in sec
    assert "R² of the CPU-compute fit" in sec
    assert "compute-op sum − union per step (ms)" in sec
    # no "does not apply" TaxBreak panel beside a ΔFT+ΔCT chart: the host chart is on the CPU basis
    assert "ΔFT + ΔCT, ms per step" not in sec and "ΔFT+ΔCT ms/step" not in sec
    assert "framework ms/step" in sec


def test_cpu_frames_merge_across_object_addresses(cpu_report):
    frames = cpu_report["data"]["inputs"][0]["top_frames"]
    # 6 steps x 3 calls of one call site, each on a different object address
    assert [f["name"] for f in frames] == ["<built-in method add of Tensor object>"]
    assert frames[0]["launches"] == 18
    assert "at 0x7d67" not in _section(cpu_report["html"], 0)


def test_merge_frames_sums_and_leaves_out_the_unframed():
    rows = [
        {"name": "f at 0x1>", "host_ns_per_step": 2.0, "host_ns": 20, "launches": 2, "share": 0.2},
        {"name": "(no Python frame in trace)", "host_ns_per_step": 5.0, "host_ns": 50, "launches": 5, "share": 0.5},
        {"name": "f at 0xAbC>", "host_ns_per_step": 3.0, "host_ns": 30, "launches": 3, "share": 0.3},
    ]
    out, unframed = merge_frames(rows)
    assert out == [{"name": "f>", "host_ns_per_step": 5.0, "host_ns": 50, "launches": 5, "share": 0.5}]
    assert unframed == 0.5
    assert normalise_frame("g (x.py:3)") == "g (x.py:3)"


def test_report_data_and_page_agree_on_frames(cpu_report):
    page_frames = re.findall(r"<td class='name'>(&lt;built-in method add[^<]*)</td>", cpu_report["html"])
    assert page_frames == ["&lt;built-in method add of Tensor object&gt;"]


def test_compare_keeps_one_basis_per_table(tmp_path):
    a = make_run_dir(tmp_path / "a")
    b = make_run_dir(tmp_path / "b", host_ms=4.0)
    r = CliRunner().invoke(cli, ["compare", str(a), str(b), "--json", "-q"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    basis = {row["metric"]: row["basis"] for row in doc["metrics"]}
    assert {m for m, x in basis.items() if x == "differencing"} == {
        "wall_ns",
        "gpu_active_ns",
        "host_exposed_ns",
        "host_fraction",
        "kernel_count",
    }
    assert basis["kernel_union_ns"] == "steps" and basis["host_wait_ns"] == "steps"
    assert basis["hdbi"] == "trace"
    # the differencing rows are the runs' differencing numbers, not step medians
    res_b = json.loads((b / "results.json").read_text())["differencing"]
    row = next(x for x in doc["metrics"] if x["metric"] == "host_exposed_ns")
    assert row["b"] == res_b["h_step_ns"]
    text = CliRunner().invoke(cli, ["compare", str(a), str(b), "-q"]).output
    tables = re.split(r"\n(?=per decode step, differencing|per step, median|whole trace)", text)
    by_title = {t.split("\n", 1)[0].split(",")[0]: t for t in tables[1:]}
    assert set(by_title) == {"per decode step", "per step", "whole trace (or measured run)"}
    for metric, x in basis.items():
        title = {"differencing": "per decode step", "steps": "per step", "trace": "whole trace (or measured run)"}[x]
        hits = [t for t, body in by_title.items() if re.search(rf"│ {metric}\s", body)]
        assert hits == [title], metric
    # time metrics are shown in ms and say so in the unit column
    assert re.search(r"│ wall_ns\s+│ ms\s+│", by_title["per decode step"])


def test_compare_of_two_cpu_runs_has_no_gpu_rows(tmp_path):
    a = make_cpu_run_dir(tmp_path / "a")
    r = CliRunner().invoke(cli, ["compare", str(a), str(a), "--json", "-q"])
    assert r.exit_code == 0, r.output
    metrics = {row["metric"] for row in json.loads(r.stdout)["metrics"]}
    assert not metrics & {"host_wait_ns", "launches", "hdbi", "ft_ns", "orchestrate_ns"}
    assert {"wall_ns", "gpu_active_ns", "host_exposed_ns"} <= metrics
