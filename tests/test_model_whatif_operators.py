"""The operators' what-ifs (overlap, cpu, megakernel) and the graph-launch cost by node count,
pinned by hand on small cases, plus the properties each must keep (docs/models.md §7)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from hostgap.errors import HostgapError
from hostgap.model import cell as cell_model
from hostgap.model import graphlaunch
from hostgap.model.accounting import Cell, account
from hostgap.model.arch import get_preset
from hostgap.model.devices import find_device
from hostgap.model.roofline import default_model
from hostgap.model.stepmodel import HostModel, StepPrediction
from hostgap.model.whatif import registry as scenarios
from hostgap.model.whatif.cpu import busy_threads, slowdown
from hostgap.model.whatif.megakernel import BW_FRACTION
from hostgap.model.whatif.overlap import is_cpu_bound, overlapped

DEV = find_device("h100")
RL = default_model(DEV.name)
HOST = HostModel(
    serial_ns=300e3,
    per_seq_ns=5e3,
    per_kernel_ns=20e3,
    launch_floor_ns=4e3,
    graph_launch_ns=30e3,
    per_rank_ns=100e3,
    dispatch_ns=500e3,
    graph_node_ns=1e3,
)


def _setup(preset="llama-3.1-8b", batch=2, mode="eager", host=HOST, engine="vllm", tp=1, scale=1.0):
    return cell_model.Setup(
        get_preset(preset), Cell(batch=batch, context=1024, engine=engine, tp=tp), DEV, mode, RL, scale, host
    )


def _sp(device, serial, orch, coll=0.0, tp=1):
    return StepPrediction(device, coll, serial, orch, 100.0, "eager", tp)


# -- overlap ------------------------------------------------------------------------------


def test_overlap_by_hand_gpu_bound_cpu_bound_and_between():
    # GPU-bound: 1 + max(3, 5) = 6 ms -> max(3 + 1, 5) = 5 ms: the whole serial part hides
    a = overlapped(_sp(5e6, 1e6, 3e6))
    assert (_sp(5e6, 1e6, 3e6).total_ns, a.total_ns, a.serial_ns, a.orchestration_ns) == (6e6, 5e6, 0.0, 4e6)
    assert a.host_ns == 0.0
    # CPU-bound: 1 + max(3, 2) = 4 ms -> max(4, 2) = 4 ms: nothing to gain
    assert overlapped(_sp(2e6, 1e6, 3e6)).total_ns == 4e6 == _sp(2e6, 1e6, 3e6).total_ns
    # between: 1 + max(3, 3.5) = 4.5 ms -> max(4, 3.5) = 4 ms; 0.5 ms of host left exposed
    b = overlapped(_sp(3.5e6, 1e6, 3e6))
    assert (b.total_ns, b.host_ns) == (4e6, 0.5e6)


def test_cpu_bound_counts_the_collectives_as_gpu_time():
    # 4 ms of CPU work per step against 3 ms of compute + 2 ms of all-reduce: the GPU's step
    assert not is_cpu_bound(_sp(3e6, 0.0, 4e6, coll=2e6, tp=2))
    assert is_cpu_bound(_sp(3e6, 0.0, 5e6, coll=2e6, tp=2))
    assert is_cpu_bound(overlapped(_sp(3e6, 1e6, 3.5e6, coll=0.5e6, tp=2)))


def test_overlap_what_if_ttft_wasted_work_and_json():
    s = _setup(batch=64, mode="graph")
    w = scenarios.run(s, "overlap:out=200")
    base = cell_model.predict(s)
    assert w.baseline == base
    assert w.scenario.total_ns == max(base.orchestration_ns + base.serial_ns, base.device_ns + base.collective_ns)
    # serial = 300 us + 64 x 5 us = 620 us, all hidden behind a graph-mode 8B step at batch 64
    assert base.serial_ns == pytest.approx(620e3)
    assert w.extra["hidden_ns"] == pytest.approx(620e3)
    assert w.extra["ttft_added_ns"] == w.scenario.total_ns
    assert w.extra["wasted_fraction"] == pytest.approx(1 / 200)
    d = json.loads(json.dumps(w.to_dict()))
    assert d["scenario"]["ttft_added_ns"] == w.scenario.total_ns
    assert {"total_ns", "host_ns", "device_ns"} <= set(d["scenario"])
    assert scenarios.run(s, "overlap").extra["wasted_fraction"] is None


def test_overlap_errors():
    with pytest.raises(HostgapError, match="no overlap scheduler"):
        scenarios.run(_setup(engine="hf", host=replace(HOST)), "overlap")
    with pytest.raises(HostgapError, match="out must be in"):
        scenarios.run(_setup(), "overlap:out=-1")


# -- cpu ----------------------------------------------------------------------------------


def test_busy_threads_and_fair_share_by_hand():
    assert busy_threads("vllm", 1) == 2.0  # API server + engine core
    assert busy_threads("vllm", 4) == 6.0  # + one worker per rank
    assert busy_threads("hf", 1) == 1.0
    assert busy_threads("hf", 4) == 1.0  # transformers: one process whatever the TP
    assert slowdown(2, 1) == 2.0
    assert slowdown(2, 4) == 1.0
    assert slowdown(2, 2, 1) == 1.5
    assert slowdown(2, 2, 0.5) == 1.25


def test_cpu_what_if_by_hand():
    s = _setup()
    w = scenarios.run(s, "cpu:cores=1")
    # 2 threads on 1 core: host at half speed. serial (300 + 2 x 5) / 0.5 = 620 us; 8B eager: 329
    # launches x ((20 - 4) / 0.5 + 4) us + dispatch 500 / 0.5 us = 11.844 + 1 = 12.844 ms
    assert account(s.arch, s.cell).launches == 329
    assert w.scenario.serial_ns == pytest.approx(620e3)
    assert w.scenario.orchestration_ns == pytest.approx(12.844e6)
    assert w.extra["slowdown"] == 2.0 and w.extra["host_speed"] == 0.5
    # a core twice as fast, shared by the two threads: the baseline exactly
    same = scenarios.run(s, "cpu:cores=1,speed=2")
    assert same.scenario.total_ns == pytest.approx(w.baseline.total_ns)
    # two cores, one busy neighbour: x1.5
    assert scenarios.run(s, "cpu:cores=2,load=1").extra["host_speed"] == pytest.approx(1 / 1.5)
    assert w.extra["ttft_added_ns"] == pytest.approx(w.extra["ttft_ns"] - w.extra["ttft_base_ns"])
    assert w.extra["ttft_added_ns"] > 0
    assert w.to_dict()["scenario"]["ttft_added_ns"] == w.extra["ttft_added_ns"]


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("cpu", "needs cores"),
        ("cpu:cores=0", "cores must be in"),
        ("cpu:cores=2,load=-1", "load must be in"),
        ("cpu:cores=2,speed=0", "speed must be in"),
        ("cpu:cores=x", "must be a number"),
    ],
)
def test_cpu_errors(spec, msg):
    with pytest.raises(HostgapError, match=msg):
        scenarios.run(_setup(), spec)


# -- megakernel ---------------------------------------------------------------------------


def test_megakernel_by_hand():
    s = _setup()
    w = scenarios.run(s, "megakernel")
    graph = cell_model.predict(s, mode="graph")
    acc = account(s.arch, s.cell)
    floor = 1e9 * (acc.weight_bytes + acc.kv_read_bytes + acc.kv_write_bytes) / DEV.mem_bw_bytes_per_s
    # 8B bf16: (8.03e9 - the 0.525e9-parameter embedding, gathered not read) x 2 B = 15.01 GB of
    # weights + KV 2 seqs x 1024 x (K and V: 2 x 8 heads x 128 x 32 layers x 2 B) = 0.268 GB:
    # 15.28 GB at 0.78 x 3.35 TB/s = 5.85 ms; batch 2 is memory-bound
    assert floor / BW_FRACTION == pytest.approx(15.28e9 / (0.78 * 3.35e12) * 1e9, rel=0.005)
    assert w.scenario.device_ns == pytest.approx(min(graph.device_ns, floor / BW_FRACTION))
    assert w.scenario.orchestration_ns == 20e3  # one launch
    assert w.scenario.serial_ns == pytest.approx(310e3)  # 300 us + 2 x 5 us stays
    assert w.scenario.total_ns == pytest.approx(310e3 + w.scenario.device_ns)
    assert w.extra["speedup_vs_graphs"] == pytest.approx(graph.total_ns / w.scenario.total_ns)
    full = scenarios.run(s, "megakernel:bw=1")
    assert full.scenario.device_ns == pytest.approx(min(graph.device_ns, floor))
    with pytest.raises(HostgapError, match="bw must be in"):
        scenarios.run(s, "megakernel:bw=1.5")


def test_megakernel_compute_bound_by_hand():
    # batch 512 at KV 1: 2 x (8.03e9 - 0.525e9 embedding) params x 512 tokens = 7.68 TFLOP at
    # 0.68 x 989.4 TFLOP/s = 11.4 ms, against 15.0 GB of weights at 0.78 x 3.35 TB/s = 5.7 ms
    s = cell_model.Setup(get_preset("llama-3.1-8b"), Cell(batch=512, context=1), DEV, "eager", RL, 1.0, HOST)
    w = scenarios.run(s, "megakernel")
    acc = account(s.arch, s.cell)
    compute = 1e9 * acc.totals()["flops"] / (DEV.peak("bfloat16") * 0.68)
    assert compute == pytest.approx(11.4e6, rel=0.02)
    assert w.scenario.device_ns == pytest.approx(compute)
    assert f"its FLOPs at the GEMM compute efficiency ({compute / 1e6:.3f} ms)" in w.assumptions[1]


def test_megakernel_compute_bound_at_large_batch():
    s = _setup(batch=512)
    w = scenarios.run(s, "megakernel")
    acc = account(s.arch, s.cell)
    compute = 1e9 * acc.totals()["flops"] / (DEV.peak("bfloat16") * RL.efficiency("gemm", "gemm").e_c)
    graph = cell_model.predict(s, mode="graph")
    floor = 1e9 * (acc.weight_bytes + acc.kv_read_bytes + acc.kv_write_bytes) / DEV.mem_bw_bytes_per_s
    assert w.scenario.device_ns == pytest.approx(min(graph.device_ns, max(compute, floor / BW_FRACTION)))


# -- graph launch by node count ------------------------------------------------------------


def test_graph_launch_fit_by_hand():
    # one point of 1,000 nodes at 1.03 ms with 30 us fixed: exactly 1 us per node
    p = graphlaunch.LaunchPoint("x", "h100-sxm", 1000, 1.03e6, "made up")
    assert graphlaunch.fit_per_node([p]) == pytest.approx(1e3)
    # two points: b = sum(x y) / sum(x^2), x = n / t, y = (t - 30 us) / t
    q = graphlaunch.LaunchPoint("y", "h100-sxm", 2000, 2.53e6, "made up")
    xs, ys = [1000 / 1.03e6, 2000 / 2.53e6], [1e6 / 1.03e6, 2.5e6 / 2.53e6]
    assert graphlaunch.fit_per_node([p, q]) == pytest.approx(
        sum(a * b for a, b in zip(xs, ys)) / sum(a * a for a in xs)
    )
    assert graphlaunch.GraphLaunchCost(1e3, 30e3, "").launch_ns(2876) == pytest.approx(2.906e6)
    with pytest.raises(ValueError):
        graphlaunch.fit_per_node([])
    with pytest.raises(ValueError, match="nodes > 0"):
        graphlaunch.fit_per_node([graphlaunch.LaunchPoint("z", "h100-sxm", 0, 1e6, "made up")])
    assert graphlaunch.GraphLaunchCost(1e3, 30e3, "").launch_ns(-5) == 30e3  # no negative node count
    # a point below the fixed part fits no negative cost
    assert graphlaunch.fit_per_node([graphlaunch.LaunchPoint("w", "h100-sxm", 10, 20e3, "made up")]) == 0.0
    loo = {r["id"]: r for r in graphlaunch.leave_one_out()}
    b = graphlaunch.fit_per_node([q for q in graphlaunch.POINTS if q.id != "vllm_b200"])
    assert loo["vllm_b200"]["predicted_ns"] == pytest.approx(30e3 + b * 2187)
    assert loo["vllm_b200"]["error"] == pytest.approx((30e3 + b * 2187) / 2.0e6 - 1)


def test_graph_launch_constants_per_device_and_held_out():
    b200 = graphlaunch.for_device("b200")
    # B200: 2,876 nodes 2.8 ms and 2,187 nodes 2.0 ms -> ~0.93 us per node
    assert b200.per_node_ns == pytest.approx(930.0, abs=1.0)
    assert graphlaunch.for_device("mi300x").per_node_ns == pytest.approx((506.768e3 - 30e3) / 421)
    assert graphlaunch.for_device("h100-sxm").per_node_ns == graphlaunch.POOLED.per_node_ns
    assert "no graph-launch measurement on h100-sxm" in graphlaunch.for_device("h100-sxm").source
    loo = graphlaunch.leave_one_out()
    assert [r["id"] for r in loo] == ["sglang_29960", "vllm_b200", "trace_mi300x"]
    assert all(abs(r["error"]) < 0.25 for r in loo)
    assert all(r["id"] not in r["fitted_on"] for r in loo)


def test_graph_mode_pays_per_node():
    s = _setup(mode="graph")
    acc = account(s.arch, s.cell)
    # piecewise: 33 graphs replay 329 - 71 = 258 kernels at 1 us each on top of the launches
    with_nodes = cell_model.predict(s)
    without = cell_model.predict(replace(s, host=replace(HOST, graph_node_ns=0.0)))
    assert acc.launches == 329
    assert with_nodes.orchestration_ns - without.orchestration_ns == pytest.approx(258e3)
    full = cell_model.predict(replace(s, capture="full"))
    full0 = cell_model.predict(replace(s, capture="full", host=replace(HOST, graph_node_ns=0.0)))
    assert full.orchestration_ns - full0.orchestration_ns == pytest.approx(322e3)  # 329 - 7 outside


# -- properties -----------------------------------------------------------------------------

_presets = st.sampled_from(["llama-3.2-1b", "llama-3.1-8b", "tiny"])
_batch = st.sampled_from([1, 4, 64, 256])


@settings(**examples(40), deadline=None)
@given(_presets, _batch, st.sampled_from(["eager", "graph"]), st.sampled_from([1, 2, 4]))
def test_overlap_never_slower_per_step(preset, batch, mode, tp):
    w = scenarios.run(_setup(preset, batch, mode, tp=tp), "overlap")
    assert w.scenario.total_ns <= w.baseline.total_ns * (1 + 1e-12)
    assert w.scenario.host_ns >= 0 and w.extra["ttft_added_ns"] > 0


@settings(**examples(40), deadline=None)
@given(_presets, _batch, st.integers(1, 64), st.integers(1, 64), st.floats(0, 16), st.floats(0.25, 4))
def test_more_cores_never_slower(preset, batch, n1, n2, load, speed):
    s = _setup(preset, batch)
    lo, hi = sorted((n1, n2))
    a = scenarios.run(s, f"cpu:cores={lo},load={load},speed={speed}")
    b = scenarios.run(s, f"cpu:cores={hi},load={load},speed={speed}")
    assert b.scenario.total_ns <= a.scenario.total_ns * (1 + 1e-12)
    assert b.extra["ttft_ns"] <= a.extra["ttft_ns"] * (1 + 1e-12)
    more_load = scenarios.run(s, f"cpu:cores={lo},load={load + 1},speed={speed}")
    assert more_load.scenario.total_ns >= a.scenario.total_ns * (1 - 1e-12)


@settings(**examples(40), deadline=None)
@given(_presets, _batch, st.sampled_from([1, 2, 4]), st.floats(0.05, 1.0))
def test_megakernel_never_slower_than_graphs(preset, batch, tp, bw):
    s = _setup(preset, batch, tp=tp)
    w = scenarios.run(s, f"megakernel:bw={bw}")
    g = scenarios.run(s, "graphs")
    assert w.scenario.total_ns <= g.scenario.total_ns * (1 + 1e-12)
    assert w.scenario.host_ns >= 0 and w.scenario.device_ns > 0


# -- analyze: graph-launch host time per node ---------------------------------------------


def test_graph_launch_cost_by_hand():
    import numpy as np

    from hostgap.anatomy.overview import graph_launch_cost

    assert graph_launch_cost(np.array([5_000]), np.array([0])) is None  # a graph launch replaying nothing
    g = graph_launch_cost(np.array([100_000, 300_000, 7]), np.array([100, 200, 0]))
    # 400 us of host time over 300 nodes: 1.333 us per node; the empty launch left out
    assert g == {
        "launches": 2,
        "nodes": 300,
        "host_ns": 400_000.0,
        "host_ns_per_node": pytest.approx(4000 / 3),
        "nodes_per_launch_p50": 150.0,
    }


def test_graph_launch_cost_on_the_mi300x_trace():
    from conftest import corpus_path
    from hostgap.anatomy.overview import overview
    from hostgap.readers import load_trace as load

    doc = overview(load(str(corpus_path("tracelens/mi300x_vllm_decode_fullgraph.json.gz", vendored=True))))
    # one hipGraphLaunch of 506.768 us replaying 421 kernels: 1.204 us per node, the MI300X point
    # graphlaunch.POINTS fits on
    g = doc["graph_launch_cost"]
    assert (g["launches"], g["nodes"]) == (1, 421)
    assert g["host_ns"] == pytest.approx(506_768, abs=1)
    assert g["host_ns_per_node"] == pytest.approx(506_768 / 421, rel=1e-5)
    (p,) = [q for q in graphlaunch.POINTS if q.device == "mi300x"]
    assert p.nodes == g["nodes"] and p.launch_ns == pytest.approx(g["host_ns"], abs=1)


# -- the assumption lines say the numbers they stand for ----------------------------------


def test_overlap_assumption_lines_by_hand():
    w = scenarios.run(_setup(batch=64, mode="graph"), "overlap:out=200")
    # serial 300 + 64 x 5 us = 0.620 ms, all hidden; graph orchestration: dispatch 0.5 ms + 33 x 30 us
    # + 258 nodes x 1 us + 71 eager kernels x 20 us = 3.168 ms
    assert w.assumptions[0].endswith(
        "split the host term the same way: the serial host work (0.620 ms: scheduler, "
        "IPC, output processing) runs during the previous step's GPU time; 0.620 ms of "
        "it leaves the step"
    )
    assert w.assumptions[0].startswith("vLLM async scheduling (--async-scheduling); SGLang's overlap scheduler")
    assert w.assumptions[1] == (
        "the step's own orchestration (3.168 ms: dispatch and the launch path of its kernels) "
        "cannot move ahead of its step; one CPU thread does orchestration + serial per step"
    )
    assert (
        w.assumptions[2]
        == f"a new request waits one step more for its first token: +{w.scenario.total_ns / 1e6:.3f} ms TTFT"
    )
    assert w.assumptions[3].endswith("(0.50 % of decode work at 200 output tokens)")
    assert w.extra["cpu_bound"] is False
    bound = scenarios.run(_setup("tiny"), "overlap")  # eager tiny: launches outlast its GPU work
    assert bound.extra["cpu_bound"] is True
    assert bound.assumptions[1].endswith(
        ": the CPU is the bottleneck, so overlap gains only what the GPU time can absorb"
    )
    assert bound.assumptions[3].endswith("(overlap:out=N for the share at N output tokens)")


def test_cpu_assumption_lines_by_hand():
    w = scenarios.run(_setup(), "cpu:cores=2,load=1")
    assert w.assumptions[0] == (
        "2 busy host threads (API server (HTTP, tokenizer, detokenizer), engine core (scheduler; "
        "model runner at TP 1)) + co-located load 1 on 2 core(s): each gets min(1, 2 / 3) of a "
        "core, host work x1.5"
    )
    assert w.assumptions[1].startswith("core speed x1 single-thread: host term at 0.667x speed")
    assert w.assumptions[2] == (
        f"TTFT: the 1024-token prefill step {w.extra['ttft_base_ns'] / 1e6:.3f} -> "
        f"{w.extra['ttft_ns'] / 1e6:.3f} ms (API-server tokenisation not modelled)"
    )
    tp = scenarios.run(_setup(tp=4), "cpu:cores=8")
    assert (
        "(API server (HTTP, tokenizer, detokenizer), engine core (scheduler; model runner at TP 1), 4 workers)"
        in tp.assumptions[0]
        and tp.assumptions[0].startswith("6 busy host threads")
    )
    assert tp.extra["slowdown"] == 1.0


def test_megakernel_assumption_lines_by_hand():
    s = _setup()
    w = scenarios.run(s, "megakernel")
    graph = cell_model.predict(s, mode="graph")
    # eager orchestration 0.5 ms + 329 x 20 us = 7.080 ms; serial 300 + 2 x 5 us = 0.310 ms
    assert w.assumptions[0] == (
        "one persistent kernel per step: orchestration 7.080 ms -> one launch (20.0 us); serial "
        "host work 0.310 ms stays (scheduling, IPC, sampling)"
    )
    assert w.assumptions[1].startswith(
        "device: the step's bytes at 0.78 of h100-sxm's datasheet bandwidth (5.847 ms) or "
        "its FLOPs at the GEMM compute efficiency ("
    )
    assert w.assumptions[1].endswith(f"never above the graph-mode kernels ({graph.device_ns / 1e6:.3f} ms)")
    assert w.assumptions[2] == (
        f"CUDA graphs for comparison: {graph.total_ns / 1e6:.3f} ms per step; megakernel "
        f"{graph.total_ns / w.scenario.total_ns:.2f}x faster than graphs"
    )
    assert w.extra["graph_total_ns"] == graph.total_ns and w.extra["bw_fraction"] == 0.78
    assert w.scenario.mode == "megakernel" and w.scenario.kernels == 1.0 and w.scenario.graph_launches == 0.0
