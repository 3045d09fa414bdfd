"""``hostgap report``: structure, numbers equal to the JSON output, escaping, size, and a
headless-Chromium render with a screenshot."""

from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import corpus_path
from hostgap.cli import cli
from hostgap.report.html import FIGURES, active_content, embedded_json
from test_report_fixtures import (
    EVIL_KERNEL,
    EVIL_OP,
    console_problems,
    decode_events,
    make_run_dir,
    run_chromium,
    write_trace,
)


class Page(HTMLParser):
    """Elements of a page: tags with attributes, figure ids, figcaptions per figure, cells."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.figures: dict[str, dict] = {}
        self._fig: str | None = None
        self._depth = 0
        self.cells: list[dict] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "figure":
            self._fig = a.get("id")
            self.figures[self._fig] = {"caption": False, "svg": False}
        if self._fig:
            if tag == "figcaption":
                self.figures[self._fig]["caption"] = True
            if tag == "svg":
                self.figures[self._fig]["svg"] = True
        if tag == "td" and "data-key" in a:
            self.cells.append({**a, "figure": self._fig})
        if tag == "script":
            self._in_script = True

    def handle_endtag(self, tag):
        if tag == "figure":
            self._fig = None
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.script_text += data


def parse(text: str) -> Page:
    p = Page()
    p.feed(text)
    return p


def run_report(args: list[str]) -> tuple[str, dict]:
    res = CliRunner().invoke(cli, ["report", *args, "--json", "-q"])
    assert res.exit_code == 0, res.output
    out = args[args.index("-o") + 1]
    return Path(out).read_text(encoding="utf-8"), json.loads(res.stdout)


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    trace = write_trace(d / "evil.json", decode_events(n_steps=8, evil=True))
    run = make_run_dir(d)
    html_path = d / "report.html"
    text, data = run_report([trace, str(run), "-o", str(html_path)])
    return {"dir": d, "trace": trace, "run": run, "html": html_path, "text": text, "data": data}


def test_every_figure_present_with_a_caption(micro):
    page = parse(micro["text"])
    ids = micro["data"]["figures"]
    assert len(ids) == 2 + 2 * len(FIGURES)
    for fid in ids:
        assert fid in page.figures, fid
        assert page.figures[fid]["caption"], f"{fid} has no caption"
    # drawn where they apply: the trace has no differencing fit, the run has one
    assert not page.figures["fig-differencing-0"]["svg"]
    assert page.figures["fig-differencing-1"]["svg"]
    assert page.figures["fig-regime"]["svg"]
    for name in ("steps", "taxbreak", "kernels", "host", "gaps", "timeline"):
        assert page.figures[f"fig-{name}-0"]["svg"], name
    assert "needs a measured run" in micro["text"]
    ids = [a["id"] for _, a in page.tags if "id" in a]
    assert len(ids) == len(set(ids)), "duplicate element ids"


def test_numbers_in_html_equal_the_json_output(micro):
    page = parse(micro["text"])
    data = micro["data"]
    for i, doc in enumerate(data["inputs"]):
        cells = {c["data-key"]: c["data-value"] for c in page.cells if c["figure"] == f"fig-verdict-{i}"}
        shown = {k: v for k, v in doc["key"]["values"].items() if v is not None}
        assert shown, "no numbers"
        for k, v in shown.items():
            assert float(cells[k]) == pytest.approx(v, rel=1e-12), k
    # the embedded data block is the same document
    assert json.loads(page.script_text) == data


def test_trace_numbers_are_steady_medians_of_hostgap_steps(micro):
    res = CliRunner().invoke(cli, ["steps", micro["trace"], "--json"])
    steps = json.loads(res.stdout)
    steady = set(steps["summary"]["steady"]["indices"])
    pool = [s for s in steps["steps"] if s["index"] in steady]
    vals = micro["data"]["inputs"][0]["key"]["values"]
    for k in ("wall_ns", "gpu_active_ns", "host_exposed_ns", "host_wait_ns", "host_fraction", "kernel_count"):
        assert vals[k] == pytest.approx(float(np.median([s[k] for s in pool]))), k
    assert vals["hdbi"] == pytest.approx(steps["taxbreak"]["hdbi"])
    ft = float(np.median([s["taxbreak"]["ft_ns"] for s in pool]))
    assert vals["ft_ns"] == pytest.approx(ft)


def test_run_numbers_come_from_differencing(micro):
    results = json.loads((micro["run"] / "results.json").read_text())
    d = results["differencing"]
    key = micro["data"]["inputs"][1]["key"]
    assert key["basis"] == "differencing"
    assert key["values"]["wall_ns"] == pytest.approx(d["t_step_ns"])
    assert key["values"]["gpu_active_ns"] == pytest.approx(d["g_step_ns"])
    assert key["values"]["host_exposed_ns"] == pytest.approx(d["h_step_ns"])
    assert key["values"]["host_fraction"] == pytest.approx(d["host_fraction"])
    assert key["checks"]["r2_wall"] == pytest.approx(d["r2_wall"])
    # the fitted slope is printed in the figure's legend
    assert f"{d['fit_wall']['slope'] / 1e6:.3f} ms/token" in micro["text"]


def test_trace_strings_are_escaped(micro):
    text = micro["text"]
    page = parse(text)
    scripts = [a for t, a in page.tags if t == "script"]
    assert scripts == [{"type": "application/json", "id": "hostgap-data"}]
    assert not [t for t, _ in page.tags if t in ("img", "iframe", "object", "embed")]
    assert not [(t, k) for t, a in page.tags for k in a if k.startswith("on")]
    assert EVIL_KERNEL not in text and EVIL_OP not in text
    assert "&lt;script&gt;document.title=" in text  # shown, as text
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "script-src 'none'" in csp[0]["content"]


def test_embedded_json_cannot_close_its_element():
    text = embedded_json({"name": "</script><script>alert(1)</script>", "amp": "&"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text)["name"].startswith("</script>")


def test_svg_active_content_check():
    assert active_content("<svg xmlns='http://www.w3.org/2000/svg'><text>&lt;script&gt; onload=x</text></svg>") is None
    assert active_content("<svg xmlns='http://www.w3.org/2000/svg'><script>x</script></svg>") == "<script> element"
    assert "onload" in active_content("<svg xmlns='http://www.w3.org/2000/svg' onload='x'/>")


def test_many_steps_are_binned_and_the_report_stays_small(tmp_path):
    trace = write_trace(tmp_path / "long.json.gz", decode_events(n_steps=1000, kernels=2), gz=True)
    text, data = run_report([trace, "-o", str(tmp_path / "long.html")])
    assert data["inputs"][0]["steps"] == 1000
    assert "averaged over bins of 4 consecutive steps" in text
    assert len(text.encode()) < 1_000_000


@pytest.mark.slow
def test_corpus_report_size_and_figures(tmp_path):
    qwen = corpus_path("tracelens/h100_qwen1.5-0.5b.json.gz", vendored=True)
    vllm = corpus_path("tracelens/mi300x_vllm_decode_fullgraph.json.gz", vendored=True)
    run = make_run_dir(tmp_path)
    text, data = run_report([str(qwen), str(vllm), str(run), "-o", str(tmp_path / "corpus.html")])
    assert len(text.encode()) < 3_000_000
    page = parse(text)
    for i in range(2):
        assert page.figures[f"fig-timeline-{i}"]["svg"]
        assert page.figures[f"fig-kernels-{i}"]["svg"]
    # the graph-replay trace: one graph launch per step, hundreds of kernels
    v = data["inputs"][1]
    assert v["key"]["values"]["kernel_count"] > 100
    assert data["regime"][0]["host_fraction"] == pytest.approx(data["inputs"][0]["key"]["values"]["host_fraction"])


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("keep me")
    r = CliRunner().invoke(cli, ["report", str(tmp_path / "nope"), "-o", str(out), "--db", str(tmp_path / "x.db")])
    assert r.exit_code == 2
    (tmp_path / "bad.json").write_text("{not json")
    r2 = CliRunner().invoke(cli, ["report", str(tmp_path / "bad.json"), "-o", str(out), "-q"])
    assert r2.exit_code == 2
    assert r2.output.count("\n") == 1 and "bad.json" in r2.output
    assert out.read_text() == "keep me"


def test_run_id_from_the_runs_db_and_results_json(tmp_path):
    from hostgap.store.database import RunsDB

    run = make_run_dir(tmp_path)
    results = json.loads((run / "results.json").read_text())
    db = tmp_path / "runs.sqlite"
    with RunsDB(db) as rdb:
        rdb.add(results)
    _, by_id = run_report([results["run_id"][:20], "--db", str(db), "-o", str(tmp_path / "a.html")])
    _, by_file = run_report([str(run / "results.json"), "-o", str(tmp_path / "b.html")])
    for doc in (by_id, by_file):
        assert doc["inputs"][0]["run_id"] == results["run_id"]
        assert doc["inputs"][0]["key"]["values"]["wall_ns"] == pytest.approx(results["differencing"]["t_step_ns"])


# -- headless Chromium ------------------------------------------------------------------------


def test_renders_in_chromium_without_console_errors(micro, tmp_path):
    shot = tmp_path / "report.png"
    r = run_chromium(micro["html"], tmp_path, f"--screenshot={shot}", "--window-size=1400,4000")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not console_problems(r.stderr), console_problems(r.stderr)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[0] == 4000 and img.shape[1] == 1400
    assert float(np.std(img[:, :, :3])) > 0.05  # not a blank page
    keep = os.environ.get("HOSTGAP_TEST_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report.png")


def test_nothing_executes_even_without_the_csp(micro, tmp_path):
    """Escaping alone must hold: drop the Content-Security-Policy and let Chromium run the page."""
    text = re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", micro["text"])
    assert "Content-Security-Policy" not in text
    page = tmp_path / "nocsp.html"
    page.write_text(text, encoding="utf-8")
    r = run_chromium(page, tmp_path, "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert "<title>" in dom and "pwned" not in dom.split("<title>")[1].split("</title>")[0]
    live = parse(dom)
    assert [a for t, a in live.tags if t == "script"] == [{"type": "application/json", "id": "hostgap-data"}]
    assert not [t for t, _ in live.tags if t == "img"]
    assert not console_problems(r.stderr)


def test_results_json_without_its_trace_or_timings(tmp_path):
    run = make_run_dir(tmp_path)
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(run / "results.json", lone / "results.json")
    text, data = run_report([str(lone / "results.json"), "-o", str(tmp_path / "lone.html")])
    doc = data["inputs"][0]
    assert doc["trace"] is None
    assert any("timings.json not found" in n for n in doc["notes"])
    assert any("trace is not available" in n for n in doc["notes"])
    page = parse(text)
    assert page.figures["fig-differencing-0"]["svg"]  # the fitted lines, from results.json
    assert not page.figures["fig-timeline-0"]["svg"]
    assert "the run&#x27;s trace is not available" in text


def test_the_console_check_catches_errors(tmp_path):
    """The Chromium log scan is live: a page with a failing script is reported."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><head><title>t</title></head><body>"
        "<script>console.error('boom'); undefinedFunction();</script></body></html>"
    )
    r = run_chromium(bad, tmp_path, "--dump-dom")
    problems = console_problems(r.stderr)
    assert any("Uncaught" in p or "boom" in p for p in problems), r.stderr[-2000:]
