"""``hostgap overlay``: the input's events kept, hostgap's tracks added, valid Chrome trace JSON
that hostgap's own loader reads back with the same analysis."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import corpus_path
from hostgap.anatomy.kernels import kernel_rows
from hostgap.anatomy.steps import analyze
from hostgap.cli import cli
from hostgap.events import Kind
from hostgap.readers import load_trace
from hostgap.report.overlay import free_pid, us
from test_report_fixtures import decode_events, write_trace


def read(path) -> dict:
    data = Path(path).read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def overlay(src, out) -> dict:
    r = CliRunner().invoke(cli, ["overlay", str(src), "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output
    return read(out)


def check_chrome_trace(doc: dict) -> None:
    """The subset of the Chrome trace event format that Perfetto and chrome://tracing need."""
    assert isinstance(doc["traceEvents"], list)
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "i", "M", "s", "f", "B", "E", "C"), e
        assert isinstance(e["pid"], (int, str))
        if e["ph"] == "M":
            assert e["name"] in (
                "process_name",
                "thread_name",
                "process_sort_index",
                "thread_sort_index",
                "process_labels",
            )
            continue
        assert isinstance(e["ts"], (int, float))
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    d = tmp_path_factory.mktemp("overlay")
    src = write_trace(d / "in.json", decode_events(n_steps=5, evil=True))
    doc = overlay(src, d / "out.json.gz")
    return {"src": src, "out": d / "out.json.gz", "doc": doc, "in": read(src)}


def ours(doc, pid=None):
    pid = pid if pid is not None else hostgap_pid(doc)
    return [e for e in doc["traceEvents"] if e.get("pid") == pid]


def hostgap_pid(doc) -> int:
    (m,) = [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "process_name" and e["args"]["name"] == "hostgap"
    ]
    return m["pid"]


def test_input_events_kept_and_valid(micro):
    doc = micro["doc"]
    check_chrome_trace(doc)
    n_in = len(micro["in"]["traceEvents"])
    assert doc["traceEvents"][:n_in] == micro["in"]["traceEvents"]
    assert doc["deviceProperties"] == micro["in"]["deviceProperties"]
    pid = hostgap_pid(doc)
    assert pid not in {e["pid"] for e in micro["in"]["traceEvents"]}


def test_loads_back_with_the_same_analysis(micro):
    a = analyze(load_trace(micro["src"])).to_dict()
    t = load_trace(str(micro["out"]))
    b = analyze(t).to_dict()
    for k in ("steps", "summary", "taxbreak", "verdict"):
        assert a[k] == b[k], k
    skipped = t.meta.skipped
    assert skipped.get("unknown category: hostgap.step") == len(a["steps"])


def test_step_track_labels_and_gaps(micro):
    doc = micro["doc"]
    steps = analyze(load_trace(micro["src"])).to_dict()["steps"]
    ev = ours(doc)
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"steps", "host-exposed gaps"} <= names
    spans = [e for e in ev if e.get("cat") == "hostgap.step" and e["ph"] == "X"]
    assert [e["name"] for e in spans] == [f"step {s['index']} ({s['kind']})" for s in steps]
    for e, s in zip(spans, steps):
        assert e["ts"] == us(s["start_ns"]) and e["dur"] == us(s["wall_ns"])
    gaps = Counter()
    for e in ev:
        if e.get("cat") == "hostgap.gap":
            gaps[e["args"]["step"]] += e["args"]["gap_ns"]
    for s in steps:  # every kernel runs inside its own step here: gaps add up to host-exposed
        assert not s["queued"]
        assert gaps[s["index"]] == s["host_exposed_ns"]


def test_taxbreak_tracks_match_kernel_rows(micro):
    t = load_trace(micro["src"])
    rows = kernel_rows(t, analyze(t))
    ev = ours(micro["doc"])
    t_py = [e for e in ev if e["name"] == "T_py"]
    t_disp = [e for e in ev if e["name"] == "T_dispatch"]
    calls = [e for e in ev if e.get("cat") == "hostgap.taxbreak" and e["name"] == "cudaLaunchKernel"]
    assert len(calls) == len(rows)
    assert sorted(e["args"]["t_py_ns"] for e in t_py) == sorted(r["t_py_ns"] for r in rows if r["t_py_ns"] > 0)
    assert sorted(e["args"]["t_dispatch_ns"] for e in t_disp) == sorted(
        r["t_dispatch_ns"] for r in rows if r["t_dispatch_ns"] > 0
    )
    assert sorted(e["args"]["dft_ns"] for e in calls) == sorted(r["dft_ns"] for r in rows)
    # the escaped-nowhere kernel name travels as data in args, JSON-encoded
    assert any(e["args"]["kernel"].startswith("<script>") for e in calls)


def test_timestamps_exact_to_the_ns():
    assert us(1_234_567) == 1234.567 and us(5) == 0.005 and us(-1500) == -1.5
    assert int(round(us(987_654_321_123) * 1000)) == 987_654_321_123
    assert free_pid([{"pid": 3}, {"pid": 100}, {"pid": "x"}]) == 101


def test_refuses_to_overwrite_input(tmp_path):
    src = write_trace(tmp_path / "in.json", decode_events(n_steps=2))
    r = CliRunner().invoke(cli, ["overlay", src, "-o", src])
    assert r.exit_code == 2
    bad = CliRunner().invoke(cli, ["overlay", src, "-o", str(tmp_path / "no" / "dir.json.gz")])
    assert bad.exit_code == 2 and "output folder does not exist" in bad.output


def test_plain_json_output(tmp_path):
    src = tmp_path / "plain.json"
    src.write_text(json.dumps({"traceEvents": decode_events(n_steps=3)}))
    doc = overlay(src, tmp_path / "out.json")
    assert (tmp_path / "out.json").read_bytes()[:1] == b"{"
    check_chrome_trace(doc)
    assert hostgap_pid(doc) == 101


@pytest.mark.parametrize("rel", ["nsys/h100_2gpu_1s.sqlite", "tracelens/mi300x_vllm_decode_fullgraph.json.gz"])
def test_corpus(rel, tmp_path):
    src = corpus_path(rel, vendored=rel.endswith(".json.gz"))  # the nsys copy (50 ms) gives no TaxBreak rows
    doc = overlay(src, tmp_path / "out.json.gz")
    check_chrome_trace(doc)
    back = load_trace(str(tmp_path / "out.json.gz"))
    orig = load_trace(str(src))
    assert np.count_nonzero(back.events.kind == Kind.KERNEL) == np.count_nonzero(orig.events.kind == Kind.KERNEL)
    ev = ours(doc)
    assert any(e.get("cat") == "hostgap.step" for e in ev)
    assert any(e.get("cat") == "hostgap.taxbreak" for e in ev)
