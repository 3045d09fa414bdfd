"""The levers in the report ("What would help": figure and table, rendered by headless Chromium) and in
``compare A B`` (did the change do what its lever predicted)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from tests.conftest import vendored_path
from tests.test_advise_inputs import run_doc, trace_doc
from tests.test_report_fixtures import console_problems, run_chromium

import hostgap
from hostgap.report.advise_section import lever_bars, levers_figure
from hostgap.report.compare_levers import lever_check
from hostgap.report.inputs import Input

MS = 1e6


def trace_input(doc: dict) -> Input:
    return Input(source="t", kind="trace", label="t", trace_path=None, anatomy=doc)


def test_lever_bars_stack_device_and_host():
    data = lever_bars(trace_input(trace_doc()))
    assert data is not None
    today, *levers = data["bars"]
    assert today["label"] == "today" and today["step_ns"] == 10 * MS and today["device_ns"] == 4 * MS
    graphs = next(b for b in levers if b["label"].startswith("graphs"))
    assert 7.0 * MS < graphs["step_ns"] < 7.2 * MS and graphs["device_ns"] == 4 * MS
    assert all(b["device_ns"] <= b["step_ns"] for b in data["bars"])
    assert [r["lever"] for r in data["levers"]][0] in ("graphs", "megakernel")
    fig = levers_figure(data, "fig-levers-0")
    assert fig.svg and fig.svg.startswith("<svg") and fig.drawn["labels"][0] == "today"
    assert lever_bars(Input(source="x", kind="trace", label="x", trace_path=None, anatomy={})) is None


def test_report_has_the_section_and_renders(tmp_path):
    p = vendored_path("tracelens/h100_bert-small.json.gz")
    out = tmp_path / "r.html"
    rep = hostgap.write_report([str(p)], str(out))
    text = out.read_text()
    assert "What would help" in text and "id='fig-levers-0'" in text
    assert rep.to_dict()["levers"][0]["levers"][0]["lever"] in ("megakernel", "graphs")
    shot = tmp_path / "shot.png"
    r = run_chromium(out, tmp_path, f"--screenshot={shot}", "--window-size=1400,3000")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not console_problems(r.stderr)
    import matplotlib.image as mpimg

    assert float(np.std(mpimg.imread(shot)[:, :, :3])) > 0.05


def run_input(doc: dict) -> Input:
    return Input(source=doc["run_id"], kind="run", label=doc["run_id"], trace_path=None, results=doc)


def test_compare_checks_the_async_lever_on_a_cpu():
    a = run_doc()
    b = copy.deepcopy(a)
    b.update(run_id="r2", engine="hf-cb-async")
    b["differencing"]["t_step_ns"] = 3.2 * MS
    c = lever_check(run_input(a), run_input(b))
    assert c is not None and c["lever"] == "async"
    # on a CPU the lever predicts no change: today's step and its interval [2.5, 3.5] ms
    assert c["predicted_ns"] == 3 * MS and c["predicted_ci_ns"] == [2.5 * MS, 3.5 * MS]
    assert c["as_predicted"] is True and c["error"] == pytest.approx(3.2 / 3 - 1)
    b["differencing"]["t_step_ns"] = 4.0 * MS
    c = lever_check(run_input(a), run_input(b))
    assert c["as_predicted"] is False and "slower than" in c["words"]


def test_compare_checks_the_batch_lever_and_ignores_other_changes():
    a = run_doc(engine="hf")
    b = copy.deepcopy(a)
    b.update(run_id="r2", batch=4)
    c = lever_check(run_input(a), run_input(b))
    assert c is not None and c["lever"] == "batch" and c["target"] == {"batch": 4}
    assert c["predicted_ci_ns"][0] < c["predicted_ns"] < c["predicted_ci_ns"][1]
    same = copy.deepcopy(a)
    same["run_id"] = "r3"
    assert lever_check(run_input(a), run_input(same)) is None


def test_compare_document_carries_the_check(tmp_path):
    import json

    a = run_doc(engine="hf")
    b = copy.deepcopy(a)
    b.update(run_id="r2", batch=4)
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    doc = hostgap.compare(str(pa), str(pb)).to_dict()
    assert doc["lever_check"]["lever"] == "batch"
    assert "lever check (batch)" in hostgap.compare(str(pa), str(pb)).text()


def test_top_lines_list_only_levers_that_gain():
    from hostgap.report.advise_view import top_lines

    def row(name, gain, ok=True, ci=None):
        return {
            "lever": name,
            "applicable": ok,
            "target": {"k": 1},
            "step_ns": 2e6,
            "step_ns_ci": ci,
            "gain": gain,
            "regime_after": "balanced",
        }

    lines = top_lines([row("a", 0.5, ci=[1e6, 3e6]), row("b", 0.0), row("c", 0.2, ok=False), row("d", 0.1)])
    assert lines == [
        "1. a (k=1): step 2.000 ms [95 % 1.000–3.000], gain +50.0 %, then balanced",
        "2. d (k=1): step 2.000 ms, gain +10.0 %, then balanced",
    ]
    assert top_lines([row(str(i), 0.1 * (5 - i)) for i in range(5)])[-1].startswith("3. 2 ")


def test_analyze_and_run_documents_carry_the_levers():
    p = vendored_path("tracelens/h100_bert-small.json.gz")
    r = hostgap.analyze(str(p), cache=False)
    doc = r.to_dict()
    assert list(doc)[-1] == "levers"
    assert doc["levers"] == hostgap.advise(str(p), cache=False).to_dict()["levers"]
    assert r.levers.num_rows == 9 and r.levers.column_names[0] == "lever"
    assert "what would help" in r.text()
    run = hostgap.api.RunResult(run_doc(engine="hf"))
    assert run.levers.num_rows == 9 and run.to_dict()["levers"][0]["applicable"]
    watched = hostgap.api.RunResult({"kind": "watch", "run_id": "w"})
    assert "levers" not in watched.to_dict() and watched.levers.num_rows == 0


def test_under_an_invalid_run_the_verdict_says_why_no_lever_applies():
    """An invalid measurement gets no lever: the line under its verdict gives that reason, not
    'no lever predicted to gain', which would read as a prediction."""
    from io import StringIO

    from rich.console import Console

    from hostgap.report.advise_view import render_top

    why = "invalid measurement: no lever rests on it"
    doc = {"levers": [{"lever": n, "applicable": False, "reason": why, "gain": None} for n in ("graphs", "cpu")]}
    out = StringIO()
    render_top(doc, Console(file=out, width=200))
    assert out.getvalue().strip() == f"what would help: no lever applies ({why})"
    doc["levers"][1] = {**doc["levers"][1], "applicable": True, "gain": -0.1}
    out = StringIO()
    render_top(doc, Console(file=out, width=200))
    assert "no lever predicted to gain" in out.getvalue()


def test_compare_checks_the_cores_lever():
    a = run_doc(engine="vllm", cores={"usable": 1, "logical": 2, "thread_cpu_step_ns": 0.1 * MS})
    a["engine_facts"] = {"engine_processes": {"1": "EngineCore", "2": "Worker"}}
    b = copy.deepcopy(a)
    b.update(run_id="r2", cores={"usable": 2, "logical": 2, "thread_cpu_step_ns": 0.1 * MS})
    b["differencing"]["t_step_ns"] = 2.4 * MS
    c = lever_check(run_input(a), run_input(b))
    assert c is not None and c["lever"] == "cpu" and c["target"] == {"cores": 2}
    # 2.03 busy processes: the fair share 1/2.033 -> 2/2.033 halves the 3 ms step at most; the
    # frontend's 0.1 ms at least: the middle 2.2 ms; the interval from 2.5/2 to 3.5 - 0.1 ms
    assert c["predicted_ns"] == pytest.approx((1.5 + 2.9) / 2 * MS)
    assert c["predicted_ci_ns"] == pytest.approx([1.25 * MS, 3.4 * MS])
    assert c["as_predicted"] is True
    fewer = copy.deepcopy(b)
    fewer["cores"]["usable"] = 1
    assert lever_check(run_input(a), run_input(fewer)) is None  # no change in the cores
