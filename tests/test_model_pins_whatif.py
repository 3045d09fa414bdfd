"""What-ifs (model/whatif/paper.py over model/cell.py) pinned against a second computation of the same prediction.

The step is rebuilt here from its definitions (METHOD.md §7, docs/models.md §4): the
roofline's device time (``device_time``, taken as given) scaled and floored at the bytes the
step must stream at the datasheet bandwidth; the all-reduce as latency + message / bus
bandwidth; serial = serial + per_seq x batch + per_rank x (tp - 1); orchestration = dispatch +
launches x per-kernel cost (in graph mode the launches outside the graphs, plus one launch per
graph); wall = serial + max(orchestration, device + collectives). Every
what-if is then checked against its own formula on those parts. Memory and bookkeeping
numbers are worked out by hand in the comments.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from hostgap.errors import HostgapError
from hostgap.model import cell as cell_model
from hostgap.model.accounting import Cell, account
from hostgap.model.arch import get_preset
from hostgap.model.devices import DeviceSpec, find_device
from hostgap.model.roofline import default_model, device_time
from hostgap.model.stepmodel import HostModel, StepPrediction
from hostgap.model.tp import AllReduceModel
from hostgap.model.whatif import paper as whatif

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
)


def _setup(preset="llama-3.1-8b", scale=1.0, host=HOST, **kw):
    return cell_model.Setup(get_preset(preset), Cell(batch=2, context=1024), DEV, "eager", RL, scale, host, **kw)


def _ring(k: int, size: float) -> float:
    """The default all-reduce by hand: 10 us + size / (50 % of 900 GB/s x k / (2 (k - 1)))."""
    return 10e3 + 1e9 * size / (0.5 * 900e9 * k / (2 * (k - 1)))


def _by_hand(s, cell=None, mode="eager", speed=1.0, arch=None, launches=None):
    """(device, collectives, serial, orchestration, total) of one step, from the definitions."""
    cell = cell or s.cell
    acc = account(arch or s.arch, cell)
    dt = device_time(acc, DEV, RL)
    floor = 1e9 * (acc.weight_bytes + acc.kv_read_bytes + acc.kv_write_bytes) / DEV.mem_bw_bytes_per_s
    dev = max(s.device_scale * dt.total_ns, floor)
    coll = 0.0 if cell.tp == 1 else dt.collective_ops * _ring(cell.tp, dt.collective_bytes / dt.collective_ops)
    h = s.host
    serial = (h.serial_ns + h.per_seq_ns * cell.batch + h.per_rank_ns * (cell.tp - 1)) / speed
    n = acc.launches if launches is None else launches
    if mode == "eager":
        orch = h.dispatch_ns / speed + n * ((h.per_kernel_ns - h.launch_floor_ns) / speed + h.launch_floor_ns)
    else:
        # vLLM V1 piecewise capture: one graph per layer and one more; the KV-cache write, the
        # attention, the LM head and sampling are launched outside the graphs, after the
        # step's dispatch
        graphs = (arch or s.arch).layers + 1
        outside = sum(o.count * o.launches for o in acc.ops if o.name in ("kv_write", "attention", "lm_head", "sample"))
        orch = (
            h.dispatch_ns / speed
            + outside * ((h.per_kernel_ns - h.launch_floor_ns) / speed + h.launch_floor_ns)
            + graphs * h.graph_launch_ns / speed
        )
    return dev, coll, serial, orch, serial + max(orch, dev + coll)


def _parts(p: StepPrediction):
    return p.device_ns, p.collective_ns, p.serial_ns, p.orchestration_ns, p.total_ns


def test_prediction_is_the_scaled_roofline_floored_at_the_bytes_streamed():
    s = _setup()
    assert _parts(cell_model.predict(s)) == pytest.approx(_by_hand(s))
    acc = account(s.arch, s.cell)
    # bytes that must move: weights + KV read + KV written, at 3.35 TB/s
    moved = acc.weight_bytes + acc.kv_read_bytes + acc.kv_write_bytes
    assert acc.kv_read_bytes > 0 and acc.kv_write_bytes > 0
    assert cell_model.bandwidth_floor_ns(acc, DEV) == pytest.approx(moved / 3.35e12 * 1e9)
    # a roofline scaled far down is held at that floor
    tiny = _setup(scale=1e-3)
    assert cell_model.predict(tiny).device_ns == pytest.approx(moved / 3.35e12 * 1e9)
    assert cell_model.predict(tiny).device_ns > 1e-3 * device_time(acc, DEV, RL).total_ns


def test_graph_mode_and_a_faster_host_by_hand():
    s = _setup()
    # 8B: 32 layers x (KV write + attention) + LM head + sampling's launches = 71 outside 33 graphs;
    # 500 + 71 x 20 + 33 x 30 us = 2,910 us of orchestration
    assert cell_model.predict(s, mode="graph").orchestration_ns == pytest.approx(2910e3)
    assert _parts(cell_model.predict(s, mode="graph")) == pytest.approx(_by_hand(s, mode="graph"))
    assert _parts(cell_model.predict(s, host_speed=2.0)) == pytest.approx(_by_hand(s, speed=2.0))


def test_measured_kernels_replace_the_table_and_keep_its_ratio_across_cells():
    s = _setup(kernels_per_step=1000.0)
    assert cell_model.predict(s).kernels == pytest.approx(1000.0)
    big = replace(s.cell, batch=16)
    ratio = account(s.arch, big).launches / account(s.arch, s.cell).launches
    p = cell_model.predict(s, cell=big)
    assert p.kernels == pytest.approx(1000.0 * ratio)
    assert _parts(p) == pytest.approx(_by_hand(s, cell=big, launches=1000.0 * ratio))


def test_tp_overlap_prediction_with_the_default_and_a_given_all_reduce():
    s = _setup()
    cell2 = replace(s.cell, tp=2)
    p = cell_model.predict(s, cell=cell2)
    assert p.collective_ns > 0
    assert _parts(p) == pytest.approx(_by_hand(s, cell=cell2))
    assert p.tp == 2
    # a given all-reduce model is used instead of the default: 1 ms latency, 1 GB/s at k=2
    ar = AllReduceModel(DEV.name, {2: 1e6}, {2: 1e9}, DEV.interconnect_bw_bytes_per_s)
    dt = device_time(account(s.arch, cell2), DEV, RL)
    expect = dt.collective_ops * (1e6 + 1e9 * (dt.collective_bytes / dt.collective_ops) / 1e9)
    assert cell_model.predict(replace(s, all_reduce=ar), cell=cell2).collective_ns == pytest.approx(expect)
    assert cell_model.collective_ns(s, dt, 1) == 0.0


def test_form_totals_by_hand():
    s = _setup()
    k = 4
    dk, ck, _, _, tk = _by_hand(s, cell=replace(s.cell, tp=k))
    d1, _, _, _, t1 = _by_hand(s)
    h1 = t1 - d1  # TP-1 host-exposed time: total - GPU-active
    gk = dk + ck
    want = {
        "overlap": tk,
        "additive": gk + h1,
        "compute_comm": t1 / k + ck,
        "host_over_k": gk + h1 / k,
        "host_times_k": gk + h1 * k,
        "additive_skew": gk + h1,
    }
    got = cell_model.form_totals(s, replace(s.cell, tp=k))
    assert got == pytest.approx(want)
    # a linear form replaces the host term: serial = form total - GPU time, no orchestration
    p = cell_model.predict(replace(s, tp_form="host_over_k"), cell=replace(s.cell, tp=k))
    assert (p.device_ns, p.collective_ns) == pytest.approx((dk, ck))
    assert p.serial_ns == pytest.approx(h1 / k) and p.orchestration_ns == 0.0
    assert p.total_ns == pytest.approx(want["host_over_k"])
    # at TP 1 every form is the step model itself
    assert _parts(cell_model.predict(replace(s, tp_form="host_times_k"))) == pytest.approx(_by_hand(s))


def test_a_form_total_below_the_gpu_time_gives_no_negative_host_term():
    idle = HostModel(0.0, 0.0, 0.0, 0.0, 0.0)
    s = _setup(host=idle, tp_form="compute_comm")
    cell2 = replace(s.cell, tp=2)
    d2, c2, _, _, _ = _by_hand(s, cell=cell2)
    d1 = _by_hand(s)[0]
    # compute_comm: D_1 / 2 + C_2 is below D_2 + C_2, since the per-kernel floor does not split
    assert d1 / 2 < d2
    p = cell_model.predict(s, cell=cell2)
    assert p.serial_ns == 0.0
    assert p.total_ns == pytest.approx(d2 + c2)


def test_memory_check_by_hand():
    arch = get_preset("tiny")
    # tiny: h 256, 4 layers, 4 heads, 2 KV heads of 64, MLP 512, vocab 1024, untied
    # per layer: attention 256x256 + 2x256x128 + 256x256 = 196,608; MLP 3x256x512 = 393,216;
    # norms 512 -> 590,336 x 4 = 2,361,344; embedding + LM head 2 x 262,144; final norm 256
    emb = 2 * 262_144
    params = 2_361_344 + emb + 256
    assert arch.param_count() == params
    m = cell_model.memory_check(arch, Cell(batch=3, context=100, tp=2), DEV)
    assert m.weights_bytes == pytest.approx(params * 2 / 2)
    # KV: 3 seqs x 100 tokens x (K, V) x 1 head per rank x 64 x 4 layers x 2 bytes
    assert m.kv_bytes == pytest.approx(3 * 100 * 2 * 1 * 64 * 4 * 2)
    # W8A8: matmul weights 1 byte, embeddings stay 16-bit; KV cache stays 16-bit
    m8 = cell_model.memory_check(arch, Cell(batch=3, context=100, tp=2, dtype="fp8"), DEV)
    assert m8.weights_bytes == pytest.approx(((params - emb) * 1 + emb * 2) / 2)
    assert m8.kv_bytes == pytest.approx(m.kv_bytes)
    # TP 4 > 2 KV heads: the head is replicated, not split to half a head
    assert cell_model.memory_check(arch, Cell(batch=3, context=100, tp=4), DEV).kv_bytes == pytest.approx(m.kv_bytes)
    # fits exactly at weights + KV, not a byte less
    total = m.weights_bytes + m.kv_bytes
    room = DeviceSpec("x", {"bfloat16": 1e12}, 1e12, total, 1e9)
    short = DeviceSpec("y", {"bfloat16": 1e12}, 1e12, total - 1, 1e9)
    assert cell_model.memory_check(arch, Cell(batch=3, context=100, tp=2), room).fits
    assert not cell_model.memory_check(arch, Cell(batch=3, context=100, tp=2), short).fits
    assert m.to_dict()["fits"] is True
    assert "exceed" in cell_model.memory_check(arch, Cell(batch=3, context=100, tp=2), short).message("y")


def test_step_change_and_per_token_speedup_by_hand():
    base = StepPrediction(0.0, 0.0, 100.0, 0.0, 1, "eager")
    scen = StepPrediction(0.0, 0.0, 150.0, 0.0, 1, "eager")
    w = whatif.WhatIf("x", (), base, scen, tokens_per_step=3.0)
    assert w.step_change == pytest.approx(0.5)  # 150 / 100 - 1
    assert w.per_token_speedup == pytest.approx(2.0)  # (100 / 1) / (150 / 3)
    w2 = whatif.WhatIf("x", (), base, scen, tokens_per_step=3.0, baseline_tokens=2.0)
    assert w2.per_token_speedup == pytest.approx(1.0)  # (100 / 2) / (150 / 3)
    assert w2.to_dict()["per_token_speedup"] == pytest.approx(1.0)


def test_parse_by_hand():
    assert whatif.parse("tp=4") == ("tp", {"k": "4"})
    assert whatif.parse(" host=2 ") == ("host", {"speed": "2"})
    assert whatif.parse("spec:gamma=4, alpha=0.7") == ("spec", {"gamma": "4", "alpha": "0.7"})
    assert whatif.parse("graphs") == ("graphs", {})
    with pytest.raises(HostgapError, match="'gamma=4'"):
        whatif.parse("gamma=4")
    with pytest.raises(HostgapError, match="expected key=value"):
        whatif.parse("spec:gamma")
    with pytest.raises(HostgapError, match=r"must be in \[1, 64\]"):
        whatif.run(_setup(), "tp=65")
    with pytest.raises(HostgapError, match="needs alpha"):
        whatif.run(_setup(), "spec:gamma=2")


def test_speculative_cycle_by_hand():
    s = _setup(host=replace(HOST, dispatch_ns=0.0, per_kernel_ns=1e3, launch_floor_ns=1e3))
    w = whatif.run(s, "spec:gamma=3,alpha=0.5")
    e = 1 + 0.5 + 0.25 + 0.125  # (1 - 0.5^4) / (1 - 0.5)
    verify = replace(s.cell, q_tokens=4, context=1024 + 3, logits_kept=2 * 4)
    vd, vc, vs, vo, vt = _by_hand(s, cell=verify)
    assert _parts(w.scenario) == pytest.approx((vd, vc, vs, vo, vt))
    assert w.tokens_per_step == pytest.approx(e) and w.extra["expected_tokens"] == pytest.approx(e)
    base_total = _by_hand(s)[4]
    assert w.per_token_speedup == pytest.approx(base_total / (vt / e))
    # a draft model adds gamma x its device time and gamma x its orchestration to the cycle
    d = whatif.run(s, "spec:gamma=3,alpha=0.5,draft=llama-3.2-1b")
    dd, dc, _, do, _ = _by_hand(s, arch=get_preset("llama-3.2-1b"))
    assert d.scenario.device_ns == pytest.approx(vd + 3 * (dd + dc))
    assert d.scenario.orchestration_ns == pytest.approx(vo + 3 * do)
    assert d.scenario.serial_ns == pytest.approx(vs)
    assert d.scenario.total_ns == pytest.approx(vs + max(vo + 3 * do, vd + 3 * (dd + dc) + vc))


def test_fp8_ratios_and_derating_touch_only_the_eight_bit_gemms():
    s = _setup()
    w = whatif.run(s, "fp8:gemm_eff=0.5")
    a16, a8 = account(s.arch, s.cell), account(s.arch, replace(s.cell, dtype="fp8"))
    assert w.extra["weight_bytes_ratio"] == pytest.approx(a8.weight_bytes / a16.weight_bytes)
    assert w.extra["launch_ratio"] == pytest.approx(a8.launches / a16.launches)
    assert w.extra["gemm_eff"] == 0.5
    rl = whatif._derated(RL, a8, 0.5)
    for o in a8.ops:
        e0, e1 = RL.efficiency(o.name, o.family), rl.efficiency(o.name, o.family)
        if o.family == "gemm" and o.compute_dtype == "fp8":
            assert (e1.e_c, e1.e_m) == pytest.approx((0.5 * e0.e_c, 0.5 * e0.e_m))
        else:
            assert (e1.e_c, e1.e_m) == (e0.e_c, e0.e_m)
    assert any(o.family == "gemm" and o.compute_dtype != "fp8" for o in a8.ops)  # the LM head stays 16-bit


def test_tp_and_graph_and_host_what_if_texts_follow_their_numbers():
    s = _setup()
    w = whatif.run(s, "tp=2")
    assert w.extra["form_totals_ns"] == pytest.approx(cell_model.form_totals(s, replace(s.cell, tp=2)))
    assert not any("bandwidth scaled" in a for a in w.assumptions)
    a100 = AllReduceModel("a100-80gb", {2: 1e4}, {2: 1e11}, 600e9, "fitted elsewhere")
    w2 = whatif.run(replace(s, all_reduce=a100), "tp=2")
    assert any("bandwidth scaled to h100-sxm" in a for a in w2.assumptions)
    others = next(a for a in w.assumptions if "other forms" in a)
    assert "overlap" not in others.split("other forms:")[1] and "additive " in others
    hidden = whatif.run(_setup(host=HostModel(1e6, 0.0, 1e3, 1e3, 30e3)), "graphs")
    assert hidden.baseline.orchestration_exposed_ns == 0
    assert any("already hidden" in a for a in hidden.assumptions)
    exposed = whatif.run(_setup(preset="tiny"), "graphs")
    assert exposed.baseline.orchestration_exposed_ns > 0
    assert not any("already hidden" in a for a in exposed.assumptions)
    for spec, word in (("host=2", "faster"), ("host=0.5", "slower"), ("host=1", "same")):
        assert f"({word})" in whatif.run(s, spec).assumptions[0]
