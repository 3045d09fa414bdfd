"""The report's figures never contradict their numbers: for a CPU run and a 2-GPU trace,
every part is drawn no larger than its whole and no input is dropped from the regime map without
a marker and a note (CPU words and frames: test_report_words.py; runs: test_report_runs.py).

Expected values come from the inputs (the steps of ``hostgap steps``, the idle-gap totals of
``hostgap analyze``, the hand-built traces), never from the figures themselves.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import corpus_path
from hostgap.cli import cli
from hostgap.report.html import figures_of
from hostgap.report.inputs import resolve_all
from test_report_fixtures import console_problems, make_cpu_run_dir, make_run_dir, run_chromium

TWO_GPU = "nsys/h100_2gpu_1s.sqlite"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    return make_cpu_run_dir(tmp_path_factory.mktemp("cpu"))


@pytest.fixture(scope="module")
def two_gpu_report(tmp_path_factory, cpu_run):
    trace = str(corpus_path(TWO_GPU, vendored=True))  # or its first 50 ms (tests/data/corpus)
    d = tmp_path_factory.mktemp("two")
    out = d / "report.html"
    res = CliRunner().invoke(cli, ["report", str(cpu_run), trace, "-o", str(out), "--json", "-q"])
    assert res.exit_code == 0, res.output
    inputs = resolve_all([str(cpu_run), trace])
    return {
        "html": out.read_text(encoding="utf-8"),
        "data": json.loads(res.stdout),
        "inputs": inputs,
        "figs": figures_of(inputs),
    }


def test_steps_bars_stack_to_wall_and_host_wait_stays_inside_host_exposed(two_gpu_report):
    for i, inp in enumerate(two_gpu_report["inputs"]):
        fig = two_gpu_report["figs"][f"fig-steps-{i}"]
        steps = inp.anatomy["steps"]
        wall = np.array([s["gpu_active_ns"] + s["host_exposed_ns"] for s in steps]) / 1e6
        assert np.allclose(fig.drawn["whole"], wall)
        for name, (part, whole) in fig.drawn["within"].items():
            assert np.all(part <= whole + 1e-12), name
        over = sum(1 for s in steps if (s["host_wait_ns"] or 0) > s["host_exposed_ns"])
        assert fig.drawn["clipped"] == over
        assert ("drawn clipped to host-exposed" in fig.caption) == (over > 0)


def test_idle_gap_time_bins_add_up_to_the_per_class_totals(two_gpu_report):
    inp = two_gpu_report["inputs"][1]
    fig = two_gpu_report["figs"]["fig-gaps-1"]
    assert fig.svg is not None
    for cls in ("host_wait", "kernel_wait", "other"):
        total_ns = sum(d["idle_gaps"]["total_ns"][cls] for d in inp.overview["devices"])
        count = sum(d["idle_gaps"]["count"][cls] for d in inp.overview["devices"])
        assert fig.drawn["time_ms"][cls].sum() == pytest.approx(total_ns / 1e6, rel=1e-9, abs=1e-9)
        assert int(fig.drawn["counts"][cls].sum()) == count
    assert len(inp.overview["devices"]) == 2
    assert "summed over" in fig.caption and "exceed" in fig.caption


def test_timeline_bars_and_legend(two_gpu_report):
    for i in range(2):
        fig = two_gpu_report["figs"][f"fig-timeline-{i}"]
        if fig.svg is None:
            continue
        assert fig.drawn["bars_end_us"] <= fig.drawn["wall_us"] + 1e-9
        assert len(set(fig.drawn["legend"])) == len(fig.drawn["legend"])


def test_regime_map_draws_every_input(two_gpu_report):
    fig = two_gpu_report["figs"]["fig-regime"]
    assert len(fig.drawn["points"]) + len(fig.drawn["missing"]) == fig.drawn["inputs"] == 2
    assert all(0.0 <= p["y"] <= 1.0 for p in fig.drawn["points"])
    kinds = {p["activity"] for p in fig.drawn["points"]}
    assert ("Squares are CPU" in fig.caption or "squares CPU" in fig.caption) == ("cpu-compute" in kinds)


def test_a_point_outside_0_1_is_drawn_on_the_edge_with_a_note(tmp_path, cpu_run):
    # a run whose differencing host fraction came out negative (device-active above wall)
    neg = make_run_dir(tmp_path, "20261130-000001-micro-hf-cuda-eager-b1-neg000")
    res = json.loads((neg / "results.json").read_text())
    res["differencing"]["host_fraction"] = -0.125
    (neg / "results.json").write_text(json.dumps(res))
    from hostgap.report.figures.across import regime_figure

    fig = regime_figure(resolve_all([str(cpu_run), str(neg)]))
    pts = {p["n"]: p for p in fig.drawn["points"]}
    assert len(pts) == 2
    assert pts[2]["clipped"] == "below" and pts[2]["y"] == 0.0 and pts[2]["host_fraction"] == -0.125
    assert "input 2 at -0.125" in fig.caption
    assert pts[1]["clipped"] is None and pts[1]["activity"] == "cpu-compute"


def test_report_page_marks_clipped_parts_only_when_clipping_happened(tmp_path):
    run = make_run_dir(tmp_path)
    from hostgap.report.figures.stepwise import steps_figure

    (inp,) = resolve_all([str(run)])
    fig = steps_figure(inp, "fig-steps-0")
    assert fig.drawn["clipped"] == 0 and "clipped" not in fig.caption


def test_real_2gpu_trace_part_within_whole_and_a_larger_part_is_clipped_and_said(tmp_path):
    """On this 2-GPU export host_wait and host-exposed share one basis (union over devices), so
    the part fits its whole and nothing is clipped. Data whose part exceeds its whole (a
    document written on another basis) is drawn clipped, and both figure and card say so."""
    import copy
    import dataclasses

    from hostgap.report.figures.stepwise import steps_figure
    from hostgap.report.html import render

    (inp,) = resolve_all([str(corpus_path("nsys/h100_2gpu_mfu_before.sqlite"))])
    (step,) = inp.anatomy["steps"]
    assert 0 < step["host_wait_ns"] <= step["host_exposed_ns"]
    fig = steps_figure(inp, "fig-steps-0")
    assert fig.drawn["clipped"] == 0 and "clipped" not in fig.caption

    anatomy = copy.deepcopy(inp.anatomy)
    anatomy["steps"][0]["host_wait_ns"] = 2 * step["host_exposed_ns"]
    larger = dataclasses.replace(inp, anatomy=anatomy)
    fig = steps_figure(larger, "fig-steps-0")
    assert fig.drawn["clipped"] == 1
    part, whole = fig.drawn["within"]["host_wait"]
    assert part[0] == whole[0] == step["host_exposed_ns"] / 1e6
    assert "drawn clipped to host-exposed" in fig.caption
    html, _ = render([larger])
    assert "is larger than host-exposed" in html


def test_cpu_run_and_2gpu_trace_render_in_chromium(two_gpu_report, tmp_path):
    """The page of a CPU run beside a 2-GPU trace loads without console errors and draws."""
    page = tmp_path / "two.html"
    page.write_text(two_gpu_report["html"], encoding="utf-8")
    shot = tmp_path / "two.png"
    r = run_chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1300,3000")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not console_problems(r.stderr), console_problems(r.stderr)
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[:2] == (3000, 1300)
    assert float(np.std(img[:, :, :3])) > 0.05  # not a blank page
