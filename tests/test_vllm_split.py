"""The per-process split of vLLM engine steps: exact tiling, by hand and on a real Worker trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from hostgap.analysis import vllm_split as vs

FIXTURE = Path(__file__).parent / "data" / "vllm_worker_tiny_cpu.json.gz"


def _arr(*x):
    return np.array(x, dtype=np.int64)


def test_parts_by_hand():
    # step 0: window [0, 100), annotation [0, 60); step 1: window [100, 150), annotation [100, 130)
    # compute: [10, 30) and [50, 70) straddling the annotation's end, [80, 90) after it; [110, 120)
    parts = vs.step_parts(_arr(0, 100), _arr(100, 50), _arr(60, 130), _arr(10, 50, 80, 110), _arr(30, 70, 90, 120))
    assert parts["compute_ns"].tolist() == [20 + 20 + 10, 10]
    assert parts["worker_host_ns"].tolist() == [60 - (20 + 10), 30 - 10]
    assert parts["between_ns"].tolist() == [(100 - 60) - (10 + 10), 20]
    total = parts["compute_ns"] + parts["worker_host_ns"] + parts["between_ns"]
    assert total.tolist() == parts["wall_ns"].tolist() == [100, 50]


def test_annotation_past_its_window_is_clipped():
    parts = vs.step_parts(_arr(100), _arr(50), _arr(400), _arr(110), _arr(120))
    assert parts["worker_host_ns"].tolist() == [40] and parts["between_ns"].tolist() == [0]


def test_no_compute_and_an_empty_window():
    parts = vs.step_parts(_arr(0, 10), _arr(10, 0), _arr(4, 10), _arr(), _arr())
    assert parts["compute_ns"].tolist() == [0, 0]
    assert parts["worker_host_ns"].tolist() == [4, 0]
    assert parts["between_ns"].tolist() == [6, 0]


def test_summary_means_add_up_and_shares():
    parts = {
        "compute_ns": _arr(10, 20),
        "worker_host_ns": _arr(30, 30),
        "between_ns": _arr(60, 50),
        "wall_ns": _arr(100, 100),
    }
    s = vs.summarize(parts)
    assert s["steps"] == 2 and s["step_ns"] == 100.0
    assert (s["compute_ns"], s["worker_host_ns"], s["between_ns"]) == (15.0, 30.0, 55.0)
    assert s["shares"] == {"compute_ns": 0.15, "worker_host_ns": 0.30, "between_ns": 0.55}


def test_steady_decode_rows():
    steps = [
        {"kind": "prefill", "wall_ns": 9},
        {"kind": "decode", "wall_ns": 5},
        {"kind": "decode", "wall_ns": 6},
        {"kind": "unknown", "wall_ns": 1},
        {"kind": "decode", "wall_ns": 0},
    ]
    assert [s["wall_ns"] for s in vs.decode_rows(steps)] == [6]
    assert [s["wall_ns"] for s in vs.decode_rows(steps[:2])] == [5]  # too few to drop one
    assert vs.decode_rows(steps[:1]) == []


def test_frontend_beside_the_tiling():
    split = {
        "step_ns": 100.0,
        "steps": 3,
        "compute_ns": 20.0,
        "worker_host_ns": 30.0,
        "between_ns": 50.0,
        "shares": {"compute_ns": 0.2, "worker_host_ns": 0.3, "between_ns": 0.5},
    }
    out = vs.with_frontend(split, {"per_step": {"wall_ns": 120.0, "engine_ns": 110.0, "frontend_ns": 10.0}})
    assert out["frontend_ns"] == 10.0 and out["step_ns"] == 100.0
    neg = vs.with_frontend(split, {"per_step": {"frontend_ns": -3.0}})
    assert neg["frontend_ns"] == 0.0 and neg["frontend_raw_ns"] == -3.0  # never a negative time
    assert vs.with_frontend(split, {"per_step": None})["frontend_ns"] is None
    assert vs.with_frontend(None, {}) is None
    assert vs.with_frontend({"unavailable": "x"}, {}) == {"unavailable": "x"}
    rows = vs.rows(out)
    assert rows[0] == ("per-process split (traced)", "0.000 ms", "mean of 3 decode steps; parts add up to it")
    assert [r[0].strip() for r in rows[1:]] == [
        "Worker compute",
        "Worker host in execute_",
        "between Worker steps",
        "frontend beyond EngineCore",
    ]
    assert rows[3][2].startswith("50.0 % ·")
    assert vs.rows(None) == [] and vs.rows({"unavailable": "no decode steps"})[0][2] == "no decode steps"


def test_engine_rows():
    assert vs.engine_rows({"startup_ns": 31_200_000_000, "shutdown_ns": 5_060_000_000}) == [
        ("engine start-up / shutdown", "31.2 s / 5.1 s", "outside every timed call")
    ]
    assert vs.engine_rows({"startup_ns": 0}) == []
    assert vs.engine_rows({"startup_ns": 2e9, "shutdown_ns": 0})[0][1] == "2.0 s / -"


@pytest.mark.skipif(not FIXTURE.exists(), reason="fixture not generated")
def test_parts_tile_every_step_of_a_real_worker_trace():
    """A vLLM Worker trace harvested on CPU (trimmed): for every decode step the three parts
    add up to the anatomy's step wall, the compute part is the anatomy's device-active time,
    and the annotation part is read independently from the raw trace events."""
    from hostgap.anatomy.steps import AnalysisOptions, analyze
    from hostgap.readers import load_trace

    trace = load_trace(str(FIXTURE))
    steps = analyze(trace, AnalysisOptions()).to_dict()["steps"]
    dec = [s for s in steps if s["kind"] == "decode"]
    assert len(dec) >= 5
    seg_s, seg_e = vs.active_segments(trace)
    parts = vs.step_parts(
        np.array([s["start_ns"] for s in dec]),
        np.array([s["wall_ns"] for s in dec]),
        np.array([s["marker_end_ns"] for s in dec]),
        seg_s,
        seg_e,
    )
    total = parts["compute_ns"] + parts["worker_host_ns"] + parts["between_ns"]
    assert total.tolist() == [s["wall_ns"] for s in dec]
    assert all(min(parts[k]) >= 0 for k in vs.PARTS)
    assert np.abs(parts["compute_ns"] - np.array([s["gpu_active_ns"] for s in dec])).max() <= 1_000
    # independently of the loader: each step's execute_ annotation from the raw JSON (µs),
    # in order, bounds the two host parts
    raw = json.loads(gzip.open(FIXTURE).read())["traceEvents"]
    annot = [
        e["dur"] * 1000
        for e in sorted(
            (e for e in raw if e.get("ph") == "X" and e.get("name", "").startswith("execute_")), key=lambda e: e["ts"]
        )
    ]
    assert len(annot) == len(steps)
    for j, s in enumerate(dec):
        a = annot[s["index"]]
        tol = 1_000  # µs rounding of the JSON
        assert parts["worker_host_ns"][j] <= a + tol  # host inside the annotation fits in it
        assert parts["worker_host_ns"][j] + parts["compute_ns"][j] >= a - tol  # the rest of it is compute
        assert parts["between_ns"][j] <= s["wall_ns"] - a + tol  # outside the annotation
    split = vs.split_of_trace(trace, steps)
    assert split["steps"] == len(dec) - 1  # the first decode step is the warm-up one
    assert vs.split_of_trace(trace) == split  # analysed here when not given
    few = vs.split_of_trace(trace, steps[:4])  # the steps given are the ones used
    assert few["steps"] == 2 and few["step_ns"] == pytest.approx((dec[1]["wall_ns"] + dec[2]["wall_ns"]) / 2)
    assert vs.split_of_trace(trace, [s for s in steps if s["kind"] != "decode"]) is None
    assert split["compute_ns"] + split["worker_host_ns"] + split["between_ns"] == pytest.approx(
        split["step_ns"], abs=1e-6
    )


RAW = """\
process 10:"python -m hostgap measure";thread (1): MainThread;generate (v.py:1);get (queue.py:2);wait (threading.py:3);PyThread_acquire_lock (libpython) 30
process 10:"python -m hostgap measure";thread (1): MainThread;generate (v.py:1);process_outputs (o.py:5) 10
process 10:"python -m hostgap measure";thread (9): Thread-2;run (threading.py:1);zmq_poll (libzmq.so);epoll_wait (libc.so.6) 40
process 20:"VLLM::EngineCore";thread (2): MainThread;busy_loop (core.py:5);schedule (s.py:9) 25
process 20:"VLLM::EngineCore";thread (2): MainThread;busy_loop (core.py:5);dequeue (shm.py:3);sched_yield (libc.so.6) 50
process 20:"VLLM::EngineCore";thread (3): Thread-1;run (t.py:1);time_sleep (libpython);clock_nanosleep (libc.so.6) 25
process 30:"VLLM::Worker";thread (4): MainThread;execute_model (w.py:1);at::native::cpublas::gemm (libtorch_cpu.so) 60
process 30:"VLLM::Worker";thread (4): MainThread;worker_busy_loop (w.py:2);take_gil (libpython) 20
process 99:"resource tracker";thread (5): MainThread;main (r.py:1);select (libc.so.6) 500
not a sample line
process 30:"VLLM::Worker";thread (4): MainThread;execute_model (w.py:1)
"""


def test_thread_states_per_engine_process():
    st = vs.process_states(RAW, {10: "frontend", 20: "EngineCore", 30: "Worker"})
    p = st["processes"]
    assert set(p) == {"frontend", "EngineCore", "Worker"}  # pid 99 is not an engine process
    assert p["frontend"] == {
        "samples": 80,
        "running": 10 / 80,
        "socket_poll": 40 / 80,
        "lock_gil": 30 / 80,
        "idle": 0.0,
    }
    # sched_yield is a busy wait: running; clock_nanosleep is idle (not a lock, despite its name)
    assert p["EngineCore"] == {"samples": 100, "running": 0.75, "socket_poll": 0.0, "lock_gil": 0.0, "idle": 0.25}
    assert p["Worker"] == {"samples": 80, "running": 0.75, "socket_poll": 0.0, "lock_gil": 0.25, "idle": 0.0}
    assert "not a critical path" in st["basis"]
    assert vs.process_states(RAW, {}) is None
    rows = vs.state_rows(st)
    assert [r[0].strip() for r in rows] == [
        "frontend threads (py-spy)",
        "EngineCore threads (py-spy)",
        "Worker threads (py-spy)",
    ]
    assert rows[0][1] == "run 12 % · poll 50 % · lock 38 % · idle 0 %"
    assert rows[1][1] == "run 75 % · poll 0 % · lock 0 % · idle 25 %" and rows[1][2].startswith("100 samples")
    assert vs.state_rows(None) == []


def test_table_rows_put_the_split_first():
    facts = {"process_split": {"unavailable": "no decode steps"}, "startup_ns": 1e9, "shutdown_ns": 2e9}
    assert [r[0] for r in vs.table_rows(facts)] == ["per-process split", "engine start-up / shutdown"]


def test_report_draws_one_stacked_bar_for_a_vllm_run():
    from hostgap.report.figures import stepwise as F
    from hostgap.report.inputs import Input

    split = {
        "steps": 30,
        "step_ns": 7.0e6,
        "compute_ns": 2.0e6,
        "worker_host_ns": 4.0e6,
        "between_ns": 1.0e6,
        "shares": {},
        "frontend_ns": 0.0,
    }
    inp = Input(
        source="r",
        kind="run",
        label="r",
        trace_path=None,
        results={"engine_facts": {"engine": "vllm", "process_split": split}},
    )
    f = F.processes_figure(inp, "fig-processes-0")
    assert f.svg is not None and "Worker host in execute_ (4.000 ms)" in f.svg
    assert "add up to the traced step (7.000 ms" in f.caption
    bare = F.processes_figure(Input(source="t", kind="trace", label="t", trace_path="t.json"), "fig-processes-1")
    assert bare.svg is None and bare.caption.startswith("Not available")


def test_parts_tile_any_timeline():
    """Property: on generated step windows, annotations and compute intervals, every step's three
    parts are >= 0, add up to its wall, and compute never exceeds the window."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from budget import examples
    from hostgap.anatomy.intervals import merge

    @settings(**examples(200), deadline=None)
    @given(st.lists(st.integers(0, 50), min_size=1, max_size=8), st.data())
    def check(walls, data):
        start = np.concatenate(([0], np.cumsum(walls)[:-1])).astype(np.int64)
        wall = np.array(walls, dtype=np.int64)
        m_end = np.array([data.draw(st.integers(s, s + 2 * w + 1)) for s, w in zip(start, wall)], dtype=np.int64)
        ivs = data.draw(
            st.lists(st.tuples(st.integers(-5, int(start[-1] + wall[-1] + 5)), st.integers(0, 30)), max_size=12)
        )
        seg_s, seg_e = merge(
            np.array([a for a, _ in ivs], dtype=np.int64), np.array([a + d for a, d in ivs], dtype=np.int64)
        )
        p = vs.step_parts(start, wall, m_end, seg_s, seg_e)
        assert (p["compute_ns"] + p["worker_host_ns"] + p["between_ns"]).tolist() == wall.tolist()
        for k in vs.PARTS:
            assert (p[k] >= 0).all()
        assert (p["compute_ns"] <= wall).all()

    check()
