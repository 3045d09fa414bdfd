"""The host-exposed share of a server's decode steps, estimated from its metrics.

Two bases, said with every number:

- ``device timer`` (SGLang started with ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``): the engine
  times its own forward passes on the GPU (``sglang:forward_execution_seconds_total``) and its
  scheduler loop by stage (``sglang:scheduler_stage_seconds_total{category}``, idle time apart
  in ``sglang:scheduler_idle_seconds_total``). Over an interval, per scheduler rank::

      host_share = 1 − Δforward_seconds / Δbusy_loop_seconds      (busy = Σ stages)

  The interval spans the ranks' values and the engine's own occupancy gauge
  (``1 − sglang:fwd_occupancy / 100``, averaged by SGLang over its last log window): two
  readings of the same quantity by the engine's timers. The stages are the host-side breakdown.

- ``model estimate`` (vLLM, which exports no GPU or step time): a step model calibrated on a
  profile of the same server (:class:`Calibration`, from the per-step table of an attach run:
  GPU-active time and host term per decode step against its batch) gives the GPU time of a step
  at the batch the metrics report; the metrics give the measured step period::

      host_share = 1 − gpu(batch) / step_period

  so a host that slows down shows up as a larger share while the model only carries the GPU
  side. Its interval is the calibration's relative error on held-out steps (blocks of
  consecutive steps, the way the model is used: on an interval's mean), widened by the
  extrapolation when the watched batch lies outside the calibrated batches.

Shares are never shown outside [0, 1]: an estimate whose whole interval lies outside is
withheld with a note (the model does not describe the server's present state).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from hostgap.server.metrics import Delta, StepStats

DEVICE_TIMER = "device timer"
MODEL = "model estimate"
NONE = "none"
FORWARD = "sglang:forward_execution_seconds_total"
STAGES = "sglang:scheduler_stage_seconds_total"
IDLE = "sglang:scheduler_idle_seconds_total"
OCCUPANCY = "sglang:fwd_occupancy"
FOLDS = 5
MIN_STEPS = 8
"""Fewest usable decode steps a calibration is fitted on."""


@dataclass(frozen=True)
class Estimate:
    """The host-exposed share of one interval with its basis and interval ([low, high])."""

    host_share: float | None
    low: float | None
    high: float | None
    basis: str
    gpu_s_per_step: float | None = None
    host_s_per_step: float | None = None
    model_period_s: float | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def no_estimate(note: str) -> Estimate:
    return Estimate(None, None, None, NONE, note=note)


# --------------------------------------------------------------------------- SGLang


def sglang_device_timer(d: Delta, stats: StepStats) -> Estimate:
    """The device-timer estimate of an SGLang interval (see the module docstring)."""
    if d.reset:  # the interval's notes say so already
        return Estimate(None, None, None, NONE)
    if not d.labels_of(FORWARD):
        return no_estimate(
            "SGLang exports no GPU forward time: start the server with "
            "SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 (and --enable-metrics)"
        )
    ranks = sorted({lab.get("tp_rank", "") for lab in d.labels_of(FORWARD)})
    shares: list[float] = []
    first: tuple[float, float, dict[str, float]] | None = None
    for rank in ranks:
        match = {"tp_rank": rank} if rank else {}
        forward = d.counter(FORWARD, **match) or 0.0
        stages = d.counter_by(STAGES, "category", **match)
        busy = math.fsum(v for k, v in stages.items() if k != "idle")
        if busy <= 0:
            idle = d.counter(IDLE, **match)
            busy = d.interval_s - idle if idle is not None else 0.0
        if busy <= 0:
            continue
        shares.append(1.0 - forward / busy)
        if first is None:
            first = (forward, busy, stages)
    if first is None:
        return no_estimate("the scheduler reported no busy time in this interval (no traffic?)")
    forward, busy, stages = first
    readings = list(shares)
    occupancy = d.b.gauge(OCCUPANCY, "mean")
    if occupancy is not None and 0.0 <= occupancy <= 100.0:
        readings.append(1.0 - occupancy / 100.0)
    share = shares[0]
    steps = stats.steps if stats.steps else None
    breakdown = {k: v / busy for k, v in sorted(stages.items()) if k != "idle"}
    note = None
    if not 0.0 <= share <= 1.0:
        # a forward time beyond the loop's busy time: the two counters were updated at
        # different moments (SGLang adds them per log window); say so rather than clip
        return no_estimate(
            f"GPU forward time {forward:.3g} s over {busy:.3g} s of busy loop: the counters "
            "are out of step in this interval (lengthen --interval)"
        )
    return Estimate(
        host_share=share,
        low=_clip(min(readings)),
        high=_clip(max(readings)),
        basis=DEVICE_TIMER,
        gpu_s_per_step=forward / steps if steps else None,
        host_s_per_step=(busy - forward) / steps if steps else None,
        breakdown=breakdown,
        note=note,
    )


# --------------------------------------------------------------------------- vLLM model


@dataclass(frozen=True)
class Calibration:
    """GPU-active time and host term per decode step as lines in the batch, fitted on the
    decode steps of profiles of the server, with the model's held-out error.

    ``block_rel_err``: the largest relative error of the mean GPU time predicted for a held-out
    block of consecutive steps (FOLDS blocks); ``step_rel_err_p90``: the same for single steps
    (reported, not used: an interval is hundreds of steps)."""

    source: str
    steps: int
    batches: tuple[int, ...]
    gpu_intercept_s: float
    gpu_slope_s: float
    host_intercept_s: float
    host_slope_s: float
    block_rel_err: float
    step_rel_err_p90: float
    host_fraction: float
    activity: str | None = None
    prefill_range: tuple[float, float] | None = None
    """The prefill shares (metrics) of the traffic the profiles were taken under (self-calibration)."""
    runs: tuple[str, ...] = ()
    """The runs whose steps were fitted (self-calibration: the attach runs, newest last)."""

    def gpu_s(self, batch: float) -> float:
        return self.gpu_intercept_s + self.gpu_slope_s * batch

    def host_s(self, batch: float) -> float:
        return self.host_intercept_s + self.host_slope_s * batch

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> Calibration:
        known = {k: v for k, v in d.items() if k in Calibration.__dataclass_fields__}
        span = known.get("prefill_range")
        return Calibration(
            **{
                **known,
                "batches": tuple(d["batches"]),
                "prefill_range": tuple(span) if span is not None else None,
                "runs": tuple(known.get("runs") or ()),
            }
        )


def step_batch(step: dict) -> int | None:
    """The number of sequences a step carried (decode + prefill requests), from its
    composition fields (``steps --json``) or a ``batch`` field."""
    if step.get("batch") is not None:
        return int(step["batch"])
    gen, ctx = step.get("gen_requests"), step.get("ctx_requests")
    if gen is None and ctx is None:
        return None
    return int(gen or 0) + int(ctx or 0)


def usable_steps(steps: Sequence[dict]) -> list[dict]:
    """Decode steps with a wall time, a batch and no flag that makes their split untrustworthy
    (partial, queued, a graph replay the trace does not record faithfully)."""
    out = []
    for s in steps:
        if s.get("partial") or s.get("queued") or s.get("graph_flags"):
            continue
        if s.get("kind") not in ("decode", None) or not s.get("wall_ns"):
            continue
        if step_batch(s) is None or s.get("gpu_active_ns") is None:
            continue
        out.append(s)
    return out


def fit_calibration(
    steps: Sequence[dict],
    source: str,
    activity: str | None = None,
    *,
    prefill_range: tuple[float, float] | None = None,
    runs: Sequence[str] = (),
) -> Calibration:
    """Fit the step model on ``steps`` (``steps --json`` rows); ValueError when too few are usable."""
    rows = usable_steps(steps)
    if len(rows) < MIN_STEPS:
        raise ValueError(f"{len(rows)} usable decode steps (at least {MIN_STEPS} needed)")
    batch = np.array([step_batch(s) for s in rows], dtype=float)
    gpu = np.array([s["gpu_active_ns"] for s in rows], dtype=float) / 1e9
    wall = np.array([s["wall_ns"] for s in rows], dtype=float) / 1e9
    host = np.maximum(wall - gpu, 0.0)
    g0, g1 = _line(batch, gpu)
    h0, h1 = _line(batch, host)
    block, step_p90 = _held_out(batch, gpu)
    return Calibration(
        source=source,
        steps=len(rows),
        batches=tuple(sorted({int(b) for b in batch})),
        gpu_intercept_s=g0,
        gpu_slope_s=g1,
        host_intercept_s=h0,
        host_slope_s=h1,
        block_rel_err=block,
        step_rel_err_p90=step_p90,
        host_fraction=float(host.sum() / wall.sum()),
        activity=activity,
        prefill_range=prefill_range,
        runs=tuple(runs),
    )


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares ``y = a + b·x``; a constant (b = 0) when x takes one value."""
    if np.ptp(x) == 0:
        return float(np.mean(y)), 0.0
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def _held_out(batch: np.ndarray, gpu: np.ndarray) -> tuple[float, float]:
    """(largest block relative error of the mean, p90 single-step relative error), each block of
    consecutive steps predicted by a model fitted on the others."""
    n = len(batch)
    edges = np.linspace(0, n, FOLDS + 1).astype(int)
    block_errs: list[float] = []
    step_errs: list[np.ndarray] = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        if hi <= lo:
            continue
        keep = np.ones(n, dtype=bool)
        keep[lo:hi] = False
        a, b = _line(batch[keep], gpu[keep])
        pred = a + b * batch[lo:hi]
        meas = gpu[lo:hi]
        if meas.mean() > 0:
            block_errs.append(float(abs(pred.mean() - meas.mean()) / meas.mean()))
        ok = meas > 0
        step_errs.append(np.abs(pred[ok] - meas[ok]) / meas[ok])
    steps = np.concatenate(step_errs) if step_errs else np.zeros(0)
    return (
        float(max(block_errs)) if block_errs else math.inf,
        float(np.quantile(steps, 0.9)) if len(steps) else math.inf,
    )


