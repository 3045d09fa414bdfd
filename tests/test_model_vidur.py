"""vidur profiles of other architectures (phi-2: non-gated MLP, parallel block) and the smooth roofline.

Every CSV here is written by the test (tiny dimensions, times chosen by hand); expected FLOPs
and bytes are derived by hand from the layer's shapes, fp16 (2 bytes).
"""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.model import roofline, vidur
from hostgap.model.devices import find_device
from hostgap.model.roofline import Efficiency, OpSamples, op_time_ns, smooth_max

H, HEADS, I, T = 64, 8, 96, 4  # hidden, heads (= kv heads, head_dim 8), MLP width, tokens
DIMS = [
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "vocab_size",
    "use_gated_mlp",
    "num_tokens",
    "num_tensor_parallel_workers",
]
PHI_OPS = [op for op in vidur.VIDUR_OPS if op != "post_attention_layernorm"]  # phi-2 files have no such column


def _csv(path, ops, gated, rows, ms=0.01):
    """rows: (tokens, tp); every op takes ``ms`` (a float, or a dict op -> ms)."""
    lines = [",".join([f"time_stats.{op}.median" for op in ops] + DIMS)]
    for tokens, k in rows:
        t = [ms[op] if isinstance(ms, dict) else ms for op in ops]
        lines.append(",".join(map(str, t + [HEADS, HEADS, H, I, 51200, gated, tokens, k])))
    path.write_text("\n".join(lines) + "\n")
    return path


def _by_op(s):
    return {str(k): i for i, k in enumerate(s.key)}


def test_non_gated_parallel_block_file_reads_the_ops_it_has(tmp_path):
    s = vidur.read_mlp(_csv(tmp_path / "phi_mlp.csv", PHI_OPS, "False", [(T, 1)]), find_device("a100"))
    assert sorted(s.key) == sorted(PHI_OPS)  # nine ops, no post-attention norm
    at = _by_op(s)
    up = at["mlp_up_proj"]
    assert s.flops[up] == 2 * T * H * I  # h -> i, not h -> 2i
    assert s.bytes[up] == 2 * (H * I + T * (H + I))  # weights + activations in and out
    assert s.bytes[at["mlp_act"]] == 2 * (T * I + T * I)  # GELU reads i values per token, writes i
    # attn + mlp + residual: two elementwise kernels, each reading two tensors and writing one
    add = at["add"]
    assert s.kernels[add] == 2 and s.bytes[add] == 2 * 2 * (3 * T * H)
    assert s.kernels[up] == 1
    assert set(s.time_ns) == {0.01e6}


def test_gated_sequential_file_keeps_one_add_kernel_and_a_gate_up_of_2i(tmp_path):
    s = vidur.read_mlp(_csv(tmp_path / "llama_mlp.csv", list(vidur.VIDUR_OPS), "True", [(T, 1)]), find_device("a100"))
    at = _by_op(s)
    assert len(s) == 10
    assert s.flops[at["mlp_up_proj"]] == 2 * T * H * 2 * I
    assert s.bytes[at["mlp_act"]] == 2 * (2 * T * I + T * I)  # SiLU-and-mul reads 2i, writes i
    assert s.kernels[at["add"]] == 1 and s.bytes[at["add"]] == 2 * 3 * T * H


def test_arch_of_row_follows_use_gated_mlp():
    row = {"n_embd": "64", "n_head": "8", "n_kv_head": "8", "n_expanded_embd": "96", "vocab_size": "50"}
    phi = vidur.arch_of_row(dict(row, use_gated_mlp="False"), "p")
    assert not phi.gated_mlp and phi.family == "llama"  # rotary, one embedding row per token
    assert phi.mlp_params() == 2 * 64 * 96
    assert vidur.arch_of_row(dict(row, use_gated_mlp="True"), "l").mlp_params() == 3 * 64 * 96
    assert vidur.arch_of_row(row, "l").gated_mlp  # column absent: gated (the older files)
    with pytest.raises(HostgapError, match="use_gated_mlp"):
        vidur.arch_of_row(dict(row, use_gated_mlp="maybe"), "x")
    with pytest.raises(HostgapError, match="non-gated"):
        phi.hf_config()


@pytest.mark.parametrize(
    "drop, msg",
    [
        ("attn_pre_proj", "missing columns time_stats.attn_pre_proj.median"),
        ("mlp_down_proj", "missing columns time_stats.mlp_down_proj.median"),
    ],
)
def test_a_file_without_a_gemm_column_is_refused_by_name(tmp_path, drop, msg):
    p = _csv(tmp_path / "x.csv", [op for op in PHI_OPS if op != drop], "False", [(T, 1)])
    with pytest.raises(HostgapError, match=msg) as e:
        vidur.read_mlp(p, find_device("a100"))
    assert str(p) in str(e.value)


