"""What-ifs move the right way by the right amount on constructed cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hostgap.errors import HostgapError
from hostgap.model import cell as cell_model
from hostgap.model.accounting import Cell
from hostgap.model.arch import get_preset
from hostgap.model.devices import find_device
from hostgap.model.roofline import default_model
from hostgap.model.stepmodel import HostModel, step
from hostgap.model.whatif import paper as whatif


def _setup(preset="llama-3.1-8b", batch=1, host=None, engine="vllm", **kw):
    host = host or HostModel(5e6, 0.0, 10e3, 4.5e3, 30e3, "test")
    dev = find_device("h100")
    return cell_model.Setup(
        get_preset(preset),
        Cell(batch=batch, context=2048, engine=engine, **kw),
        dev,
        "eager",
        default_model(dev.name),
        1.0,
        host,
    )


def test_expected_tokens_formula():
    assert whatif.expected_tokens(4, 0.0) == 1.0
    assert whatif.expected_tokens(4, 1.0) == 5.0
    assert whatif.expected_tokens(3, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)


def test_spec_decoding_at_zero_acceptance_gives_no_per_token_gain():
    w = whatif.run(_setup(), "spec:gamma=4,alpha=0")
    assert w.tokens_per_step == 1.0
    assert w.per_token_speedup <= 1.0
    hi = whatif.run(_setup(), "spec:gamma=4,alpha=0.9")
    assert hi.per_token_speedup > 3.0  # host-bound cell: one host term per ~4 tokens
    drafted = whatif.run(_setup(), "spec:gamma=4,alpha=0.9,draft=llama-3.2-1b")
    assert drafted.per_token_speedup < hi.per_token_speedup  # a draft model costs device time


def test_graphs_give_nothing_when_orchestration_is_hidden():
    # few cheap launches behind a long GPU step: orchestration fully hidden
    s = _setup(batch=1, host=HostModel(1e6, 0.0, 2e3, 2e3, 30e3))
    base = cell_model.predict(s)
    assert base.orchestration_ns < base.gpu_ns
    w = whatif.run(s, "graphs")
    assert w.scenario.total_ns == pytest.approx(w.baseline.total_ns)


def test_graphs_gain_exactly_the_exposed_orchestration():
    s = _setup(preset="llama-3.2-1b", engine="hf", host=HostModel(0.5e6, 0.0, 12e3, 4.5e3, 30e3))
    w = whatif.run(s, "graphs")
    b = w.baseline
    assert b.orchestration_exposed_ns > 0
    # new step = serial + max(graph launch, gpu): the gain is the exposed orchestration
    assert b.total_ns - w.scenario.total_ns == pytest.approx(b.orchestration_exposed_ns)


def test_fp8_halves_weight_bytes_and_adds_launches():
    w = whatif.run(_setup(), "fp8:gemm_eff=1")
    assert 0.5 < w.extra["weight_bytes_ratio"] < 0.6
    assert w.extra["launch_ratio"] > 1.2
    assert w.scenario.device_ns < w.baseline.device_ns  # memory-bound decode: fewer bytes
    assert w.scenario.orchestration_ns > w.baseline.orchestration_ns
    assert any("1.7x" in a for a in w.assumptions)
    slow = whatif.run(_setup(), "fp8:gemm_eff=0.4")  # less efficient 8-bit GEMMs: less gain
    assert slow.scenario.device_ns > w.scenario.device_ns
    assert slow.baseline.device_ns == w.baseline.device_ns


def test_tp_additive_form_keeps_the_host_term():
    s = _setup()
    w = whatif.run(s, "tp=2")
    assert w.scenario.host_ns == pytest.approx(w.baseline.host_ns)
    assert w.scenario.device_ns < w.baseline.device_ns and w.scenario.collective_ns > 0
    other = whatif.run(replace(s, tp_form="host_times_k"), "tp=2")
    assert other.scenario.total_ns > w.scenario.total_ns


def test_faster_host_shrinks_host_but_not_device_nor_launch_floor():
    s = _setup()
    w = whatif.run(s, "host=2")
    assert w.scenario.device_ns == w.baseline.device_ns
    assert w.scenario.serial_ns == pytest.approx(w.baseline.serial_ns / 2)
    assert any("launch floor 4.50 us per kernel unchanged" in a for a in w.assumptions)
    p = step(0.0, 0.0, 100, 1, s.host, host_speed=1e6)
    assert p.orchestration_ns == pytest.approx(100 * s.host.launch_floor_ns, rel=1e-3)


def test_bad_what_if_specs_are_user_errors():
    for bad in ("warp", "spec:gamma=4", "spec:alpha=2", "tp=x", "spec:gamma", "tp", "host", "host=0"):
        with pytest.raises(HostgapError):
            whatif.run(_setup(), bad)


def test_fp8_default_is_physical_and_slower_at_batch_one_through_its_launches():
    """8-bit GEMMs as efficient as 16-bit (default): device time falls, but the quantisation
    kernels' orchestration makes the host-bound batch-1 step slower (paper: 0.79x mean)."""
    s = _setup(host=HostModel(0.2e6, 0.0, 30e3, 4.7e3, 30e3, "test", 0.0, 1e6))
    w = whatif.run(s, "fp8")
    assert w.extra["gemm_eff"] == 1.0
    assert w.scenario.device_ns < w.baseline.device_ns
    assert w.scenario.total_ns > w.baseline.total_ns
    extra = w.scenario.kernels - w.baseline.kernels
    assert extra == 4 * 32  # one quantisation kernel per matmul: qkv, o, gate_up, down x 32 layers
    # host-bound both ways: the step grows by exactly the extra kernels' per-kernel cost
    assert w.scenario.total_ns - w.baseline.total_ns == pytest.approx(extra * 30e3)
