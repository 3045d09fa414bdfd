"""Formulas of the model modules pinned with explicit parameters and hand-derived values.

Every expected number below is worked out in the comment beside it from the formula's
definition (docs/models.md), never read back from the code: a changed operator or constant
in tp.py, accounting.py, devices.py or vidur.py changes one of them.
"""

from __future__ import annotations

import pytest

from hostgap.errors import HostgapError
from hostgap.model import tp, vidur
from hostgap.model.accounting import Cell, account, expected_experts_hit, scale_launches
from hostgap.model.arch import Arch
from hostgap.model.devices import BUILTIN, DeviceSpec, find_device, load_device_file

DEV = DeviceSpec("test-gpu", {"bfloat16": 100e12, "fp8": 200e12}, 1e12, 80e9, 900e9, {}, ("tg",))


# -- tp.py --------------------------------------------------------------------------------


def test_default_all_reduce_is_a_ring_at_half_the_link():
    ar = tp.default_all_reduce(DEV)
    # bus bandwidth of a ring all-reduce: link x k / (2 (k - 1)), at 50 % of the link
    assert ar.bw_bytes_per_s[2] == pytest.approx(0.5 * 900e9 * 2 / 2)  # 450 GB/s
    assert ar.bw_bytes_per_s[4] == pytest.approx(0.5 * 900e9 * 4 / 6)  # 300 GB/s
    assert ar.bw_bytes_per_s[8] == pytest.approx(0.5 * 900e9 * 8 / 14)  # 257.14 GB/s
    assert ar.latency_ns == {2: 10_000.0, 4: 10_000.0, 8: 10_000.0}
    # 3 MB over 4 ranks: 10 us + 3e6 B / 300e9 B/s = 10 us + 10 us
    assert float(ar.time_ns(3e6, 4)) == pytest.approx(20_000.0)
    assert float(ar.time_ns(3e6, 1)) == 0.0


def test_all_reduce_time_scales_bandwidth_to_another_device_and_takes_the_nearest_k():
    ar = tp.AllReduceModel("a", {2: 5_000.0, 8: 30_000.0}, {2: 100e9, 8: 50e9}, 300e9)
    other = DeviceSpec("b", {"bfloat16": 1e12}, 1e12, 1e9, 600e9)  # twice the link
    # 1 MB at k=2 on "a": 5 us + 1e6 / 100e9 s = 5 + 10 us = 15 us; on "b": 5 + 5 = 10 us
    assert float(ar.time_ns(1e6, 2)) == pytest.approx(15_000.0)
    assert float(ar.time_ns(1e6, 2, other)) == pytest.approx(10_000.0)
    # k=6 is nearer 8 than 2: 30 us + 1e6 / 50e9 s = 30 + 20 us
    assert float(ar.time_ns(1e6, 6)) == pytest.approx(50_000.0)
    assert float(ar.time_ns(1e6, 3)) == pytest.approx(15_000.0)  # nearer 2


def test_fit_all_reduce_recovers_an_exact_affine_law_per_worker_count():
    import numpy as np

    size = np.array([1e5, 1e6, 1e7, 1e5, 1e6, 1e7, 1e6])
    workers = np.array([2, 2, 2, 4, 4, 4, 4])
    per_node = np.array([2, 2, 2, 4, 4, 4, 2])  # the last row spans two nodes: dropped
    # k=2: 8 us + size / 200 GB/s; k=4: 12 us + size / 100 GB/s
    t = np.where(workers == 2, 8e3 + size / 200.0, 12e3 + size / 100.0)
    t[-1] = 1e9
    ar = tp.fit_all_reduce(vidur.AllReduceSamples(size, workers, per_node, t), DEV)
    assert ar.latency_ns[2] == pytest.approx(8e3, rel=1e-6)
    assert ar.bw_bytes_per_s[2] == pytest.approx(200e9, rel=1e-6)
    assert ar.latency_ns[4] == pytest.approx(12e3, rel=1e-6)
    assert ar.bw_bytes_per_s[4] == pytest.approx(100e9, rel=1e-6)
    ev = tp.evaluate_all_reduce(ar, vidur.AllReduceSamples(size, workers, per_node, t))
    assert ev[2].mape == pytest.approx(0.0, abs=1e-9) and ev[4].n == 3


