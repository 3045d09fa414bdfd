"""An interval's step period against what the calibrated step model expects at its load: a step
slower than the model's band is an anomaly (interference: another process on the host's cores, a
cut CPU quota, a stalled engine); a slower step that the interval's batch and prefill explain is
load, not an anomaly.

The expected period of a vLLM interval at decode batch B with P prefill tokens per step::

    expected = gpu(B) + host(B) + P · gpu_slope
    band     = expected · (1 + block_rel_err + extrapolation(B) + HOST_TOLERANCE)

``gpu`` and ``host`` are the calibration's lines (:class:`~hostgap.server.watch.estimate.Calibration`);
a prefill token is allowed what one more decode sequence adds to a step (the GPU line's slope:
the calibration, fitted on decode steps, has no prefill term of its own). The band widens by the
GPU line's held-out block error, by the extrapolation beyond the calibrated batches (both as the
share's interval), and by ``HOST_TOLERANCE`` for the host line, whose held-out error is not
measured. The interval is an anomaly when its measured period (mean ITL) lies above the band.

A :class:`Band` fitted on the server's own fault-free watched intervals (:func:`fit_band`, ``watch
--band-from``) replaces that fixed tolerance: the band's top is ``expected · exp(a + b · ln(B) +
c · prefill share + d · KV cache share + margin)``, the line fitted to ``ln(period / expected)``
and the margin the :data:`BAND_QUANTILE` quantile of its residuals. The KV cache's used share
(vLLM's ``vllm:kv_cache_usage_perc``) stands for the context the batch carries: a decode step's
attention reads every cached token of its sequences, so long contexts slow a step the batch alone
does not explain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from hostgap.errors import HostgapError
from hostgap.server.metrics import StepStats
from hostgap.server.watch.estimate import Calibration, extrapolation

HOST_TOLERANCE = 0.25
"""Relative allowance for the host line (and the step-to-step spread of the mean over an interval)."""
KEYS = ("anomaly", "anomaly_reason", "expected_period_s", "expected_period_high_s", "anomaly_basis")
BAND_QUANTILE = 0.99
"""The fitted band's top: this quantile of the fault-free intervals' residuals (false alarms
about 1 % on intervals like them)."""
BAND_MIN_INTERVALS = 20
"""Fewer fault-free intervals give no band (the quantile would rest on one or two of them)."""


@dataclass(frozen=True)
class Band:
    """The band fitted on a server's own fault-free intervals (docs/watch.md, "Anomalies"): the
    log of measured period / the model's expected period as a line in the log of the decode batch,
    the prefill share and the KV cache's used share (the context the batch carries), and the top
    of the residuals (their :data:`BAND_QUANTILE`). An interval is an anomaly when its period lies
    above ``expected x exp(line + margin)``."""

    intercept: float
    batch_coef: float
    prefill_coef: float
    margin: float
    intervals: int
    source: str
    batches: tuple[float, float]
    """The decode batches the band was fitted over (min, max): outside them it extrapolates."""
    kv_coef: float = 0.0
    kv_mean: float = 0.0
    """The fitted intervals' mean KV cache share: the value an interval without one is read at."""

    def high(self, expected: float, batch: float, prefill_share: float, kv_usage: float | None = None) -> float:
        kv = self.kv_mean if kv_usage is None else kv_usage
        x = self.intercept + self.batch_coef * math.log(max(batch, 1e-9)) + self.prefill_coef * prefill_share
        return expected * math.exp(x + self.kv_coef * kv + self.margin)

    def to_dict(self) -> dict:
        return {**asdict(self), "batches": list(self.batches)}

    @staticmethod
    def from_dict(d: dict) -> Band:
        fields = {k: d[k] for k in Band.__dataclass_fields__ if k in d}  # a band stored before kv_coef
        return Band(**{**fields, "batches": tuple(d["batches"])})


