"""The per-step split of transformers' continuous-batching loop (hf-cb): exact tiling by hand,
against a brute-force reference over generated timelines, on micro Kineto traces and on a real
trace of the tiny preset.

``tests/data/hf_cb_tiny_cpu.json.gz``: ``hostgap.capture.engines.hf.batching.HFCBEngine`` on the tiny
preset (batch 2, prompt 32, one traced call of 8 tokens after two untraced ones, transformers
5.24, torch 2.13 CPU), the events' ``args`` reduced to ``External id``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import annotation, cpu_op
from hostgap.analysis import cb_split as cs

FIXTURE = Path(__file__).parent / "data" / "hf_cb_tiny_cpu.json.gz"
P = {p: i for i, p in enumerate(cs.PARTS)}


def _arr(*x):
    return np.array(x, dtype=np.int64)


def _ann(*rows):
    """(start, end, part name) rows -> the three arrays step_tiling takes."""
    return _arr(*(r[0] for r in rows)), _arr(*(r[1] for r in rows)), _arr(*(P[r[2]] for r in rows))


def _host(tiling, step, inside):
    """{part: ns} of one step, inside (True) or outside the step annotation, non-zero only."""
    row = tiling["host_ns"][step, int(inside)]
    return {p: int(v) for p, v in zip(cs.PARTS, row) if v}


def test_one_step_by_hand():
    # window [0, 100), step annotation [0, 60)
    #   inside: kwargs [2, 8); forward_sample [10, 50) holding sample [40, 50); compute [20, 35)
    #   outside: update [60, 70) holding deliver [65, 68); prepare [72, 95) holding admit
    #   [72, 74), schedule [75, 80) and inputs [80, 95), which holds mask [85, 90); compute [86, 88)
    a = _ann(
        (2, 8, "kwargs"),
        (10, 50, "forward"),
        (40, 50, "sample"),
        (60, 70, "update"),
        (65, 68, "deliver"),
        (72, 95, "prepare"),
        (72, 74, "admit"),
        (75, 80, "schedule"),
        (80, 95, "inputs"),
        (85, 90, "mask"),
    )
    t = cs.step_tiling(_arr(0), _arr(100), _arr(60), _arr(20, 86), _arr(35, 88), *a)
    assert t["compute_step_ns"].tolist() == [15] and t["compute_loop_ns"].tolist() == [2]
    assert _host(t, 0, True) == {"kwargs": 6, "forward": 40 - 10 - 15, "sample": 10, "other": 2 + 2 + 10}
    assert _host(t, 0, False) == {
        "update": 10 - 3,
        "deliver": 3,
        "admit": 2,
        "prepare": 1,  # [74, 75)
        "schedule": 5,
        "inputs": 15 - 5,
        "mask": 5 - 2,
        "other": 2 + 5,  # [70, 72) and [95, 100)
    }
    assert int(t["host_ns"].sum()) + 15 + 2 == t["wall_ns"][0] == 100


def test_windows_with_a_gap_and_clipping():
    # windows [10, 30) and [50, 60); annotation end 90 past its window (clipped); an annotation
    # straddling the first window's start, one in the gap, one after every window
    a = _ann((0, 15, "update"), (35, 45, "schedule"), (55, 80, "inputs"), (70, 75, "mask"))
    t = cs.step_tiling(_arr(10, 50), _arr(20, 10), _arr(20, 90), _arr(5, 28), _arr(12, 52), *a)
    assert t["wall_ns"].tolist() == [20, 10]
    assert t["compute_step_ns"].tolist() == [2, 2] and t["compute_loop_ns"].tolist() == [2, 0]
    # step 0: [10, 12) compute; [12, 15) update, inside; [15, 20) other inside; [20, 28) other
    # outside; [28, 30) compute outside
    assert _host(t, 0, True) == {"update": 3, "other": 5}
    assert _host(t, 0, False) == {"other": 8}
    # step 1: the annotation covers the whole window; [50, 52) compute, [52, 55) other, [55, 60) inputs
    assert _host(t, 1, True) == {"other": 3, "inputs": 5}
    assert _host(t, 1, False) == {}
    for k in range(2):
        total = t["host_ns"][k].sum() + t["compute_step_ns"][k] + t["compute_loop_ns"][k]
        assert total == t["wall_ns"][k]


def test_equal_starts_the_shorter_is_inner_and_overlap_goes_to_the_later():
    # prepare and admit start together: admit (shorter) is the inner one
    t = cs.step_tiling(_arr(0), _arr(20), _arr(0), _arr(), _arr(), *_ann((0, 10, "prepare"), (0, 4, "admit")))
    assert _host(t, 0, False) == {"admit": 4, "prepare": 6, "other": 10}
    # not nested (never on one thread): the later-starting one wins where they overlap
    t = cs.step_tiling(_arr(0), _arr(20), _arr(0), _arr(), _arr(), *_ann((0, 10, "update"), (5, 15, "schedule")))
    assert _host(t, 0, False) == {"update": 5, "schedule": 10, "other": 5}


def test_no_steps_and_no_annotations():
    t = cs.step_tiling(_arr(), _arr(), _arr(), _arr(0), _arr(5), _arr(), _arr(), _arr())
    assert t["host_ns"].shape == (0, 2, len(cs.PARTS)) and t["wall_ns"].tolist() == []
    t = cs.step_tiling(_arr(0), _arr(10), _arr(4), _arr(), _arr(), _arr(), _arr(), _arr())
    assert _host(t, 0, True) == {"other": 4} and _host(t, 0, False) == {"other": 6}


def _reference(windows, m_ends, segs, anns):
    """Nanosecond by nanosecond: (compute in, compute out, host[step, inside, part])."""
    n = len(windows)
    host = np.zeros((n, 2, len(cs.PARTS)), dtype=np.int64)
    c_in, c_out = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for k, ((s, e), m) in enumerate(zip(windows, m_ends)):
        for t in range(s, e):
            inside = t < min(max(m, s), e)
            if any(a <= t < b for a, b in segs):
                (c_in if inside else c_out)[k] += 1
                continue
            cover = [(a, -(b - a), i, p) for i, (a, b, p) in enumerate(anns) if a <= t < b]
            part = max(cover)[3] if cover else P["other"]
            host[k, int(inside), part] += 1
    return c_in, c_out, host


@st.composite
def timelines(draw):
    n = draw(st.integers(1, 3))
    starts = sorted(draw(st.lists(st.integers(0, 60), min_size=n, max_size=n, unique=True)))
    windows = []
    for i, s in enumerate(starts):
        limit = starts[i + 1] if i + 1 < n else s + 30
        windows.append((s, draw(st.integers(s, limit))))
    m_ends = [draw(st.integers(s - 5, e + 5)) for s, e in windows]
    raw = draw(st.lists(st.tuples(st.integers(-5, 95), st.integers(0, 15)), max_size=6))
    segs = []
    for a, d in sorted(raw):  # merged, disjoint, sorted, as the trace's activity segments
        if segs and a <= segs[-1][1]:
            segs[-1] = (segs[-1][0], max(segs[-1][1], a + d))
        elif d:
            segs.append((a, a + d))
    anns = _nested(draw, 0, 95, 3)
    return windows, m_ends, segs, anns


def _nested(draw, lo, hi, depth):
    """Properly nested intervals inside [lo, hi) (as on one thread)."""
    out = []
    t = lo
    while depth and t < hi and draw(st.booleans()):
        a = draw(st.integers(t, hi))
        b = draw(st.integers(a, hi))
        out.append((a, b, draw(st.integers(0, len(cs.PARTS) - 1))))
        out += _nested(draw, a, b, depth - 1)
        t = b
    return out


@settings(max_examples=150, deadline=None)
@given(timelines())
def test_tiling_matches_the_nanosecond_reference(tl):
    windows, m_ends, segs, anns = tl
    t = cs.step_tiling(
        _arr(*(s for s, _ in windows)),
        _arr(*(e - s for s, e in windows)),
        _arr(*m_ends),
        _arr(*(a for a, _ in segs)),
        _arr(*(b for _, b in segs)),
        _arr(*(a for a, _, _ in anns)),
        _arr(*(b for _, b, _ in anns)),
        _arr(*(p for _, _, p in anns)),
    )
    c_in, c_out, host = _reference(windows, m_ends, segs, anns)
    assert t["compute_step_ns"].tolist() == c_in.tolist()
    assert t["compute_loop_ns"].tolist() == c_out.tolist()
    assert t["host_ns"].tolist() == host.tolist()
    assert (t["host_ns"].sum(axis=(1, 2)) + c_in + c_out).tolist() == [e - s for s, e in windows]


def _tiling(walls, c_in, c_out, inside, outside):
    n = len(walls)
    host = np.zeros((n, 2, len(cs.PARTS)), dtype=np.int64)
    for k in range(n):
        for p, v in inside[k].items():
            host[k, 1, P[p]] = v
        for p, v in outside[k].items():
            host[k, 0, P[p]] = v
    return {"wall_ns": _arr(*walls), "compute_step_ns": _arr(*c_in), "compute_loop_ns": _arr(*c_out), "host_ns": host}


def test_summary_means_add_up():
    t = _tiling(
        [100, 80],
        [40, 30],
        [2, 0],
        [{"forward": 20, "other": 8}, {"forward": 10, "sample": 10}],
        [{"inputs": 20, "update": 10}, {"inputs": 24, "other": 6}],
    )
    s = cs.summarize(t)
    assert s["steps"] == 2 and s["step_ns"] == 90.0
    assert (s["compute_ns"], s["step_host_ns"], s["loop_host_ns"]) == (36.0, 24.0, 30.0)
    assert s["compute_ns"] + s["step_host_ns"] + s["loop_host_ns"] == s["step_ns"]
    assert s["compute_loop_ns"] == 1.0 and s["between_ns"] == 31.0
    assert s["step_parts"] == {"forward": 15.0, "sample": 5.0, "other": 4.0}
    assert s["loop_parts"] == {"inputs": 22.0, "update": 5.0, "other": 3.0}
    assert s["shares"] == {"compute_ns": 0.4, "step_host_ns": 24 / 90, "loop_host_ns": 30 / 90}
    assert s["annotated"] is True and cs.summarize(t, annotated=False)["annotated"] is False
    zero = cs.summarize(_tiling([0], [0], [0], [{}], [{}]))
    assert zero["shares"] == {"compute_ns": None, "step_host_ns": None, "loop_host_ns": None}
    assert zero["step_parts"] == {"other": 0.0}


def test_rows():
    s = cs.summarize(
        _tiling(
            [4_000_000],
            [2_000_000],
            [100_000],
            [{"forward": 900_000, "other": 100_000}],
            [{"inputs": 500_000, "update": 250_000, "schedule": 100_000, "admit": 40_000, "other": 10_000}],
        )
    )
    rows = cs.rows(s)
    assert rows[0] == ("loop split (traced)", "4.000 ms", "mean of 1 decode steps; parts add up to it")
    assert rows[1] == ("  compute", "2.100 ms", "52.5 % · device-active in the step")
    assert rows[2] == ("  host in the step", "1.000 ms", "25.0 % · forward Python/dispatch, kwargs, sampling")
    assert rows[3] == ("  loop host between steps", "0.900 ms", "22.5 % · update, admission, scheduling, inputs")
    assert rows[4] == (
        "    largest loop parts",
        "inputs 0.500 · update 0.250 · schedule 0.100 ms",
        "host by hostgap.cb.* part",
    )
    assert rows[5] == ("  between forward passes", "1.000 ms", "loop host + compute outside the step")
    assert len(rows) == 6
    assert cs.rows(None) == [] and cs.rows({}) == []
    assert cs.rows({"unavailable": "no decode steps"}) == [("loop split", "-", "no decode steps")]


def _step(i, kind, ts, dur, tid=1):
    return annotation(f"hostgap.step#{i}:{kind}:b1:q{128 if kind == 'prefill' else 1}:s{128 + i}", ts, dur, tid=tid)


def test_split_of_a_micro_trace(kineto_trace):
    """Prefill and three decode steps on the loop thread (tid 1); the first decode step is the
    warm-up one. A sub-annotation on another thread (tid 2) and an unknown name are ignored /
    charged to other. Times in µs."""
    ev = [_step(0, "prefill", 0, 40), cpu_op("aten::mm", 5, 30)]
    for i, t0 in ((1, 100), (2, 200), (3, 300)):
        ev += [
            _step(i, "decode", t0, 60),
            annotation("hostgap.cb.forward_sample", t0 + 5, 50),
            cpu_op("aten::mm", t0 + 10, 30),
            annotation("hostgap.cb.update", t0 + 60, 10),
            annotation("hostgap.cb.prepare", t0 + 75, 20),
            annotation("hostgap.cb.inputs", t0 + 80, 15),
            annotation("hostgap.cb.inputs.new_thing", t0 + 90, 5),
            annotation("hostgap.cb.schedule", t0 + 60, 30, tid=2),
        ]
    trace_path = kineto_trace(ev)
    from hostgap.analysis.trace import analyse_trace
    from hostgap.anatomy.steps import analyze

    trace = analyse_trace(trace_path).trace
    s = cs.split_of_trace(trace)
    assert s["steps"] == 2  # decode steps 2 and 3 (3 ends at its last op)
    steps = analyze(trace).to_dict()["steps"]
    assert [r["kind"] for r in steps] == ["prefill", "decode", "decode", "decode"]
    # step 2: window [200, 300): compute 30, forward own 50 - 30, other in the step 10; update
    # 10, other [270, 275) 5, prepare own 5, inputs 10, new_thing 5 (other), other [295, 300) 5;
    # step 3, the last: its window ends with its annotation (60): the same inside, nothing outside
    assert [r["wall_ns"] for r in steps[2:]] == [100_000, 60_000]
    assert s["step_ns"] == 80_000
    assert s["compute_ns"] == 30_000 and s["compute_loop_ns"] == 0
    assert s["step_parts"] == {"forward": 20_000.0, "other": 10_000.0}
    assert s["loop_parts"] == {"update": 5_000.0, "prepare": 2_500.0, "inputs": 5_000.0, "other": 7_500.0}
    assert "schedule" not in s["loop_parts"]  # the other thread's
    assert s["compute_ns"] + s["step_host_ns"] + s["loop_host_ns"] == pytest.approx(s["step_ns"])
    assert cs.split_of_trace(trace, steps[:2]) is not None  # one decode step: kept
    assert cs.split_of_trace(trace, steps[:1]) is None


def test_sub_annotations_and_threads(kineto_trace):
    from hostgap.analysis.trace import analyse_trace

    ev = [
        _step(0, "decode", 0, 10, tid=3),
        annotation("hostgap.cb.update", 10, 2, tid=3),
        annotation("hostgap.cb.inputs.mask", 12, 1, tid=4),
        annotation("hostgap.cb.mystery", 13, 1, tid=3),
        annotation("other.range", 14, 1, tid=3),
    ]
    trace = analyse_trace(kineto_trace(ev)).trace
    assert cs.step_threads(trace).tolist() == [3]
    s, e, p = cs.sub_annotations(trace)
    assert len(s) == 3 and sorted(p.tolist()) == sorted([P["update"], P["mask"], P["other"]])
    s, e, p = cs.sub_annotations(trace, np.array([3]))
    assert s.tolist() == [10_000, 13_000] and e.tolist() == [12_000, 14_000]
    assert p.tolist() == [P["update"], P["other"]]
    assert set(cs.PART_OF.values()) <= set(cs.PARTS) and set(cs.DETAIL) == set(cs.PARTS)


@pytest.mark.skipif(not FIXTURE.exists(), reason="fixture not generated")
def test_a_real_hf_cb_trace_tiles_every_step():
    """The tiny preset through transformers' loop: every decode step tiles exactly, compute is
    the anatomy's device-active time, the step annotation's length bounds the host inside it
    (read independently from the raw JSON), and the loop's parts are all found."""
    from hostgap.anatomy.steps import AnalysisOptions, analyze
    from hostgap.readers import load_trace

    trace = load_trace(str(FIXTURE))
    steps = analyze(trace, AnalysisOptions()).to_dict()["steps"]
    assert [s["kind"] for s in steps] == ["prefill"] + ["decode"] * 7
    dec = [s for s in steps if s["kind"] == "decode"]
    seg_s, seg_e = cs.active_segments(trace)
    a = cs.sub_annotations(trace, cs.step_threads(trace))
    t = cs.step_tiling(
        np.array([s["start_ns"] for s in dec]),
        np.array([s["wall_ns"] for s in dec]),
        np.array([s["marker_end_ns"] for s in dec]),
        seg_s,
        seg_e,
        *a,
    )
    total = t["host_ns"].sum(axis=(1, 2)) + t["compute_step_ns"] + t["compute_loop_ns"]
    assert total.tolist() == [s["wall_ns"] for s in dec]
    assert t["host_ns"].min() >= 0
    assert np.abs(t["compute_step_ns"] + t["compute_loop_ns"] - [s["gpu_active_ns"] for s in dec]).max() <= 1_000
    raw = json.loads(gzip.open(FIXTURE).read())["traceEvents"]
    marks = sorted((e for e in raw if e.get("name", "").startswith("hostgap.step#")), key=lambda e: e["ts"])
    for j, s in enumerate(dec):
        inside = t["host_ns"][j, 1].sum() + t["compute_step_ns"][j]
        if j < len(dec) - 1:  # the last step's window ends at its last op
            assert abs(inside - marks[s["index"]]["dur"] * 1000) <= 1_000
    loop = t["host_ns"][:, 0].sum(axis=0)
    for part in ("admit", "schedule", "inputs", "kv_indices", "mask", "reset", "prepare", "update"):
        assert loop[P[part]] > 0, part
    inner = t["host_ns"][:, 1].sum(axis=0)
    for part in ("kwargs", "forward", "sample", "d2h"):
        assert inner[P[part]] > 0, part
    split = cs.split_of_trace(trace, steps)
    assert split["steps"] == len(dec) - 1 and split["annotated"]
    assert split["loop_host_ns"] > 0 and split["between_ns"] >= split["loop_host_ns"]