@pytest.mark.parametrize(
    "form,expected",
    [
        # D_k = 4e6, C_k = 3e5, D_1 = 6e6, k = 2, h = 2e6 (s = 1e5 for additive_skew)
        ("additive", 4e6 + 3e5 + 2e6),
        ("compute_comm", (6e6 + 2e6) / 2 + 3e5),
        ("host_over_k", 4e6 + 3e5 + 2e6 / 2),
        ("host_times_k", 4e6 + 3e5 + 2e6 * 2),
        ("additive_skew", 4e6 + 3e5 + 2e6 + 1e5 * (2 - 1)),
    ],
)
def test_tp_forms_by_hand(form, expected):
    params = (2e6, 1e5) if form == "additive_skew" else (2e6,)
    cell = tp.TPCell(2, 4e6, 3e5, 6e6)
    assert float(tp.TPFormFit(form, params).predict([cell])[0]) == pytest.approx(expected)


def test_fit_form_recovers_exact_parameters_and_keeps_them_non_negative():
    cells = [tp.TPCell(k, 8e6 / k, 1e5 * (k > 1), 8e6) for k in (1, 2, 4)]
    walls = [c.device_ns + c.comm_ns + 3e6 + 2e5 * (c.k - 1) for c in cells]
    cells = [tp.TPCell(c.k, c.device_ns, c.comm_ns, c.device1_ns, w) for c, w in zip(cells, walls)]
    f = tp.fit_form("additive_skew", cells)
    assert f.params == pytest.approx((3e6, 2e5), rel=1e-9)
    # walls below D_k + C_k: the fitted host term would be negative, it is clipped to 0
    low = [tp.TPCell(c.k, c.device_ns, c.comm_ns, c.device1_ns, 0.5 * (c.device_ns + c.comm_ns)) for c in cells]
    assert tp.fit_form("additive", low).params == (0.0,)
    with pytest.raises(ValueError):
        tp.fit_form("nonsense", cells)


def test_paper_reference_check_by_hand():
    from hostgap.model.accounting import Cell, account
    from hostgap.model.arch import get_preset
    from hostgap.model.roofline import default_model, device_time

    res = tp.paper_reference_check()
    h100, arch = find_device("h100"), get_preset("llama-3.1-8b")
    raw = lambda k: device_time(account(arch, Cell(tp=k)), h100, default_model(h100.name)).total_ns  # noqa: E731
    scale = 6.41e6 / raw(1)
    assert res["device_scale"] == pytest.approx(scale)
    # 8B TP-2: 65 all-reduces of 8,192 B on the default ring: 10 us + 8192 / (0.5 x 900e9 x 2 / 2) s each
    comm = 65 * (10e3 + 8192 / 450e9 * 1e9)
    assert res["predicted_8b_tp2_device_ms"] == pytest.approx((scale * raw(2) + comm) / 1e6)
    assert res["measured_8b_tp2_gpu_ms"] == 15.42
    by = {r.form: r for r in res["forms"]}
    # additive, fitted on TP-1 alone: h = 12.19 - 6.41 ms; TP-2 = D_2 + C_2 + h
    add = by["additive"]
    assert add.tp2_wall_pred_ms == pytest.approx((scale * raw(2) + comm) / 1e6 + 12.19 - 6.41)
    assert add.tp2_wall_error == pytest.approx(abs(add.tp2_wall_pred_ms - 15.9) / 15.9)
    assert add.ratio_70b_error == pytest.approx(abs(add.ratio_70b_pred - 1.11) / 1.11)
    # fitted on TP-1 and TP-2 (relative weights), then 70B: t_k = scale x D_k + C_k + h, ratio t_2 / t_4
    y1, b1, y2, b2 = 12.19e6, scale * raw(1), 15.9e6, scale * raw(2) + comm
    h = ((y1 - b1) / y1**2 + (y2 - b2) / y2**2) / (1 / y1**2 + 1 / y2**2)
    a70 = get_preset("llama-3.1-70b")
    ring = {2: 450e9, 4: 300e9}  # 0.5 x 900e9 x k / (2 (k - 1))
    t70 = {
        k: scale * device_time(account(a70, Cell(tp=k)), h100, default_model(h100.name)).total_ns
        + 161 * (10e3 + 16384 / ring[k] * 1e9)
        + h
        for k in (2, 4)
    }
    assert add.ratio_70b_pred == pytest.approx(t70[2] / t70[4])


