"""Levers ranked by predicted gain (``hostgap advise``, docs/advise.md), calibrated on one input.

The input (a trace's steps, or a measured run's differencing medians) gives, per decode step:
its wall ``T``, device-active time ``G``, the host-caused idle ``W`` (the time the device waited
because nothing had been launched), the host time between the step's marker end and the next
step ``B`` (the engine loop: scheduler, output processing), the launch path's cost ``O`` (ΔFT +
ΔCT + ΔKT of the step's launches, TaxBreak) and its launch counts. Every lever is a change to one
of these, put through the step's critical path (stepmodel.py: ``wall = serial + max(orchestration,
device)``): host work removed from the critical path shortens the step only while the device
waits on the host, so a cut of ``X`` of host work saves ``min(X, W')``, ``W'`` the host-caused idle
it can reach.

Each lever is computed per step on the step's own quantities; the prediction is the median over
the steps and its 95 % interval the distribution-free order-statistic interval of that median
(steps taken as independent draws; :func:`median_rank`). A measured run is one point with its own intervals: the lever
runs at the low and high ends of its wall interval (every time scaled together).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from hostgap.anatomy.verdict import classify
from hostgap.model import graphlaunch
from hostgap.stats.order import half_binomial_quantile

MIN_STEPS_FOR_CI = 6
"""Fewer steps give no interval (``step_ns_ci`` null): no order-statistic interval of 5 values or
fewer holds the median with 95 %."""
FULL_GRAPH_EAGER_SHARE = 0.05
"""A step replayed by graph launches with at most this share of its kernels launched eagerly is
a FULL graph (vLLM's FULL, SGLang's decode graphs); above it, piecewise."""
CPU_SPEED = 1.4
"""The ``cpu`` lever's target: a core 1.4x as fast single-thread, the speed that cuts host
orchestration 29 %, the top of TaxBreak's faster-CPU range (METHOD.md §7). An assumption."""
FUSION_SHARE = 0.3
"""The ``fusion`` lever's target: 30 % of the launches fused away (norms, activations and residual
adds folded into their neighbours, as torch.compile's pointwise fusion does in a decoder layer).
An assumption, not measured on this input."""
CPU_RUN = "no device time to overlap: CPU run"


@dataclass(frozen=True)
class Steps:
    """Per-step quantities (one entry per step, ns; NaN where the input does not say)."""

    wall: np.ndarray
    device: np.ndarray  # device-active (the CPU-compute analogue on a CPU run)
    host_wait: np.ndarray  # host-caused idle (a measured run: the differencing host term)
    between: np.ndarray  # host time after the step's marker ended, before the next step
    orchestrate: np.ndarray  # ΔFT + ΔCT + ΔKT of the step's launches
    launches: np.ndarray  # eager launch calls
    graph_launches: np.ndarray
    kernels: np.ndarray

    def scaled(self, f: float) -> Steps:
        """Every time x ``f`` (counts unchanged): a measured run at an end of its interval."""
        t = {k: getattr(self, k) * f for k in ("wall", "device", "host_wait", "between", "orchestrate")}
        return replace(self, **t)

    def take(self, idx: np.ndarray) -> Steps:
        return Steps(*(getattr(self, k)[idx] for k in Steps.__dataclass_fields__))

    def __len__(self) -> int:
        return len(self.wall)


@dataclass(frozen=True)
class Baseline:
    """One input, ready for the levers."""

    source: str  # what it is, for the basis lines ("trace X", "measured run Y")
    gpu: bool  # False: a CPU run (device-active is CPU compute)
    steps: Steps
    wall_ci: tuple[float, float] | None = None  # a measured run's own 95 % interval of the wall
    batch: float = 1.0  # sequences per decode step
    batch_known: bool = True  # False: the input does not say (1 assumed for tokens/s)
    engine: str | None = None  # vllm, sglang, hf, hf-cb, hf-cb-async, ...
    launch_floor_ns: float | None = None  # ΔKT per launch
    device_name: str | None = None
    preset: str | None = None  # the model's architecture (a preset name), when known
    context: int = 2048
    unfaithful: tuple[str, ...] = ()  # why the input's host-caused idle is not to be trusted
    notes: tuple[str, ...] = ()
    facts: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """One lever on one set of steps: the predicted walls and device times, per step."""

    wall: np.ndarray
    device: np.ndarray
    tokens_ratio: float = 1.0  # tokens per step after / before


