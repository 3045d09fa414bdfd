"""The differencing method (METHOD.md §4): per-decode-step wall, device-active and host time
from whole-run totals at two token counts, with no model of the step.

Run the same workload generating N tokens for every N of a sweep N1 .. N2. Prefill, loading and
warm-up are the same in every run and cancel, so for any run total X(N) the per-step cost is the
slope of X against N (two points: ``(X(N2) - X(N1)) / (N2 - N1)``)::

    t_step = slope of W (untraced wall)        g_step = device-active per step
    h_step = t_step - g_step  (host-exposed)    k_step = slope of K (kernel count)

The result is the mean over KV lengths prompt + N1 .. prompt + N2 - 1.

**Estimator** (default ``theil-sen``): the Theil-Sen slope over every run of the sweep (the
median of all pairwise slopes between runs at different N), with Sen's distribution-free
confidence interval (Kendall's tau). It is robust to heavy tails and to occasional preemption
spikes, and its interval covers the true slope at its nominal level: a simulation test draws
per-N timings from known slopes with normal, heavy-tailed and spiky noise and checks coverage.
``min``/``median``/``mean`` keep the two-point slope of that per-N estimate, with a percentile
bootstrap interval (``min``: the bootstrap of a sample minimum under-covers; reported as such).

**Basis of g_step.** On a GPU, ``g_step`` is the slope of the traced runs' device-busy union
G(N): kernel time is not inflated by the profiler. On a CPU the analogue (time inside compute
operators) is measured inside traced runs whose host time the profiler inflates, so it is never
set beside the untraced wall directly: the **compute share** ``c = slope(G) / slope(W_traced)``
is taken on the traced basis and applied to the untraced wall, ``g_step = c * t_step``
(:func:`difference`, ``basis``). The compute share's interval uses that both slopes come from
the same traced runs (a slow period stretches a run's compute and its wall together): it is
the set of shares ``c`` for which Kendall's test finds no trend of ``G - c W_traced`` in N
(:func:`paired_ratio`, a rank form of Fieller's interval), and the share itself is that test's
centre (the median of the runs' pairwise ratios of compute to wall increments), so the estimate
and its interval come from one construction and the estimate lies inside. Intervals of products, differences
and ratios of independent estimates combine their own intervals by MOVER (Zou and Donner), on
the log scale for products and ratios.

The multi-point check fits X(N) = a + b N by least squares over the per-N estimates and reports
R², the largest relative residual from the robust line (one bad N is caught even when R² stays
high), and the relative difference between the two-point slope and the fitted slope b.

Everything here is pure: arrays in, frozen dataclasses out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import cast

import numpy as np

from hostgap.checks import fit_reason  # the linearity check's rule and limits
from hostgap.stats.confidence import (
    Slope,
    complement,
    edge_reasons,
    mover_difference,
    mover_product,
    mover_ratio,
    paired_ratio,
    theil_sen,
    theil_sen_line,
)

ESTIMATORS = ("theil-sen", "median", "min", "mean")


def estimate(values, estimator: str = "min", axis: int = -1) -> np.ndarray | float:
    """Reduce repeats with the named per-N estimator (``theil-sen`` reduces per N by the median)."""
    x = np.asarray(values, dtype=np.float64)
    if estimator == "min":
        return np.min(x, axis=axis)
    if estimator in ("median", "theil-sen"):
        return np.median(x, axis=axis)
    if estimator == "mean":
        return np.mean(x, axis=axis)
    raise ValueError(f"unknown estimator {estimator!r}; use one of {ESTIMATORS}")


def two_point_slope(n1: int, y1: float, n2: int, y2: float) -> float:
    """(y2 - y1) / (n2 - n1).

    >>> two_point_slope(1, 10.0, 11, 60.0)
    5.0
    """
    if n2 == n1:
        raise ValueError("two-point slope needs n1 != n2")
    return (float(y2) - float(y1)) / (n2 - n1)


@dataclass(frozen=True)
class LinearFit:
    """y = intercept + slope * n, least squares; ``max_residual``: the largest distance of a point
    from the robust (Theil-Sen) line through the same points, relative to the line's largest
    value."""

    slope: float
    intercept: float
    r2: float
    points: int
    max_residual: float = 0.0
    lack_of_fit_p: float | None = None  # :func:`lack_of_fit_p` over every run; None: too few repeats

    def to_dict(self) -> dict:
        return asdict(self)


def linear_fit(n, y) -> LinearFit:
    """Least-squares line through (n, y); R² = 1 - SS_res / SS_tot, and 1.0 when y is constant
    (the line then fits it exactly).

    >>> f = linear_fit([1, 2, 3], [3.0, 5.0, 7.0])
    >>> (round(f.slope, 9), round(f.intercept, 9), f.r2)
    (2.0, 1.0, 1.0)
    >>> linear_fit([1, 2, 3], [4.0, 4.0, 4.0]).r2
    1.0
    """
    x = np.asarray(n, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("a linear fit needs at least two distinct n")
    slope, intercept = np.polyfit(x, y, 1)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0:  # constant y: the horizontal line is exact (polyfit may leave rounding dust)
        return LinearFit(0.0, float(y[0]), 1.0, int(len(x)), 0.0)
    resid = y - (intercept + slope * x)
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot
    return LinearFit(float(slope), float(intercept), float(r2), int(len(x)), _max_residual(x, y))


def _max_residual(x: np.ndarray, y: np.ndarray) -> float:
    """Largest |y - robust line| over the points, relative to the line's largest |value| over
    them (its value at N2 for a growing total: a short run's small total does not turn its
    ordinary jitter into a large relative error); 0 when the line is 0 everywhere."""
    b, a, _lo, _hi = theil_sen_line(x, y)
    line = a + b * x
    scale = float(np.max(np.abs(line)))
    return float(np.max(np.abs(y - line)) / scale) if scale > 0 else 0.0


def lack_of_fit_p(series: dict[int, list[int]]) -> float | None:
    """p-value of the lack-of-fit F test of a line through every run of ``series`` (N -> run
    totals): is the per-N means' departure from the line larger than the spread of the runs at
    each N explains? Noise here is a run's pace (a slow period stretches a whole run), so the
    errors are taken as relative: the line is fitted by least squares weighted by 1 / line(N)²
    (two reweightings) and both sums of squares carry that weight. None without at least three
    N and two runs at every N (the pure error needs repeats everywhere).

    >>> lack_of_fit_p({1: [10, 12], 2: [20, 22], 3: [30, 32]}) > 0.99  # a line, repeats spread
    True
    >>> lack_of_fit_p({1: [10, 10.1], 2: [30, 30.1], 3: [31, 31.1]}) < 0.01  # a bend, tight repeats
    True
    >>> lack_of_fit_p({1: [10, 11], 2: [20], 3: [30, 31]}) is None
    True
    """
    ns = sorted(n for n, v in series.items() if v)
    if len(ns) < 3 or any(len(series[n]) < 2 for n in ns):
        return None
    x = np.concatenate([np.full(len(series[n]), float(n)) for n in ns])
    y = np.concatenate([np.asarray(series[n], dtype=np.float64) for n in ns])
    w = np.ones_like(x)
    for _ in range(3):  # unweighted first, then weighted by the previous line
        slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(w))
        line = intercept + slope * x
        if np.any(line <= 0):
            return None  # a relative error needs a positive line
        w = 1.0 / line**2
    means = {n: float(np.mean(series[n])) for n in ns}
    fitted = {n: intercept + slope * n for n in ns}
    pure = sum(float(np.sum((np.asarray(series[n], float) - means[n]) ** 2)) / fitted[n] ** 2 for n in ns)
    lack = sum(len(series[n]) * (means[n] - fitted[n]) ** 2 / fitted[n] ** 2 for n in ns)
    df_lack, df_pure = len(ns) - 2, len(x) - len(ns)
    if pure <= 1e-12 * len(x):  # no spread at all (a stand-in, a clock's resolution)
        return 0.0 if lack > 1e-12 * len(x) else 1.0
    from scipy.stats import f

    return float(f.sf((lack / df_lack) / (pure / df_pure), df_lack, df_pure))


def linear_enough(fit: LinearFit | None, strict: bool = False) -> bool:
    """The linearity check: R² >= :data:`hostgap.checks.LINEARITY_R2` and every point within
    :data:`hostgap.checks.LINEARITY_RESIDUAL` of the robust line; unless ``strict``, also a noisy line, whose
    departure the runs' own spread explains (:func:`lack_of_fit_p`,
    :func:`hostgap.checks.noisy_line`). The same rule as the reasons it gives
    (:mod:`hostgap.checks`). No fit (too few N) passes: nothing to check."""
    return fit is None or fit_reason("", fit.to_dict(), strict) is None


def slope_agreement(two_point: float, fitted: float) -> float | None:
    """|two-point - fitted| / |fitted| (paper: 0.55 %); None when the fitted slope is 0."""
    if fitted == 0:
        return None
    return abs(two_point - fitted) / abs(fitted)


def bootstrap_slopes(r1, r2, dn: int, estimator: str = "min", n_boot: int = 2000, seed: int = 0) -> np.ndarray:
    """Bootstrap distribution of (est(R2*) - est(R1*)) / dn, resampling each side's repeats
    with replacement (vectorised: one ``n_boot x repeats`` index draw per side)."""
    rng = np.random.default_rng(seed)
    a = np.asarray(r1, dtype=np.float64)
    b = np.asarray(r2, dtype=np.float64)
    ia = rng.integers(0, len(a), size=(n_boot, len(a)))
    ib = rng.integers(0, len(b), size=(n_boot, len(b)))
    # reduced along axis 1 of a 2-D draw: arrays (one value per resample)
    diff = cast(np.ndarray, estimate(b[ib], estimator, axis=1) - estimate(a[ia], estimator, axis=1))
    return diff / dn


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


# -- slopes with intervals ----------------------------------------------------------------


def bootstrap_slope(
    series: dict[int, list], n1: int, n2: int, estimator: str, n_boot: int, seed: int, level: float = 0.95
) -> Slope:
    """Two-point slope of the per-N ``estimator`` with a percentile bootstrap interval."""
    v = two_point_slope(n1, float(estimate(series[n1], estimator)), n2, float(estimate(series[n2], estimator)))
    lo, hi = percentile_ci(bootstrap_slopes(series[n1], series[n2], n2 - n1, estimator, n_boot, seed), level)
    return Slope(v, min(lo, v), max(hi, v))


@dataclass(frozen=True)
class Series:
    """Run totals per token count N: one list of repeats per N.

    ``wall_ns``: untraced wall; ``traced_wall_ns``, ``busy_ns`` (device-active union),
    ``kernel_sum_ns``, ``kernel_union_ns``, ``kernel_count``, ``copies``, ``copy_ns``,
    ``h2d_bytes``, ``d2h_bytes``: from the traced runs. ``thread_ns``: the untraced runs'
    thread CPU time (a cross-check on a shared CPU, where preemption inflates wall).
    """

    wall_ns: dict[int, list[int]]
    traced_wall_ns: dict[int, list[int]]
    busy_ns: dict[int, list[int]]
    kernel_sum_ns: dict[int, list[int]]
    kernel_union_ns: dict[int, list[int]]
    kernel_count: dict[int, list[int]]
    copies: dict[int, list[int]] = field(default_factory=dict)
    copy_ns: dict[int, list[int]] = field(default_factory=dict)
    h2d_bytes: dict[int, list[int]] = field(default_factory=dict)
    d2h_bytes: dict[int, list[int]] = field(default_factory=dict)
    thread_ns: dict[int, list[int]] = field(default_factory=dict)  # untraced runs' thread CPU time
    wall_rounds: dict[int, list[int]] = field(default_factory=dict)  # round of each untraced run (-1: none)
    wall_seq: dict[int, list[int]] = field(default_factory=dict)  # position of each untraced run in run order


ACTIVITY_LABEL = {
    "gpu": "GPU-active",
    "cpu-compute": "CPU compute (device-active analogue)",
}
"""The name of the device-active quantity by the run's ``activity`` (what g_step measures): the
label a run's results carry and every view of a run prints."""