# -- accounting.py ------------------------------------------------------------------------

MOE = Arch(
    "toy-moe",
    "olmoe",
    hidden=64,
    layers=2,
    heads=4,
    kv_heads=4,
    head_dim=16,
    intermediate=32,
    vocab=100,
    tied_embeddings=False,
    experts=8,
    top_k=2,
)


def test_moe_expert_flops_bytes_and_quant_by_hand():
    acc = account(MOE, Cell(batch=3, context=10, dtype="fp8"))
    T, top, h, i = 3, 2, 64, 32
    ex = acc.op("experts")
    assert ex.flops == 2 * T * top * 3 * h * i  # 73,728: top_k experts per token, 3 matmuls each
    hit = 8 * (1 - (1 - 2 / 8) ** 3)  # 4.625 experts hit by 3 tokens
    assert expected_experts_hit(8, 2, 3) == pytest.approx(4.625)
    assert ex.weight_bytes == pytest.approx(hit * 3 * h * i * 1)  # fp8: 1 byte per weight
    assert ex.act_bytes == pytest.approx(T * top * (2 * h + 3 * i) * 2)  # 2,688
    q = acc.op("experts_quant")
    assert q.flops == 2 * T * top * h  # 768
    assert q.act_bytes == T * top * h * (2 + 1)  # read bf16, write fp8: 1,152
    assert q.kernels == 2 and q.launches == 2
    r = acc.op("router")
    assert r.flops == 2 * T * h * 8 and r.weight_bytes == h * 8 * 1  # 3,072 FLOPs
    assert r.act_bytes == T * (h + 8) * 2  # read the hidden state, write 8 logits: 432 bytes
    assert expected_experts_hit(0, 0, 5) == 0.0


def test_tp2_dense_projection_shapes_by_hand():
    arch = Arch(
        "toy",
        "llama",
        hidden=64,
        layers=3,
        heads=8,
        kv_heads=2,
        head_dim=8,
        intermediate=96,
        vocab=50,
        tied_embeddings=False,
    )
    acc = account(arch, Cell(batch=2, context=5, tp=4))
    T = 2
    # q: 64 / 4 = 16 columns per rank; kv heads 2 < 4 ranks: one kv head (8 dims) replicated, x2 (k, v)
    assert acc.op("qkv_proj").flops == 2 * T * 64 * (16 + 2 * 8)
    # attention: 4 x heads/k x head_dim x batch x s (decode: q = 1, s = 5)
    assert acc.op("attention").flops == 4 * 2 * 8 * 2 * 5
    assert acc.op("attention").kv_read_bytes == 2 * 5 * 2 * 8 * 2
    assert acc.op("down_proj").weight_bytes == 96 / 4 * 64 * 2
    assert acc.op("lm_head").weight_bytes == 64 * 50 / 4 * 2
    assert acc.op("attn_all_reduce").act_bytes == T * 64 * 2
    assert acc.op("qkv_proj").act_bytes == T * (64 + 32) * 2  # read hidden, write q + k + v per rank
    res = acc.op("residual_add")  # two per layer: read two hidden states, write one
    assert (res.count, res.flops, res.act_bytes) == (2 * 3, 2 * T * 64, (2 * T * 64 + T * 64) * 2)
    assert acc.op("embed").launches == 1 + 2  # vocab-parallel lookup: mask and all-reduce
    # prefill of 4 tokens at context 4: causal q.s = 4 x 0 + 4 x 5 / 2 = 10 key reads per head
    pre = account(arch, Cell(batch=1, q_tokens=4, context=4, tp=1))
    assert pre.op("attention").flops == 4 * 8 * 8 * 10


