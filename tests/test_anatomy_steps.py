"""Step anatomy on hand-built timelines, exact to the ns (METHOD.md §3).

Each test draws its timeline in µs in the docstring; expected values are derived by hand from
the definitions, never read back from the code.
"""

from __future__ import annotations

import numpy as np
import pytest

from anatomy_builders import H100, US, Timeline
from hostgap.anatomy.markers import hostgap_step_name
from hostgap.anatomy.steps import AnalysisOptions, analyze
from hostgap.errors import HostgapError

FLOOR = AnalysisOptions(launch_floor_ns=4500.0)

VLLM_DECODE = "execute_2_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq2sk20sqsq2sqsk20)"


def run(t: Timeline, tmp_path, config: AnalysisOptions = FLOOR, **top) -> dict:
    return analyze(t.load(tmp_path, **top), config).to_dict()


# -- graph replay: kernels belong to the step that launched them ---------------------------


def graph_steps() -> Timeline:
    """Two vLLM decode steps, each one cudaGraphLaunch replaying two kernels that start after
    the CPU marker has ended::

        marker 0 [0, 10]     graph launch [5, 8]      -> k [20, 30], k [31, 40]
        marker 1 [100, 110]  graph launch [105, 108]  -> k [120, 130], k [131, 200]
    """
    t = Timeline(props=H100)
    t.annotation(VLLM_DECODE, 0, 10)
    t.annotation(VLLM_DECODE, 100, 10)
    t.graph_launch(5, 3, [("gemv", 20, 10), ("attn", 31, 9)])
    t.graph_launch(105, 3, [("gemv", 120, 10), ("attn", 131, 69)])
    return t


def test_graph_step_kernels_belong_to_the_launching_step(tmp_path):
    doc = run(graph_steps(), tmp_path)
    s0, s1 = doc["steps"]
    assert doc["marker_family"] == "vllm"
    assert (s0["kernel_count"], s1["kernel_count"]) == (2, 2)
    assert (s0["graph_launches"], s0["launches"]) == (1, 0)
    assert s0["kernel_sum_ns"] == s0["kernel_union_ns"] == s0["gpu_active_ns"] == 19 * US
    assert s1["kernel_sum_ns"] == 79 * US
    # wall: marker start -> next marker start; last step -> end of its last GPU op
    assert s0["wall_ns"] == 100 * US
    assert s1["wall_ns"] == 100 * US  # 100 -> 200
    assert s0["host_exposed_ns"] == 81 * US and s1["host_exposed_ns"] == 21 * US
    assert s0["host_fraction"] == pytest.approx(0.81)
    assert not s0["queued"]
    assert s0["first_gpu_start_ns"] == 20 * US and s0["last_gpu_end_ns"] == 40 * US
    assert doc["unassigned"]["gpu_ops_outside_steps"] == 0


def test_last_graph_step_not_queued(tmp_path):
    """The last step has no next marker: it is not queued when its GPU work starts soon after
    its launch (regression: an int64 overflow once flagged it)."""
    assert not run(graph_steps(), tmp_path)["steps"][1]["queued"]


def test_graph_step_taxbreak_one_launch_no_per_kernel_terms(tmp_path):
    t = graph_steps()
    a = analyze(t.load(tmp_path), FLOOR)
    k = a.kernels
    assert len(k) == 2 and k.graph.all()  # one row per graph launch, none per replayed kernel
    assert list(k.gpu_ops) == [2, 2]
    assert list(k.device_ns) == [19 * US, 79 * US]
    tb0 = a.steps[0]["taxbreak"]
    assert tb0["launches"] == 0 and tb0["graph_launches"] == 1  # eager calls, graph calls apart
    assert tb0["kt_ns"] == 4500  # one floor per replay
    assert tb0["device_active_ns"] == 19 * US
    assert tb0["ct_ns"] == 0  # a graph launch is never a library launch
    assert a.taxbreak["graph_launches"] == 2 and a.taxbreak["launches"] == 0