@pytest.mark.parametrize(
    "value, msg", [("", "not a number"), ("abc", "not a number"), ("0", "positive"), ("-0.01", "positive")]
)
def test_a_bad_time_is_refused_with_its_column(tmp_path, value, msg):
    p = _csv(tmp_path / "x.csv", PHI_OPS, "False", [(T, 1)], ms={op: 0.01 for op in PHI_OPS} | {"mlp_act": value})
    with pytest.raises(HostgapError, match=f"time_stats.mlp_act.median.*{msg}|{msg}"):
        vidur.read_mlp(p, find_device("a100"))


@pytest.mark.parametrize(
    "col, value, msg",
    [
        ("num_tokens", "x", "num_tokens is not an integer"),
        ("num_tensor_parallel_workers", "", "is not an integer"),
        ("n_embd", "0", "n_embd must be a positive integer"),
        ("vocab_size", "-5", "vocab_size must be a positive integer"),
    ],
)
def test_a_bad_dimension_is_refused_with_its_column(tmp_path, col, value, msg):
    p = _csv(tmp_path / "x.csv", PHI_OPS, "False", [(T, 1)])
    header, row = p.read_text().splitlines()
    cells = row.split(",")
    cells[header.split(",").index(col)] = value
    p.write_text(header + "\n" + ",".join(cells) + "\n")
    with pytest.raises(HostgapError, match=msg) as e:
        vidur.read_mlp(p, find_device("a100"))
    assert str(p) in str(e.value)


