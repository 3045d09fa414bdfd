"""The differencing method (METHOD.md §4): per-decode-step wall, device-active and host time
from whole-run totals at two token counts, with no model of the step.

Run the same workload generating N1 and N2 tokens. Prefill, loading and warm-up are the same in
both runs and cancel, so for any run total X(N)::

    x_step = (X(N2) - X(N1)) / (N2 - N1)

    t_step = slope of W (untraced wall)        g_step = slope of G (device-active union)
    h_step = t_step - g_step  (host-exposed)    k_step = slope of K (kernel count)

The result is the mean over KV lengths prompt + N1 .. prompt + N2 - 1. Repeats give bootstrap
confidence intervals: the repeats at N1 and at N2 are resampled independently, the estimator
(minimum by default: the least-disturbed run on a shared machine; or the median) is applied to
each resample, and the percentile interval of the resulting slopes is reported.

The multi-point check fits X(N) = a + b N by least squares over a sweep of N and reports R² and
the relative difference between the two-point slope and the fitted slope b.

Everything here is pure: arrays in, frozen dataclasses out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

ESTIMATORS = ("min", "median", "mean")


def estimate(values, estimator: str = "min", axis: int = -1) -> np.ndarray | float:
    """Reduce repeats with the named estimator."""
    x = np.asarray(values, dtype=np.float64)
    if estimator == "min":
        return np.min(x, axis=axis)
    if estimator == "median":
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
    """y = intercept + slope * n, least squares."""

    slope: float
    intercept: float
    r2: float
    points: int

    def to_dict(self) -> dict:
        return asdict(self)


def linear_fit(n, y) -> LinearFit:
    """Least-squares line through (n, y); R² = 1 - SS_res / SS_tot (1.0 when y is constant
    and the line fits it exactly).

    >>> f = linear_fit([1, 2, 3], [3.0, 5.0, 7.0])
    >>> (round(f.slope, 9), round(f.intercept, 9), f.r2)
    (2.0, 1.0, 1.0)
    """
    x = np.asarray(n, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("a linear fit needs at least two distinct n")
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    ss_res = float(np.sum(resid**2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return LinearFit(float(slope), float(intercept), float(r2), int(len(x)))


def slope_agreement(two_point: float, fitted: float) -> float | None:
    """|two-point - fitted| / |fitted| (paper: 0.55 %); None when the fitted slope is 0."""
    if fitted == 0:
        return None
    return abs(two_point - fitted) / abs(fitted)


def bootstrap_slopes(r1, r2, dn: int, estimator: str = "min", n_boot: int = 2000,
                     seed: int = 0) -> np.ndarray:
    """Bootstrap distribution of (est(R2*) - est(R1*)) / dn, resampling each side's repeats
    with replacement (vectorised: one ``n_boot x repeats`` index draw per side)."""
    rng = np.random.default_rng(seed)
    a = np.asarray(r1, dtype=np.float64)
    b = np.asarray(r2, dtype=np.float64)
    ia = rng.integers(0, len(a), size=(n_boot, len(a)))
    ib = rng.integers(0, len(b), size=(n_boot, len(b)))
    return (estimate(b[ib], estimator, axis=1) - estimate(a[ia], estimator, axis=1)) / dn


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


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


@dataclass(frozen=True)
class Differencing:
    """Per-decode-step quantities (ns unless named otherwise) and the checks behind them."""

    n1: int
    n2: int
    estimator: str
    activity: str  # "gpu" or "cpu-compute"
    t_step_ns: float
    g_step_ns: float
    h_step_ns: float
    k_step: float
    host_fraction: float | None
    kernel_sum_step_ns: float
    kernel_union_step_ns: float
    sum_minus_union_step_ns: float
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
    return two_point_slope(n1, estimate(series[n1], estimator), n2, estimate(series[n2], estimator))


def _fit(series: dict[int, list[int]], estimator: str) -> LinearFit | None:
    ns = sorted(n for n, v in series.items() if v)
    if len(ns) < 3:
        return None
    return linear_fit(ns, [estimate(series[n], estimator) for n in ns])


def difference(series: Series, n1: int, n2: int, *, estimator: str = "min", activity: str = "gpu",
               n_boot: int = 2000, level: float = 0.95, seed: int = 0,
               prompt_len: int | None = None) -> Differencing:
    """Apply the differencing method to ``series`` between ``n1`` and ``n2``."""
    if not n1 < n2:
        raise ValueError(f"need n1 < n2, got {n1}, {n2}")
    dn = n2 - n1
    t = _slope(series.wall_ns, n1, n2, estimator)
    g = _slope(series.busy_ns, n1, n2, estimator)
    if t is None or g is None:
        raise ValueError("series lack repeats at n1 or n2")
    k = _slope(series.kernel_count, n1, n2, "median")
    ksum = _slope(series.kernel_sum_ns, n1, n2, estimator)
    kun = _slope(series.kernel_union_ns, n1, n2, estimator)
    tt = _slope(series.traced_wall_ns, n1, n2, estimator)
    infl = None
    if series.traced_wall_ns.get(n2) and series.wall_ns.get(n2):
        infl = float(estimate(series.traced_wall_ns[n2], estimator) / estimate(series.wall_ns[n2], estimator) - 1)

    tb = bootstrap_slopes(series.wall_ns[n1], series.wall_ns[n2], dn, estimator, n_boot, seed)
    gb = bootstrap_slopes(series.busy_ns[n1], series.busy_ns[n2], dn, estimator, n_boot, seed + 1)
    hb = tb - gb
    with np.errstate(divide="ignore", invalid="ignore"):
        fb = np.where(tb > 0, hb / tb, np.nan)
    fb = fb[np.isfinite(fb)]
    ci = {
        "level": level,
        "method": f"percentile bootstrap over repeats ({n_boot} resamples, estimator {estimator})",
        "repeats_untraced": [len(series.wall_ns[n1]), len(series.wall_ns[n2])],
        "repeats_traced": [len(series.busy_ns[n1]), len(series.busy_ns[n2])],
        "t_step_ns": percentile_ci(tb, level),
        "g_step_ns": percentile_ci(gb, level),
        "h_step_ns": percentile_ci(hb, level),
        "host_fraction": percentile_ci(fb, level) if len(fb) else None,
    }
    fw, fg = _fit(series.wall_ns, estimator), _fit(series.busy_ns, estimator)
    fk = _fit(series.kernel_count, "median")
    opt = lambda s: _slope(s, n1, n2, "median") if s else None  # noqa: E731
    return Differencing(
        n1=n1, n2=n2, estimator=estimator, activity=activity,
        t_step_ns=t, g_step_ns=g, h_step_ns=t - g, k_step=k if k is not None else float("nan"),
        host_fraction=(t - g) / t if t > 0 else None,
        kernel_sum_step_ns=ksum, kernel_union_step_ns=kun,
        sum_minus_union_step_ns=ksum - kun if ksum is not None and kun is not None else None,
        copies_per_step=opt(series.copies), copy_step_ns=opt(series.copy_ns),
        h2d_bytes_per_step=opt(series.h2d_bytes), d2h_bytes_per_step=opt(series.d2h_bytes),
        profiler_inflation=infl, traced_t_step_ns=tt, ci=ci,
        fit_wall=fw, fit_gpu=fg, fit_kernels=fk,
        r2_wall=fw.r2 if fw else None, r2_gpu=fg.r2 if fg else None,
        slope_agreement=slope_agreement(t, fw.slope) if fw else None,
        slope_agreement_gpu=slope_agreement(g, fg.slope) if fg else None,
        kv_range=(prompt_len + n1, prompt_len + n2 - 1) if prompt_len is not None else None,
        thread_t_step_ns=_slope(series.thread_ns, n1, n2, estimator) if series.thread_ns else None,
        r2_thread=(ft.r2 if (ft := _fit(series.thread_ns, estimator)) else None) if series.thread_ns else None,
    )


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