def test_scale_launches_hits_the_measured_total_and_ignores_nonsense():
    acc = account(MOE, Cell())
    scaled = scale_launches(acc, 2 * acc.launches)
    assert scaled.launches == pytest.approx(2 * acc.launches)
    assert scale_launches(acc, float("nan")) is acc and scale_launches(acc, 0.0) is acc


# -- devices.py ---------------------------------------------------------------------------


def test_device_peaks_fall_back_to_sixteen_bit_and_names_match_by_longest_alias():
    a100 = find_device("a100")
    assert a100.peak("fp8") == 312e12  # no FP8 units: the bf16 rate
    assert a100.peak("int8") == 624e12
    assert find_device("NVIDIA H100 80GB HBM3 SXM").name == "h100-sxm"  # contained alias
    assert find_device("nvidia-h200").name == "h200"  # punctuation and case ignored
    with pytest.raises(HostgapError):
        find_device("h1")  # too short to match inside anything
    cpu_only = DeviceSpec("x", {"float32": 5e9}, 1e9, 1e9, 1e9)
    assert cpu_only.peak("bfloat16") == 5e9
    with pytest.raises(HostgapError):
        DeviceSpec("y", {}, 1e9, 1e9, 1e9).peak("bfloat16")
    assert all(set(d.sources) >= {"peak_flops", "mem_bw_bytes_per_s"} for d in BUILTIN.values())


def test_device_file_validation(tmp_path):
    def write(body):
        p = tmp_path / "d.json"
        p.write_text(body)
        return p

    ok = write(
        '{"devices": [{"name": "z", "peak_flops": {"bfloat16": 1e12}, "mem_bw_bytes_per_s": 2e12, '
        '"mem_bytes": 3e9, "interconnect_bw_bytes_per_s": 4e9, "source": "s", '
        '"sources": {"mem_bytes": "m"}}]}'
    )
    d = load_device_file(ok)["z"]
    assert (d.mem_bw_bytes_per_s, d.mem_bytes, d.interconnect_bw_bytes_per_s) == (2e12, 3e9, 4e9)
    assert d.sources["mem_bytes"] == "m" and d.sources["peak_flops"] == "s"
    for body, msg in [
        ('{"devices": []}', "non-empty"),
        ('{"devices": [{"name": "z"}]}', "missing"),
        (
            '{"devices": [{"name": "z", "peak_flops": {"bfloat16": 1e12}, "mem_bw_bytes_per_s": 0, "mem_bytes": 3e9, '
            '"interconnect_bw_bytes_per_s": 4e9, "source": "s"}]}',
            "> 0",
        ),
        (
            '{"devices": [{"name": "z", "peak_flops": {"bfloat16": 1e12}, "mem_bw_bytes_per_s": 1, "mem_bytes": 3e9, '
            '"interconnect_bw_bytes_per_s": 4e9}]}',
            "no source",
        ),
        (
            '{"devices": [{"name": "z", "peak_flops": {}, "mem_bw_bytes_per_s": 1, "mem_bytes": 3e9, '
            '"interconnect_bw_bytes_per_s": 4e9, "source": "s"}]}',
            "peak_flops",
        ),
    ]:
        with pytest.raises(HostgapError, match=msg):
            load_device_file(write(body))


# -- vidur.py -----------------------------------------------------------------------------

_VIDUR_HEADER = [
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "vocab_size",
    "use_gated_mlp",
    "num_tokens",
    "num_tensor_parallel_workers",
]