def fit_band(rows: Sequence[dict], source: str) -> Band:
    """The band of fault-free watched intervals: rows with a step period, an expected period,
    a decode batch and a prefill share (watch rows of a vLLM server with a calibration); least
    squares of ``ln(period / expected)`` on ``1, ln(batch), prefill share, KV cache share`` (the
    last where the rows carry it; a row without it at the others' mean), the margin the
    :data:`BAND_QUANTILE` quantile of the residuals. HostgapError with fewer than
    :data:`BAND_MIN_INTERVALS` such rows."""
    use = [
        r
        for r in rows
        if r.get("status") == "ok"
        and all(isinstance(r.get(k), (int, float)) for k in ("step_period_s", "expected_period_s", "seqs_per_step"))
        and r["step_period_s"] > 0
        and r["expected_period_s"] > 0
        and r["seqs_per_step"] > 0
    ]
    if len(use) < BAND_MIN_INTERVALS:
        raise HostgapError(
            source,
            f"{len(use)} watched interval(s) with a step period and the model's expected period: a band needs "
            f"at least {BAND_MIN_INTERVALS} (watch the server with its calibration, under normal traffic, longer)",
        )
    y = np.log([r["step_period_s"] / r["expected_period_s"] for r in use])
    b = np.array([float(r["seqs_per_step"]) for r in use])
    share = np.array([float(r.get("prefill_share") or 0.0) for r in use])
    kv = np.array(
        [float(r["kv_cache_usage"]) if isinstance(r.get("kv_cache_usage"), (int, float)) else np.nan for r in use]
    )
    kv_mean = float(np.nanmean(kv)) if np.isfinite(kv).any() else 0.0
    kv = np.where(np.isfinite(kv), kv, kv_mean)
    x = np.column_stack([np.ones(len(use)), np.log(b), share, kv])
    keep = [c for c in range(4) if c == 0 or np.ptp(x[:, c]) > 0]  # a constant column has no coefficient
    coef = np.zeros(4)
    coef[keep] = np.linalg.lstsq(x[:, keep], y, rcond=None)[0]
    resid = y - x @ coef
    return Band(
        float(coef[0]),
        float(coef[1]),
        float(coef[2]),
        float(np.quantile(resid, BAND_QUANTILE)),
        len(use),
        source,
        (float(b.min()), float(b.max())),
        float(coef[3]),
        kv_mean,
    )


def prefill_per_step(stats: StepStats) -> float:
    if not stats.steps or stats.prefill_tokens is None:
        return 0.0
    return stats.prefill_tokens / stats.steps


def expected_period(cal: Calibration, batch: float, prefill: float) -> tuple[float, float]:
    """(expected step period, the top of its band) at decode batch ``batch`` with ``prefill``
    prefill tokens per step."""
    base = cal.gpu_s(batch) + cal.host_s(batch) + max(prefill, 0.0) * max(cal.gpu_slope_s, 0.0)
    err = cal.block_rel_err + extrapolation(cal, batch) + HOST_TOLERANCE
    return base, base * (1.0 + err)


def judge(stats: StepStats, cal: Calibration | None, band: Band | None = None) -> dict:
    """The anomaly fields of an interval row: ``anomaly`` True / False, or None where there is no
    model to judge by (no calibration, no decode steps, no period); ``band``: the band fitted on
    the server's fault-free intervals, else the fixed tolerance (``anomaly_basis`` says which)."""
    out: dict = dict.fromkeys(KEYS)
    batch, period = stats.seqs_per_step, stats.step_period_s
    if cal is None or not stats.steps or batch is None or period is None or batch <= 0:
        return out
    prefill = prefill_per_step(stats)
    base, high = expected_period(cal, batch, prefill)
    if base <= 0:
        return out
    basis = f"fixed tolerance: held-out error + extrapolation + {HOST_TOLERANCE:g}"
    if band is not None:
        high = band.high(base, batch, stats.prefill_share or 0.0, stats.kv_cache_usage)
        basis = f"band fitted on {band.intervals} fault-free intervals of {band.source}"
        if not band.batches[0] <= batch <= band.batches[1]:
            basis += f" (batch {batch:.1f} outside its batches {band.batches[0]:.1f}-{band.batches[1]:.1f})"
    out.update(expected_period_s=base, expected_period_high_s=high, anomaly=period > high, anomaly_basis=basis)
    if out["anomaly"]:
        out["anomaly_reason"] = (
            f"step period {period * 1e3:.3g} ms above the {high * 1e3:.3g} ms the calibration allows at batch "
            f"{batch:.1f} with {prefill:.3g} prefill tokens per step (expected {base * 1e3:.3g} ms): "
            "not explained by load"
        )
    return out
