"""Device-time model: per op ``t_min + smax_q(FLOPs / (peak e_c), bytes / (BW e_m))``.

METHOD.md §7. ``t_min`` is the fixed per-kernel latency (launch-to-first-byte, tail): it is
what a 1-token projection at TP-8 pays beyond its bandwidth time. ``e_c`` and ``e_m`` are the
achieved fractions of the datasheet peak FLOP/s and memory bandwidth. ``smax_q(c, m) =
(c^q + m^q)^(1/q)`` joins the two roofs: q = inf is the sharp roofline ``max(c, m)``; a finite
q says a kernel near the ridge point is slower than either roof alone (it neither streams its
weights at full bandwidth nor keeps its tensor cores busy). All four are fitted from measured
kernel times (:func:`fit`), per op or per op family; nothing is assumed except the documented
defaults used when no fit is given (:data:`DEFAULT_EFFICIENCY`, sharp).

A memory-bound op's time follows bandwidth: 1 GB at 2 TB/s x 0.8 is 625 us whatever the peak
FLOP/s; a compute-bound one follows the peak.

Collective ops are not timed here (see :mod:`hostgap.model.tp`): they are GPU-busy time that
includes waiting for the slowest rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hostgap.model.accounting import Account
from hostgap.model.devices import DeviceSpec


@dataclass(frozen=True)
class Efficiency:
    """Fitted (or default) parameters of one op family on one device."""

    t_min_ns: float
    e_c: float
    e_m: float
    q: float = math.inf  # roof sharpness: inf is max(compute, memory)

    def to_dict(self) -> dict:
        d = {"t_min_ns": self.t_min_ns, "e_c": self.e_c, "e_m": self.e_m}
        if math.isfinite(self.q):  # JSON has no infinity: absent means sharp
            d["q"] = self.q
        return d


DEFAULT_EFFICIENCY: dict[str, Efficiency] = {
    # Rounded from the per-family fit (band-weighted) on vidur's A100 kernel times
    # (Llama-3-8B and Llama-2-7B rows, all TP degrees; docs/models.md). Attention has no vidur rows: decode
    # attention kernels read the KV cache at roughly 60 % of peak bandwidth (FlashDecoding /
    # paged attention reports), 5 us floor.
    "gemm": Efficiency(5_600.0, 0.68, 0.78),
    "attention": Efficiency(5_000.0, 0.5, 0.6),
    "norm": Efficiency(3_600.0, 0.5, 0.38),
    "elementwise": Efficiency(2_500.0, 0.5, 0.60),
    "gather": Efficiency(3_900.0, 0.5, 0.15),
    "quant": Efficiency(2_500.0, 0.5, 0.5),
    "collective": Efficiency(10_000.0, 1.0, 0.5),
}
"""Used when no fitted model is given; ``hostgap predict`` says so when it uses them."""


@dataclass(frozen=True)
class RooflineModel:
    """Per-key efficiencies (key: op name, else op family) for one device."""

    device: str
    efficiencies: dict  # key -> Efficiency
    source: str = "default"  # "default" or a description of the fit
    keyed_by: str = "family"  # "family" or "op"

    def efficiency(self, name: str, family: str) -> Efficiency:
        e = self.efficiencies.get(name) if self.keyed_by == "op" else None
        return e or self.efficiencies.get(family) or DEFAULT_EFFICIENCY.get(family) or DEFAULT_EFFICIENCY["elementwise"]

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "source": self.source,
            "keyed_by": self.keyed_by,
            "efficiencies": {k: v.to_dict() for k, v in self.efficiencies.items()},
        }

    @staticmethod
    def from_dict(d: dict) -> RooflineModel:
        return RooflineModel(
            d["device"],
            {k: Efficiency(**v) for k, v in d["efficiencies"].items()},
            d.get("source", "fitted"),
            d.get("keyed_by", "family"),
        )


def default_model(device: str) -> RooflineModel:
    return RooflineModel(device, dict(DEFAULT_EFFICIENCY), "default efficiencies (docs/models.md)")


def smooth_max(a, b, q):
    """``(a^q + b^q)^(1/q)`` for a, b >= 0, computed as ``hi (1 + (lo/hi)^q)^(1/q)`` (no overflow).

    q = inf gives ``max(a, b)``; q = 1 the sum. Between the two it exceeds the max most where
    a = b (by 2^(1/q)).
    """
    a, b, q = np.asarray(a, float), np.asarray(b, float), np.asarray(q, float)
    hi, lo = np.maximum(a, b), np.minimum(a, b)
    ratio = np.divide(lo, hi, out=np.zeros(np.broadcast(lo, hi).shape), where=hi > 0)
    with np.errstate(over="ignore", under="ignore"):
        excess = np.where(np.isinf(q), 1.0, (1.0 + ratio ** np.where(np.isinf(q), 1.0, q)) ** (1.0 / q))
    return hi * excess


def op_time_ns(flops, bytes_, peak_flops, bw_bytes_per_s, t_min_ns, e_c, e_m, kernels=1.0, q=math.inf):
    """Vectorised roofline time of op instances in ns (see the module docstring)."""
    flops, bytes_ = np.asarray(flops, float), np.asarray(bytes_, float)
    compute = flops / (np.asarray(peak_flops, float) * np.asarray(e_c, float))
    memory = bytes_ / (np.asarray(bw_bytes_per_s, float) * np.asarray(e_m, float))
    return np.asarray(kernels, float) * np.asarray(t_min_ns, float) + 1e9 * smooth_max(compute, memory, q)


@dataclass(frozen=True)
class DeviceTime:
    """Predicted GPU time of one step on one rank, split by op."""

    total_ns: float  # compute ops only; collectives are reported apart
    per_op_ns: dict  # op name -> ns per step (count x instance)
    bound: dict  # op name -> "compute" | "memory"
    collective_bytes: float = 0.0
    collective_ops: int = 0

    def to_dict(self) -> dict:
        return {
            "total_ns": self.total_ns,
            "per_op_ns": self.per_op_ns,
            "bound": self.bound,
            "collective_bytes": self.collective_bytes,
            "collective_ops": self.collective_ops,
        }


def device_time(acc: Account, device: DeviceSpec, model: RooflineModel) -> DeviceTime:
    """Sum over the account's non-collective ops of count x roofline time."""
    per_op: dict[str, float] = {}
    bound: dict[str, str] = {}
    total = 0.0
    coll_bytes, coll_n = 0.0, 0
    for o in acc.ops:
        if o.family == "collective":
            coll_bytes += o.count * o.act_bytes
            coll_n += o.count
            continue
        e = model.efficiency(o.name, o.family)
        peak = device.peak(o.compute_dtype)
        t = float(
            op_time_ns(o.flops, o.bytes, peak, device.mem_bw_bytes_per_s, e.t_min_ns, e.e_c, e.e_m, o.kernels, e.q)
        )
        per_op[o.name] = per_op.get(o.name, 0.0) + o.count * t
        bound[o.name] = (
            "compute" if o.flops / (peak * e.e_c) > o.bytes / (device.mem_bw_bytes_per_s * e.e_m) else "memory"
        )
        total += o.count * t
    return DeviceTime(total, per_op, bound, coll_bytes, coll_n)


