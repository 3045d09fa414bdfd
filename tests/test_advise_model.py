"""The levers' arithmetic (model/levers/arithmetic.py, device.py) by hand on micro inputs: every number
below is worked out in the comment beside it (docs/advise.md)."""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.model.graphlaunch import GraphLaunchCost
from hostgap.model.levers import arithmetic as A
from hostgap.model.levers import device as D

MS, US = 1e6, 1e3
COST = GraphLaunchCost(per_node_ns=1 * US, fixed_ns=30 * US, source="hand")


def steps(n: int = 1, **kw) -> A.Steps:
    """One step of 10 ms: device 4, host-caused idle 5 (1 of it between steps), launch path 3 ms
    over 100 eager launches (30 us each), 100 kernels."""
    base = dict(
        wall=10 * MS,
        device=4 * MS,
        host_wait=5 * MS,
        between=1 * MS,
        orchestrate=3 * MS,
        launches=100.0,
        graph_launches=0.0,
        kernels=100.0,
    )
    base.update(kw)
    return A.Steps(**{k: np.full(n, float(v)) for k, v in base.items()})


def base(s: A.Steps | None = None, **kw) -> A.Baseline:
    return A.Baseline(source="hand", gpu=kw.pop("gpu", True), steps=s if s is not None else steps(), **kw)


def test_inside_wait_and_per_launch():
    s = steps()
    assert A.inside_wait(s)[0] == pytest.approx(4 * MS)  # 5 - min(1, 5)
    assert A.per_launch_ns(s)[0] == pytest.approx(30 * US)  # 3 ms / 100 calls
    assert A.inside_wait(steps(between=7 * MS))[0] == 0.0  # the whole wait lies between steps
    assert np.isnan(A.per_launch_ns(steps(launches=0))[0])  # no call: no cost per call
    assert A.per_launch_ns(steps(launches=50, graph_launches=50))[0] == pytest.approx(30 * US)


def test_critical_cut_is_bounded_by_the_reach_and_never_negative():
    s = steps()
    assert A.critical_cut(s, np.array([2 * MS]), np.array([4 * MS])).wall[0] == pytest.approx(8 * MS)
    assert A.critical_cut(s, np.array([6 * MS]), np.array([4 * MS])).wall[0] == pytest.approx(6 * MS)
    assert A.critical_cut(s, np.array([-1 * MS]), np.array([4 * MS])).wall[0] == pytest.approx(10 * MS)
    assert A.critical_cut(s, np.array([1 * MS]), np.array([-4 * MS])).wall[0] == pytest.approx(10 * MS)


def test_graphs_full():
    # cut = 100 x 30 us - (30 us + 100 x 1 us) = 2.87 ms, inside wait 4 ms: 10 - 2.87 = 7.13 ms
    out = A.graphs_full(steps(), COST)
    assert out.wall[0] == pytest.approx(7.13 * MS)
    assert out.device[0] == pytest.approx(4 * MS)
    # a step whose inside wait is 1 ms saves 1 ms only
    assert A.graphs_full(steps(host_wait=2 * MS), COST).wall[0] == pytest.approx(9 * MS)


def test_overlap():
    # S = min(1, 5) = 1, M = 9, O = 3: max(min(3, 9) + 1, 9) = 9 ms
    assert A.overlap(steps()).wall[0] == pytest.approx(9 * MS)
    # host-bound inside the marker (O = 9.5 > M = 9): max(9 + 1, 9) = 10: no gain
    assert A.overlap(steps(orchestrate=9.5 * MS)).wall[0] == pytest.approx(10 * MS)
    # O + S beyond M: max(8.5 + 1, 9) = 9.5
    assert A.overlap(steps(orchestrate=8.5 * MS)).wall[0] == pytest.approx(9.5 * MS)
    # unknown launch path: O = M - device = 5, max(5 + 1, 9) = 9
    assert A.overlap(steps(orchestrate=np.nan)).wall[0] == pytest.approx(9 * MS)
    # the exposed loop time is the host-caused part: between 3 ms, host wait 2 ms -> S = 2, M = 8
    assert A.overlap(steps(between=3 * MS, host_wait=2 * MS)).wall[0] == pytest.approx(8 * MS)


def test_faster_host():
    # floor 100 x 5 us = 0.5 ms; (5 - 0.5) x (1 - 1 / 1.5) = 1.5 ms saved
    assert A.faster_host(steps(), 1.5, 5 * US, True).wall[0] == pytest.approx(8.5 * MS)
    # no floor given: 5 x 1/3
    assert A.faster_host(steps(), 1.5, None, True).wall[0] == pytest.approx(10 * MS - 5 * MS / 3)
    # a floor beyond the wait: nothing to gain
    assert A.faster_host(steps(), 1.5, 100 * US, True).wall[0] == pytest.approx(10 * MS)
    cpu = A.faster_host(steps(), 2.0, 5 * US, False)
    assert (cpu.wall[0], cpu.device[0]) == pytest.approx((5 * MS, 2 * MS))