def test_host_wait_of_the_graph_step(tmp_path):
    """Host-caused idle = the part of a gap before any later work had been handed to the GPU
    (the launch call's end). Device timeline: [0, 8) host (graph 0 handed over at 8), [8, 20)
    unexplained (launched, not started: no wait evidence), busy [20, 30], [30, 31) dependency
    (the replay's second kernel follows the graph's own edges), busy [31, 40], [40, 108) host
    (graph 1 handed over at 108), [108, 120) unexplained, busy [120, 130], [130, 131)
    dependency, busy [131, 200].
    Step 0's wall [0, 100): host 8 + 60 = 68, dependency 1, unexplained 12, busy 19.
    Step 1's wall [100, 200): host 8, dependency 1, unexplained 12, busy 79."""
    doc = run(graph_steps(), tmp_path)
    s0, s1 = doc["steps"]
    assert s0["host_wait_ns"] == 68 * US
    assert s0["idle_causes"] == {
        "host_ns": 68 * US,
        "dependency_ns": 1 * US,
        "outside_ns": 0,
        "unexplained_ns": 12 * US,
    }
    assert s0["busy_ns"] == 19 * US and s0["idle_ns"] == 81 * US
    assert s1["host_wait_ns"] == 8 * US
    assert s1["idle_causes"] == {"host_ns": 8 * US, "dependency_ns": 1 * US, "outside_ns": 0, "unexplained_ns": 12 * US}


def test_host_wait_clipped_to_the_step_wall(tmp_path):
    """The gap [40, 108) spans both walls: 40 -> 100 is step 0's, 100 -> 108 step 1's."""
    doc = run(graph_steps(), tmp_path)
    assert doc["steps"][1]["host_wait_ns"] == 8 * US
    assert doc["idle_causes"]["host_ns"] == 76 * US


# -- deep queue: the host runs ahead -------------------------------------------------------


def deep_queue() -> Timeline:
    """Four ProfilerSteps 10 µs apart, each launching one 50 µs kernel at marker start + 1;
    the kernels run back to back from 5: [5, 55], [55, 105], [105, 155], [155, 205].
    The host is up to 150 µs ahead of the GPU."""
    t = Timeline(props=H100)
    for i in range(4):
        t.annotation(f"ProfilerStep#{i + 1}", 10 * i, 9)
        t.launch_kernel(10 * i + 1, 1, "gemm", 5 + 50 * i, 50)
    return t


def test_deep_queue_flags_and_host_wait(tmp_path):
    doc = run(deep_queue(), tmp_path)
    steps = doc["steps"]
    assert doc["marker_family"] == "profiler_step"
    assert [s["kernel_count"] for s in steps] == [1, 1, 1, 1]
    assert [s["wall_ns"] for s in steps[:3]] == [10 * US] * 3
    assert steps[3]["wall_ns"] == 175 * US  # 30 -> 205
    assert [s["queued"] for s in steps[:3]] == [True, True, True]
    # only [0, 2), before the first launch call returned, is host-caused; [2, 5) is launch latency
    assert [s["host_wait_ns"] for s in steps] == [2 * US, 0, 0, 0]
    assert steps[0]["idle_causes"]["unexplained_ns"] == 3 * US
    v = doc["verdict"]
    assert v["basis"] == "host_cause_fraction"
    assert v["host_wait_share"] == 0.0
    assert v["verdict"] == "device-bound"
    sm = doc["summary"]
    assert sm["warmup"]["indices"] == [0]  # the leading decode step, flagged or not
    assert sm["flagged"]["indices"] == [1, 2, 3] and sm["steady"]["count"] == 0


def test_deep_queue_last_step_is_queued_too(tmp_path):
    """Its kernel starts 124 µs after its launch, after its marker ended, behind earlier steps'
    work: the host ran ahead (the wall 30 -> 205 is mostly earlier steps' GPU time)."""
    doc = run(deep_queue(), tmp_path)
    assert doc["steps"][3]["queued"]


