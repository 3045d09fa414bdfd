"""vidur reader and cross-model validation (model/vidur.py): the parallel block's add counted
twice in FLOPs too, metrics per op over that op's rows only, GEMMs keyed per op or per family,
token ranges reported (mutation audit, bench/mutation.sh). CSVs are written here."""

from __future__ import annotations

import numpy as np

from hostgap.model import vidur
from hostgap.model.devices import find_device
from hostgap.model.roofline import OpSamples
from test_model_vidur import PHI_OPS, H, I, T, _by_op, _csv

A100 = find_device("a100")


def test_parallel_block_add_is_two_kernels_of_flops_too(tmp_path):
    s = vidur.read_mlp(_csv(tmp_path / "phi_mlp.csv", PHI_OPS, "False", [(T, 1)]), A100)
    add = _by_op(s)["add"]
    # one residual add reads two T x H tensors: 2 T H flops; attn + mlp + residual is two of them
    assert s.flops[add] == 2 * (2 * T * H)
    assert s.flops[_by_op(s)["mlp_up_proj"]] == 2 * T * H * I  # one kernel: counted once


def _profile(tmp_path, name, tokens):
    ms = {op: 0.004 + 0.0001 * i for i, op in enumerate(vidur.VIDUR_OPS)}
    rows = [(t, 1) for t in tokens]
    return vidur.read_mlp(_csv(tmp_path / f"{name}_mlp.csv", list(vidur.VIDUR_OPS), "True", rows, ms=ms), A100)


def test_cross_model_metrics_are_per_op_rows_and_keyed_as_asked(tmp_path):
    tokens = [1, 2, 8, 32, 100, 300, 600, 1000]
    cal, score = _profile(tmp_path, "a", tokens), _profile(tmp_path, "b", tokens[:5])
    by_op = vidur.validate_cross_model(cal, score, keyed_by="op")
    m = by_op["metrics"]
    # each op's metrics cover that op's 5 scored rows, not the other 45
    assert all(m[op].n == 5 for op in vidur.VIDUR_OPS)
    assert m["gemm (all four)"].n == 20 and m["other ops"].n == 30 and m["overall"].n == 50
    # token ranges of the scored GEMM rows: T = 1, 2, 8, 32 (4 each x 4 GEMMs), T = 100 (4)
    assert m["gemm, decode-sized, T <= 64"].n == 16 and m["gemm, 64 < T <= 512"].n == 4
    assert m["gemm, T > 512"].n == 0
    assert "attn_pre_proj" in by_op["model"].efficiencies and "gemm" not in by_op["model"].efficiencies
    fam = vidur.validate_cross_model(cal, score, keyed_by="family")
    assert "gemm" in fam["model"].efficiencies and "attn_pre_proj" not in fam["model"].efficiencies
    assert fam["metrics"]["attn_pre_proj"].n == 5  # still reported per vidur op


def test_cross_model_without_token_counts_reports_no_token_ranges(tmp_path):
    cal, score = _profile(tmp_path, "a", [1, 8, 64, 300]), _profile(tmp_path, "b", [2, 16])
    bare = OpSamples(
        score.key,
        score.flops,
        score.bytes,
        score.kernels,
        score.peak_flops,
        score.bw_bytes_per_s,
        score.time_ns,
        score.group,
        None,
    )
    m = vidur.validate_cross_model(cal, bare)["metrics"]
    assert not any(k.startswith("gemm, ") for k in m) and m["overall"].n == 20
    assert np.isfinite(m["overall"].mape)
