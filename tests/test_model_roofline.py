"""Roofline device-time model: bandwidth vs peak, fitting recovers coefficients, vidur accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import TRACES
from hostgap.errors import HostgapError
from hostgap.model import roofline, vidur
from hostgap.model.accounting import account, decode_cell
from hostgap.model.arch import get_preset
from hostgap.model.devices import BUILTIN, find_device, load_device_file
from hostgap.model.roofline import Efficiency, OpSamples, op_time_ns

VIDUR = TRACES / "vidur"


def test_memory_bound_op_follows_bandwidth_not_peak():
    # a decode GEMV: 1 GB of weights, 2 GFLOP
    t = op_time_ns(2e9, 1e9, 1e15, 2e12, 5_000, 0.7, 0.8)
    assert t == pytest.approx(5_000 + 1e9 / (2e12 * 0.8) * 1e9)
    assert op_time_ns(2e9, 1e9, 1e16, 2e12, 5_000, 0.7, 0.8) == pytest.approx(t)  # 10x peak: same
    faster = op_time_ns(2e9, 1e9, 1e15, 4e12, 5_000, 0.7, 0.8)
    assert faster - 5_000 == pytest.approx((t - 5_000) / 2)  # 2x bandwidth: half the time


def test_compute_bound_op_follows_peak():
    t1 = op_time_ns(1e13, 1e8, 1e15, 2e12, 0, 0.7, 0.8)
    t2 = op_time_ns(1e13, 1e8, 2e15, 2e12, 0, 0.7, 0.8)
    assert t2 == pytest.approx(t1 / 2)


def test_decode_step_on_h200_is_faster_than_h100_by_bandwidth():
    acc = account(get_preset("llama-3.1-8b"), decode_cell(1, 2048))
    m = roofline.default_model("x")
    h100 = roofline.device_time(acc, find_device("h100"), m).total_ns
    h200 = roofline.device_time(acc, find_device("h200"), m).total_ns
    gemm_h100 = sum(v for k, v in roofline.device_time(acc, find_device("h100"), m).per_op_ns.items())
    assert h200 < h100 and gemm_h100 == pytest.approx(h100)
    assert roofline.device_time(acc, find_device("h100"), m).bound["gate_up_proj"] == "memory"


def _synthetic(true: Efficiency, n=300, noise=0.03, seed=1) -> OpSamples:
    rng = np.random.default_rng(seed)
    tokens = np.unique(np.geomspace(1, 16384, n).astype(int))
    k, m = 4096, 14336
    flops, bytes_ = 2.0 * tokens * k * m, 2.0 * (k * m + tokens * (k + m))
    peak, bw = np.full(len(tokens), 312e12), np.full(len(tokens), 2.0e12)
    t = op_time_ns(flops, bytes_, peak, bw, true.t_min_ns, true.e_c, true.e_m)
    t = t * (1 + noise * rng.standard_normal(len(t)))
    return OpSamples(np.full(len(t), "gemm"), flops, bytes_, np.ones(len(t)), peak, bw, t)


def test_fit_recovers_known_coefficients_from_noisy_data():
    true = Efficiency(7_000.0, 0.72, 0.83)
    m = roofline.fit(_synthetic(true), keyed_by="family")
    got = m.efficiencies["gemm"]
    assert got.e_c == pytest.approx(true.e_c, rel=0.03)
    assert got.e_m == pytest.approx(true.e_m, rel=0.03)
    assert got.t_min_ns == pytest.approx(true.t_min_ns, rel=0.25)
    held = _synthetic(true, seed=2)
    assert roofline.evaluate(m, held)["overall"].mape < 0.04


def test_device_table_has_required_devices_with_sources():
    for name in ("h100-sxm", "h200", "a100-80gb", "b200", "l40s", "mi300x", "cpu"):
        d = BUILTIN[name]
        assert d.peak("bfloat16") > 0 and d.mem_bw_bytes_per_s > 0 and d.mem_bytes > 0
        assert set(d.sources) >= {"peak_flops", "mem_bw_bytes_per_s", "mem_bytes", "interconnect_bw_bytes_per_s"}
        assert all(d.sources.values())
    assert find_device("NVIDIA H200").name == "h200"
    assert find_device("NVIDIA H100 80GB HBM3").name == "h100-sxm"
    assert find_device("a100").peak("fp8") == find_device("a100").peak("bfloat16")  # no FP8 units


def test_user_device_file_json_and_toml(tmp_path):
    entry = {
        "name": "rtx-4090",
        "aliases": ["NVIDIA GeForce RTX 4090"],
        "peak_flops": {"bfloat16": 165.2e12},
        "mem_bw_bytes_per_s": 1.008e12,
        "mem_bytes": 24e9,
        "interconnect_bw_bytes_per_s": 64e9,
        "source": "Ada whitepaper",
    }
    pj = tmp_path / "d.json"
    pj.write_text(json.dumps({"devices": [entry]}))
    devs = load_device_file(pj)
    assert find_device("NVIDIA GeForce RTX 4090", devs).mem_bw_bytes_per_s == 1.008e12
    pt = tmp_path / "d.toml"
    pt.write_text(
        '[[devices]]\nname = "x1"\npeak_flops = { bfloat16 = 1e14 }\nmem_bw_bytes_per_s = 1e12\n'
        'mem_bytes = 1e10\ninterconnect_bw_bytes_per_s = 1e10\nsource = "measured"\n'
    )
    assert load_device_file(pt)["x1"].sources["mem_bytes"] == "measured"
    bad = dict(entry)
    del bad["source"]
    pj.write_text(json.dumps({"devices": [bad]}))
    with pytest.raises(HostgapError, match="no source"):
        load_device_file(pj)
    pj.write_text("{")
    with pytest.raises(HostgapError, match="not valid JSON"):
        load_device_file(pj)


@pytest.fixture(scope="module")
def vidur_samples():
    a, b = VIDUR / "a100_llama3-8b_mlp.csv", VIDUR / "a100_llama2-7b_mlp.csv"
    if not (a.exists() and b.exists()):
        pytest.skip(f"vidur profiles not found under {VIDUR} (shared trace corpus absent)")
    dev = find_device("a100-80gb")
    return vidur.read_mlp(a, dev, "llama3-8b"), vidur.read_mlp(b, dev, "llama2-7b")


def _report(name, res):
    rows = [
        f"{k:26s} MAPE {m.mape * 100:5.1f} %  p90 {m.p90_error * 100:5.1f} %  max {m.max_error * 100:5.1f} %"
        for k, m in res["metrics"].items()
    ]
    print(f"\n{name}\n" + "\n".join(rows))


@pytest.mark.parametrize("direction", ["llama3-8b->llama2-7b", "llama2-7b->llama3-8b"])
def test_vidur_cross_model_accuracy(vidur_samples, direction):
    s3, s2 = vidur_samples
    cal, score = (s3, s2) if direction.startswith("llama3") else (s2, s3)
    res = vidur.validate_cross_model(cal, score)
    _report(f"{direction} (per-op fit)", res)
    m = res["metrics"]
    for op in vidur.GEMM_OPS:
        assert m[op].mape <= 0.10, (op, m[op])
    assert m["gemm (all four)"].mape <= 0.10
    assert m["overall"].mape <= 0.15
    assert m["gemm, decode-sized, T <= 64"].mape <= 0.10  # the decode regime, thanks to band weights
    # near the ridge point the joined roofs (fitted q) hold 9 %; the sharp max gave 14 %
    assert m["gemm, 64 < T <= 512"].mape <= 0.11
    assert m["gemm (all four)"].mape <= 0.08
    shared = vidur.validate_cross_model(cal, score, keyed_by="family")
    _report(f"{direction} (one efficiency set for all GEMMs)", shared)
    assert shared["metrics"]["gemm (all four)"].mape <= 0.20


def test_vidur_fitted_gemm_efficiencies_match_the_documented_defaults(vidur_samples):
    s3, s2 = vidur_samples
    both = OpSamples(
        *(
            np.concatenate([getattr(s3, f), getattr(s2, f)])
            for f in ("key", "flops", "bytes", "kernels", "peak_flops", "bw_bytes_per_s", "time_ns", "group", "tokens")
        )
    )
    key = np.where(np.isin(both.key, vidur.GEMM_OPS), "gemm", both.key)
    m = roofline.fit(
        OpSamples(
            key,
            *(
                getattr(both, f)
                for f in ("flops", "bytes", "kernels", "peak_flops", "bw_bytes_per_s", "time_ns", "group", "tokens")
            ),
        )
    )
    g, d = m.efficiencies["gemm"], roofline.DEFAULT_EFFICIENCY["gemm"]
    print("\nvidur all-rows GEMM fit:", g)
    assert g.e_c == pytest.approx(d.e_c, abs=0.1)
    assert g.e_m == pytest.approx(d.e_m, abs=0.15)


def test_vidur_reader_rejects_other_csv(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(HostgapError, match="not a vidur profile"):
        vidur.read_mlp(p, find_device("a100"))


def test_cli_fit_measured_runs_with_an_all_reduce_file(tmp_path):
    from click.testing import CliRunner

    from hostgap.cli import cli
    from hostgap.model.fitting.measured import load_model
    from test_model_stepmodel import _results, _write

    ar = VIDUR / "a100_dgx_all_reduce.csv"
    if not ar.exists():
        pytest.skip(f"vidur profiles not found under {VIDUR}")
    paths = _write(tmp_path, _results(batches=(1, 2, 4), prompts=(128,)))
    out = tmp_path / "m.json"
    r = CliRunner().invoke(cli, ["fit", *paths, "--all-reduce", str(ar), "-o", str(out)])
    assert r.exit_code == 2 and "--all-reduce: needs --device" in r.output  # never assumed
    assert not out.exists()
    r = CliRunner().invoke(cli, ["fit", *paths, "--all-reduce", str(ar), "--device", "a100", "-o", str(out)])
    assert r.exit_code == 0, r.output
    m = load_model(out)
    assert set(m.all_reduce.latency_ns) == {2, 4, 8} and len(m.provenance["kernel_data_sha256"]) == 1


def test_cli_fit_on_vidur_files_then_predict_on_a100(tmp_path):
    from click.testing import CliRunner

    from hostgap.cli import cli
    from hostgap.model.fitting.measured import load_model

    files = [VIDUR / "a100_llama3-8b_mlp.csv", VIDUR / "a100_llama2-7b_mlp.csv", VIDUR / "a100_dgx_all_reduce.csv"]
    if not all(f.exists() for f in files):
        pytest.skip(f"vidur profiles not found under {VIDUR}")
    out = tmp_path / "a100.json"
    r = CliRunner().invoke(cli, ["fit", "--vidur-mlp", str(files[0]), "--all-reduce", str(files[2])])
    assert r.exit_code == 2 and "needs --device" in r.output  # which GPU measured them is never assumed
    r = CliRunner().invoke(
        cli,
        [
            "fit",
            "--vidur-mlp",
            str(files[0]),
            "--device",
            "a100",
            "--test-mlp",
            str(files[1]),
            "--all-reduce",
            str(files[2]),
            "-o",
            str(out),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (t,) = doc["tests"]  # the held-out model, scored by a fit that never saw it
    assert set(t) == {"file", "device", "gemm_mape_pct", "op_mape_pct", "max_err_pct", "rows"}
    assert t["file"] == files[1].name and t["device"] == "a100-80gb" and t["rows"] == 10 * 1044
    assert t["gemm_mape_pct"] <= 10.0 and t["op_mape_pct"] <= 15.0  # cross-model on the same GPU
    m = load_model(out)
    effs = m.roofline_for("a100-80gb").efficiencies
    assert effs["gemm"].e_m > 0.5 and "gate_up_proj" not in effs  # one set for the four GEMMs
    assert len(m.provenance["kernel_data_sha256"]) == 2 and set(m.all_reduce.latency_ns) == {2, 4, 8}
    r = CliRunner().invoke(
        cli, ["predict", "llama-3.1-8b", "--gpu", "a100", "--model", str(out), "--json", "--what-if", "tp=2"]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert "measured on a100-80gb" in d["basis"]
    assert d["what_ifs"][0]["scenario"]["collective_ns"] > 0
    r = CliRunner().invoke(cli, ["predict", "llama-3.1-8b", "--gpu", "h100", "--model", str(out), "--json"])
    assert "fitted on a100-80gb applied to h100-sxm" in json.loads(r.stdout)["basis"]


HELD_OUT = Path(__import__("os").environ.get("HOSTGAP_VIDUR_HELDOUT", "/nonexistent"))


def test_held_out_h100_and_phi2_profiles_meet_the_targets(tmp_path):
    """vidur's H100 and A100 phi-2 profiles (docs/models.md lists their paths and commits; not in
    the repository): set HOSTGAP_VIDUR_HELDOUT to the folder holding them. The fit sees only the
    A100 Llama files; targets: GEMM MAPE <= 10 % on the other GPU and on the other model."""
    from click.testing import CliRunner

    from hostgap.cli import cli

    fit = [VIDUR / "a100_llama3-8b_mlp.csv", VIDUR / "a100_llama2-7b_mlp.csv"]
    h100, a100 = HELD_OUT / "h100_phi-2_mlp.csv", HELD_OUT / "a100_phi-2_mlp.csv"
    if not all(f.exists() for f in [*fit, h100, a100]):
        pytest.skip("vidur A100 Llama files or the held-out phi-2 files (HOSTGAP_VIDUR_HELDOUT) not found")
    base = [
        "fit",
        "--vidur-mlp",
        str(fit[0]),
        "--vidur-mlp",
        str(fit[1]),
        "--device",
        "a100",
        "--json",
        "-o",
        str(tmp_path / "m.json"),
    ]
    scores = {}
    for f, dev in ((h100, "h100"), (a100, "a100")):
        r = CliRunner().invoke(cli, [*base, "--test-mlp", str(f), "--test-device", dev])
        assert r.exit_code == 0, r.output
        (scores[dev],) = json.loads(r.stdout)["tests"]
    assert scores["h100"]["device"] == "h100-sxm" and scores["h100"]["rows"] == 261 * 9
    assert scores["h100"]["gemm_mape_pct"] <= 10.0  # other GPU, other model
    assert scores["a100"]["gemm_mape_pct"] <= 10.0  # same GPU, other model
