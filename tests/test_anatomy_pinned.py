"""Numbers that a wrong operator would change: exact values on hand-built timelines for the parts
of the step anatomy that the mutation audit found unpinned (unattributed host time, the CPU
"where host time goes" table, the verdict's step pool, the queued-step rules, the busy-at-launch
tie, the event-table validation helper).

Every expected value is worked out by hand in the docstring (µs; the builder's unit).
"""

from __future__ import annotations

import pytest

from anatomy_builders import H100, US, Timeline
from hostgap.anatomy.steps import AnalysisOptions, analyze
from hostgap.errors import HostgapError

FLOOR = AnalysisOptions(launch_floor_ns=4500.0)


def run(t: Timeline, tmp_path, config: AnalysisOptions = FLOOR) -> dict:
    return analyze(t.load(tmp_path), config).to_dict()


# -- unattributed host time -------------------------------------------------------------------


def unattributed_two_steps() -> Timeline:
    """One thread, no Python frames::

    ProfilerStep#1 [0, 50]
      aten::mul [10, 20]: launch [12, 14] -> k [20, 25]
         T_py [0, 10] (from the step start), T_dispatch [10, 12], launch [12, 14]
      cudaStreamSynchronize [30, 40]   (the host waits: covered, not unattributed)
      covered = [0, 14] + [30, 40] = 24; window [0, 50] -> unattributed 26
    ProfilerStep#2 [50, 90]
      aten::add [60, 70]: launch [61, 63] -> k [70, 72]
         T_py [50, 60] (step start 50 > previous op end 20), T_dispatch [60, 61], launch [61, 63]
      covered 13; window [50, 90] (the last step: to its marker end) -> unattributed 27
    """
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 40)
    t.op("aten::mul", 10, 10)
    t.launch_kernel(12, 2, "k", 20, 5)
    t.runtime("cudaStreamSynchronize", 30, 10)
    t.op("aten::add", 60, 10)
    t.launch_kernel(61, 2, "k", 70, 2)
    return t


def test_unattributed_host_time_is_the_window_minus_covered_time(tmp_path):
    doc = run(unattributed_two_steps(), tmp_path)
    s0, s1 = doc["steps"]
    assert s0["taxbreak"]["py_ns"] == 10 * US and s1["taxbreak"]["py_ns"] == 10 * US
    assert s0["taxbreak"]["unattributed_ns"] == 26 * US
    assert s1["taxbreak"]["unattributed_ns"] == 27 * US
    assert doc["taxbreak"]["unattributed_ns"] == 53 * US


# -- the CPU "where host time goes" table -----------------------------------------------------


def cpu_two_steps() -> Timeline:
    """A CPU-only trace (no device activity), one thread::

        ProfilerStep#1 [0, 50]
          frame <built-in function linear> [2, 30]
            aten::linear [5, 25] > aten::addmm [8, 20]   addmm is compute (kernel-bearing)
          aten::view [30, 31]                             metadata: not compute
        ProfilerStep#2 [50, 100]
          aten::mul [60, 70]                              leaf: compute
          aten::linear [75, 85] > aten::addmm [76, 84]

    Host time per top-level op = time since the previous top-level op (or the step start) +
    its own time outside compute ops:
        linear#1: (5 - 0) + (20 - 12) = 13      view: (30 - 25) + 1 = 6
        mul:      (60 - 50) + 0 = 10            linear#2: (75 - 70) + (10 - 8) = 7
    By op: linear 20 (2 ops), mul 10, view 6; total 36; per step (2 steps): 10, 5, 3.
    By frame: no frame 10 + 6 + 7 = 23 (3 ops), <built-in function linear> 13.
    """
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.frame("<built-in function linear>", 2, 28)
    t.op("aten::linear", 5, 20)
    t.op("aten::addmm", 8, 12)
    t.op("aten::view", 30, 1)
    t.op("aten::mul", 60, 10)
    t.op("aten::linear", 75, 10)
    t.op("aten::addmm", 76, 8)
    return t


def test_cpu_top_ops_exact_table(tmp_path):
    doc = run(cpu_two_steps(), tmp_path)
    assert doc["activity"] == "cpu-compute"
    got = [(r["name"], r["host_ns"], r["host_ns_per_step"], r["launches"], r["share"]) for r in doc["top_ops"]]
    assert got == [
        ("aten::linear", 20 * US, 10 * US, 2, pytest.approx(20 / 36)),
        ("aten::mul", 10 * US, 5 * US, 1, pytest.approx(10 / 36)),
        ("aten::view", 6 * US, 3 * US, 1, pytest.approx(6 / 36)),
    ]
    assert all(r["basis"].startswith("CPU:") for r in doc["top_ops"])