# -- fitting ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpSamples:
    """Measured op instances: one row each (arrays of equal length)."""

    key: np.ndarray  # op name or family the row calibrates
    flops: np.ndarray
    bytes: np.ndarray
    kernels: np.ndarray
    peak_flops: np.ndarray
    bw_bytes_per_s: np.ndarray
    time_ns: np.ndarray
    group: np.ndarray | None = field(default=None)  # e.g. the model the row comes from
    tokens: np.ndarray | None = field(default=None)  # tokens the op processed (for error breakdowns)

    def take(self, mask: np.ndarray) -> OpSamples:
        # the optional columns (group, tokens) stay None
        columns: list[Any] = [
            None if v is None else v[mask]
            for v in (
                self.key,
                self.flops,
                self.bytes,
                self.kernels,
                self.peak_flops,
                self.bw_bytes_per_s,
                self.time_ns,
                self.group,
                self.tokens,
            )
        ]
        return OpSamples(*columns)

    def __len__(self) -> int:
        return len(self.time_ns)


def band_weights(tokens: np.ndarray | None, n: int) -> np.ndarray:
    """Residual weights giving every factor-of-2 band of token counts the same total weight.

    Profiles sample tokens on a linear grid (vidur: 1, 2, 4, 8, 16, 24, ... 4096), so
    prefill-sized rows outnumber decode-sized ones ~20:1; unweighted, the fit would serve
    prefill and miss decode. Weights multiply residuals, hence the square root.
    """
    if tokens is None:
        return np.ones(n)
    band = np.floor(np.log2(np.maximum(tokens, 1))).astype(int)
    return np.sqrt(1.0 / np.bincount(band)[band])