@dataclass(frozen=True)
class LeverSpec:
    """A lever's fixed words and its arithmetic (``None``: not applicable, ``reason`` says why)."""

    lever: str
    target: dict
    basis: str
    validated: str
    apply: Callable[[Steps], Outcome] | None
    reason: str = ""
    ends: tuple[Callable[[Steps], Outcome], Callable[[Steps], Outcome]] | None = None
    """The model's own low and high ends where it is a bracket (the ``batch`` lever on a CPU run):
    the interval runs from the low end at the input's low end to the high end at its high end."""


@dataclass(frozen=True)
class Lever:
    """One row of ``advise --json``'s ``levers`` (docs/advise.md)."""

    lever: str
    applicable: bool
    reason: str
    target: dict
    step_ns: float | None
    step_ns_ci: tuple[float, float] | None
    tokens_per_s: float | None
    gain: float | None
    regime_after: str | None
    basis: str
    validated: str

    def to_dict(self) -> dict:
        return {
            "lever": self.lever,
            "applicable": self.applicable,
            "reason": self.reason,
            "target": self.target,
            "step_ns": self.step_ns,
            "step_ns_ci": list(self.step_ns_ci) if self.step_ns_ci is not None else None,
            "tokens_per_s": self.tokens_per_s,
            "gain": self.gain,
            "regime_after": self.regime_after,
            "basis": self.basis,
            "validated": self.validated,
        }


# -- the host-side levers' arithmetic (per step, vectorised) ------------------------------------


def critical_cut(s: Steps, cut: np.ndarray, reach: np.ndarray) -> Outcome:
    """``cut`` of host work removed from the critical path, of which at most ``reach`` (the
    host-caused idle it can reach) shortens the step; device time unchanged."""
    saved = np.clip(cut, 0.0, np.maximum(reach, 0.0))
    return Outcome(s.wall - saved, s.device)


def inside_wait(s: Steps) -> np.ndarray:
    """Host-caused idle inside the step's marker: the part the launch path can reach (the wait
    between steps is the engine loop's, which graphs and fusion do not touch)."""
    return np.maximum(s.host_wait - np.minimum(s.between, s.host_wait), 0.0)


def per_launch_ns(s: Steps) -> np.ndarray:
    """ΔFT + ΔCT + ΔKT per launch call (eager and graph), per step."""
    calls = s.launches + s.graph_launches
    return np.where(calls > 0, s.orchestrate / np.maximum(calls, 1.0), np.nan)


def graphs_full(s: Steps, cost: graphlaunch.GraphLaunchCost, keep: float = 0.0, graphs: float = 1.0) -> Outcome:
    """The eager launches replayed from ``graphs`` graphs (1: FULL capture), ``keep`` of them still
    launched eagerly (piecewise capture: attention between the pieces): the replayed launches'
    ΔFT + ΔCT + ΔKT are cut, the graph launches of that many nodes paid (graphlaunch.py);
    already-replayed graph launches stay."""
    moved = np.maximum(s.launches - keep, 0.0)
    # a step without launch calls or launch costs: nothing to replay
    cut = moved * np.nan_to_num(per_launch_ns(s)) - (graphs * cost.fixed_ns + cost.per_node_ns * moved)
    return critical_cut(s, cut, inside_wait(s))


def overlap(s: Steps) -> Outcome:
    """Async scheduling / overlap: the host work between steps (``S``, the exposed part of the
    engine loop) runs during the previous step's device time. With the marker's part ``M = T -
    S`` = max(O, G): step = max(min(O, M) + S, M) (whatif_overlap.py's rule on measured parts)."""
    s_exp = np.minimum(s.between, s.host_wait)
    m = s.wall - s_exp
    o = np.where(np.isnan(s.orchestrate), m - s.device, s.orchestrate)
    new = np.maximum(np.minimum(np.maximum(o, 0.0), m) + s_exp, m)
    return Outcome(np.minimum(new, s.wall), s.device)