def test_cli_refuses_a_malformed_profile_in_one_line(tmp_path):
    p = _csv(tmp_path / "x.csv", PHI_OPS, "False", [(T, 1)])
    p.write_text(p.read_text().replace(f",{T},1\n", ",four,1\n"))
    r = CliRunner().invoke(cli, ["fit", "--vidur-mlp", str(p), "--device", "a100", "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and "num_tokens is not an integer" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "m.json").exists()


# -- smooth roofline ----------------------------------------------------------------------


def test_smooth_max_limits_by_hand():
    a, b = np.array([3.0, 2.0, 0.0, 5.0]), np.array([4.0, 2.0, 0.0, 0.0])
    assert list(smooth_max(a, b, math.inf)) == [4.0, 2.0, 0.0, 5.0]
    assert smooth_max(a, b, 1.0) == pytest.approx([7.0, 4.0, 0.0, 5.0])
    assert smooth_max(a, b, 2.0) == pytest.approx([5.0, 2.0 * math.sqrt(2.0), 0.0, 5.0])  # 3-4-5
    assert smooth_max(1e300, 1e300, 2.0) == pytest.approx(1e300 * math.sqrt(2.0))  # no overflow
    # op_time_ns: kernels x t_min + the joined roofs; 1 GFLOP at 1 TFLOP/s = 1 ms, 1 GB at 1 TB/s = 1 ms
    t = op_time_ns(1e9, 1e9, 1e12, 1e12, 1000.0, 1.0, 1.0, kernels=2.0, q=1.0)
    assert t == pytest.approx(2 * 1000.0 + 2e6)
    assert op_time_ns(1e9, 1e9, 1e12, 1e12, 0.0, 1.0, 1.0) == pytest.approx(1e6)  # default q: sharp


def _synthetic(q_true, seed):
    rng = np.random.default_rng(seed)
    tokens = np.unique(np.geomspace(1, 8192, 300).astype(int))
    k, n = 4096, 14336
    flops, bytes_ = 2.0 * tokens * k * n, 2.0 * (k * n + tokens * (k + n))
    peak, bw = np.full(len(tokens), 312e12), np.full(len(tokens), 2.0e12)
    t = op_time_ns(flops, bytes_, peak, bw, 6_000.0, 0.7, 0.85, 1.0, q_true) * (
        1 + 0.01 * rng.standard_normal(len(tokens))
    )
    return OpSamples(np.full(len(t), "gemm"), flops, bytes_, np.ones(len(t)), peak, bw, t, tokens=tokens)


def test_fit_recovers_a_finite_sharpness_and_reports_a_sharp_roof_as_inf():
    got = roofline.fit(_synthetic(1.5, 1), keyed_by="family").efficiencies["gemm"]
    assert got.q == pytest.approx(1.5, rel=0.1)
    assert got.e_c == pytest.approx(0.7, rel=0.05) and got.e_m == pytest.approx(0.85, rel=0.05)
    sharp = roofline.fit(_synthetic(math.inf, 2), keyed_by="family").efficiencies["gemm"]
    assert sharp.q > 8  # near max(): at the ridge within 2^(1/8) - 1 = 9 % of it
    assert sharp.e_c == pytest.approx(0.7, rel=0.05)


def test_efficiency_json_round_trip_keeps_q_and_omits_infinity():
    finite, sharp = Efficiency(5_000.0, 0.7, 0.8, 1.4), Efficiency(5_000.0, 0.7, 0.8)
    assert finite.to_dict()["q"] == 1.4 and "q" not in sharp.to_dict()
    m = roofline.RooflineModel("a100-80gb", {"gemm": finite, "norm": sharp}, "t", "family")
    back = roofline.RooflineModel.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back.efficiencies["gemm"].q == 1.4 and math.isinf(back.efficiencies["norm"].q)


# -- CLI: fit on one device's files, score another device's --------------------------------


def _profile(path, ops, gated, dev_bw, dev_peak, t_min_ms=0.004, k=1):
    """A profile whose GEMM times follow a sharp roofline on a device of the given peaks."""
    ms = {}
    rows = [(tok, k) for tok in (1, 2, 4, 8, 16, 64, 256, 1024, 4096)]
    lines = [",".join([f"time_stats.{op}.median" for op in ops] + DIMS)]
    arch = vidur.arch_of_row(
        {
            "n_embd": H,
            "n_head": HEADS,
            "n_kv_head": HEADS,
            "n_expanded_embd": I,
            "vocab_size": 51200,
            "use_gated_mlp": gated,
        },
        "g",
    )
    from hostgap.model.accounting import Cell, account

    for tok, kk in rows:
        acc = account(arch, Cell(batch=1, q_tokens=tok, context=tok, tp=kk, dtype="float16", engine="vllm"))
        for op in ops:
            o = acc.op(vidur.VIDUR_OPS[op])
            n = 2 if (op == "add" and "post_attention_layernorm" not in ops) else 1
            ms[op] = t_min_ms * n + 1e3 * max(n * o.flops / (dev_peak * 0.7), n * o.bytes / (dev_bw * 0.8))
        lines.append(",".join(map(str, [ms[op] for op in ops] + [HEADS, HEADS, H, I, 51200, gated, tok, kk])))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_scores_a_phi_style_file_of_another_device_in_json(tmp_path):
    a100, h100 = find_device("a100"), find_device("h100")
    fit_file = _profile(
        tmp_path / "a_mlp.csv", list(vidur.VIDUR_OPS), "True", a100.mem_bw_bytes_per_s, a100.peak("float16")
    )
    test_file = _profile(tmp_path / "h_phi_mlp.csv", PHI_OPS, "False", h100.mem_bw_bytes_per_s, h100.peak("float16"))
    r = CliRunner().invoke(
        cli,
        [
            "fit",
            "--vidur-mlp",
            str(fit_file),
            "--device",
            "a100",
            "--test-mlp",
            str(test_file),
            "--test-device",
            "h100",
            "--json",
            "-o",
            str(tmp_path / "m.json"),
        ],
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    (t,) = out["tests"]
    assert t["file"] == "h_phi_mlp.csv" and t["device"] == "h100-sxm" and t["rows"] == 9 * len(PHI_OPS)
    # same physics on both devices (t_min, 70 % of peak FLOP/s, 80 % of peak bandwidth): the A100
    # fit carries to the H100 through the datasheet peaks, so the GEMMs are predicted closely
    assert t["gemm_mape_pct"] < 3.0
    assert 0 <= t["gemm_mape_pct"] <= t["max_err_pct"]


def test_cli_fit_gives_the_four_gemms_one_set_that_every_gemm_of_a_step_runs_on(tmp_path):
    from hostgap.model.accounting import Cell, account
    from hostgap.model.fitting.measured import load_model

    a100 = find_device("a100")
    fit_file = _profile(
        tmp_path / "a_mlp.csv", list(vidur.VIDUR_OPS), "True", a100.mem_bw_bytes_per_s, a100.peak("float16")
    )
    out = tmp_path / "m.json"
    r = CliRunner().invoke(cli, ["fit", "--vidur-mlp", str(fit_file), "--device", "a100", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rl = load_model(out).roofline_for("a100-80gb")
    assert "gemm" in rl.efficiencies and not {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"} & set(rl.efficiencies)
    assert "input_norm" in rl.efficiencies  # the other ops stay per op
    g = rl.efficiencies["gemm"]
    # the profile's four GEMMs all take 4 us + bytes / (0.8 x BW) (bandwidth-bound at these sizes)
    assert g.t_min_ns == pytest.approx(4_000, rel=0.05) and g.e_m == pytest.approx(0.8, rel=0.05)
    # every GEMM of a step runs on that one set, the LM head (no vidur rows) included
    arch = vidur.arch_of_row(
        {
            "n_embd": H,
            "n_head": HEADS,
            "n_kv_head": HEADS,
            "n_expanded_embd": I,
            "vocab_size": 51200,
            "use_gated_mlp": "True",
        },
        "g",
    )
    acc = account(arch, Cell(batch=1, q_tokens=1, context=16, tp=1, dtype="float16", engine="vllm"))
    dt = roofline.device_time(acc, a100, rl)
    gemms = [o for o in acc.ops if o.family == "gemm"]
    assert {o.name for o in gemms} >= {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}
    for o in gemms:
        by_hand = o.count * (
            o.kernels * g.t_min_ns
            + 1e9
            * smooth_max(o.flops / (a100.peak("float16") * g.e_c), o.bytes / (a100.mem_bw_bytes_per_s * g.e_m), g.q)
        )
        assert dt.per_op_ns[o.name] == pytest.approx(float(by_hand), rel=1e-9), o.name
