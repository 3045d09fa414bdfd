"""Windows computed all at once equal :func:`gpu_times` window by window, and the GPU-side /
CPU-side range choice keeps the k-th CPU range of a name only past that name's GPU ranges."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from conftest import annotation, cpu_op, gpu_annotation, kernel, memcpy, memset
from hostgap.anatomy.link import link
from hostgap.anatomy.timeline import _choose_ranges, classify_gaps, gpu_times, lane_prev_end, totals, windows
from hostgap.events import GPU_OP_KINDS
from hostgap.readers import load_trace

op = st.tuples(
    st.sampled_from(["k", "c", "s"]), st.integers(0, 60), st.integers(0, 15), st.integers(0, 1), st.integers(0, 4096)
)
win = st.tuples(st.integers(0, 3), st.integers(0, 70), st.integers(0, 30), st.booleans(), st.integers(0, 1))


def _events(ops, wins) -> list[dict]:
    make = {"k": kernel, "c": memcpy, "s": memset}
    events = []
    for kind, ts, dur, dev, nbytes in ops:
        extra = {} if kind == "k" else {"nbytes": nbytes}
        events.append(make[kind](f"{kind}{ts}", ts=ts, dur=dur, device=dev, **extra))
    for step, ts, dur, on_gpu, dev in wins:
        name = f"ProfilerStep#{step}"
        events.append(gpu_annotation(name, ts=ts, dur=dur, device=dev) if on_gpu else annotation(name, ts=ts, dur=dur))
    return events


@settings(**examples(60), deadline=None)
@given(st.lists(op, min_size=1, max_size=25), st.lists(win, min_size=1, max_size=8))
def test_windows_equal_gpu_times_one_by_one(tmp_path_factory, ops, wins):
    from conftest import write_kineto

    path = write_kineto(tmp_path_factory.mktemp("w") / "t.json", _events(ops, wins))
    trace = load_trace(str(path))
    ev = trace.events
    gpu = np.flatnonzero(ev.of_kind(*GPU_OP_KINDS))
    for w in windows(trace):
        rows = gpu[ev.device[gpu] == w.device]  # every op of the device: no nearness shortcut
        assert w.times == gpu_times(trace, rows, w.start_ns, w.end_ns), w


def _reference_choice(gpu_names, gpu_rows, cpu_names, cpu_rows) -> list[int]:
    """The rule written as a loop: all GPU ranges; per name, the CPU ranges after the first
    (number of GPU ranges of that name) in trace order."""
    chosen = list(gpu_rows)
    for name in set(cpu_names.tolist()):
        n_gpu = int(np.sum(gpu_names == name))
        chosen.extend(cpu_rows[cpu_names == name][n_gpu:].tolist())
    return sorted(chosen)


@settings(**examples(200), deadline=None)
@given(st.lists(st.integers(0, 5), max_size=12), st.lists(st.integers(0, 5), max_size=12))
def test_range_choice_matches_the_rule(gpu, cpu):
    gpu_names, cpu_names = np.array(gpu, dtype=np.int64), np.array(cpu, dtype=np.int64)
    gpu_rows = np.arange(len(gpu), dtype=np.int64) * 2  # disjoint row numbers, trace order
    cpu_rows = np.arange(len(cpu), dtype=np.int64) * 2 + 1
    got = _choose_ranges(gpu_names, gpu_rows, cpu_names, cpu_rows)
    assert sorted(got.tolist()) == _reference_choice(gpu_names, gpu_rows, cpu_names, cpu_rows)


def test_range_choice_by_hand():
    # name 7: one GPU range, three CPU ranges -> the 2nd and 3rd CPU ranges (rows 12, 13) stay;
    # name 9: no GPU range -> its CPU range (row 14) stays; name 8: GPU only (row 3)
    got = _choose_ranges(np.array([7, 8]), np.array([2, 3]), np.array([7, 7, 7, 9]), np.array([11, 12, 13, 14]))
    assert sorted(got.tolist()) == [2, 3, 12, 13, 14]


def test_thousands_of_windows_each_exact(kineto_trace):
    # 3,000 one-step windows over a kernel every 10 µs lasting 4 µs: each window [10i, 10i+6]
    # holds 4 µs of kernel from 10i and nothing else (busy 4,000 ns, idle 2,000 ns)
    n = 3000
    events = [kernel("k", ts=10 * i, dur=4) for i in range(n)]
    events += [annotation(f"ProfilerStep#{i}", ts=10 * i, dur=6) for i in range(n)]
    ws = windows(load_trace(kineto_trace(events)))
    assert len(ws) == n
    assert {(w.times.busy_ns, w.times.idle_ns, w.times.kernel_count) for w in ws} == {(4000, 2000, 1)}
    assert [w.name for w in ws[:3]] == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]


def test_totals_copies_by_direction(kineto_trace):
    # kernels [0,4] and [2,6] (sum 8, union 6); H2D copy [10,13] of 100 B, D2H copy [20,22] of 7 B,
    # a device-to-device copy [30,31] of 1,000 B (neither direction)
    events = [
        kernel("a", ts=0, dur=4),
        kernel("b", ts=2, dur=4),
        memcpy("Memcpy HtoD (Pageable -> Device)", ts=10, dur=3, nbytes=100),
        memcpy("Memcpy DtoH (Device -> Pageable)", ts=20, dur=2, nbytes=7),
        memcpy("Memcpy DtoD (Device -> Device)", ts=30, dur=1, nbytes=1000),
    ]
    t = totals(load_trace(kineto_trace(events)))
    assert (t.activity, t.busy_ns, t.kernel_sum_ns, t.kernel_union_ns, t.kernel_count) == (
        "gpu",
        12_000,
        8_000,
        6_000,
        2,
    )
    assert (t.copy_ns, t.h2d_bytes, t.d2h_bytes) == (6_000, 100, 7)


def test_idle_gaps_keep_devices_apart_on_equal_stream_ids(kineto_trace):
    # stream 7 on device 0: [0,1] then [100,101]; stream 7 on device 1: [50,51]. Per device the
    # only gap is device 0's 99 µs one; merged into one lane they would be two gaps of 49 µs
    events = [
        kernel("a", ts=0, dur=1, device=0),
        kernel("b", ts=100, dur=1, device=0),
        kernel("c", ts=50, dur=1, device=1),
    ]
    trace = load_trace(kineto_trace(events))
    ev = trace.events
    rows = np.flatnonzero(ev.of_kind(*GPU_OP_KINDS))
    _, gap, *_ = classify_gaps(trace, link(trace), rows, 30_000)
    assert gap.tolist() == [99_000]
    prev = lane_prev_end(trace, rows)
    assert sorted(prev[rows].tolist()) == [np.iinfo(np.int64).min, np.iinfo(np.int64).min, 1_000]


def test_lane_prev_end_at_chosen_rows_equals_the_full_length_array(kineto_trace):
    events = [
        cpu_op("aten::x", ts=0, dur=1),  # host rows: never given, int64 min
        kernel("a", ts=0, dur=10, stream=7),
        kernel("b", ts=5, dur=20, stream=7),  # overlaps a: its stream was busy until 10
        kernel("c", ts=40, dur=1, stream=8),
        kernel("d", ts=200, dur=1, stream=7),  # after the longest end so far on stream 7, 25
        cpu_op("aten::y", ts=300, dur=1),  # the last row: past every GPU row
    ]
    trace = load_trace(kineto_trace(events))
    ev = trace.events
    rows = np.flatnonzero(ev.of_kind(*GPU_OP_KINDS))
    full = lane_prev_end(trace, rows)
    low = np.iinfo(np.int64).min
    assert [full[r] for r in rows] == [low, 10_000, low, 25_000]
    every = np.arange(len(ev))  # GPU and host rows, the last (a host row) included
    assert lane_prev_end(trace, rows, every).tolist() == full.tolist()
    assert lane_prev_end(trace, rows, rows[::-1]).tolist() == full[rows[::-1]].tolist()
    # only some GPU rows given: the others are "not given", like host rows
    assert lane_prev_end(trace, rows[:2], rows).tolist() == [low, 10_000, low, low]
    # no rows: nothing given, in either form
    none = np.zeros(0, dtype=np.int64)
    assert lane_prev_end(trace, none).tolist() == [low] * len(ev)
    assert lane_prev_end(trace, none, rows[:3]).tolist() == [low] * 3