Q_RANGE = (1.0, 64.0)
"""Bounds of the fitted roof sharpness: 1 (the two roofs add) to 64 (indistinguishable from max)."""


def _fit_one(s: OpSamples) -> Efficiency:
    """Least squares on log time (relative error) over log-parameters, a few starts.

    Fits t_min, e_c, e_m and the sharpness q (within :data:`Q_RANGE`; a fit at the upper
    bound is reported as the sharp roofline, q = inf).
    """
    from scipy.optimize import least_squares  # only where a model is fitted

    t = s.time_ns
    w = band_weights(s.tokens, len(t))

    def predict(p):
        return op_time_ns(
            s.flops,
            s.bytes,
            s.peak_flops,
            s.bw_bytes_per_s,
            np.exp(p[0]),
            np.exp(p[1]),
            np.exp(p[2]),
            s.kernels,
            np.exp(p[3]),
        )

    def resid(p):
        return w * (np.log(predict(p)) - np.log(t))

    lo = [np.log(1.0), np.log(1e-3), np.log(1e-3), np.log(Q_RANGE[0])]
    hi = [np.log(1e7), np.log(1.0), np.log(1.0), np.log(Q_RANGE[1])]
    best = None
    tmin0 = max(float(np.min(t / np.maximum(s.kernels, 1))) * 0.5, 10.0)
    for e0 in (0.7, 0.3, 0.05):
        for q0 in (2.0, 16.0):
            x0 = np.clip([np.log(tmin0), np.log(e0), np.log(e0), np.log(q0)], np.add(lo, 1e-9), np.subtract(hi, 1e-9))
            r = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
            if best is None or r.cost < best.cost:
                best = r
    assert best is not None  # the six starts above each gave a result
    p = np.exp(best.x)
    q = float(p[3]) if p[3] < Q_RANGE[1] * 0.999 else math.inf
    return Efficiency(float(p[0]), float(p[1]), float(p[2]), q)


def fit(samples: OpSamples, device: str = "", source: str = "fitted", keyed_by: str = "op") -> RooflineModel:
    """Per-key t_min, e_c, e_m and q minimising relative (log) error over the samples."""
    if len(samples) == 0:
        raise ValueError("no samples to fit")
    effs = {}
    for key in np.unique(samples.key):
        effs[str(key)] = _fit_one(samples.take(samples.key == key))
    return RooflineModel(device, effs, source, keyed_by)


def predict(model: RooflineModel, samples: OpSamples) -> np.ndarray:
    """Predicted time (ns) of each sample row under ``model``."""
    out = np.empty(len(samples))
    for key in np.unique(samples.key):
        m = samples.key == key
        e = model.efficiencies.get(str(key)) or DEFAULT_EFFICIENCY.get(str(key)) or DEFAULT_EFFICIENCY["elementwise"]
        out[m] = op_time_ns(
            samples.flops[m],
            samples.bytes[m],
            samples.peak_flops[m],
            samples.bw_bytes_per_s[m],
            e.t_min_ns,
            e.e_c,
            e.e_m,
            samples.kernels[m],
            e.q,
        )
    return out


@dataclass(frozen=True)
class Metrics:
    """Relative error of predictions on held-out rows."""

    n: int
    mape: float  # mean |pred - meas| / meas, as a fraction
    max_error: float  # max |pred - meas| / meas
    p90_error: float

    def to_dict(self) -> dict:
        return {"n": self.n, "mape": self.mape, "max_error": self.max_error, "p90_error": self.p90_error}


def error_metrics(pred: np.ndarray, meas: np.ndarray) -> Metrics:
    rel = np.abs(np.asarray(pred, float) - np.asarray(meas, float)) / np.asarray(meas, float)
    if rel.size == 0:
        return Metrics(0, float("nan"), float("nan"), float("nan"))
    return Metrics(int(rel.size), float(rel.mean()), float(rel.max()), float(np.quantile(rel, 0.9)))


def evaluate(model: RooflineModel, samples: OpSamples) -> dict[str, Metrics]:
    """Metrics per key and ``"overall"``."""
    pred = predict(model, samples)
    out = {
        str(k): error_metrics(pred[samples.key == k], samples.time_ns[samples.key == k]) for k in np.unique(samples.key)
    }
    out["overall"] = error_metrics(pred, samples.time_ns)
    return out