def deep_queue_two_streams() -> Timeline:
    """Like :func:`deep_queue`, but each step also launches a 1 µs kernel on an idle stream
    (8) that runs at once: a step's *first* GPU op starts 2 µs after its marker, while its
    50 µs kernel on stream 7 waits behind the earlier steps' (the shape of the real
    hta/a100_deep_queue_rank0 steps: first kernel ~2 ms in, most GPU work after the marker)."""
    t = Timeline(props=H100)
    for i in range(4):
        t.annotation(f"ProfilerStep#{i + 1}", 10 * i, 9)
        t.launch_kernel(10 * i + 1, 1, "small", 10 * i + 2, 1, stream=8)
        t.launch_kernel(10 * i + 3, 1, "gemm", 5 + 50 * i, 50, stream=7)
    return t


def test_deep_queue_with_an_early_small_kernel(tmp_path):
    steps = run(deep_queue_two_streams(), tmp_path)["steps"]
    assert [s["queued"] for s in steps[:3]] == [True, True, True]
    assert steps[3]["wall_ns"] == 175 * US and steps[3]["gpu_active_ns"] == 51 * US


def test_deep_queue_last_step_queued_when_most_work_runs_after_its_marker(tmp_path):
    steps = run(deep_queue_two_streams(), tmp_path)["steps"]
    assert steps[3]["queued"]


# -- step wall and segmentation -------------------------------------------------------------


def test_wall_next_marker_start_and_last_step_to_last_gpu_end(tmp_path):
    """marker 0 [0, 30], marker 1 [50, 60] (gap 30 -> 50 belongs to step 0's wall);
    step 1's kernel runs [70, 90]: wall 1 = 50 -> 90."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 30)
    t.annotation("ProfilerStep#2", 50, 10)
    t.launch_kernel(2, 2, "a", 10, 5)
    t.launch_kernel(52, 2, "b", 70, 20)
    s0, s1 = run(t, tmp_path)["steps"]
    assert s0["wall_ns"] == 50 * US and s1["wall_ns"] == 40 * US
    assert s0["gpu_active_ns"] == 5 * US and s1["gpu_active_ns"] == 20 * US


def test_last_step_wall_to_marker_end_when_no_gpu_work_after(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 30)
    t.annotation("ProfilerStep#2", 50, 40)
    t.launch_kernel(52, 2, "b", 55, 5)
    s1 = run(t, tmp_path)["steps"][1]
    assert s1["wall_ns"] == 40 * US  # marker ends at 90 after its kernel (55 -> 60)


def test_step_with_no_kernels_has_null_hdbi(tmp_path):
    """Step 0 launches nothing (host only); step 1 launches one kernel."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 20)
    t.op("aten::item", 2, 5)
    t.annotation("ProfilerStep#2", 20, 20)
    t.launch_kernel(22, 2, "k", 25, 5)
    doc = run(t, tmp_path)
    s0, s1 = doc["steps"]
    assert s0["kernel_count"] == 0 and s0["gpu_active_ns"] == 0
    assert s0["host_exposed_ns"] == s0["wall_ns"] == 20 * US
    assert s0["taxbreak"]["hdbi"] is None
    assert s0["taxbreak"]["device_active_ns"] == 0
    assert s1["taxbreak"]["hdbi"] is not None and 0 < s1["taxbreak"]["hdbi"] < 1


def test_gpu_work_launched_outside_every_step_is_unassigned(tmp_path):
    t = Timeline()
    t.launch_kernel(1, 1, "warm", 3, 2)  # before the first marker
    t.annotation("ProfilerStep#1", 10, 10)
    t.launch_kernel(12, 1, "k", 14, 2)
    doc = run(t, tmp_path)
    assert doc["steps"][0]["kernel_count"] == 1
    assert doc["unassigned"]["gpu_ops_outside_steps"] == 1