def test_cpu_top_frames_exact_table(tmp_path):
    doc = run(cpu_two_steps(), tmp_path)
    got = [(r["name"], r["host_ns"], r["host_ns_per_step"], r["launches"], r["share"]) for r in doc["top_frames"]]
    assert got == [
        ("(no Python frame in trace)", 23 * US, 11.5 * US, 3, pytest.approx(23 / 36)),
        ("<built-in function linear>", 13 * US, 6.5 * US, 1, pytest.approx(13 / 36)),
    ]


def test_cpu_top_ops_limit(tmp_path):
    a = analyze(cpu_two_steps().load(tmp_path), AnalysisOptions(top=2))
    assert [r["name"] for r in a.top_ops] == ["aten::linear", "aten::mul"]


def test_gpu_top_ops_per_step_and_shares(tmp_path):
    """:func:`unattributed_two_steps`: aten::mul is charged ΔFT = T_py 10 + T_dispatch 2 = 12,
    aten::add 10 + 1 = 11 (both native, no ΔCT); 2 steps: 6 and 5.5 per step; shares 12/23, 11/23."""
    doc = run(unattributed_two_steps(), tmp_path)
    got = [(r["name"], r["host_ns"], r["host_ns_per_step"], r["launches"], r["share"]) for r in doc["top_ops"]]
    assert got == [
        ("aten::mul", 12 * US, 6 * US, 1, pytest.approx(12 / 23)),
        ("aten::add", 11 * US, 5.5 * US, 1, pytest.approx(11 / 23)),
    ]
    frames = [(r["name"], r["host_ns"]) for r in doc["top_frames"]]
    assert frames == [("(no Python frame in trace)", 23 * US)]


# -- the verdict's step pool -------------------------------------------------------------------


def minority_queued() -> Timeline:
    """Five ProfilerSteps 100 µs apart (markers 10 µs long), one kernel each, launched at
    marker start + 1 [+1, +2]:

        step 0 (warm-up)  k [5, 15]
        step 1            k [105, 155]             host fraction 50/100 = 0.5
        step 2 (queued)   k [310, 320], stream 8   starts after step 3's marker: queued
        step 3            k [305, 375]             host fraction 30/100 = 0.3
        step 4 (last)     k [405, 425]             wall 400 -> 425: 5/25 = 0.2

    A minority of the pool (steps 1-4) is queued, so the queued step is dropped: steps_used 3 and
    the raw host fraction is median(0.5, 0.3, 0.2) = 0.3 (keeping it would give 0.4).
    """
    t = Timeline(props=H100)
    for i in range(5):
        t.annotation(f"ProfilerStep#{i + 1}", 100 * i, 10)
    t.launch_kernel(1, 1, "k", 5, 10)
    t.launch_kernel(101, 1, "k", 105, 50)
    t.launch_kernel(201, 1, "k", 310, 10, stream=8)
    t.launch_kernel(301, 1, "k", 305, 70)
    t.launch_kernel(401, 1, "k", 405, 20)
    return t


def test_verdict_pool_drops_a_queued_minority(tmp_path):
    doc = run(minority_queued(), tmp_path)
    assert [s["queued"] for s in doc["steps"]] == [False, False, True, False, False]
    v = doc["verdict"]
    assert v["steps_used"] == 3
    assert v["host_fraction"] == pytest.approx(0.3)


# -- queued-step rules -------------------------------------------------------------------------


def waited_behind_earlier_work() -> Timeline:
    """Three steps; the first step's kernel keeps the GPU busy through step 1's marker::

        ProfilerStep#1 [0, 10]     launch [1, 2] -> k [3, 250]
        ProfilerStep#2 [150, 160]  launch [151, 152] -> k [250, 260]
        ProfilerStep#3 [300, 310]  launch [301, 302] -> k [303, 305]

    Step 1's first op (250) starts after its marker ended (160) and the GPU was busy from its
    marker start until then (150 -> 250 covered = 100 = 250 - 150): queued by the rule "waited
    behind earlier work". With ``fo + m_start`` (400) instead of ``fo - m_start`` it would not be.
    Step 0 is not queued: of its 247 µs, 100 run after the next marker (less than half).
    """
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 10)
    t.annotation("ProfilerStep#2", 150, 10)
    t.annotation("ProfilerStep#3", 300, 10)
    t.launch_kernel(1, 1, "k", 3, 247)
    t.launch_kernel(151, 1, "k", 250, 10)
    t.launch_kernel(301, 1, "k", 303, 2)
    return t