def test_fused():
    # GPU: 0.3 x 100 x 30 us = 0.9 ms within the 4 ms inside wait
    assert A.fused(steps(), 0.3, True).wall[0] == pytest.approx(9.1 * MS)
    # CPU: 0.5 x (10 - 4) = 3 ms of framework time
    assert A.fused(steps(), 0.5, False).wall[0] == pytest.approx(7 * MS)


def test_megakernel():
    # 3 ms - one launch's 30 us = 2.97 ms within the 4 ms inside wait
    out = A.megakernel(steps())
    assert out.wall[0] == pytest.approx(7.03 * MS)
    # a device bound: host-bound step (wait 5 > half of 6), the device's cut is hidden
    out = A.megakernel(steps(), np.array([2 * MS]))
    assert (out.wall[0], out.device[0]) == pytest.approx((7.03 * MS, 2 * MS))
    # device-bound step (wait 0.5 <= 3): the device's 2 ms leave the step; nothing host-side to cut
    out = A.megakernel(steps(host_wait=0.5 * MS, between=0.5 * MS), np.array([2 * MS]))
    assert out.wall[0] == pytest.approx(8 * MS)
    # partly host-bound: host path 4 + 1 - 0.57 = 4.43 outlasts the 2 ms device bound: 10 - 5 + 4.43
    part = steps(host_wait=2 * MS, orchestrate=0.6 * MS, launches=20.0)
    assert A.megakernel(part, np.array([2 * MS])).wall[0] == pytest.approx(9.43 * MS)
    # a bound above today's device time changes nothing
    assert A.megakernel(steps(host_wait=0.0), np.array([9 * MS])).device[0] == pytest.approx(4 * MS)


def test_host_share_after():
    s = steps()
    out = A.graphs_full(s, COST)
    # 5 - 2.87 = 2.13 ms of 7.13
    assert A.host_share_after(s, out)[0] == pytest.approx(2.13 / 7.13)
    dev = A.Outcome(np.array([8 * MS]), np.array([2 * MS]))
    # the 2 ms saved are the device's: the wait stays 5 ms of 8
    assert A.host_share_after(s, dev)[0] == pytest.approx(5 / 8)


def test_evaluate_gain_regime_and_tokens():
    spec = A.LeverSpec("graphs", {"capture": "full"}, "b", "v", lambda x: A.graphs_full(x, COST))
    row = A.evaluate(base(batch=2.0), spec)
    assert row.applicable and row.step_ns == pytest.approx(7.13 * MS)
    assert row.gain == pytest.approx(0.287)
    assert row.tokens_per_s == pytest.approx(2 * 1e9 / (7.13 * MS))
    assert row.regime_after == "host-bound"  # 2.13 / 7.13 = 0.30
    assert row.step_ns_ci is None  # one step, no interval of its own
    # per token: the step 14 ms for 1.5x the tokens is 1 - (14 / 1.5) / 10 = 6.7 % less time per token
    spec2 = A.LeverSpec("x", {}, "b", "v", lambda x: A.Outcome(x.wall * 1.4, x.device, 1.5))
    assert A.evaluate(base(), spec2).gain == pytest.approx(1 - 14 / 1.5 / 10)
    no = A.evaluate(base(), A.LeverSpec("fp8", {}, "b", "v", None, "needs the model's architecture"))
    assert (no.applicable, no.step_ns, no.gain, no.reason) == (False, None, None, "needs the model's architecture")
    assert no.to_dict()["step_ns_ci"] is None


def test_interval_of_a_measured_run_runs_the_lever_at_its_ends():
    b = base(wall_ci=(9 * MS, 11 * MS))
    lo, hi = A.interval(b, lambda x: A.graphs_full(x, COST))
    # x0.9: 9 - (2.7 - 0.13) = 6.43; x1.1: 11 - (3.3 - 0.13) = 7.83
    assert (lo, hi) == pytest.approx((6.43 * MS, 7.83 * MS))
    assert A.today_interval(b) == pytest.approx((9 * MS, 11 * MS))


