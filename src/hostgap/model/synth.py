"""Synthetic co-batched steps with known ground truth, for testing attribution.

Step times follow the METHOD.md §8 form exactly (two segments per class, split on Σp), with
multiplicative noise; each step's time is the sum of a host part (a per-step constant plus a
per-request cost: scheduling, sampling, IPC) and a device part (the rest), so the host/device
split has a truth too. The default coefficients are in the range of an 8B model on one H100-class
GPU under an eager engine; they are test fixtures, not measurements.

>>> from hostgap.model.synth import synth_steps
>>> data = synth_steps(400, seed=1)
>>> len(data.steps), data.steps.requests is not None
(400, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hostgap.model.steptable.files import Requests, Steps

# Coefficient order everywhere: beta, a1 (Σp), a2 (Σc), a3 (Σp²), a4 (|B|), a5 (Σp·c); ns.
PREFILL_TRUTH = (
    (512.0, (4.0e6, 6.0e3, 15.0, 2.0, 120.0e3, 0.01)),  # Σp <= 512: memory-bound
    (np.inf, (2.5e6, 22.0e3, 15.0, 4.0, 150.0e3, 0.02)),  # compute-bound
)
DECODE_TRUTH = (
    (64.0, (7.0e6, 0.0, 30.0, 0.0, 60.0e3, 0.0)),  # |B| <= 64: weight reads dominate
    (np.inf, (5.0e6, 0.0, 30.0, 0.0, 110.0e3, 0.0)),
)
HOST_TRUTH = (3.0e6, 45.0e3)  # host part: per step, per request (inside beta and a4 above)


@dataclass(frozen=True)
class SynthData:
    """Generated steps and the coefficients that produced them."""

    steps: Steps
    truth: dict = field(default_factory=dict)  # class -> ((sum_p_max, coef6), ...)
    host_truth: tuple[float, float] = HOST_TRUTH
    noise: float = 0.0


def synth_steps(
    n_steps: int = 600,
    *,
    seed: int = 0,
    noise: float = 0.01,
    decode_fraction: float = 0.6,
    context: str = "varied",
    max_batch: int = 256,
    source: str = "synth",
    prefill_truth=PREFILL_TRUTH,
    decode_truth=DECODE_TRUTH,
    host_truth=HOST_TRUTH,
) -> SynthData:
    """``n_steps`` steps, a ``decode_fraction`` of them decode-only.

    ``context="varied"`` draws KV lengths log-uniformly over 64..32k tokens (where token-count
    models fail); ``"fixed"`` gives every decode request 1024 tokens of context.
    """
    rng = np.random.default_rng(seed)
    is_dec = rng.random(n_steps) < decode_fraction
    rows = [(_decode_step(rng, context, max_batch) if d else _prefill_step(rng, context)) for d in is_dec]
    counts = np.array([len(r[0]) for r in rows])
    p = np.concatenate([r[0] for r in rows]).astype(np.float64)
    c = np.concatenate([r[1] for r in rows]).astype(np.float64)
    pre = np.concatenate([r[2] for r in rows])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    owner = np.repeat(np.arange(n_steps), counts)
    # per-step request aggregates, each a Steps column of that name (typed Any: passed as **agg)
    agg: dict[str, Any] = {
        "n_requests": counts.astype(np.float64),
        "n_prefill": np.bincount(owner, weights=pre.astype(float), minlength=n_steps),
        "sum_p": np.bincount(owner, weights=p, minlength=n_steps),
        "sum_c": np.bincount(owner, weights=c, minlength=n_steps),
        "sum_pp": np.bincount(owner, weights=p * p, minlength=n_steps),
        "sum_pc": np.bincount(owner, weights=p * c, minlength=n_steps),
    }
    X = np.column_stack([np.ones(n_steps), agg["sum_p"], agg["sum_c"], agg["sum_pp"], agg["n_requests"], agg["sum_pc"]])
    prefill_cls = (agg["n_prefill"] > 0) | (agg["sum_p"] > agg["n_requests"])
    total = np.where(prefill_cls, _piecewise(X, prefill_truth), _piecewise(X, decode_truth))
    host = host_truth[0] + host_truth[1] * agg["n_requests"]
    device = total - host
    if (device <= 0).any():
        raise ValueError("truth gives a non-positive device time: host_truth too large")
    host = host * np.exp(noise * rng.standard_normal(n_steps))
    device = device * np.exp(noise * rng.standard_normal(n_steps))
    wall = np.round(host + device)
    steps = Steps(
        sources=(source,),
        source_idx=np.zeros(n_steps, np.int32),
        step=np.arange(n_steps, dtype=np.int64),
        wall_ns=wall,
        gpu_active_ns=np.round(device),
        host_exposed_ns=wall - np.round(device),
        host_wait_ns=np.full(n_steps, np.nan),
        queued=np.zeros(n_steps, bool),
        requests=Requests(offsets, np.array([f"r{i}" for i in range(len(p))], dtype=object), p, c, pre),
        origin=f"synth(seed={seed})",
        **agg,
    )
    return SynthData(steps, {"prefill": prefill_truth, "decode": decode_truth}, host_truth, noise)


def _piecewise(X: np.ndarray, truth) -> np.ndarray:
    out = np.zeros(len(X))
    lo = -np.inf
    for hi, coef in truth:
        m = (X[:, 1] > lo) & (X[:, 1] <= hi)
        out[m] = X[m] @ np.asarray(coef)
        lo = hi
    return out


def _loguniform_int(rng, lo: float, hi: float, n: int) -> np.ndarray:
    return np.round(np.exp(rng.uniform(np.log(lo), np.log(hi), n))).astype(np.int64)


def _decode_contexts(rng, context: str, n: int) -> np.ndarray:
    if context == "fixed":
        return np.full(n, 1024, np.int64)
    return _loguniform_int(rng, 64, 32768, n)


def _decode_step(rng, context: str, max_batch: int):
    b = int(_loguniform_int(rng, 1, max_batch, 1)[0])
    return np.ones(b, np.int64), _decode_contexts(rng, context, b), np.zeros(b, bool)


def _prefill_step(rng, context: str):
    n_ctx = int(rng.integers(1, 5))
    q = _loguniform_int(rng, 16, 2048, n_ctx)
    cached = np.where(rng.random(n_ctx) < 0.5, 0, _loguniform_int(rng, 16, 8192, n_ctx))
    n_gen = int(rng.integers(0, 33)) if rng.random() < 0.6 else 0
    gen_c = _decode_contexts(rng, context, n_gen)
    p = np.concatenate([q, np.ones(n_gen, np.int64)])
    c = np.concatenate([q + cached, gen_c])
    pre = np.concatenate([np.ones(n_ctx, bool), np.zeros(n_gen, bool)])
    return p, c, pre
