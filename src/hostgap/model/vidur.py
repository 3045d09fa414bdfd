"""Reading vidur's measured A100 profiles (microsoft/vidur, MIT) into model samples.

- ``*_mlp.csv``: per-op GPU kernel time (ms; min/max/mean/median/std over repeats) of each
  token-level op of one transformer layer vs ``num_tokens`` and TP degree
  (``num_tensor_parallel_workers``), with the model dimensions on every row.
- ``all_reduce.csv``: all-reduce time (ms) vs message ``size`` (bytes) and ``num_workers``,
  ``devices_per_node``.

Each vidur op maps to one op of :func:`hostgap.model.accounting.account` (vLLM kernels), so
the validation exercises the accounting and the roofline together. The **median** time is
used (robust to the occasional slow repeat).

Models vidur profiles differ in two ways the reader follows (vidur's ``mlp_impl.py``):

- ``use_gated_mlp`` False (phi-2): the up projection is h -> i, not h -> 2i, and the
  activation (GELU) reads i values per token, not 2i.
- A block without a post-attention norm (phi-2's parallel attention + MLP; its file has no
  ``post_attention_layernorm`` column) ends with ``attn + mlp + residual``: two elementwise
  kernels, so vidur's ``add`` there is two kernels moving twice the bytes of one residual add.

Op columns other than the four GEMMs may be absent; a row contributes the ops its file has.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.accounting import Cell, account
from hostgap.model.arch import Arch
from hostgap.model.devices import DeviceSpec
from hostgap.model.roofline import OpSamples

VIDUR_OPS = {
    "emb": "embed",
    "input_layernorm": "input_norm",
    "attn_pre_proj": "qkv_proj",
    "attn_rope": "rope",
    "attn_post_proj": "o_proj",
    "post_attention_layernorm": "post_norm",
    "mlp_up_proj": "gate_up_proj",
    "mlp_act": "act",
    "mlp_down_proj": "down_proj",
    "add": "residual_add",
}
"""vidur op name -> hostgap accounting op name."""

GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")

_DIMS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "num_tokens", "num_tensor_parallel_workers")


def _read_rows(path: str | Path, required: tuple) -> list[dict]:
    p = Path(path)
    try:
        with p.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise HostgapError(str(p), f"cannot read: {e.strerror}") from None
    if not rows:
        raise HostgapError(str(p), "no rows")
    missing = [c for c in required if c not in rows[0]]
    if missing:
        raise HostgapError(str(p), f"not a vidur profile: missing columns {', '.join(missing)}")
    return rows


def arch_of_row(row: dict, name: str) -> Arch:
    """The one-layer architecture a vidur row was measured on (rotary, one embedding row per token)."""
    h, heads = int(row["n_embd"]), int(row["n_head"])
    gated = str(row.get("use_gated_mlp", "True")).strip().lower()
    if gated not in ("true", "false"):
        raise HostgapError(name, f"use_gated_mlp must be True or False, got {row.get('use_gated_mlp')!r}")
    return Arch(
        name=name,
        family="llama",
        hidden=h,
        layers=1,
        heads=heads,
        kv_heads=int(row["n_kv_head"]),
        head_dim=h // heads,
        intermediate=int(row["n_expanded_embd"]),
        vocab=int(row["vocab_size"]),
        tied_embeddings=False,
        gated_mlp=gated == "true",
    )


def _ops_in(path, header, stat: str) -> list[str]:
    """The vidur ops this file times (the four GEMMs are required)."""
    have = [op for op in VIDUR_OPS if f"time_stats.{op}.{stat}" in header]
    missing = [f"time_stats.{op}.{stat}" for op in GEMM_OPS if op not in have]
    if missing:
        raise HostgapError(str(path), f"not a vidur profile: missing columns {', '.join(missing)}")
    return have


def read_mlp(
    path: str | Path, device: DeviceSpec, group: str | None = None, stat: str = "median", dtype: str = "float16"
) -> OpSamples:
    """One sample per (row, vidur op): accounting FLOPs/bytes for that op, measured time.

    ``key`` is the vidur op name. vidur profiles fp16 (``dtype``).
    """
    rows = _read_rows(path, _DIMS)
    ops = _ops_in(path, rows[0], stat)
    # no post-attention norm: a parallel block whose "add" is attn + mlp + residual (two kernels)
    add_kernels = 1.0 if "post_attention_layernorm" in ops else 2.0
    group = group or Path(path).stem
    cols: dict[str, list] = {c: [] for c in ("key", "flops", "bytes", "kernels", "time_ns", "tokens")}
    cache = {}
    for r in rows:
        k, T = _int(path, r, "num_tensor_parallel_workers"), _int(path, r, "num_tokens")
        ck = (k, T)
        if ck not in cache:
            for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size"):
                _int(path, r, c)
            arch = arch_of_row(r, group)
            cache[ck] = account(arch, Cell(batch=1, q_tokens=T, context=T, tp=k, dtype=dtype, engine="vllm"))
        acc = cache[ck]
        for vop in ops:
            o = acc.op(VIDUR_OPS[vop])
            n = add_kernels if vop == "add" else 1.0  # otherwise one kernel per op (vLLM fused kernels)
            cols["key"].append(vop)
            cols["flops"].append(o.flops * n)
            cols["bytes"].append(o.bytes * n)
            cols["kernels"].append(n)
            cols["time_ns"].append(_time_ns(path, r, f"time_stats.{vop}.{stat}"))
            cols["tokens"].append(T)
    n = len(cols["key"])
    return OpSamples(
        key=np.array(cols["key"]),
        flops=np.array(cols["flops"]),
        bytes=np.array(cols["bytes"]),
        kernels=np.array(cols["kernels"]),
        peak_flops=np.full(n, device.peak(dtype)),
        bw_bytes_per_s=np.full(n, device.mem_bw_bytes_per_s),
        time_ns=np.array(cols["time_ns"]),
        group=np.full(n, group),
        tokens=np.array(cols["tokens"]),
    )


def _int(path, row: dict, col: str) -> int:
    """A positive integer column of a vidur row; one line naming the file and column otherwise."""
    try:
        v = int(row[col])
    except (TypeError, ValueError):
        raise HostgapError(str(path), f"{col} is not an integer: {row[col]!r}") from None
    if v <= 0:
        raise HostgapError(str(path), f"{col} must be a positive integer, got {v}")
    return v


def _time_ns(path, row: dict, col: str) -> float:
    try:
        t = float(row[col]) * 1e6
    except (TypeError, ValueError):
        raise HostgapError(str(path), f"{col} is not a number: {row[col]!r}") from None
    if not t > 0:
        raise HostgapError(str(path), f"{col} must be a positive time in ms, got {row[col]!r}")
    return t


@dataclass(frozen=True)
class AllReduceSamples:
    size_bytes: np.ndarray
    workers: np.ndarray
    devices_per_node: np.ndarray
    time_ns: np.ndarray

    def take(self, mask) -> AllReduceSamples:
        return AllReduceSamples(
            self.size_bytes[mask], self.workers[mask], self.devices_per_node[mask], self.time_ns[mask]
        )

    def __len__(self) -> int:
        return len(self.time_ns)


def read_all_reduce(path: str | Path, stat: str = "median") -> AllReduceSamples:
    col = f"time_stats.all_reduce.{stat}"
    rows = _read_rows(path, ("size", "num_workers", "devices_per_node", col))
    return AllReduceSamples(
        np.array([float(r["size"]) for r in rows]),
        np.array([int(r["num_workers"]) for r in rows]),
        np.array([int(r["devices_per_node"]) for r in rows]),
        np.array([float(r[col]) * 1e6 for r in rows]),
    )


GEMM_FAMILY = "gemm"
GEMM_KEYS = (*(VIDUR_OPS[o] for o in GEMM_OPS), GEMM_FAMILY)
"""Keys a GEMM row of :func:`as_hostgap_ops` can carry (its op name, or the family)."""


def as_hostgap_ops(s: OpSamples, gemm_key: str | None = GEMM_FAMILY) -> OpSamples:
    """The same samples keyed for a fit that plugs into ``device_time``.

    Other ops keep their hostgap op name. The four GEMMs are keyed by their family (``"gemm"``),
    so a fit gives them one ``t_min``, ``e_c``, ``e_m`` and q, which ``device_time`` applies to
    every GEMM of a step (lm_head included) through the family fallback: the projections run the
    same cuBLAS kernels, whose fixed latency and achieved fractions of the peaks follow the
    shape (FLOPs, bytes), not the role of the matrix. Per-op keys (``gemm_key=None``) give each
    projection its own four parameters, which then absorb the fitted model's shapes (on vidur's
    A100 Llama rows: ``t_min`` 7.4-7.6 us for QKV and gate+up, 4.0-4.7 us for O and down) and
    carry worse to another model (docs/models.md, held-out H100 and phi-2).
    """
    names = np.array([VIDUR_OPS[str(k)] for k in s.key])
    key = names if gemm_key is None else np.where(np.isin(s.key, GEMM_OPS), gemm_key, names)
    return OpSamples(key, s.flops, s.bytes, s.kernels, s.peak_flops, s.bw_bytes_per_s, s.time_ns, s.group, s.tokens)


TOKEN_RANGES = ((1, 64, "decode-sized, T <= 64"), (65, 512, "64 < T <= 512"), (513, 1 << 30, "T > 512"))


def validate_cross_model(calibrate: OpSamples, score: OpSamples, keyed_by: str = "op") -> dict:
    """Fit on one model's rows, score on the other's: Metrics per op, per family, overall.

    ``keyed_by="family"`` fits one efficiency set for all four GEMMs (and one per other op).
    """
    from hostgap.model import roofline

    def rekey(s: OpSamples) -> OpSamples:
        if keyed_by == "op":
            return s
        key = np.where(np.isin(s.key, GEMM_OPS), "gemm", s.key)
        return OpSamples(key, s.flops, s.bytes, s.kernels, s.peak_flops, s.bw_bytes_per_s, s.time_ns, s.group, s.tokens)

    # vidur profile rows (read_mlp) carry the model they come from in ``group``
    model = roofline.fit(rekey(calibrate), source=f"vidur {cast(np.ndarray, calibrate.group)[0]}", keyed_by="op")
    pred = roofline.predict(model, rekey(score))
    out = {}
    for op in np.unique(score.key):
        m = score.key == op
        out[str(op)] = roofline.error_metrics(pred[m], score.time_ns[m])
    g = np.isin(score.key, GEMM_OPS)
    out["gemm (all four)"] = roofline.error_metrics(pred[g], score.time_ns[g])
    if score.tokens is not None:
        for lo, hi, label in TOKEN_RANGES:
            m = g & (score.tokens >= lo) & (score.tokens <= hi)
            out[f"gemm, {label}"] = roofline.error_metrics(pred[m], score.time_ns[m])
    out["other ops"] = roofline.error_metrics(pred[~g], score.time_ns[~g])
    out["overall"] = roofline.error_metrics(pred, score.time_ns)
    return {"model": model, "metrics": out}
