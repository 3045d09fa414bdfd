"""The step model's formulas (stepmodel.py) pinned on small round numbers worked out by hand.

wall = serial + max(orchestration, device + collectives); orchestration = dispatch + kernels x
((per_kernel - floor) / speed + floor), plus in graph mode one graph launch / speed per graph
(the kernels then being those launched outside the graphs);
serial = (serial + per_seq x batch + per_rank x (tp - 1)) / speed. Each expected value is
computed in the comment beside it from those definitions (docs/models.md §4), never read back
from the code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hostgap.model import stepmodel as sm

H = sm.HostModel(
    serial_ns=100.0,
    per_seq_ns=10.0,
    per_kernel_ns=5.0,
    launch_floor_ns=2.0,
    graph_launch_ns=30.0,
    per_rank_ns=50.0,
    dispatch_ns=40.0,
)


def test_orchestration_by_hand():
    # eager: 40 + 10 kernels x ((5 - 2) + 2) = 40 + 50 = 90
    assert sm.orchestration_ns(H, 10) == pytest.approx(90.0)
    # a host twice as fast halves the CPU part only: 40 / 2 + 10 x (3 / 2 + 2) = 20 + 35 = 55
    assert sm.orchestration_ns(H, 10, "eager", 2.0) == pytest.approx(55.0)
    # graph mode: the dispatch still runs, `kernels` are those launched outside the graphs,
    # plus one launch per graph: 40 / 2 + 10 x (3 / 2 + 2) + 1 x 30 / 2 = 20 + 35 + 15 = 70
    assert sm.orchestration_ns(H, 10, "graph", 2.0) == pytest.approx(70.0)
    # every kernel inside 4 graphs: 40 + 0 + 4 x 30 = 160
    assert sm.orchestration_ns(H, 0, "graph", graphs=4) == pytest.approx(160.0)
    # the graph count is ignored in eager mode: 40 + 10 x 5 = 90
    assert sm.orchestration_ns(H, 10, "eager", graphs=4) == pytest.approx(90.0)
    # a floor above the per-kernel cost is cut to it: the whole 5 us is hardware,
    # 40 / 2 + 10 x (0 / 2 + 5) = 20 + 50 = 70
    high_floor = sm.HostModel(100.0, 10.0, 5.0, 8.0, 30.0, dispatch_ns=40.0)
    assert sm.orchestration_ns(high_floor, 10, "eager", 2.0) == pytest.approx(70.0)


def test_serial_by_hand():
    # (100 + 10 x 4 + 50 x (3 - 1)) / 2 = 240 / 2 = 120
    assert sm.serial_ns(H, 4, tp=3, host_speed=2.0) == pytest.approx(120.0)
    # TP 1 pays no per-rank term: 100 + 10 x 4 = 140
    assert sm.serial_ns(H, 4) == pytest.approx(140.0)


def test_for_device_never_puts_the_floor_above_the_per_kernel_cost():
    assert sm.for_device(H, 3.0).launch_floor_ns == 3.0
    assert sm.for_device(H, 9.0).launch_floor_ns == 5.0  # min(9, per_kernel 5)
    assert sm.for_device(H, 3.0).per_kernel_ns == 5.0


def test_step_with_orchestration_hidden_by_the_gpu():
    p = sm.step(200.0, 20.0, 10, 4, H, "eager", 1.0, tp=3)
    # serial 100 + 40 + 100 = 240; orchestration 90 < device + collectives 220
    assert p.serial_ns == pytest.approx(240.0) and p.orchestration_ns == pytest.approx(90.0)
    assert p.total_ns == pytest.approx(240.0 + 220.0)
    assert p.orchestration_exposed_ns == 0.0 and p.collective_wait_ns == 0.0
    assert p.gpu_ns == pytest.approx(220.0)
    assert p.host_ns == pytest.approx(240.0)  # 460 - 220
    assert p.host_caused_ns == pytest.approx(240.0)
    assert p.host_fraction == pytest.approx(240.0 / 460.0)
    assert (p.kernels, p.mode, p.tp) == (10, "eager", 3)


def test_step_with_exposed_orchestration_under_tp_and_without():
    p = sm.step(50.0, 10.0, 10, 4, H, "eager", 1.0, tp=3)
    # total 240 + max(90, 60) = 330; exposed 90 - 60 = 30, spent inside the all-reduce (TP 3)
    assert p.total_ns == pytest.approx(330.0)
    assert p.orchestration_exposed_ns == pytest.approx(30.0)
    assert p.collective_wait_ns == pytest.approx(30.0)
    assert p.gpu_ns == pytest.approx(50.0 + 10.0 + 30.0)
    assert p.host_ns == pytest.approx(330.0 - 90.0)
    assert p.host_caused_ns == pytest.approx(240.0 + 30.0)
    d = p.to_dict()
    assert d["collective_wait_ns"] == pytest.approx(30.0) and d["gpu_active_ns"] == pytest.approx(90.0)
    assert d["host_ns"] == pytest.approx(240.0) and d["total_ns"] == pytest.approx(330.0)
    assert d["serial_host_ns"] == pytest.approx(240.0) and d["orchestration_exposed_ns"] == pytest.approx(30.0)
    # TP 1: serial 140; total 140 + 90 = 230; the exposed 30 stays host time (no all-reduce to hide in)
    q = sm.step(50.0, 10.0, 10, 4, H, "eager", 1.0, tp=1)
    assert q.total_ns == pytest.approx(230.0)
    assert q.collective_wait_ns == 0.0 and q.gpu_ns == pytest.approx(60.0)
    assert q.host_ns == pytest.approx(170.0) and q.host_caused_ns == pytest.approx(170.0)


def test_host_fraction_of_an_empty_step_is_unknown():
    p = sm.StepPrediction(0.0, 0.0, 0.0, 0.0, 0, "eager")
    assert math.isnan(p.host_fraction)


def test_host_model_dict_round_trip_ignores_unknown_keys():
    d = {**H.to_dict(), "unrelated": 1}
    assert sm.HostModel.from_dict(d) == H


def _samples(serial, per_seq, per_kernel, base, batch, kernels, g, graph):
    b, k, g, gr = (np.asarray(x, float) for x in (batch, kernels, g, graph))
    gr = gr.astype(bool)
    orch = np.where(gr, base.graph_launch_ns, base.dispatch_ns + per_kernel * k)
    t = serial + per_seq * b + np.maximum(orch, g)
    return sm.HostSamples(t, g, k, b, gr)


BASE = sm.HostModel(
    serial_ns=0.0, per_seq_ns=0.0, per_kernel_ns=1.0, launch_floor_ns=3e3, graph_launch_ns=20e3, dispatch_ns=100e3
)


def test_predict_host_by_hand():
    m = sm.HostModel(200e3, 5e3, 10e3, 3e3, 20e3, dispatch_ns=100e3)
    s = sm.HostSamples(
        np.array([1.0, 1.0, 1.0]),
        np.array([1e6, 1e3, 50e3]),
        np.array([100.0, 100.0, 100.0]),
        np.array([2.0, 2.0, 4.0]),
        np.array([False, False, True]),
    )
    # eager, GPU 1 ms longer than 100 us + 100 x 10 us = 1.1 ms: 200 + 10 + 1100 us
    # eager, GPU 1 us: the same 1.1 ms orchestration; graph: max(20 us launch, 50 us GPU) + 200 + 20
    assert sm.predict_host(m, s) == pytest.approx([1310e3, 1310e3, 270e3])


def test_fit_host_recovers_an_exact_law():
    batch = [1, 2, 4, 8, 16, 1, 4, 16]
    kernels = [300, 300, 300, 300, 300, 300, 300, 300]
    g = [1e6, 1.5e6, 2e6, 3e6, 6e6, 1e6, 2e6, 6e6]
    graph = [0, 0, 0, 0, 0, 1, 1, 1]
    s = _samples(200e3, 6e3, 12e3, BASE, batch, kernels, g, graph)
    fit = sm.fit_host(s, BASE, launch_floor_ns=4e3)
    assert fit.serial_ns == pytest.approx(200e3, rel=1e-3)
    assert fit.per_seq_ns == pytest.approx(6e3, rel=1e-2)
    assert fit.per_kernel_ns == pytest.approx(12e3, rel=1e-3)
    assert fit.launch_floor_ns == 4e3  # the given floor, below the per-kernel cost
    assert fit.dispatch_ns == BASE.dispatch_ns and fit.graph_launch_ns == BASE.graph_launch_ns
    assert fit.source.startswith("fitted on 8 measured cells")
    assert sm.evaluate_host(fit, s).mape < 1e-3
    # a floor above the fitted per-kernel cost is cut to it; none given keeps the base's
    assert sm.fit_host(s, BASE, launch_floor_ns=50e3).launch_floor_ns == pytest.approx(12e3, rel=1e-3)
    assert sm.fit_host(s, BASE).launch_floor_ns == 3e3
    assert sm.fit_host(s, BASE, launch_floor_ns=float("nan")).launch_floor_ns == 3e3


def test_fit_host_with_one_batch_size_and_a_measured_per_kernel_cost():
    s = _samples(150e3, 9e3, 10e3, BASE, [4, 4, 4, 4], [200, 250, 300, 350], [1e6, 1e6, 1e6, 1e6], [0, 0, 0, 0])
    # batch never varies: the per-sequence part cannot be told from the serial part and stays 0,
    # the serial part absorbs 9 us x 4 = 36 us; the given per-kernel cost is kept as is
    fit = sm.fit_host(s, BASE, per_kernel_ns=10e3)
    assert fit.per_seq_ns == 0.0
    assert fit.per_kernel_ns == 10e3
    assert fit.serial_ns == pytest.approx(150e3 + 36e3, rel=1e-3)
    assert fit.source.startswith("per-kernel orchestration measured (TaxBreak)")
    # a non-positive or non-finite measured cost is ignored (fitted instead)
    for bad in (0.0, -1.0, float("nan")):
        assert sm.fit_host(s, BASE, per_kernel_ns=bad).source.startswith("fitted")
    with pytest.raises(ValueError):
        sm.fit_host(s.take(np.zeros(4, bool)), BASE)


def test_leave_one_out_on_an_exact_law_is_exact_and_needs_three_cells():
    s = _samples(
        200e3,
        6e3,
        12e3,
        BASE,
        [1, 2, 4, 8, 16, 1, 4, 16],
        [300] * 8,
        [1e6, 1.5e6, 2e6, 3e6, 6e6, 1e6, 2e6, 6e6],
        [0, 0, 0, 0, 0, 1, 1, 1],
    )
    m = sm.leave_one_out(s, BASE)
    assert m.n == 8 and m.mape < 1e-4
    two = sm.leave_one_out(s.take(np.arange(8) < 2), BASE)
    assert two.n == 0 and math.isnan(two.mape)


def test_fit_host_leaves_the_flat_region_of_the_max():
    """Five eager cells with one kernel count (300), all orchestration-bound (100 us + 300 x
    12 us = 3.7 ms > 1 ms of GPU), and one graph cell that separates the serial part: the law
    200 us + 6 us x batch + 12 us per kernel is identifiable and exact. Started with the host
    time in the serial part alone, the fit stopped at 791 us + 151 us x batch + 0.95 us per
    kernel (61 % off on a cell); it must recover the law."""
    s = _samples(200e3, 6e3, 12e3, BASE, [1, 2, 4, 8, 16, 1], [300] * 6, [1e6] * 6, [0, 0, 0, 0, 0, 1])
    fit = sm.fit_host(s, BASE)
    assert fit.serial_ns == pytest.approx(200e3, rel=1e-3)
    assert fit.per_seq_ns == pytest.approx(6e3, rel=1e-2)
    assert fit.per_kernel_ns == pytest.approx(12e3, rel=1e-3)
    assert sm.evaluate_host(fit, s).mape < 1e-3