def vllm_model(stats: StepStats, cal: Calibration | None) -> Estimate:
    """The model estimate of a vLLM interval (see the module docstring)."""
    if cal is None:
        return no_estimate(
            "no calibration: profile the server once with `hostgap attach URL --load C` "
            "and pass the run with --calibration RUN"
        )
    if stats.step_period_s is None or stats.seqs_per_step is None or not stats.steps:
        return no_estimate("no decode steps in this interval")
    batch = stats.seqs_per_step
    gpu = cal.gpu_s(batch)
    period = stats.step_period_s
    err = cal.block_rel_err + extrapolation(cal, batch)
    if gpu <= 0:
        return no_estimate(f"the calibration predicts no GPU time at batch {batch:.1f}")
    share = 1.0 - gpu / period
    low, high = 1.0 - gpu * (1 + err) / period, 1.0 - gpu * (1 - err) / period
    host_s, model_period = max(period - gpu, 0.0), gpu + cal.host_s(batch)
    if high < 0.0 or low > 1.0:
        return Estimate(
            None,
            None,
            None,
            MODEL,
            gpu,
            host_s,
            model_period,
            note=f"the calibration's GPU time at batch {batch:.1f} ({gpu * 1e3:.3g} ms) exceeds the "
            f"measured step period ({period * 1e3:.3g} ms): recalibrate on this server",
        )
    note = None
    if batch < min(cal.batches) or batch > max(cal.batches):
        note = f"batch {batch:.1f} outside the calibrated batches {list(cal.batches)}: extrapolated"
    return Estimate(_clip(share), _clip(low), _clip(high), MODEL, gpu, host_s, model_period, note=note)


def extrapolation(cal: Calibration, batch: float) -> float:
    """Extra relative error for a batch outside the calibrated range: the GPU time at a batch
    beyond what was profiled is not known to the fit. One calibrated batch: the bound between
    a batch-independent time and one proportional to the batch; several: the distance beyond
    the range relative to the batch."""
    lo, hi = min(cal.batches), max(cal.batches)
    if lo <= batch <= hi:
        return 0.0
    edge = lo if batch < lo else hi
    if lo == hi:
        return abs(batch - edge) / min(batch, edge)
    return abs(batch - edge) / max(batch, edge)


def _clip(x: float) -> float:
    return min(1.0, max(0.0, x))
