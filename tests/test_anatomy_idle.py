"""Idle causes, queued/partial rules and step markers on hand-built timelines (docs/method.md §3).

One timeline per cause and per rule, each worked out by hand in its docstring (µs). A device's
timeline is cut into busy time and gaps; in a gap, the part before any later op had been handed
to the GPU (its launch call's end) is host; the rest is dependency, outside the capture or
unexplained by the evidence named in the docstring.
"""

from __future__ import annotations

import pytest

from anatomy_builders import H100, US, Timeline
from hostgap.anatomy.steps import AnalysisOptions, analyze

FLOOR = AnalysisOptions(launch_floor_ns=4500.0)
VLLM_DECODE = "execute_2_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq2sk20sqsq2sqsk20)"


def run(t: Timeline, tmp_path, config: AnalysisOptions = FLOOR) -> dict:
    return analyze(t.load(tmp_path), config).to_dict()


def causes(host=0, dependency=0, outside=0, unexplained=0) -> dict:
    return {
        "host_ns": host * US,
        "dependency_ns": dependency * US,
        "outside_ns": outside * US,
        "unexplained_ns": unexplained * US,
    }


# -- dependency ---------------------------------------------------------------------------------


def stream_wait(kernel: str = "k2", wait: bool = True) -> Timeline:
    """ProfilerStep#1 [0, 100]; k1 launched [1, 2] runs [5, 10]; cudaStreamWaitEvent [20, 21];
    k2 launched [22, 23] runs [60, 70].

    [0, 2) host, [2, 5) unexplained (launch latency), busy [5, 10], [10, 23) host (nothing handed
    over), [23, 60) dependency (k2 launched right after a stream wait), busy [60, 70],
    [70, 100) host. Host 2 + 13 + 30 = 45, dependency 37, unexplained 3, busy 15."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(1, 1, "k1", 5, 5)
    if wait:
        t.runtime("cudaStreamWaitEvent", 20, 1)
    t.launch_kernel(22, 1, kernel, 60, 10)
    return t


def test_dependency_after_a_stream_wait(tmp_path):
    doc = run(stream_wait(), tmp_path)
    (s,) = doc["steps"]
    assert s["busy_ns"] == 15 * US and s["idle_ns"] == 85 * US
    assert s["idle_causes"] == causes(host=45, dependency=37, unexplained=3)
    assert s["host_wait_ns"] == 45 * US


def test_event_wait_is_not_launch_path_excess(tmp_path):
    """k2's 38 µs from launch to start is a wait on an event: no ΔKT_fw sample (queued);
    k1's (5 - 1) - 4.5 < 0 -> 0."""
    doc = run(stream_wait(), tmp_path)
    tb = doc["taxbreak"]
    assert tb["kt_fw_samples"] == 1 and tb["queued_launches"] == 1 and tb["kt_fw_ns"] == 0


def test_dependency_on_a_collective(tmp_path):
    """As :func:`stream_wait` without the wait call, k2 an NCCL all-reduce: the same split."""
    doc = run(stream_wait("ncclKernel_AllReduce_RING_LL_Sum_float", wait=False), tmp_path)
    assert doc["steps"][0]["idle_causes"] == causes(host=45, dependency=37, unexplained=3)


def test_without_evidence_the_wait_is_unexplained(tmp_path):
    doc = run(stream_wait(wait=False), tmp_path)
    assert doc["steps"][0]["idle_causes"] == causes(host=45, unexplained=40)
    assert doc["taxbreak"]["kt_fw_samples"] == 2  # no evidence: k2's delay stays a launch sample


