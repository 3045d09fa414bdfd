"""The report's figures never contradict their numbers: for a CPU run and a 2-GPU trace,
every part is drawn no larger than its whole, no input is dropped from the regime map without a
marker and a note, CPU inputs are described in CPU words, and Python frames are merged across
object addresses.

Expected values come from the inputs (the steps of ``hostgap steps``, the idle-gap totals of
``hostgap analyze``, the hand-built traces), never from the figures themselves.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import corpus_path
from test_report_fixtures import console_problems, make_cpu_run_dir, make_run_dir, run_chromium

from hostgap.cli import cli
from hostgap.report.html import figures_of
from hostgap.report.inputs import resolve_all
from hostgap.report.words import merge_frames, normalise_frame

TWO_GPU = "nsys/h100_2gpu_1s.sqlite"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    return make_cpu_run_dir(tmp_path_factory.mktemp("cpu"))


@pytest.fixture(scope="module")
def two_gpu_report(tmp_path_factory, cpu_run):
    trace = str(corpus_path(TWO_GPU))
    d = tmp_path_factory.mktemp("two")
    out = d / "report.html"
    res = CliRunner().invoke(cli, ["report", str(cpu_run), trace, "-o", str(out), "--json", "-q"])
    assert res.exit_code == 0, res.output
    inputs = resolve_all([str(cpu_run), trace])
    return {"html": out.read_text(encoding="utf-8"), "data": json.loads(res.stdout), "inputs": inputs,
            "figs": figures_of(inputs)}


def _section(html: str, i: int) -> str:
    start = html.index(f"<section id='input-{i}'>")
    return html[start:html.index("</section>", start)]


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
    from hostgap.report.figures_map import regime_figure

    fig = regime_figure(resolve_all([str(cpu_run), str(neg)]))
    pts = {p["n"]: p for p in fig.drawn["points"]}
    assert len(pts) == 2
    assert pts[2]["clipped"] == "below" and pts[2]["y"] == 0.0 and pts[2]["host_fraction"] == -0.125
    assert "input 2 at -0.125" in fig.caption
    assert pts[1]["clipped"] is None and pts[1]["activity"] == "cpu-compute"


def test_cpu_run_uses_cpu_words(two_gpu_report):
    sec = _section(two_gpu_report["html"], 0)
    for gpu_word in ("GPU idle", "r2 gpu", "sum minus union step ns", "GPU-active", "check: r2"):
        assert gpu_word not in sec, gpu_word
    assert "CPU-compute" in sec
    assert "R² of the CPU-compute fit" in sec
    assert "compute-op sum − union per step (ms)" in sec
    # no "does not apply" TaxBreak panel beside a ΔFT+ΔCT chart: the host chart is on the CPU basis
    assert "ΔFT + ΔCT, ms per step" not in sec and "ΔFT+ΔCT ms/step" not in sec
    assert "framework ms/step" in sec


def test_cpu_frames_merge_across_object_addresses(two_gpu_report):
    frames = two_gpu_report["data"]["inputs"][0]["top_frames"]
    # 6 steps x 3 calls of one call site, each on a different object address
    assert [f["name"] for f in frames] == ["<built-in method add of Tensor object>"]
    assert frames[0]["launches"] == 18
    assert "at 0x7d67" not in _section(two_gpu_report["html"], 0)


def test_merge_frames_sums_and_leaves_out_the_unframed():
    rows = [{"name": "f at 0x1>", "host_ns_per_step": 2.0, "host_ns": 20, "launches": 2, "share": 0.2},
            {"name": "(no Python frame in trace)", "host_ns_per_step": 5.0, "host_ns": 50, "launches": 5,
             "share": 0.5},
            {"name": "f at 0xAbC>", "host_ns_per_step": 3.0, "host_ns": 30, "launches": 3, "share": 0.3}]
    out, unframed = merge_frames(rows)
    assert out == [{"name": "f>", "host_ns_per_step": 5.0, "host_ns": 50, "launches": 5, "share": 0.5}]
    assert unframed == 0.5
    assert normalise_frame("g (x.py:3)") == "g (x.py:3)"


def test_report_data_and_page_agree_on_frames(two_gpu_report):
    page_frames = re.findall(r"<td class='name'>(&lt;built-in method add[^<]*)</td>", two_gpu_report["html"])
    assert page_frames == ["&lt;built-in method add of Tensor object&gt;"]


def test_a_run_found_from_another_folder(tmp_path, monkeypatch):
    """A run measured in one folder (its run_dir stored relative, as older databases hold it)
    is found by id from another folder; a run whose folder is gone is reported on stderr."""
    from hostgap.store import RunsDB

    home = tmp_path / "project"
    home.mkdir()
    run = make_run_dir(home / "runs")
    res = json.loads((run / "results.json").read_text())
    db_path = tmp_path / "runs.sqlite"
    monkeypatch.chdir(home)
    with RunsDB(db_path) as db:
        db.add({**res, "run_dir": str(run.relative_to(home))})  # written from the project folder
        stored = db._conn.execute("SELECT run_dir FROM runs").fetchone()[0]
    assert stored == str(run)  # made absolute when written
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = elsewhere / "r.html"
    r = CliRunner().invoke(cli, ["report", res["run_id"], "--db", str(db_path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "not found" not in r.stderr
    # an old row: relative path, measured in a folder this one is not
    with RunsDB(db_path) as db:
        db._conn.execute("UPDATE runs SET results = ?", (json.dumps({**res, "run_dir": "runs/" + run.name}),))
        db._conn.commit()
    r = CliRunner().invoke(cli, ["report", res["run_id"], "--db", str(db_path), "-o", str(out)])
    assert r.exit_code == 0
    assert f"note: {res['run_id']}: run directory 'runs/{run.name}'" in r.stderr
    assert "not found from" in r.stderr
    # ... resolved when the report runs from the folder it was measured in
    monkeypatch.chdir(home)
    r = CliRunner().invoke(cli, ["report", res["run_id"], "--db", str(db_path), "-o", str(out)])
    assert r.exit_code == 0 and "not found" not in r.stderr


def test_runs_prints_the_database_location(tmp_path, capfd):
    db_path = tmp_path / "somewhere" / "runs.sqlite"
    r = CliRunner().invoke(cli, ["runs", "--db", str(db_path), "--json"])
    assert r.exit_code == 0
    assert json.loads(r.stdout) == []  # stdout stays clean JSON
    # the progress console writes on a duplicate of descriptor 2
    assert f"runs database: {db_path} (0 runs)" in capfd.readouterr().err.replace("\n", "")


def test_report_page_marks_clipped_parts_only_when_clipping_happened(tmp_path):
    run = make_run_dir(tmp_path)
    from hostgap.report.figures import steps_figure

    (inp,) = resolve_all([str(run)])
    fig = steps_figure(inp, "fig-steps-0")
    assert fig.drawn["clipped"] == 0 and "clipped" not in fig.caption


def test_compare_keeps_one_basis_per_table(tmp_path):
    a = make_run_dir(tmp_path / "a")
    b = make_run_dir(tmp_path / "b", host_ms=4.0)
    r = CliRunner().invoke(cli, ["compare", str(a), str(b), "--json", "-q"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    basis = {row["metric"]: row["basis"] for row in doc["metrics"]}
    assert {m for m, x in basis.items() if x == "differencing"} == {
        "wall_ns", "gpu_active_ns", "host_exposed_ns", "host_fraction", "kernel_count"}
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


def test_real_trace_where_host_wait_exceeds_host_exposed_is_clipped_and_said(tmp_path):
    """On this 2-GPU export the one step's host_wait (gaps summed per stream) is larger than its
    host-exposed time (device-wide union): the bar is clipped and both figure and card say so."""
    from hostgap.report.figures import steps_figure
    from hostgap.report.html import render

    (inp,) = resolve_all([str(corpus_path("nsys/h100_2gpu_mfu_before.sqlite"))])
    (step,) = inp.anatomy["steps"]
    assert step["host_wait_ns"] > step["host_exposed_ns"]  # the premise, from hostgap steps
    fig = steps_figure(inp, "fig-steps-0")
    assert fig.drawn["clipped"] == 1
    part, whole = fig.drawn["within"]["host_wait"]
    assert part[0] == whole[0] == step["host_exposed_ns"] / 1e6
    assert "drawn clipped to host-exposed" in fig.caption
    html, _ = render([inp])
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


def test_a_relative_run_dir_is_resolved_against_the_database_folder(tmp_path, monkeypatch):
    """A project-local database ($HOSTGAP_DB=project/runs.sqlite) with an old relative row finds
    project/runs/<id> from any folder; an absolute path that is gone resolves to nothing."""
    from hostgap.store import RunsDB, resolve_run_dir

    project = tmp_path / "project"
    run = make_run_dir(project / "runs")
    res = json.loads((run / "results.json").read_text())
    db_path = project / "runs.sqlite"
    with RunsDB(db_path) as db:
        db.add({**res, "run_dir": str(run)})
        db._conn.execute("UPDATE runs SET results = ?", (json.dumps({**res, "run_dir": f"runs/{run.name}"}),))
        db._conn.commit()
    monkeypatch.chdir(tmp_path)  # neither the project folder nor the run's parent
    assert resolve_run_dir(f"runs/{run.name}", db_path) == run.resolve()
    assert resolve_run_dir(f"runs/{run.name}", None) is None
    assert resolve_run_dir(str(tmp_path / "gone"), db_path) is None
    assert resolve_run_dir(None, db_path) is None
    with RunsDB(db_path) as db:
        assert db.get(res["run_id"])["run_dir"] == str(run.resolve())
        assert db.results()[0]["run_dir"] == str(run.resolve())