def faster_host(s: Steps, speed: float, floor_ns: float | None, gpu: bool) -> Outcome:
    """A core ``speed`` x as fast single-thread. GPU: the host-caused idle shrinks by (1 - 1 /
    speed), less its launch-floor part (ΔKT: driver and hardware, no faster on a faster core).
    CPU run: every part of the step runs on the core, the whole step divides by ``speed``."""
    if not gpu:
        return Outcome(s.wall / speed, s.device / speed)
    floor = np.minimum((s.launches + s.graph_launches) * (floor_ns or 0.0), s.host_wait)
    return critical_cut(s, (s.host_wait - floor) * (1.0 - 1.0 / speed), s.host_wait)


def more_cores(
    base: Baseline, usable: float, target: float, processes: float, thread_ns: float | None
) -> tuple[Callable[[Steps], Outcome], Callable[[Steps], Outcome]]:
    """The step with ``target`` cores instead of ``usable`` for ``processes`` busy host processes
    (may be fractional: a process busy for part of the step), as two ends. The most it gains (the
    first): a fair scheduler gives each ``min(1, cores / processes)`` of a core (model/whatif/cpu.py), so the
    host-exposed time (on a CPU run: the whole step, compute included) shrinks by the ratio of the
    shares. The least (the second): only the measuring thread's own CPU per step (``thread_ns``,
    the frontend of an engine in other processes) leaves the shared core, the step less it."""
    before = min(1.0, usable / processes)
    after = min(1.0, target / processes)
    keep = before / after

    def most(s: Steps) -> Outcome:
        if not base.gpu:
            return Outcome(s.wall * keep, s.device * keep)
        host = np.maximum(s.wall - s.device, 0.0)
        return critical_cut(s, host * (1.0 - keep), s.host_wait)

    def least(s: Steps) -> Outcome:
        # the thread's CPU leaving the shared core saves no more than the fair share's bound
        cut = np.minimum(float(thread_ns or 0.0), s.wall - most(s).wall)
        return critical_cut(s, np.minimum(cut, np.maximum(s.wall - s.device, 0.0)), s.wall)

    return most, least


def fused(s: Steps, share: float, gpu: bool) -> Outcome:
    """``share`` of the launches fused away: their ΔFT + ΔCT + ΔKT cut (GPU), or that share of
    the host time between compute ops (CPU run: the framework's per-op work), reaching only the
    host-caused idle inside the marker. Device work unchanged (a lower bound on the gain)."""
    if not gpu:
        return critical_cut(s, share * (s.wall - s.device), s.wall - s.device)
    return critical_cut(s, share * s.launches * np.nan_to_num(per_launch_ns(s)), inside_wait(s))


def megakernel(s: Steps, device_after: np.ndarray | None = None) -> Outcome:
    """One persistent kernel per step: every launch's cost but one leaves the step's critical path
    (the engine loop between steps stays). Inside the marker the step is the longer of the host's
    path (device + host-caused wait, less the cut) and the device's (``device_after``: the
    bandwidth bound where the architecture is known, never above today's), so a shorter device
    time shortens the step only once the host's path is shorter."""
    calls = s.launches + s.graph_launches
    cut = np.maximum(np.nan_to_num(s.orchestrate - np.where(calls > 0, per_launch_ns(s), 0.0)), 0.0)
    dev = s.device if device_after is None else np.minimum(device_after, s.device)
    w_in = inside_wait(s)
    path = np.maximum(s.device + w_in - cut, dev)
    return Outcome(s.wall - s.device - w_in + path, dev)


# -- from outcomes to rows ---------------------------------------------------------------------


def _median(x: np.ndarray) -> float:
    return float(np.median(x))