def test_dependency_when_older_work_on_another_stream_is_held(tmp_path):
    """ProfilerStep#1 [0, 100]; a [1, 2] -> [5, 10] (stream 7); b [3, 4] -> [50, 60] (stream 8,
    held); c [20, 21] -> [30, 35] (stream 7).
    [0, 2) host, [2, 5) unexplained; gap [10, 30): b was handed over at 4 and c ran first -> b was
    held: dependency 20; gap [35, 50): b ends it, no evidence -> unexplained 15; [60, 100) host.
    Host 42, dependency 20, unexplained 18, busy 20."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(1, 1, "a", 5, 5)
    t.launch_kernel(3, 1, "b", 50, 10, stream=8)
    t.launch_kernel(20, 1, "c", 30, 5)
    (s,) = run(t, tmp_path)["steps"]
    assert s["idle_causes"] == causes(host=42, dependency=20, unexplained=18)


# -- outside the capture -----------------------------------------------------------------------


def before_capture() -> Timeline:
    """ProfilerStep#1 [10, 100]. Kernels "old" [0, 30] (correlation 1) and "old2" [35, 38]
    (correlation 2) have no launch call: launched before the capture (below the first captured
    call's correlation, 5). Launch corr 5 [12, 13] -> k [40, 50].
    Wall [10, 100). Busy [10, 30] + [35, 38] + [40, 50] = 33. Gap [30, 35): old2 ends it, handed
    over outside the trace -> outside 5. Gap [38, 40): k handed over at 13 -> unexplained 2.
    [50, 100) host 50."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 10, 90)
    t.kernel("old", 0, 30, corr=1)
    t.kernel("old2", 35, 3, corr=2)
    t.runtime("cudaLaunchKernel", 12, 1, corr=5)
    t.kernel("k", 40, 10, corr=5)
    return t


def test_work_launched_before_the_capture_is_busy_and_flags_the_step(tmp_path):
    doc = run(before_capture(), tmp_path)
    (s,) = doc["steps"]
    assert s["wall_ns"] == 90 * US and s["gpu_active_ns"] == 10 * US  # the step's own GPU time
    assert s["busy_ns"] == 33 * US
    assert s["idle_causes"] == causes(host=50, outside=5, unexplained=2)
    assert s["partial"] and s["partial_reason"] == "work_launched_before_the_capture"
    assert doc["unassigned"]["gpu_ops_before_capture"] == 2


def full_graph_step() -> Timeline:
    """A vLLM decode step: marker [0, 10], one graph launch [2, 3] replaying [100, 150] and
    [150, 200]; nothing on the device before. The replay waited 97 µs after its launch (more than
    the 30 µs tolerance) with nothing before it in the trace: the device was busy with work the
    capture lacks, so the whole leading gap [0, 100) is outside. Host-caused: 0."""
    t = Timeline(props=H100)
    t.annotation(VLLM_DECODE, 0, 10)
    t.graph_launch(2, 1, [("gemv", 100, 50), ("attn", 150, 50)])
    return t


def test_full_graph_wait_is_outside_not_host(tmp_path):
    doc = run(full_graph_step(), tmp_path)
    (s,) = doc["steps"]
    assert s["host_exposed_ns"] == 100 * US and s["host_fraction"] == pytest.approx(0.5)
    assert s["idle_causes"] == causes(outside=100) and s["host_wait_ns"] == 0
    # the replay waited behind work outside the capture: no launch-path (ΔKT_fw) sample
    assert doc["taxbreak"]["queued_launches"] == 1 and doc["taxbreak"]["kt_fw_samples"] == 0
    v = doc["verdict"]
    # the raw residual (50 %) would say host-bound, but the step's annotation ends 90 µs before
    # its replay ends: the graph-mode guard withholds a host-bound reading (anatomy/graphs.py)
    assert v["verdict"] == "incomplete-capture" and v["raw_verdict"] == "graph-untrusted"
    assert s["graph_flags"] == ["annotation-ends-early"] and v["graph_flagged_steps"] == [0]
    assert v["host_wait_share"] == 0.0 and v["idle_shares"]["outside"] == pytest.approx(0.5)


def test_full_graph_wait_below_the_tolerance_is_host_and_latency(tmp_path):
    """With a 200 µs tolerance the leading gap is split: [0, 3) host, [3, 100) unexplained."""
    doc = run(full_graph_step(), tmp_path, AnalysisOptions(launch_floor_ns=4500.0, gap_threshold_ns=200_000))
    assert doc["steps"][0]["idle_causes"] == causes(host=3, unexplained=97)
    assert doc["taxbreak"]["kt_fw_samples"] == 1  # no evidence of a wait: a launch-path sample


def test_gpu_work_without_a_launch_in_the_trace(tmp_path):
    """ProfilerStep#1 [0, 50]; launch corr 1 [1, 2] -> k [4, 6]; kernel corr 99 [20, 25] has no
    launch call and is not from before the capture (99 > 1, starts inside the step). Its hand-over
    is unknown, so it counts as pending from the start: the gaps [0, 4) and [6, 20) both held work
    from outside the trace -> outside 4 + 14; [25, 50) host 25."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 50)
    t.launch_kernel(1, 1, "k", 4, 2)
    t.kernel("lost", 20, 5, corr=99)
    (s,) = run(t, tmp_path)["steps"]
    assert s["idle_causes"] == causes(host=25, outside=18)
    assert s["partial"] and s["partial_reason"] == "gpu_work_without_launch"


# -- several devices: one basis ------------------------------------------------------------------


def test_two_devices_union_basis(tmp_path):
    """ProfilerStep#1 [0, 100]; a [1, 2] -> device 0 [5, 40]; b [3, 4] -> device 1 [20, 60].
    Device 0: host [0, 2) + [40, 100) = 62, unexplained [2, 5) = 3, busy 35.
    Device 1: host [0, 4) + [60, 100) = 44, unexplained [4, 20) = 16, busy 40.
    Step (idle = every device idle; first cause in host, dependency, outside, unexplained):
    [0, 4) host (device 1 still waits on the host), [4, 5) unexplained, busy [5, 60] = 55,
    [60, 100) host: host 44, unexplained 1. host_wait 44 <= host_exposed 100 - 55 = 45."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(1, 1, "a", 5, 35)
    t.runtime("cudaLaunchKernel", 3, 1, corr=50)
    t.kernel("b", 20, 40, corr=50, device=1, stream=3)
    (s,) = run(t, tmp_path)["steps"]
    assert s["gpu_active_ns"] == 55 * US and s["busy_ns"] == 55 * US
    assert s["idle_causes"] == causes(host=44, unexplained=1)
    assert s["host_wait_ns"] == 44 * US <= s["host_exposed_ns"]
    d0, d1 = s["devices"]
    assert (d0["device"], d0["busy_ns"], d0["idle_causes"]) == (0, 35 * US, causes(host=62, unexplained=3))
    assert (d1["device"], d1["busy_ns"], d1["idle_causes"]) == (1, 40 * US, causes(host=44, unexplained=16))


# -- queued rules, each alone ---------------------------------------------------------------------


def three_markers(t: Timeline, starts=(0, 10, 40)) -> Timeline:
    for i, s in enumerate(starts):
        t.annotation(f"ProfilerStep#{i + 1}", s, 1)
    return t


def test_queued_rule_starts_after_next_marker(tmp_path):
    """Step 0's kernel [15, 16] starts after step 1's marker (10)."""
    t = three_markers(Timeline(props=H100))
    t.launch_kernel(0, 1, "k", 15, 1)
    s = run(t, tmp_path)["steps"]
    assert [x["queued_reason"] for x in s] == ["starts_after_next_marker", None, None]


def test_queued_rule_mostly_after_next_marker(tmp_path):
    """Step 0's kernel [5, 30]: 20 of its 25 µs run after step 1's marker (10)."""
    t = three_markers(Timeline(props=H100))
    t.launch_kernel(0, 1, "k", 5, 25)
    s = run(t, tmp_path)["steps"]
    assert [x["queued_reason"] for x in s] == ["mostly_after_next_marker", None, None]


def test_queued_rule_waited_behind_earlier_work(tmp_path):
    """Step 0 [0, 1]: k [1, 30]; step 1 [10, 11]: launch [10, 10.5] -> k [30, 31]: starts after
    its marker ended, the GPU busy from 10 to 30; step 0's kernel: 20 of 29 µs after 10."""
    t = three_markers(Timeline(props=H100))
    t.launch_kernel(0, 0.5, "k", 1, 29)
    t.launch_kernel(10, 0.5, "k", 30, 1)
    s = run(t, tmp_path)["steps"]
    assert [x["queued_reason"] for x in s] == ["mostly_after_next_marker", "waited_behind_earlier_work", None]


def test_queued_rule_last_step_behind_earlier_work(tmp_path):
    """Step 0 [0, 10]: k [5, 105]; last step [100, 110]: launch [101, 102] -> k [120, 200].
    Earlier work runs until 105 > 100 and 80 of the last step's 80 µs run after its marker end;
    the GPU was idle 105 -> 120, so it did not simply wait behind earlier work."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 10)
    t.annotation("ProfilerStep#2", 100, 10)
    t.launch_kernel(1, 1, "k", 5, 100)
    t.launch_kernel(101, 1, "k", 120, 80)
    s = run(t, tmp_path)["steps"]
    assert [x["queued_reason"] for x in s] == [None, "last_step_behind_earlier_work"]


def test_partial_rule_launch_without_gpu_work(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.launch_kernel(2, 1, "k", 5, 5)
    t.runtime("cudaLaunchKernel", 60, 2, corr=99)
    s = run(t, tmp_path)["steps"]
    assert [x["partial_reason"] for x in s] == [None, "launch_without_gpu_work"]


# -- markers ---------------------------------------------------------------------------------------


def legacy_steps() -> Timeline:
    """ProfilerStep#N recorded as ops (category "Operator", 2021 traces)::

    ProfilerStep#1 [0, 50]:   aten::mm [5, 20] > launch [8, 10] -> k [12, 22]
    ProfilerStep#2 [50, 100]: aten::mm [55, 70] > launch [58, 60] -> k [62, 72]
    """
    t = Timeline(props=H100)
    t.op("ProfilerStep#1", 0, 50)
    t.op("ProfilerStep#2", 50, 50)
    t.op("aten::mm", 5, 15)
    t.launch_kernel(8, 2, "k", 12, 10)
    t.op("aten::mm", 55, 15)
    t.launch_kernel(58, 2, "k", 62, 10)
    return t


def test_legacy_operator_profiler_steps_are_step_markers(tmp_path):
    """Two steps; the launches' op is aten::mm (T_dispatch 8 - 5 = 3), not the step range."""
    a = analyze(legacy_steps().load(tmp_path), FLOOR)
    assert a.marker_family == "profiler_step" and len(a.steps) == 2
    assert [s["kernel_count"] for s in a.steps] == [1, 1]
    assert list(a.kernels.t_dispatch_ns) == [3 * US, 3 * US]
    assert [r["name"] for r in a.top_ops] == ["aten::mm"]
    custom = analyze(legacy_steps().load(tmp_path), AnalysisOptions(step_marker="^ProfilerStep#"))
    assert custom.marker_family == "custom" and len(custom.steps) == 2


def test_sglang_step_ranges_preferred_over_execute(tmp_path):
    """SGLang traces carry execute_... ranges that can hold the wait for the previous batch's GPU
    work and step[...] ranges that bound the iterations: the steps come from step[...]."""
    t = Timeline(props=H100)
    t.annotation("execute_context_0(0)_generation_2(2)", 0, 200)
    t.annotation("step[forward_mode=decode bs=2]", 0, 50)
    t.annotation("step[forward_mode=decode bs=2]", 100, 50)
    t.launch_kernel(1, 1, "k", 5, 10)
    t.launch_kernel(101, 1, "k", 105, 10)
    doc = run(t, tmp_path)
    assert doc["marker_family"] == "sglang" and len(doc["steps"]) == 2
    assert "step[" in doc["marker_note"]


def test_device_bound_with_hidden_host_work_says_so():
    """A device-bound verdict whose trace HDBI is below 0.5: the note names the hidden host work."""
    from hostgap.anatomy.verdict import step_verdict

    step = {
        "index": 0,
        "kind": "decode",
        "partial": False,
        "queued": False,
        "wall_ns": 100,
        "host_wait_ns": 5,
        "host_fraction": 0.3,
        "idle_causes": {"host_ns": 5, "dependency_ns": 0, "outside_ns": 0, "unexplained_ns": 0},
    }
    v = step_verdict([step], [], 0.4)
    assert v["verdict"] == "device-bound" and "HDBI 0.40" in v["note"]
    assert step_verdict([step], [], 0.6)["note"] == ""


@pytest.mark.parametrize(
    "host, dep, out, unexp, label",
    [
        (25, 30, 30, 30, "host-bound"),  # the host share alone decides when it reaches 0.25
        (24, 25, 30, 30, "dependency-bound"),  # then dependency, outside, unexplained in that order
        (24, 24, 25, 30, "incomplete-capture"),
        (24, 24, 24, 25, "unexplained-idle"),
        (24, 24, 24, 24, "balanced"),
        (9, 0, 0, 0, "device-bound"),
    ],
)
def test_verdict_labels_on_the_causal_basis(host, dep, out, unexp, label):
    from hostgap.anatomy.verdict import step_verdict

    step = {
        "index": 0,
        "kind": "decode",
        "partial": False,
        "queued": False,
        "wall_ns": 100,
        "host_wait_ns": host,
        "host_fraction": 0.9,
        "idle_causes": {"host_ns": host, "dependency_ns": dep, "outside_ns": out, "unexplained_ns": unexp},
    }
    v = step_verdict([step], [], None)
    assert v["verdict"] == label and v["raw_verdict"] == "host-bound"
    assert v["host_wait_share"] == host / 100 and v["idle_shares"]["dependency"] == dep / 100


def test_dependency_on_a_peer_copy(tmp_path):
    """As :func:`stream_wait` without the wait call, the second op a peer copy launched [22, 23]
    running [60, 70]: the same split (host 45, dependency 37, unexplained 3)."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(1, 1, "k1", 5, 5)
    t.copy(22, 1, 60, 10, 4096, direction="PtoP", api="cudaMemcpyPeerAsync")
    (s,) = run(t, tmp_path)["steps"]
    assert s["idle_causes"] == causes(host=45, dependency=37, unexplained=3)


def test_a_stream_wait_on_another_thread_is_no_evidence(tmp_path):
    """The wait call of :func:`stream_wait` issued on thread 2: k2's launch on thread 1 did not
    follow it, so its 37 µs are unexplained."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(1, 1, "k1", 5, 5)
    t.runtime("cudaStreamWaitEvent", 20, 1, tid=2)
    t.launch_kernel(22, 1, "k2", 60, 10)
    (s,) = run(t, tmp_path)["steps"]
    assert s["idle_causes"] == causes(host=45, unexplained=40)


def test_a_step_without_gpu_work_is_measured_on_every_device(tmp_path):
    """Step 0 [0, 50] launches a (device 0, [5, 40]) and b (device 1, [20, 60]); step 1
    [50, 100] launches nothing: its devices are all devices. Device 0 is idle throughout (host
    50), device 1 busy until 60 (busy 10, host 40); the step: busy 10, host 40."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.launch_kernel(1, 1, "a", 5, 35)
    t.runtime("cudaLaunchKernel", 3, 1, corr=50)
    t.kernel("b", 20, 40, corr=50, device=1, stream=3)
    s1 = run(t, tmp_path)["steps"][1]
    assert [(d["device"], d["busy_ns"], d["host_wait_ns"]) for d in s1["devices"]] == [
        (0, 0, 50 * US),
        (1, 10 * US, 40 * US),
    ]
    assert (s1["busy_ns"], s1["host_wait_ns"]) == (10 * US, 40 * US)


def test_cpu_steps_without_compute_ops_are_host_time(tmp_path):
    """A CPU-only trace whose only op is metadata (aten::view): no compute at all, every step's
    wall is host time, no per-device parts."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 30)
    t.op("aten::view", 10, 1)
    doc = run(t, tmp_path)
    assert doc["activity"] == "cpu-compute"
    assert [(s["busy_ns"], s["host_wait_ns"], s["devices"]) for s in doc["steps"]] == [
        (0, 50 * US, []),
        (0, 30 * US, []),
    ]


def test_a_step_is_measured_on_the_devices_its_own_ops_ran_on(tmp_path):
    """Step 0 [0, 50] launches a on device 0 ([5, 40]); step 1 [50, 100] launches b on device 1
    ([60, 90], launched [51, 52]). Step 0's devices: device 0 only (busy 35, host 2 + 10,
    unexplained 3); step 1's: device 1 only (busy 30, host [50, 52) + [90, 100) = 12,
    unexplained [52, 60) = 8)."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.launch_kernel(1, 1, "a", 5, 35)
    t.runtime("cudaLaunchKernel", 51, 1, corr=50)
    t.kernel("b", 60, 30, corr=50, device=1, stream=3)
    s0, s1 = run(t, tmp_path)["steps"]
    assert [d["device"] for d in s0["devices"]] == [0] and [d["device"] for d in s1["devices"]] == [1]
    assert (s0["busy_ns"], s0["idle_causes"]) == (35 * US, causes(host=12, unexplained=3))
    assert (s1["busy_ns"], s1["idle_causes"]) == (30 * US, causes(host=12, unexplained=8))
