"""Step windows and the device-op table (hostgap.anatomy.windows) on hand-built inputs."""

from __future__ import annotations

import numpy as np

from anatomy_builders import H100, US, Timeline
from hostgap.anatomy.link import link
from hostgap.anatomy.markers import step_markers
from hostgap.anatomy.timeline import activity_rows
from hostgap.anatomy.windows import INT_MAX, device_ops, host_api_steps, marker_windows, step_of, with_wall_end
from hostgap.events import NONE


def test_step_of_boundaries():
    """Windows [0, 10), [10, 20), [20, 25] (the last: to its marker end 25): a time on a
    boundary belongs to the later step; before the first start or after the last marker end,
    to none."""
    start, marker_end = np.array([0, 10, 20]), np.array([5, 15, 25])
    t = np.array([-1, 0, 9, 10, 20, 25, 26])
    assert step_of(t, start, marker_end).tolist() == [NONE, 0, 0, 1, 2, 2, NONE]
    assert step_of(t, np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == [NONE] * 7


def two_steps() -> Timeline:
    """ProfilerStep#2 [100, 150] written before ProfilerStep#1 [0, 50] (thread 1); an op on
    thread 3 [160, 170]."""
    t = Timeline()
    t.annotation("ProfilerStep#2", 100, 50)
    t.annotation("ProfilerStep#1", 0, 50)
    t.op("aten::mm", 160, 10, tid=3)
    return t


def test_marker_windows_sorted_with_next_start_cpu_end_and_wall_end(tmp_path):
    tr = two_steps().load(tmp_path)
    w = marker_windows(tr, step_markers(tr).rows)
    assert w.names == ["ProfilerStep#1", "ProfilerStep#2"] and len(w) == 2
    us = lambda a: (np.asarray(a) // US).tolist()  # noqa: E731
    assert us(w.start_ns) == [0, 100] and us(w.marker_end_ns) == [50, 150]
    assert w.next_start_ns[0] == 100 * US and w.next_start_ns[1] == INT_MAX
    assert us(w.cpu_end_ns) == [100, 150] and us(w.wall_end_ns) == [100, 150]
    assert w.thread.tolist() == [1, 1]
    assert us(with_wall_end(w, 200 * US).wall_end_ns) == [100, 200]
    assert us(with_wall_end(w, 120 * US).wall_end_ns) == [100, 150]
    assert us(with_wall_end(w, None).wall_end_ns) == [100, 150]
    assert us(with_wall_end(w, 200 * US).wall_ns) == [100, 100]
    assert w.step_of(np.array([99, 100, 150, 151]) * US).tolist() == [0, 1, 1, NONE]


def test_whole_trace_window_without_markers(tmp_path):
    """No marker rows: one step from the first event's start (0) to the last event's end (170)."""
    tr = two_steps().load(tmp_path)
    w = marker_windows(tr, np.zeros(0, np.int64))
    assert w.names == ["whole trace"]
    assert (w.start_ns.tolist(), w.marker_end_ns.tolist()) == ([0], [170 * US])
    assert w.thread.tolist() == [NONE] and w.next_start_ns.tolist() == [INT_MAX]
    assert len(with_wall_end(marker_windows(tr, np.zeros(0, np.int64)), None)) == 1


def launches_around_the_capture() -> Timeline:
    """Steps [10, 20) and [20, 30]. GPU ops (stream 7):
    a: launched [5, 6] (before the first step)   runs [7, 8]    -> outside, no step
    b: launched [12, 13] (step 0)                runs [14, 15]  -> step 0, handed over at 13
    c: launched [20, 21] (on the boundary)       runs [22, 23]  -> step 1
    d: no launch in the trace, starts at 25                     -> not outside (after the start)
    e: no launch in the trace, starts at 3                      -> outside (before the first step)
    """
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 10, 5)
    t.annotation("ProfilerStep#2", 20, 10)
    t.launch_kernel(5, 1, "a", 7, 1)
    t.launch_kernel(12, 1, "b", 14, 1)
    t.launch_kernel(20, 1, "c", 22, 1)
    t.kernel("d", 25, 1)
    t.kernel("e", 3, 1)
    return t


def test_device_ops_steps_hand_over_and_outside(tmp_path):
    tr = launches_around_the_capture().load(tmp_path)
    lk = link(tr)
    activity, rows = activity_rows(tr)
    w = marker_windows(tr, step_markers(tr).rows)
    ops = device_ops(tr, lk, activity, rows, w)
    assert ops.gpu and activity == "gpu"
    by = {tr.name_of(r): i for i, r in enumerate(ops.rows)}
    get = lambda col: {n: int(col[i]) for n, i in by.items()}  # noqa: E731
    assert get(ops.step) == {"a": NONE, "b": 0, "c": 1, "d": NONE, "e": NONE}
    assert {n: bool(ops.outside[i]) for n, i in by.items()} == {
        "a": True,
        "b": False,
        "c": False,
        "d": False,
        "e": True,
    }
    enq = get(ops.enqueue_ns)
    assert (enq["a"], enq["b"], enq["c"]) == (6 * US, 13 * US, 21 * US)
    assert ops.launch_row[by["d"]] == NONE and ops.launch_row[by["b"]] >= 0
    assert all(ops.is_kernel)


def test_device_ops_on_a_cpu_trace(tmp_path):
    """CPU-only: compute ops belong to the step holding their start and are "handed over" when
    they start; none is outside the capture."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.op("aten::mm", 10, 5)
    t.op("aten::mm", 60, 5)
    tr = t.load(tmp_path)
    activity, rows = activity_rows(tr)
    w = marker_windows(tr, step_markers(tr).rows)
    ops = device_ops(tr, link(tr), activity, rows, w)
    assert activity == "cpu-compute" and not ops.gpu
    assert ops.step.tolist() == [0, 1] and ops.enqueue_ns.tolist() == [10 * US, 60 * US]
    assert not ops.outside.any() and ops.device.tolist() == [NONE, NONE]


def test_host_api_steps(tmp_path):
    tr = launches_around_the_capture().load(tmp_path)
    w = marker_windows(tr, step_markers(tr).rows)
    rows, step = host_api_steps(tr, w)
    assert [tr.name_of(r) for r in rows] == ["cudaLaunchKernel"] * 3
    assert step[rows].tolist() == [NONE, 0, 1]
    other = np.setdiff1d(np.arange(len(tr.events)), rows)
    assert (step[other] == NONE).all()


def test_before_first_launch_by_correlation_within_the_process():
    """Host calls of process (link key) 1 start at correlation 5. GPU ops without a launch:
    key 1 corr 3 (below 5: launched before the capture), key 1 corr 9 (no), key 2 (a process
    with no host call in the trace: no), key 0 (no), key 1 without a correlation id (no)."""
    from hostgap.anatomy.windows import _before_first_launch
    from hostgap.events import Kind
    from test_link_nesting import table

    rows = [
        {"kind": Kind.LAUNCH, "start": 0, "dur": 1, "corr": 5, "key": 1},
        {"kind": Kind.RUNTIME, "start": 1, "dur": 1, "corr": 7, "key": 1},
    ]
    rows += [
        {"kind": Kind.KERNEL, "start": 10 + i, "dur": 1, "corr": c, "key": k}
        for i, (k, c) in enumerate([(1, 3), (1, 9), (2, 1), (0, 1), (1, NONE)])
    ]
    tr = table(rows)
    assert _before_first_launch(tr, np.arange(2, 7)).tolist() == [True, False, False, False, False]
    assert _before_first_launch(table(rows[2:]), np.arange(5)).tolist() == [False] * 5  # no host calls
    # the first captured call is the lowest correlation id, not the earliest call: 5, not 7
    rows = [
        {"kind": Kind.RUNTIME, "start": 0, "dur": 1, "corr": 7, "key": 1},
        {"kind": Kind.LAUNCH, "start": 1, "dur": 1, "corr": 5, "key": 1},
        {"kind": Kind.KERNEL, "start": 10, "dur": 1, "corr": 6, "key": 1},
        {"kind": Kind.KERNEL, "start": 11, "dur": 1, "corr": 4, "key": 1},
    ]
    assert _before_first_launch(table(rows), np.array([2, 3])).tolist() == [False, True]