@dataclass(frozen=True)
class Differencing:
    """Per-decode-step quantities (ns unless named otherwise) and the checks behind them.

    ``basis`` says how g_step was obtained: ``"traced-device"`` (GPU: the traced runs' device
    busy slope) or ``"traced-share x untraced-wall"`` (CPU: ``compute_share`` of the traced
    runs times the untraced t_step)."""

    n1: int
    n2: int
    estimator: str
    activity: str  # "gpu" or "cpu-compute"
    t_step_ns: float
    g_step_ns: float
    h_step_ns: float
    k_step: float
    host_fraction: float | None
    kernel_sum_step_ns: float | None
    kernel_union_step_ns: float | None
    sum_minus_union_step_ns: float | None
    copies_per_step: float | None
    copy_step_ns: float | None
    h2d_bytes_per_step: float | None
    d2h_bytes_per_step: float | None
    profiler_inflation: float | None
    traced_t_step_ns: float | None
    ci: dict
    fit_wall: LinearFit | None
    fit_gpu: LinearFit | None
    fit_kernels: LinearFit | None
    r2_wall: float | None
    r2_gpu: float | None
    slope_agreement: float | None  # wall: two-point vs fitted
    slope_agreement_gpu: float | None
    kv_range: tuple[int, int] | None = None  # (prompt + n1, prompt + n2 - 1)
    thread_t_step_ns: float | None = None  # t_step from the decode thread's CPU time
    r2_thread: float | None = None
    basis: str = "traced-device"
    compute_share: float | None = None  # CPU: traced compute slope / traced wall slope
    traced_g_step_ns: float | None = None  # slope of the traced busy time itself

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("fit_wall", "fit_gpu", "fit_kernels"):
            v = getattr(self, k)
            d[k] = v.to_dict() if v else None
        d["kv_range"] = list(self.kv_range) if self.kv_range else None
        return d