def test_interval_of_a_trace_is_the_order_statistic_interval_of_the_median():
    walls = np.array([8, 9, 10, 11, 12, 10, 10.0]) * MS
    n = len(walls)
    s = A.Steps(
        walls,
        np.full(n, 4 * MS),
        np.full(n, 0.0),
        np.zeros(n),
        np.full(n, 1 * MS),
        np.full(n, 10.0),
        np.zeros(n),
        np.full(n, 10.0),
    )
    # 7 values: P(Binomial(7, 1/2) <= 0) = 1/128 <= 0.025, P(<= 1) = 8/128 > 0.025: [min, max]
    assert A.today_interval(base(s)) == pytest.approx((8 * MS, 12 * MS))
    assert A.today_interval(base(s.take(np.arange(5)))) is None  # five steps: no 95 % interval
    assert A.median_rank(5) is None and A.median_rank(6) == 0 and A.median_rank(7) == 0
    # n = 9: P(<= 1) = 10/512 <= 0.025 < P(<= 2) = 46/512: the 2nd smallest to the 2nd largest
    assert A.median_rank(9) == 1
    assert A.median_rank(100) == 39  # the textbook 40th and 61st of 100
    same = base(steps(6))
    assert A.today_interval(same) == pytest.approx((10 * MS, 10 * MS))


def test_rank_and_noise():
    def row(name, gain, ok=True):
        return A.Lever(name, ok, "", {}, 1.0, None, 1.0, gain, None, "", "")

    ranked = A.rank([row("a", 0.1), row("b", None, False), row("c", 0.3), row("d", -0.2)])
    assert [r.lever for r in ranked] == ["c", "a", "d", "b"]
    r = A.Lever("x", True, "", {}, 9.5, None, 1.0, 0.05, None, "", "")
    assert A.within_noise(r, (9.0, 11.0)) and not A.within_noise(r, (9.6, 11.0))
    assert not A.within_noise(r, None)


def test_apply_ratios():
    out = D.apply_ratios(steps(), D.Ratios(0.5, 2.0, 1.5, ""))
    # device 4 x 0.5 = 2; host-exposed (10 - 4) x 2 = 12: 14 ms for 1.5x the tokens
    assert (out.wall[0], out.device[0], out.tokens_ratio) == pytest.approx((14 * MS, 2 * MS, 1.5))


def test_batch_outcome_adds_the_per_sequence_host_cost():
    b = base(batch=1.0, preset="llama-3.2-1b", device_name="h100-sxm", engine="vllm")
    apply, words = D.batch_outcome(b, 4)
    r = D.batch_ratios(b, 4)
    out = apply(steps())
    # device 4 x r; host-exposed 6 ms + 3 x 5.74 us (vLLM's per-sequence serial cost)
    assert out.wall[0] == pytest.approx(4 * MS * r.device + 6 * MS + 3 * 5.74 * US)
    assert out.tokens_ratio == 4.0 and r.device > 1.0
    assert "5.7 us per added sequence x 3" in words


def test_device_levers_need_a_preset_and_a_gpu():
    assert {k: v[1] for k, v in D.device_levers(base()).items()} == {
        "fp8": "needs the model's architecture",
        "tp": "needs the model's architecture",
        "spec": "needs the model's architecture",
    }
    cpu = D.device_levers(base(gpu=False, preset="tiny"))
    assert all(r is None and "CPU run" in why for r, why in cpu.values())
    nogpu = D.device_levers(base(preset="llama-3.2-1b"))
    assert all(r is None and "needs the GPU's spec" in why for r, why in nogpu.values())
    odd = D.device_levers(base(preset="llama-3.2-1b", device_name="GPU 2 (name not in trace)"))
    assert all(r is None and "not in the device table" in why for r, why in odd.values())
    ok = D.device_levers(base(preset="llama-3.1-8b", device_name="NVIDIA H100 80GB HBM3"))
    fp8, tp, spec = (ok[k][0] for k in ("fp8", "tp", "spec"))
    assert fp8 is not None and fp8.device < 1.0 and fp8.tokens == 1.0  # half the weight bytes
    assert tp is not None and tp.device < 1.0
    assert spec is not None and spec.tokens == pytest.approx((1 - 0.6**5) / (1 - 0.6))


def test_rank_keeps_levers_without_a_gain_or_not_applicable_last():
    def row(name, gain, ok=True):
        return A.Lever(name, ok, "", {}, 1.0, None, 1.0, gain, None, "", "")

    ranked = A.rank([row("x", 0.9, False), row("y", None, True), row("z", 0.1)])
    assert [r.lever for r in ranked] == ["z", "x", "y"]