def _vidur_csv(path, rows):
    ops = list(vidur.VIDUR_OPS)
    cols = _VIDUR_HEADER + [f"time_stats.{op}.median" for op in ops]
    lines = [",".join(cols)]
    for tokens, k, ms in rows:
        lines.append(",".join(map(str, [8, 2, 64, 96, 50, "True", tokens, k] + [ms] * len(ops))))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_vidur_reader_maps_ops_units_and_shapes(tmp_path):
    p = _vidur_csv(tmp_path / "x_mlp.csv", [(4, 2, 0.25)])
    s = vidur.read_mlp(p, DEV)
    assert len(s) == len(vidur.VIDUR_OPS)
    assert set(s.time_ns) == {0.25e6}  # ms -> ns
    up = list(s.key).index("mlp_up_proj")
    # gate+up at TP-2: 2 x 4 tokens x 64 x (2 x 96 / 2)
    assert s.flops[up] == 2 * 4 * 64 * 96
    assert s.peak_flops[up] == 100e12 and s.bw_bytes_per_s[up] == 1e12  # fp16 falls back to bf16
    assert set(s.tokens) == {4} and set(s.group) == {"x_mlp"}  # grouped by file name
    assert set(vidur.read_mlp(p, DEV, group="g").group) == {"g"}
    arch = vidur.arch_of_row(
        {
            "n_embd": "64",
            "n_head": "8",
            "n_kv_head": "2",
            "n_expanded_embd": "96",
            "vocab_size": "50",
            "use_gated_mlp": "False",
        },
        "g",
    )
    assert arch.head_dim == 8 and not arch.gated_mlp and arch.family == "llama" and arch.layers == 1
    assert not arch.tied_embeddings  # vidur profiles the embedding alone: no head shares its table
    keyed = vidur.as_hostgap_ops(s)
    # the four GEMMs share the family key (one efficiency set), the other ops keep their names
    gemm_rows = [list(s.key).index(op) for op in vidur.GEMM_OPS]
    assert set(keyed.key[gemm_rows]) == {"gemm"} and keyed.time_ns[up] == 0.25e6
    assert keyed.key[list(s.key).index("input_layernorm")] == "input_norm"
    assert sum(keyed.key == "gemm") == 4
    per_op = vidur.as_hostgap_ops(s, gemm_key=None)
    assert per_op.key[up] == "gate_up_proj" and sum(per_op.key == "gemm") == 0


def test_vidur_all_reduce_reader(tmp_path):
    p = tmp_path / "ar.csv"
    p.write_text("size,num_workers,devices_per_node,time_stats.all_reduce.median\n1024,2,2,0.05\n2048,4,4,0.1\n")
    s = vidur.read_all_reduce(p)
    assert list(s.size_bytes) == [1024.0, 2048.0] and list(s.workers) == [2, 4]
    assert list(s.time_ns) == pytest.approx([5e4, 1e5])
    assert len(s.take(s.workers == 4)) == 1
    empty = tmp_path / "e.csv"
    empty.write_text("size\n")
    with pytest.raises(HostgapError, match="no rows"):
        vidur.read_all_reduce(empty)


def test_fit_form_weights_relative_error():
    # two cells disagreeing on h (1 ms vs 3 ms); relative weights 1/y: h = sum(r_i / y_i^2) / sum(1 / y_i^2)
    cells = [tp.TPCell(1, 1e6, 0.0, 1e6, 2e6), tp.TPCell(1, 3e6, 0.0, 3e6, 6e6)]
    h = (1e6 / 2e6**2 + 3e6 / 6e6**2) / (1 / 2e6**2 + 1 / 6e6**2)  # 1.2 ms, not the plain mean 2 ms
    assert tp.fit_form("additive", cells).params[0] == pytest.approx(h)


def test_synthetic_cells_by_hand():
    import numpy as np

    cells = tp.synthetic_cells("additive", (5e6,), ks=(1, 4), models=((6e6, 1e6),), noise=0.0)
    # k=1: D = 6 ms, no collective; k=4: D = (6 - 1) / 4 + 1 ms, C = 30 us + 20 us x log2 4
    assert [c.device_ns for c in cells] == [6e6, 2.25e6]
    assert [c.comm_ns for c in cells] == [0.0, 7e4]
    assert [c.wall_ns for c in cells] == pytest.approx([11e6, 2.25e6 + 7e4 + 5e6])
    noisy = tp.synthetic_cells("additive", (5e6,), ks=(1, 4), models=((6e6, 1e6),), noise=0.02, seed=7)
    eps = np.random.default_rng(7).standard_normal(2)
    assert [c.wall_ns for c in noisy] == pytest.approx(list(np.array([11e6, 7.32e6]) * (1 + 0.02 * eps)))