def _slope(series: dict[int, list[int]], n1: int, n2: int, estimator: str) -> float | None:
    if n1 not in series or n2 not in series or not series[n1] or not series[n2]:
        return None
    return two_point_slope(n1, float(estimate(series[n1], estimator)), n2, float(estimate(series[n2], estimator)))


def _fit(series: dict[int, list[int]], estimator: str) -> LinearFit | None:
    ns = sorted(n for n, v in series.items() if v)
    if len(ns) < 3:
        return None
    fit = linear_fit(ns, [estimate(series[n], estimator) for n in ns])
    return replace(fit, lack_of_fit_p=lack_of_fit_p(series))


def _within(series: dict[int, list[int]], n1: int, n2: int) -> dict[int, list[int]]:
    return {n: v for n, v in series.items() if n1 <= n <= n2 and v}


def slope_with_interval(
    series: dict[int, list[int]],
    n1: int,
    n2: int,
    estimator: str,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> Slope:
    """The per-step slope of ``series`` between ``n1`` and ``n2`` and its interval:
    Theil-Sen over every run (``theil-sen``), else the two-point slope of the per-N estimate
    with a percentile bootstrap."""
    if estimator == "theil-sen":
        ts = theil_sen(_within(series, n1, n2), level)
        if ts is not None:
            return ts
    est = "median" if estimator == "theil-sen" else estimator
    return bootstrap_slope(series, n1, n2, est, n_boot, seed, level)


def _interval(x: Slope | None, lo: float = -np.inf, hi: float = np.inf) -> list[float] | None:
    """``[x.lo, x.hi]`` intersected with the quantity's possible range [lo, hi]: a time is never
    negative and a share lies in [0, 1], so the true value is inside the range and cutting the
    interval to it keeps its coverage while never showing an impossible bound. None when there
    is no interval or it lies wholly outside the range."""
    if x is None:
        return None
    a, b = max(x.lo, lo), min(x.hi, hi)
    return [float(a), float(b)] if a <= b else None


_TINY = 1e-9
"""How close to 0 or 1 a share's interval may reach before MOVER's log scale (at 0 it has none)."""


def split(
    t: Slope, g_traced: Slope, activity: str, traced_t: Slope | None = None, paired_share: Slope | None = None
) -> dict:
    """g, h, the host fraction and (CPU) the compute share, each with its interval, on one
    basis: GPU ``g = g_traced``; CPU ``g = t * share`` with the share and its interval
    ``paired_share`` (:func:`paired_ratio`) where the traced runs give one, else
    ``g_traced / traced_t`` with the MOVER ratio of the two slopes' intervals (as if independent:
    wider). Intervals are None
    where MOVER does not apply (an interval reaching 0)."""
    if activity == "gpu":
        g = g_traced
        share = mover_ratio(g, t)
        share_value = g.value / t.value if t.value > 0 else None
        h = mover_difference(t, g)
    else:
        if traced_t is None or traced_t.value <= 0:
            raise ValueError("a CPU split needs a positive traced wall slope")
        # the paired share's estimate comes with its interval (the centre of Kendall's test);
        # without one, the ratio of the two slopes, in the middle of its MOVER interval
        share_value = paired_share.value if paired_share else g_traced.value / traced_t.value
        share = paired_share or mover_ratio(g_traced, traced_t)
        if share is not None:  # a share lies in (0, 1): cut to it, so the products below exist
            v = share.value
            share = Slope(v, min(max(share.lo, _TINY), v), max(min(share.hi, 1 - _TINY), v))
        g_val = t.value * share_value
        prod = mover_product(t, share) if share else None
        rest = mover_product(t, complement(share)) if share else None
        g = Slope(g_val, prod.lo, prod.hi) if prod else Slope(g_val, np.nan, np.nan)
        h = Slope(t.value - g_val, rest.lo, rest.hi) if rest else Slope(t.value - g_val, np.nan, np.nan)
    frac = complement(share) if share else None
    return {
        "g": g,
        "h": h,
        "share": share_value,
        "host_fraction": (1 - share_value) if share_value is not None else None,
        "ci_g": _interval(g, 0.0) if np.isfinite(g.lo) else None,
        "ci_h": _interval(h, 0.0) if np.isfinite(h.lo) else None,
        "ci_host_fraction": _interval(frac, 0.0, 1.0),
        "ci_share": _interval(share, 0.0, 1.0),
    }


def difference(
    series: Series,
    n1: int,
    n2: int,
    *,
    estimator: str = "theil-sen",
    activity: str = "gpu",
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
    prompt_len: int | None = None,
) -> Differencing:
    """Apply the differencing method to ``series`` between ``n1`` and ``n2`` (module doc)."""
    if not n1 < n2:
        raise ValueError(f"need n1 < n2, got {n1}, {n2}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; use one of {ESTIMATORS}")
    for name, ser in (("untraced wall", series.wall_ns), ("traced busy", series.busy_ns)):
        if not (ser.get(n1) and ser.get(n2)):
            raise ValueError(f"series lack repeats at n1 or n2 ({name})")
    t = slope_with_interval(series.wall_ns, n1, n2, estimator, seed=seed, n_boot=n_boot, level=level)
    wall = None
    if estimator == "theil-sen":  # rounds, run order and slow periods (hostgap.stats.rounds)
        from hostgap.stats.rounds import wall_estimate

        wall = wall_estimate(series.wall_ns, series.wall_rounds, series.wall_seq, n1, n2, level)
        t = Slope(wall.value, wall.lo, wall.hi) if wall else t
    gt = slope_with_interval(series.busy_ns, n1, n2, estimator, seed=seed + 1, n_boot=n_boot, level=level)
    tt = (
        slope_with_interval(series.traced_wall_ns, n1, n2, estimator, seed=seed + 2, n_boot=n_boot, level=level)
        if series.traced_wall_ns.get(n1) and series.traced_wall_ns.get(n2)
        else None
    )
    paired = None
    if activity != "gpu" and tt is not None and tt.value > 0:
        paired = paired_ratio(_within(series.busy_ns, n1, n2), _within(series.traced_wall_ns, n1, n2), level)
    sp = split(t, gt, activity, tt, paired)
    k = _slope(series.kernel_count, n1, n2, "median")
    ksum = _slope(series.kernel_sum_ns, n1, n2, estimator)
    kun = _slope(series.kernel_union_ns, n1, n2, estimator)
    infl = None
    if series.traced_wall_ns.get(n2) and series.wall_ns.get(n2):
        infl = float(estimate(series.traced_wall_ns[n2], estimator) / estimate(series.wall_ns[n2], estimator) - 1)
    method = (
        "Theil-Sen slope over every run of the sweep, Sen's interval"
        if estimator == "theil-sen"
        else f"percentile bootstrap over repeats ({n_boot} resamples, estimator {estimator})"
    )
    if wall is not None:
        method = _wall_method(wall)
    ci = {
        "level": level,
        "method": method
        + (
            "; compute share from the paired traced runs (Kendall's test inverted); g, h and the host fraction by MOVER"
            if paired is not None
            else "; g, h and the host fraction combined by MOVER"
        ),
        "repeats_untraced": [len(series.wall_ns[n1]), len(series.wall_ns[n2])],
        "repeats_traced": [len(series.busy_ns[n1]), len(series.busy_ns[n2])],
        "t_step_ns": _interval(t, 0.0),
        "g_step_ns": sp["ci_g"],
        "h_step_ns": sp["ci_h"],
        "host_fraction": sp["ci_host_fraction"],
    }
    if activity != "gpu":
        ci["compute_share"] = sp["ci_share"]
    if wall is not None:
        ci["wall"] = wall.to_dict()
    shown = {"t_step_ns": t.value, "g_step_ns": sp["g"].value, "h_step_ns": sp["h"].value}
    shown.update(host_fraction=sp["host_fraction"], compute_share=sp["share"] if activity != "gpu" else None)
    ci["edge"] = edge_reasons(shown, ci, estimator)  # points on their interval's edge, and why
    est = "median" if estimator == "theil-sen" else estimator
    fw, fg = _fit(series.wall_ns, est), _fit(series.busy_ns, est)
    fk = _fit(series.kernel_count, "median")
    opt = lambda s: _slope(s, n1, n2, "median") if s else None  # noqa: E731
    # both series have repeats at n1 and n2 (checked above), so both slopes exist
    two_t = cast(float, _slope(series.wall_ns, n1, n2, est))
    two_g = cast(float, _slope(series.busy_ns, n1, n2, est))
    ft = _fit(series.thread_ns, est) if series.thread_ns else None
    return Differencing(
        n1=n1,
        n2=n2,
        estimator=estimator,
        activity=activity,
        t_step_ns=t.value,
        g_step_ns=sp["g"].value,
        h_step_ns=sp["h"].value,
        k_step=k if k is not None else float("nan"),
        host_fraction=sp["host_fraction"] if t.value > 0 else None,
        kernel_sum_step_ns=ksum,
        kernel_union_step_ns=kun,
        sum_minus_union_step_ns=ksum - kun if ksum is not None and kun is not None else None,
        copies_per_step=opt(series.copies),
        copy_step_ns=opt(series.copy_ns),
        h2d_bytes_per_step=opt(series.h2d_bytes),
        d2h_bytes_per_step=opt(series.d2h_bytes),
        profiler_inflation=infl,
        traced_t_step_ns=tt.value if tt else None,
        ci=ci,
        fit_wall=fw,
        fit_gpu=fg,
        fit_kernels=fk,
        r2_wall=fw.r2 if fw else None,
        r2_gpu=fg.r2 if fg else None,
        slope_agreement=slope_agreement(two_t, fw.slope) if fw else None,
        slope_agreement_gpu=slope_agreement(two_g, fg.slope) if fg else None,
        kv_range=(prompt_len + n1, prompt_len + n2 - 1) if prompt_len is not None else None,
        thread_t_step_ns=_slope(series.thread_ns, n1, n2, est) if series.thread_ns else None,
        r2_thread=ft.r2 if ft else None,
        basis="traced-device" if activity == "gpu" else "traced-share x untraced-wall",
        compute_share=sp["share"] if activity != "gpu" else None,
        traced_g_step_ns=gt.value,
    )


def _wall_method(wall) -> str:
    """The ``ci.method`` words for the wall's estimate (:class:`hostgap.stats.rounds.WallEstimate`)."""
    how = (
        "wall interval from the spread of the rounds' slopes (batch means)"
        if wall.basis == "rounds"
        else "wall interval Sen's"
    )
    if wall.rho is not None:
        how += f", widened for the runs' correlation in run order (AR(1), rho {wall.rho:.2f})"
    slow = ""
    if wall.left_out:
        slow = (
            f"; {wall.left_out} untraced run(s) on slow periods left out of the wall's estimate, "
            "its interval holding every run's too"
        )
    return f"Theil-Sen slope over every run of the sweep{slow}; {how}; traced intervals Sen's"


def sweep_points(n1: int, n2: int, points: int = 5) -> list[int]:
    """N values for the multi-point check: ``points`` values spread geometrically over the
    decade ending at n2 (from n2 / 10), plus n1 and n2; sorted, distinct.

    >>> sweep_points(1, 128)
    [1, 13, 23, 41, 72, 128]
    """
    lo = max(n1 + 1, round(n2 / 10))
    vals = {n1, n2}
    if lo < n2:
        vals.update(int(round(v)) for v in np.geomspace(lo, n2, points))
    return sorted(v for v in vals if n1 <= v <= n2)


def series_from_raw(raw: dict) -> Series:
    """The differencing input from ``timings.json`` content (the raw timings of a run)."""
    tr = {int(n): v for n, v in raw["traced"].items()}

    def col(key):
        return {n: [int(s[key]) for s in v] for n, v in tr.items() if v}

    return Series(
        wall_ns={int(n): list(v) for n, v in raw["untraced_wall_ns"].items()},
        traced_wall_ns=col("wall_ns"),
        busy_ns=col("busy_ns"),
        kernel_sum_ns=col("kernel_sum_ns"),
        kernel_union_ns=col("kernel_union_ns"),
        kernel_count=col("kernel_count"),
        copies=col("copies"),
        copy_ns=col("copy_ns"),
        h2d_bytes=col("h2d_bytes"),
        d2h_bytes=col("d2h_bytes"),
        thread_ns={int(n): list(v) for n, v in raw.get("untraced_thread_ns", {}).items() if v and all(v)},
        wall_rounds={int(n): list(v) for n, v in raw.get("untraced_rounds", {}).items()},
        wall_seq={int(n): list(v) for n, v in raw.get("untraced_seq", {}).items()},
    )