def test_a_zero_step_has_no_gain_and_no_rate():
    zero = A.LeverSpec("x", {}, "b", "v", lambda s: A.Outcome(s.wall * 0.0, s.device * 0.0))
    row = A.evaluate(base(), zero)
    assert (row.gain, row.tokens_per_s) == (None, None)
    empty_today = base(steps(wall=0.0, device=0.0, host_wait=0.0, between=0.0))
    same = A.LeverSpec("x", {}, "b", "v", lambda s: A.Outcome(s.wall + 1.0, s.device))
    assert A.evaluate(empty_today, same).gain is None


def test_units_in_words():
    assert A.ms(1.5e6) == "1.500 ms" and A.us(2500.0) == "2.5 us"


def test_a_step_without_launch_costs_cuts_nothing():
    # two steps: the second has no launch calls and no TaxBreak (NaN): its wall stays
    s = A.Steps(
        np.array([10 * MS, 10 * MS]),
        np.full(2, 4 * MS),
        np.full(2, 5 * MS),
        np.full(2, 1 * MS),
        np.array([3 * MS, np.nan]),
        np.array([100.0, 0.0]),
        np.zeros(2),
        np.array([100.0, 0.0]),
    )
    assert A.graphs_full(s, COST).wall == pytest.approx([7.13 * MS, 10 * MS])
    assert A.fused(s, 0.3, True).wall == pytest.approx([9.1 * MS, 10 * MS])
    assert A.megakernel(s).wall == pytest.approx([7.03 * MS, 10 * MS])


def test_a_lever_without_a_finite_step_is_not_shown():
    spec = A.LeverSpec("x", {"k": 1}, "b", "v", lambda s: A.Outcome(s.wall * np.nan, s.device))
    row = A.evaluate(base(), spec)
    assert (row.applicable, row.step_ns, row.gain) == (False, None, None)
    assert row.reason == "the input's steps lack a quantity this lever needs"


def test_ratios_of_device_work_and_the_rest_by_hand():
    from hostgap.model.stepmodel import StepPrediction

    # base: device 4 + collectives 1 = 5, total 2 + max(3, 5) = 7, the rest 2
    base_p = StepPrediction(4 * MS, 1 * MS, 2 * MS, 3 * MS, 10, "eager")
    # new: device 2 + collectives 1 = 3, total 3 + max(1, 3) = 6, the rest 3
    new_p = StepPrediction(2 * MS, 1 * MS, 3 * MS, 1 * MS, 10, "eager")
    r = D._ratios(base_p, new_p, 1.5, "w")
    assert (r.device, r.host, r.tokens, r.words) == pytest.approx((0.6, 1.5, 1.5, "w"))
    zero = StepPrediction(0.0, 0.0, 0.0, 0.0, 0, "eager")
    assert (D._ratios(zero, new_p, 1.0, "").device, D._ratios(zero, new_p, 1.0, "").host) == (1.0, 1.0)


def test_setup_and_batch_and_bandwidth_of_the_input_cell():
    from hostgap.model.cell import bandwidth_floor_ns, setup_account
    from hostgap.model.roofline import device_time

    b = base(batch=1.0, preset="llama-3.2-1b", device_name="h100-sxm", engine="hf")
    s = D.setup_for(b)
    assert (s.cell.engine, s.cell.batch, s.mode, s.device.name) == ("hf", 1, "eager", "h100-sxm")
    assert D.setup_for(base(preset="llama-3.2-1b", device_name="h100-sxm", engine="sglang")).cell.engine == "vllm"
    s4 = D.setup_for(b, batch=4)
    d0 = device_time(setup_account(s), s.device, s.roofline).total_ns
    d4 = device_time(setup_account(s4), s4.device, s4.roofline).total_ns
    assert D.batch_ratios(b, 4).device == pytest.approx(d4 / d0) and 1.0 < d4 / d0 < 2.0
    _, words = D.batch_outcome(b, 4)
    assert "DEFAULT_HOST[hf].per_seq_ns" in words and "2.0 us per added sequence x 3" in words
    bound = D.megakernel_device_ns(b)
    assert bound == pytest.approx(bandwidth_floor_ns(setup_account(s), s.device) / 0.78)
    assert D.megakernel_device_ns(base()) is None
    graph = base(steps(graph_launches=1.0), preset="llama-3.2-1b", device_name="h100-sxm")
    assert D.setup_for(graph).mode == "graph"


def test_megakernel_keeps_one_launch_of_a_graph_only_step():
    # two graph launches, 0.2 ms in all: one launch's 0.1 ms stays, 0.1 ms is cut
    s = steps(launches=0.0, graph_launches=2.0, orchestrate=0.2 * MS)
    assert A.megakernel(s).wall[0] == pytest.approx(9.9 * MS)