def test_activation_bytes_of_embed_norm_misc_and_shared_expert_by_hand():
    qm = Arch(
        "toy-qmoe",
        "qwen2_moe",
        hidden=64,
        layers=2,
        heads=4,
        kv_heads=4,
        head_dim=16,
        intermediate=32,
        vocab=100,
        tied_embeddings=False,
        experts=8,
        top_k=2,
        shared_expert_intermediate=48,
    )
    acc = account(qm, Cell(batch=3, context=10, tp=2))
    T, h, si, k = 3, 64, 48, 2
    sh = acc.op("shared_expert")
    assert sh.act_bytes == T * (2 * h + 3 * si / k) * 2
    assert sh.flops == 2 * T * 3 * h * si / k and sh.weight_bytes == (3 * h * si / k + h) * 2
    assert acc.op("embed").act_bytes == T * h * 2
    fn = acc.op("final_norm")
    assert (fn.flops, fn.act_bytes, fn.weight_bytes) == (T * h, 2 * T * h * 2, h * 2)
    hf = account(qm, Cell(batch=3, context=10, engine="hf"))
    misc = hf.op("misc")
    assert (misc.count, misc.act_bytes, misc.kernels) == (2, T * h * 2, 9)


def test_every_dense_op_shape_by_hand():
    arch = Arch(
        "toy",
        "llama",
        hidden=64,
        layers=3,
        heads=8,
        kv_heads=2,
        head_dim=8,
        intermediate=96,
        vocab=50,
        tied_embeddings=False,
    )
    acc = account(arch, Cell(batch=2, context=5, tp=4))
    T = 2  # per rank: q 16 dims, one replicated kv head of 8, intermediate 24, vocab 12.5
    o = acc.op("o_proj")
    assert (o.flops, o.weight_bytes) == (2 * T * 16 * 64, 16 * 64 * 2)
    assert acc.op("sample").act_bytes == 2 * 12.5 * 2
    kv = acc.op("kv_write")
    assert (kv.kv_write_bytes, kv.act_bytes) == (2 * 1 * 2 * 8 * 2, T * 2 * 8 * 2)
    assert acc.op("attention").act_bytes == 2 * T * 16 * 2
    rope = acc.op("rope")
    assert (rope.flops, rope.act_bytes) == (T * 24, 2 * T * 24 * 2)
    norm = acc.op("input_norm")
    assert (norm.flops, norm.act_bytes) == (T * 64, 2 * T * 64 * 2)
    act = acc.op("act")  # gated: read gate and up (2 x 24), write 24
    assert (act.flops, act.act_bytes) == (2 * T * 24, (2 * T * 24 + T * 24) * 2)
    q8 = account(arch, Cell(batch=2, context=5, dtype="fp8")).op("qkv_proj_quant")
    assert q8.act_bytes == T * 64 * (2 + 1)  # read bf16, write fp8
    moe = account(MOE, Cell(batch=3, context=10)).op("moe_overhead")
    assert (moe.flops, moe.act_bytes) == (3 * 2 * 64, (3 * 2 * 64 + 3 * 64) * 2)


def test_prefill_kv_write_stores_every_new_token_of_every_sequence_by_hand():
    arch = Arch(
        "toy",
        "llama",
        hidden=64,
        layers=3,
        heads=8,
        kv_heads=2,
        head_dim=8,
        intermediate=96,
        vocab=50,
        tied_embeddings=False,
    )
    # 2 sequences x 3 new tokens each: 6 tokens written, k and v of 2 kv heads x 8 dims, bf16
    kv = account(arch, Cell(batch=2, q_tokens=3, context=7)).op("kv_write")
    assert kv.kv_write_bytes == 2 * 3 * 2 * (2 * 8) * 2  # 384 bytes
    assert kv.count == 3  # once per layer
    # an fp8 KV cache halves the bytes written, not the activations read
    kv8 = account(arch, Cell(batch=2, q_tokens=3, context=7, kv_dtype="fp8")).op("kv_write")
    assert (kv8.kv_write_bytes, kv8.act_bytes) == (2 * 3 * 2 * 16 * 1, 6 * 2 * 16 * 2)