def interval(
    base: Baseline,
    apply: Callable[[Steps], Outcome],
    ends: tuple[Callable[[Steps], Outcome], Callable[[Steps], Outcome]] | None = None,
) -> tuple[float, float] | None:
    """The 95 % interval of the lever's predicted step (module docstring); with ``ends`` (a model
    bracketed by two ends), from the low end's lower limit to the high end's upper limit."""
    lo_fn, hi_fn = ends or (apply, apply)
    s = base.steps
    if base.wall_ci is not None and len(s) == 1:
        t = float(s.wall[0])
        if t <= 0:
            return None
        ends_ = [_median(f(s.scaled(c / t)).wall) for f in (lo_fn, hi_fn) for c in base.wall_ci]
        return (min(ends_), max(ends_))
    low, high = np.sort(lo_fn(s).wall), np.sort(hi_fn(s).wall)
    k = median_rank(len(low))
    return (
        None if k is None else (float(min(low[k], high[k])), float(max(high[len(high) - 1 - k], low[len(low) - 1 - k])))
    )


def median_rank(n: int, alpha: float = 0.05) -> int | None:
    """0-based index ``k`` such that [x_(k), x_(n-1-k)] of ``n`` sorted i.i.d. values holds their
    median with probability >= 1 - alpha (the distribution-free order-statistic interval: the
    count below the median is Binomial(n, 1/2)); None below 6 values, where even [min, max] holds
    it with less than 95 % (n = 5: 93.75 %)."""
    if n < MIN_STEPS_FOR_CI:
        return None
    k = min(half_binomial_quantile(n, alpha / 2), n - 1)
    return k if k >= 0 else None


def today_interval(base: Baseline) -> tuple[float, float] | None:
    """Today's step's own 95 % interval, built as each lever's is."""
    return interval(base, lambda s: Outcome(s.wall, s.device))


def evaluate(base: Baseline, spec: LeverSpec) -> Lever:
    """One lever's row: its prediction on the input's steps, its interval, gain and regime."""
    if spec.apply is None:
        return Lever(
            spec.lever,
            False,
            spec.reason,
            spec.target,
            None,
            None,
            None,
            None,
            None,
            spec.basis,
            spec.validated,
        )
    out = spec.apply(base.steps)
    step = _median(out.wall)
    if not np.isfinite(step):  # a quantity the lever needs is missing from the input: no number shown
        why = "the input's steps lack a quantity this lever needs"
        return evaluate(base, LeverSpec(spec.lever, spec.target, spec.basis, spec.validated, None, why))
    today = _median(base.steps.wall)
    tokens_today = base.batch
    tokens = tokens_today * out.tokens_ratio
    gain = 1.0 - (step / tokens) / (today / tokens_today) if step > 0 and today > 0 else None
    frac = _median(host_share_after(base.steps, out))
    return Lever(
        spec.lever,
        True,
        spec.reason,
        spec.target,
        step,
        interval(base, spec.apply, spec.ends),
        tokens * 1e9 / step if step > 0 else None,
        gain,
        classify(frac) if np.isfinite(frac) else None,
        spec.basis,
        spec.validated,
    )


def host_share_after(s: Steps, out: Outcome) -> np.ndarray:
    """The host-caused share of each step after the lever: the host-caused idle less the time the
    lever saved beyond the device's own change, over the new wall (what the verdict classifies)."""
    wait = np.clip(s.host_wait - ((s.wall - out.wall) - (s.device - out.device)), 0.0, np.maximum(out.wall, 0.0))
    return np.where(out.wall > 0, wait / np.where(out.wall > 0, out.wall, 1.0), np.nan)


def rank(levers: list[Lever]) -> list[Lever]:
    """Applicable levers by predicted gain, best first; then the rest in their given order."""
    yes = sorted((lv for lv in levers if lv.applicable and lv.gain is not None), key=lambda lv: -(lv.gain or 0.0))
    return yes + [lv for lv in levers if not (lv.applicable and lv.gain is not None)]


def within_noise(lever: Lever, today_ci: tuple[float, float] | None) -> bool:
    """The lever's predicted step lies inside today's own interval: not a gain the input can tell
    from its noise."""
    return lever.step_ns is not None and today_ci is not None and today_ci[0] <= lever.step_ns <= today_ci[1]


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def us(ns: float) -> str:
    return f"{ns / 1e3:.1f} us"