def test_queued_when_the_first_op_waited_behind_earlier_work(tmp_path):
    doc = run(waited_behind_earlier_work(), tmp_path)
    assert [s["queued"] for s in doc["steps"]] == [False, True, False]


# -- a launch at the stream's end: the busy-at-launch tie ---------------------------------------


def launch_at_lane_end() -> Timeline:
    """ProfilerStep#1 [0, 100]; k1 launched [1, 2] runs [5, 20]; k2 launched [20, 22] exactly
    when k1 ends (20) runs [27, 30]. The stream is free at k2's launch start: k2 is not queued and
    ΔKT_fw = T_launch - T_floor = (27 - 20) - 4.5 = 2.5 µs (k1: (5 - 1) - 4.5 < 0 -> 0)."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(1, 1, "k", 5, 15)
    t.launch_kernel(20, 2, "k", 27, 3)
    return t


def test_launch_exactly_at_the_lane_end_is_not_queued(tmp_path):
    a = analyze(launch_at_lane_end().load(tmp_path), FLOOR)
    k = a.kernels
    assert list(k.queued) == [False, False]
    assert list(k.dkt_fw_ns) == [0.0, 2500.0]
    assert a.taxbreak["kt_fw_ns"] == 2500 and a.taxbreak["kt_fw_samples"] == 2


# -- the event table's validation helper --------------------------------------------------------


def test_require_raises_only_when_the_condition_fails():
    from hostgap.events import require

    require(True, "trace.json", "never raised")
    with pytest.raises(HostgapError) as e:
        require(False, "trace.json", "no traceEvents")
    assert "trace.json" in str(e.value) and "no traceEvents" in str(e.value)


# -- the causal rule on the timeline the naive reference once disagreed on -----------------------


def test_gap_after_the_work_was_launched_is_not_host(tmp_path):
    """tests/test_anatomy_properties.py::two_threads_two_streams. GPU ops (one device):
    [2, 3] handed over at 1, [10, 14] at 12, [21, 23] at 19 (stream 8), [21, 22] at 15 (stream 7),
    [23, 24] at 20, [24, 25] at 21. Walls: [0, 2), [2, 4), [4, 5), [5, 25) (the last step: to its
    last op's end, 25 > its marker end 21).

    Gaps: [0, 2): host [0, 1) (first hand-over at 1), then launched-not-started [1, 2)
    unexplained; [3, 10): nothing handed over before 12 -> host, whole; [14, 21): a kernel was
    handed over at 15 -> host [14, 15), unexplained [15, 21) (the GPU had the work: not the host).
    Step 4: host [5, 10) + [14, 15) = 6 µs, unexplained 6 µs, busy 8 µs (10-14, 21-25).
    """
    from test_anatomy_properties import two_threads_two_streams

    doc = run(two_threads_two_streams(), tmp_path)
    steps = doc["steps"]
    assert [s["wall_ns"] for s in steps] == [2 * US, 2 * US, 1 * US, 20 * US]
    assert [s["host_wait_ns"] for s in steps] == [1 * US, 1 * US, 1 * US, 6 * US]
    s3 = steps[3]
    assert s3["busy_ns"] == 8 * US
    assert s3["idle_causes"] == {"host_ns": 6 * US, "dependency_ns": 0, "outside_ns": 0, "unexplained_ns": 6 * US}
    assert steps[0]["idle_causes"]["unexplained_ns"] == 1 * US


# -- ties (docs/method.md §3 "Ties") ----------------------------------------------------------------


def test_tie_idle_gap_exactly_at_the_threshold_is_other(tmp_path):
    """k1 [0, 10], k2 [40, 45] on one stream, k2 launched [1, 2] (before the gap began: not
    host-wait). The 30 µs gap equals the threshold: kernel-wait needs < threshold, so "other"."""
    from hostgap.anatomy.link import link
    from hostgap.anatomy.timeline import idle_gaps
    from hostgap.events import GPU_OP_KINDS

    t = Timeline(props=H100)
    t.launch_kernel(0, 0, "k", 0, 10)
    t.launch_kernel(1, 1, "k", 40, 5)
    trace = t.load(tmp_path)
    rows = __import__("numpy").flatnonzero(trace.events.of_kind(*GPU_OP_KINDS))
    g = idle_gaps(trace, link(trace), rows, 30_000)
    assert g.count == {"host_wait": 0, "kernel_wait": 0, "other": 1}
    g = idle_gaps(trace, link(trace), rows, 30_001)
    assert g.count == {"host_wait": 0, "kernel_wait": 1, "other": 0}


def test_tie_leading_wait_exactly_at_the_tolerance_is_not_outside(tmp_path):
    """Graph launch [2, 3], replay starts at 33: it waited exactly 30 µs after its launch, not
    more than the tolerance: [0, 3) host, [3, 33) unexplained (31 µs would make it outside)."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 10)
    t.graph_launch(2, 1, [("k", 33, 10)])
    (s,) = run(t, tmp_path)["steps"]
    assert (s["idle_causes"]["host_ns"], s["idle_causes"]["unexplained_ns"]) == (3 * US, 30 * US)
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 10)
    t.graph_launch(2, 1, [("k", 34, 10)])
    (s,) = run(t, tmp_path)["steps"]
    assert s["idle_causes"]["outside_ns"] == 34 * US