def test_partial_first_step_when_earlier_work_still_runs(tmp_path):
    """A kernel launched before the first marker runs into it (capture began mid-stream)."""
    t = Timeline()
    t.launch_kernel(1, 1, "old", 3, 20)  # runs 3 -> 23, into step 0
    t.annotation("ProfilerStep#1", 10, 10)
    t.launch_kernel(12, 1, "k", 24, 2)
    t.annotation("ProfilerStep#2", 30, 10)
    t.launch_kernel(32, 1, "k", 34, 2)
    doc = run(t, tmp_path)
    assert doc["steps"][0]["partial"] and not doc["steps"][1]["partial"]
    assert 0 in doc["summary"]["flagged"]["indices"]


def test_copies_per_step(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.copy(1, 2, 5, 3, 8, direction="HtoD")
    t.launch_kernel(4, 1, "k", 8, 10)
    t.copy(20, 2, 22, 1, 4096, direction="DtoH")
    t.memset(30, 1, 32, 1, 64)
    s = run(t, tmp_path)["steps"][0]
    assert (s["h2d_bytes"], s["h2d_ns"], s["h2d_count"]) == (8, 3 * US, 1)
    assert (s["d2h_bytes"], s["d2h_ns"], s["d2h_count"]) == (4096, 1 * US, 1)
    # busy = union of kernel [8,18], copies [5,8], [22,23], memset [32,33]: 3 + 10 + 1 + 1
    assert s["gpu_active_ns"] == 15 * US
    assert s["kernel_sum_ns"] == 10 * US and s["kernel_count"] == 1


def test_overlapping_kernels_union_below_sum(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.launch_kernel(1, 1, "a", 10, 10, stream=7)
    t.launch_kernel(3, 1, "b", 15, 10, stream=8)
    s = run(t, tmp_path)["steps"][0]
    assert s["kernel_sum_ns"] == 20 * US and s["kernel_union_ns"] == 15 * US == s["gpu_active_ns"]


def test_runtime_api_time_inside_gpu_idle(tmp_path):
    """cudaStreamSynchronize [10, 30] while kernel [5, 20] runs: 20 -> 30 is inside GPU idle;
    the launch call [1, 2] is idle too (the kernel starts at 5)."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 40)
    t.launch_kernel(1, 1, "k", 5, 15)
    t.runtime("cudaStreamSynchronize", 10, 20)
    s = run(t, tmp_path)["steps"][0]
    assert s["runtime_api_in_idle_ns"] == 11 * US


# -- markers and composition ---------------------------------------------------------------


def test_hostgap_capture_markers_preferred_and_parsed(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 100)  # lower preference
    t.annotation(hostgap_step_name(0, "prefill", 4, 128, 128), 1, 40)
    t.annotation(hostgap_step_name(1, "decode", 4, 1, 129), 50, 40)
    t.launch_kernel(2, 1, "k", 5, 5)
    t.launch_kernel(52, 1, "k", 55, 5)
    doc = run(t, tmp_path)
    assert doc["marker_family"] == "hostgap"
    p, d = doc["steps"]
    assert p["kind"] == "prefill" and d["kind"] == "decode"
    assert (p["ctx_requests"], p["ctx_q"], p["ctx_s"], p["ctx_qq"], p["ctx_qs"]) == (
        4,
        512,
        512,
        4 * 128**2,
        4 * 128 * 128,
    )
    assert p["gen_requests"] == 0
    assert (d["gen_requests"], d["gen_q"], d["gen_s"], d["gen_qq"], d["gen_qs"]) == (4, 4, 516, 4, 516)
    assert d["ctx_requests"] == 0
    # prefill is reported apart from the steady decode state
    assert doc["summary"]["prefill"]["indices"] == [0]


def test_vllm_short_annotation(tmp_path):
    t = Timeline()
    t.annotation("execute_context_1(512)_generation_3(3)", 0, 10)
    t.annotation("execute_context_0(0)_generation_4(4)", 20, 10)
    t.annotation("execute_context_2(300_45000)_generation_0(0)", 40, 10)
    doc = run(t, tmp_path)
    m, d, p = doc["steps"]
    assert doc["marker_family"] == "vllm"
    assert m["kind"] == "mixed" and d["kind"] == "decode" and p["kind"] == "prefill"
    assert (m["ctx_requests"], m["ctx_q"], m["gen_requests"], m["gen_q"]) == (1, 512, 3, 3)
    assert (d["gen_requests"], d["gen_q"]) == (4, 4)
    assert (p["ctx_requests"], p["ctx_q"], p["ctx_qq"]) == (2, 300, 45000)
    assert p["ctx_s"] is None  # the short form carries no KV lengths: unknown, not 0


def test_vllm_detailed_annotation(tmp_path):
    t = Timeline()
    t.annotation("execute_70_context_1(sq64sk64sqsq4096sqsk4096)_generation_6(sq6sk600sqsq6sqsk600)", 0, 10)
    s = run(t, tmp_path)["steps"][0]
    assert s["kind"] == "mixed"
    assert (s["ctx_requests"], s["ctx_q"], s["ctx_s"], s["ctx_qq"], s["ctx_qs"]) == (1, 64, 64, 4096, 4096)
    assert (s["gen_requests"], s["gen_q"], s["gen_s"], s["gen_qq"], s["gen_qs"]) == (6, 6, 600, 6, 600)


def test_sglang_step_markers(tmp_path):
    t = Timeline()
    t.annotation("step[forward_mode=EXTEND bs=2]", 0, 10)
    t.annotation("step[forward_mode=DECODE bs=8]", 20, 10)
    doc = run(t, tmp_path)
    assert doc["marker_family"] == "sglang"
    p, d = doc["steps"]
    assert p["kind"] == "prefill" and p["ctx_requests"] == 2
    assert d["kind"] == "decode" and d["gen_requests"] == 8


def test_sglang_token_counts_fill_q(tmp_path):
    """``toks=`` is the tokens processed in the step: Σq of the prefill (ctx_q) or of the
    decode (gen_q); a mixed step's tokens cannot be split, so its fields stay null."""
    t = Timeline()
    t.annotation("step[forward_mode=EXTEND bs=8 toks=15360]", 0, 10)
    t.annotation("step[forward_mode=DECODE bs=8 toks=8]", 20, 10)
    t.annotation("step[forward_mode=EXTEND toks=512]", 40, 10)
    t.annotation("step[forward_mode=MIXED bs=3 toks=40]", 60, 10)
    p, d, p2, m = run(t, tmp_path)["steps"]
    assert (p["kind"], p["ctx_requests"], p["ctx_q"], p["gen_requests"]) == ("prefill", 8, 15360, 0)
    assert (d["kind"], d["gen_requests"], d["gen_q"], d["ctx_requests"]) == ("decode", 8, 8, 0)
    assert (p2["ctx_requests"], p2["ctx_q"]) == (None, 512)
    assert m["kind"] == "mixed" and m["ctx_q"] is None and m["gen_q"] is None


def test_custom_step_marker_regex(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 100)
    t.annotation("decode_step 1", 10, 20)
    t.annotation("decode_step 2", 40, 20)
    t.annotation("sample", 12, 2)
    doc = run(t, tmp_path, AnalysisOptions(step_marker=r"^decode_step"))
    assert doc["marker_family"] == "custom"
    assert [s["name"] for s in doc["steps"]] == ["decode_step 1", "decode_step 2"]
    assert doc["steps"][0]["wall_ns"] == 30 * US


@pytest.mark.parametrize("pattern, words", [("([", "--step-marker"), ("^nothing$", "no annotation matches")])
def test_bad_step_marker(tmp_path, pattern, words):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 10)
    with pytest.raises(HostgapError) as e:
        analyze(t.load(tmp_path), AnalysisOptions(step_marker=pattern))
    assert words in str(e.value)


def test_whole_trace_is_one_step_without_markers(tmp_path):
    t = Timeline()
    t.launch_kernel(0, 1, "k", 5, 5)
    t.launch_kernel(20, 1, "k", 25, 5)
    doc = run(t, tmp_path)
    assert doc["marker_family"] == "whole_trace"
    (s,) = doc["steps"]
    assert s["kernel_count"] == 2 and s["wall_ns"] == 30 * US


# -- summary groups --------------------------------------------------------------------------


def decode_loop(n: int, first_kind: str = "prefill") -> Timeline:
    """A prefill step then n - 1 decode steps, each 100 µs, each one kernel of 40 µs."""
    t = Timeline()
    for i in range(n):
        kind = first_kind if i == 0 else "decode"
        t.annotation(hostgap_step_name(i, kind, 1, 8 if kind == "prefill" else 1, 8 + i), 100 * i, 60)
        t.launch_kernel(100 * i + 2, 2, "k", 100 * i + 10, 40 + i)
    return t


def test_summary_groups(tmp_path):
    doc = run(decode_loop(6), tmp_path)
    sm = doc["summary"]
    assert sm["prefill"]["indices"] == [0]
    assert sm["warmup"]["indices"] == [1]  # first decode step
    assert sm["steady"]["indices"] == [2, 3, 4, 5]
    assert sm["flagged"]["count"] == 0
    st = sm["steady"]["gpu_active_ns"]
    vals = [42 * US, 43 * US, 44 * US, 45 * US]  # the last step's wall ends at its kernel end
    assert st["median"] == pytest.approx(np.median(vals))
    assert st["min"] == 42 * US
    assert st["p10"] == pytest.approx(np.percentile(vals, 10))
    assert st["p90"] == pytest.approx(np.percentile(vals, 90))
    assert st["n"] == 4


def test_warmup_is_the_leading_decode_step_even_when_flagged(tmp_path):
    t = decode_loop(6)
    # make step 1 run ahead: its kernel is pushed past step 2's marker start
    t.events = [e for e in t.events if not (e["name"] == "k" and e["ts"] == 110)]
    t.kernel("k", 250, 41, corr=2)
    doc = run(t, tmp_path)
    sm = doc["summary"]
    assert doc["steps"][1]["queued"]
    assert 2 not in sm["warmup"]["indices"]


def test_partial_last_step_when_a_launch_has_no_gpu_op(tmp_path):
    """The capture stopped before step 1's kernel ran: its launch has no GPU partner."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.launch_kernel(2, 1, "k", 5, 5)
    t.runtime("cudaLaunchKernel", 60, 2, corr=99)
    doc = run(t, tmp_path)
    assert [s["partial"] for s in doc["steps"]] == [False, True]
    assert doc["steps"][1]["launches"] == 1 and doc["steps"][1]["kernel_count"] == 0
    assert doc["summary"]["flagged"]["indices"] == [1]
    assert doc["unassigned"]["launches_without_gpu_ops"] == 1


def test_capture_annotation_round_trips_through_the_parser():
    """The capture engine's annotation and the anatomy's parser agree on the format."""
    from hostgap.anatomy.markers import composition
    from hostgap.capture.protocol.engine import step_name

    assert step_name(3, "decode", 2, 1, 131) == hostgap_step_name(3, "decode", 2, 1, 131)
    kind, f = composition(step_name(3, "decode", 2, 1, 131))
    assert kind == "decode" and (f["gen_requests"], f["gen_q"], f["gen_s"], f["gen_qs"]) == (2, 2, 262, 262)


def test_two_devices_each_step_on_its_own(tmp_path):
    """Kernels on device 1 are counted with device 0's in the step that launched them; the
    step's device is where most of its GPU ops ran."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.launch_kernel(1, 1, "a", 5, 10)
    t.kernel("b", 5, 10, corr=50, device=1, stream=3)
    t.runtime("cudaLaunchKernel", 2, 1, corr=50)
    t.kernel("c", 20, 5, corr=51, device=1, stream=3)
    t.runtime("cudaLaunchKernel", 3, 1, corr=51)
    s = run(t, tmp_path)["steps"][0]
    assert s["kernel_count"] == 3 and s["device"] == 1
    assert s["kernel_sum_ns"] == 25 * US and s["gpu_active_ns"] == 15 * US  # union across devices


def test_cpu_host_wait_clipped_to_the_step_wall(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.op("aten::mm", 5, 10)
    t.op("aten::mm", 90, 5)
    s1 = run(t, tmp_path)["steps"][1]
    # the CPU computes [5, 15] and [90, 95]; step 1's wall [50, 100) is otherwise host time
    assert s1["host_wait_ns"] == 45 * US
    (d,) = s1["devices"]  # the CPU is one pseudo-device, without an index
    assert (d["device"], d["busy_ns"], d["host_wait_ns"]) == (None, 5 * US, 45 * US)


# -- verdict ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fraction, expected",
    [
        (0.0, "device-bound"),
        (0.0999, "device-bound"),
        (0.10, "balanced"),
        (0.2499, "balanced"),
        (0.25, "host-bound"),
        (1.0, "host-bound"),
        (None, None),
        (float("nan"), None),
    ],
)
def test_verdict_thresholds(fraction, expected):
    from hostgap.anatomy.verdict import classify

    assert classify(fraction) == expected


def test_verdict_over_steady_decode_steps(tmp_path):
    """decode_loop(6): steps 2-5 are used (prefill and warm-up apart). Raw host fractions 0.58,
    0.57, 0.56 and, for the last step (wall 500 -> 560, kernel 45), 15/60: median 0.565.
    Host-caused idle of step i (2-4): [100i, 100i+4) before its launch call returns, and from its
    kernel's end (100i+50+i) to the wall end: 54 - i µs of 100; the launch latency
    [100i+4, 100i+10) is unexplained. Last step: 4 + 5 = 9 of 60. Median(0.52, 0.51, 0.50, 0.15)
    = 0.505."""
    doc = run(decode_loop(6), tmp_path)
    v = doc["verdict"]
    assert v["steps_used"] == 4 and v["basis"] == "host_cause_fraction"
    assert v["host_fraction"] == pytest.approx(0.565)
    assert v["host_wait_share"] == pytest.approx(0.505)
    assert v["idle_shares"]["unexplained"] == pytest.approx(0.06)
    assert v["verdict"] == "host-bound" and v["raw_verdict"] == "host-bound"
    assert v["thresholds"] == {"host_bound_min": 0.25, "device_bound_max": 0.10}
    assert v["hdbi"] == doc["taxbreak"]["hdbi"]


def test_queued_verdict_without_host_wait_falls_back_to_host_fraction():
    from hostgap.anatomy.verdict import verdict

    v = verdict(0.5, None, None, queued=True)
    assert v.basis == "host_fraction" and v.verdict == "host-bound"
    q = verdict(0.5, 0.02, 0.4, queued=True)
    assert q.basis == "host_wait_fraction" and q.verdict == "device-bound" and q.note


def test_runtime_api_in_idle_counts_concurrent_calls_once(tmp_path):
    """Step [0, 40], kernel [1, 5]; launch [0, 1] on thread 1, cudaStreamSynchronize [10, 30]
    on threads 1 and 2, cudaEventQuery [5, 35] on thread 3: the calls cover [0, 1] and [5, 35]
    of GPU-idle time = 31 µs."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 40)
    t.launch_kernel(0, 1, "k", 1, 4)
    t.runtime("cudaStreamSynchronize", 10, 20, tid=1)
    t.runtime("cudaStreamSynchronize", 10, 20, tid=2)
    t.runtime("cudaEventQuery", 5, 30, tid=3)
    s = run(t, tmp_path)["steps"][0]
    assert s["runtime_api_in_idle_ns"] <= s["wall_ns"] - s["gpu_active_ns"]
    assert s["runtime_api_in_idle_ns"] == 31 * US
