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
"""

from __future__ import annotations

from hostgap.server.metrics import StepStats
from hostgap.server.watch.estimate import Calibration, extrapolation

HOST_TOLERANCE = 0.25
"""Relative allowance for the host line (and the step-to-step spread of the mean over an interval)."""
KEYS = ("anomaly", "anomaly_reason", "expected_period_s", "expected_period_high_s")


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


def judge(stats: StepStats, cal: Calibration | None) -> dict:
    """The anomaly fields of an interval row: ``anomaly`` True / False, or None where there is no
    model to judge by (no calibration, no decode steps, no period)."""
    out: dict = dict.fromkeys(KEYS)
    batch, period = stats.seqs_per_step, stats.step_period_s
    if cal is None or not stats.steps or batch is None or period is None or batch <= 0:
        return out
    prefill = prefill_per_step(stats)
    base, high = expected_period(cal, batch, prefill)
    if base <= 0:
        return out
    out.update(expected_period_s=base, expected_period_high_s=high, anomaly=period > high)
    if out["anomaly"]:
        out["anomaly_reason"] = (
            f"step period {period * 1e3:.3g} ms above the {high * 1e3:.3g} ms the calibration allows at batch "
            f"{batch:.1f} with {prefill:.3g} prefill tokens per step (expected {base * 1e3:.3g} ms): "
            "not explained by load"
        )
    return out