def test_tie_call_exactly_on_a_step_boundary_belongs_to_the_later_step(tmp_path):
    """Markers [0, 10] and [10, 20]: a launch starting at 10 is step 1's; one starting at 20
    (the last marker's end) is still step 1's; one at 21 belongs to no step."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 10)
    t.annotation("ProfilerStep#2", 10, 10)
    t.launch_kernel(10, 1, "k", 12, 1)
    t.launch_kernel(20, 1, "k", 22, 1)
    t.launch_kernel(21, 1, "k", 24, 1)
    doc = run(t, tmp_path)
    assert [s["launches"] for s in doc["steps"]] == [0, 2]
    assert doc["unassigned"]["gpu_ops_outside_steps"] == 1


def test_tie_equal_starts_on_two_streams_and_a_launch_ending_at_the_gap_start(tmp_path):
    """k0 [0, 10] (launched [0, 0]). Two kernels start at 20 on streams 7 and 8, handed over at
    12 and 15: the gap [10, 20) ends at both; host [10, 12), unexplained [12, 20). Then k3
    launched [21, 25] runs [25, 30] right after them, and k4 launched [26, 30] — its call ends
    exactly when the gap [30, 40) begins — runs [40, 41]: no host part, unexplained 10."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 41)
    t.launch_kernel(0, 0, "k0", 0, 10)
    t.launch_kernel(11, 1, "a", 20, 3)
    t.launch_kernel(14, 1, "b", 20, 2, stream=8)
    t.launch_kernel(21, 4, "k3", 25, 5)
    t.launch_kernel(26, 4, "k4", 40, 1)
    (s,) = run(t, tmp_path)["steps"]
    # busy [0, 10] + [20, 23] + [25, 30] + [40, 41] = 19; gap [23, 25): k3 handed over at 25
    assert s["busy_ns"] == 19 * US
    assert s["idle_causes"] == {"host_ns": 4 * US, "dependency_ns": 0, "outside_ns": 0, "unexplained_ns": 18 * US}


def test_tie_touching_ops_leave_no_gap(tmp_path):
    """k1 [1, 10] and k2 [10, 20] touch (k2 launched [3, 4]): one busy segment, no zero-length
    gap; the step [0, 30) has busy 19, and host time [0, 1) (until k1's launch call returned) and
    [20, 30) (after the last op): 11, nothing else."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 30)
    t.launch_kernel(0, 1, "k", 1, 9)
    t.launch_kernel(3, 1, "k", 10, 10)
    (s,) = run(t, tmp_path)["steps"]
    assert s["busy_ns"] == 19 * US
    assert s["idle_causes"] == {"host_ns": 11 * US, "dependency_ns": 0, "outside_ns": 0, "unexplained_ns": 0}


def test_plain_verdict_is_not_queued_by_default():
    """verdict(f, host_wait_share) without ``queued`` classifies the fraction it is given (the
    differencing split's use), not the host-wait share."""
    from hostgap.anatomy.verdict import verdict

    v = verdict(0.5, 0.02)
    assert (v.verdict, v.basis, v.note) == ("host-bound", "host_fraction", "")


def test_verdict_pool_without_decode_steps_keeps_the_complete_ones():
    """No decode step: the pool falls back to the steps that are not partial (here the second,
    host share 0.05: device-bound), never to the partial one (0.9)."""
    from hostgap.anatomy.verdict import step_verdict

    def step(i, partial, host):
        return {
            "index": i,
            "kind": "prefill",
            "partial": partial,
            "queued": False,
            "wall_ns": 100,
            "host_wait_ns": host,
            "host_fraction": host / 100,
            "idle_causes": {"host_ns": host, "dependency_ns": 0, "outside_ns": 0, "unexplained_ns": 0},
        }

    v = step_verdict([step(0, True, 90), step(1, False, 5)], [], None)
    assert (v["verdict"], v["steps_used"], v["host_wait_share"]) == ("device-bound", 1, 0.05)
