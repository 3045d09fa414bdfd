"""Confidence intervals of slopes and of their sums, products and ratios, used by the
differencing method (:mod:`hostgap.stats.differencing`): Sen's interval of a Theil-Sen slope
(Kendall's tau), MOVER (Zou and Donner) for independent estimates, and the paired ratio of two
slopes measured on the same runs (Kendall's test inverted, its estimate the test's own centre).
Pure numpy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Slope:
    """A per-step slope and its interval (``lo`` <= ``value`` <= ``hi``)."""

    value: float
    lo: float
    hi: float


def _ties(v: np.ndarray) -> float:
    """sum k (k - 1) (2 k + 5) over the groups of k equal values (Kendall's tau tie term)."""
    _u, k = np.unique(v, return_counts=True)
    k = k[k > 1].astype(np.float64)
    return float(np.sum(k * (k - 1) * (2 * k + 5)))


def theil_sen_line(x, y, level: float = 0.95) -> tuple[float, float, float, float]:
    """(slope, intercept, lo, hi): the median of the pairwise slopes between points at different
    x, the intercept median(y) - slope * median(x), and Sen's interval from the normal
    approximation of Kendall's tau with tie corrections (as scipy.stats.theilslopes computes
    it; done here in numpy, without importing scipy.stats)."""
    from statistics import NormalDist

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = x[j] - x[i], y[j] - y[i]
    keep = dx != 0
    if not keep.any():
        raise ValueError("a Theil-Sen line needs at least two distinct x")
    slopes = np.sort(dy[keep] / dx[keep])
    b = float(np.median(slopes))
    a = float(np.median(y) - b * np.median(x))
    n, nt = len(y), len(slopes)
    sigma = np.sqrt((n * (n - 1) * (2 * n + 5) - _ties(x) - _ties(y)) / 18.0)
    z = NormalDist().inv_cdf(0.5 * (1 + level))
    hi_i = min(int(np.round((nt + z * sigma) / 2.0)), nt - 1)
    lo_i = max(int(np.round((nt - z * sigma) / 2.0)) - 1, 0)
    return b, a, float(slopes[lo_i]), float(slopes[hi_i])


def theil_sen(series: dict[int, list], level: float = 0.95) -> Slope | None:
    """Theil-Sen slope over every run of ``series`` (N -> repeats) with Sen's interval; None
    with fewer than two distinct N."""
    x = np.concatenate([np.full(len(v), n, dtype=np.float64) for n, v in series.items() if v] or [np.zeros(0)])
    y = np.concatenate([np.asarray(v, dtype=np.float64) for v in series.values() if v] or [np.zeros(0)])
    if len(np.unique(x)) < 2:
        return None
    b, _a, lo, hi = theil_sen_line(x, y, level)
    return Slope(b, min(lo, b), max(hi, b))


def mover_difference(a: Slope, b: Slope) -> Slope:
    """a - b for independent estimates (MOVER: each side's half-widths added in quadrature)."""
    d = a.value - b.value
    lo = d - float(np.hypot(a.value - a.lo, b.hi - b.value))
    hi = d + float(np.hypot(a.hi - a.value, b.value - b.lo))
    return Slope(d, lo, hi)


def mover_product(a: Slope, b: Slope) -> Slope | None:
    """a * b for independent positive estimates (MOVER on the log scale); None unless both
    intervals are positive."""
    if min(a.lo, b.lo) <= 0:
        return None
    p = a.value * b.value
    lo = p * float(np.exp(-np.hypot(np.log(a.value / a.lo), np.log(b.value / b.lo))))
    hi = p * float(np.exp(np.hypot(np.log(a.hi / a.value), np.log(b.hi / b.value))))
    return Slope(p, lo, hi)


def mover_ratio(a: Slope, b: Slope) -> Slope | None:
    """a / b for independent positive estimates (MOVER on the log scale); None unless both
    intervals are positive."""
    if min(a.lo, b.lo) <= 0:
        return None
    return mover_product(a, Slope(1 / b.value, 1 / b.hi, 1 / b.lo))


def paired_ratio(num: dict[int, list], den: dict[int, list], level: float = 0.95) -> Slope | None:
    """``slope(num) / slope(den)`` when both come from the same runs (``num[n][i]`` and
    ``den[n][i]`` one run): the estimate and its interval from one construction, Kendall's test of
    "no trend in N" for ``num - c den`` (normal approximation, ties in N, continuity correction).
    The interval is every ratio ``c`` the test does not reject; the estimate is the ratio where
    the test's statistic S changes sign (the middle of the ratios with the smallest |S|): the
    Hodges-Lehmann estimate of the test, i.e. the median of the pairwise ratios ``d num / d den``
    when ``den`` grows with N. It lies inside the interval, since the interval holds every ratio
    the test finds least surprising. Noise the runs share cancels in ``num - c den``, which
    treating the two slopes as independent (:func:`mover_ratio`) ignores, so the interval is no
    wider than the data say. ``c`` moves S only where a pair of runs' ``num - c den`` swap order,
    at ``c = d num / d den`` (the cuts); the interval runs between those cuts. None when the runs
    are unpaired, fewer than 3, or the accepted set is empty or unbounded.

    >>> c = paired_ratio({1: [3.0, 3.3], 2: [5.0], 3: [7.1, 6.9], 4: [9.0]},
    ...                  {1: [6.0, 6.6], 2: [10.0], 3: [14.0, 14.0], 4: [18.0]})
    >>> c.lo < c.value < c.hi, round(c.value, 4)
    (True, 0.5)
    """
    from statistics import NormalDist

    ns = [n for n, v in num.items() if v]
    if any(len(den.get(n, ())) != len(num[n]) for n in ns):
        return None
    x = np.concatenate([np.full(len(num[n]), n, dtype=np.float64) for n in ns] or [np.zeros(0)])
    a = np.concatenate([np.asarray(num[n], dtype=np.float64) for n in ns] or [np.zeros(0)])
    b = np.concatenate([np.asarray(den[n], dtype=np.float64) for n in ns] or [np.zeros(0)])
    if len(x) < 3 or len(np.unique(x)) < 2:
        return None
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    sign = np.sign(dx[keep])  # each pair oriented so that N grows
    da, db = (a[j] - a[i])[keep] * sign, (b[j] - b[i])[keep] * sign
    moving = db != 0
    ratio = da[moving] / db[moving]
    cuts = np.unique(ratio)
    if len(cuts) == 0:
        return None
    # S(c) = sum of sign(da - c db) = sum of sign(db) sign(ratio - c), plus the pairs db = 0 leave
    # fixed; evaluated exactly at every cut and once inside every stretch between and beyond them
    probes = np.concatenate([[cuts[0] - 1.0], (cuts[:-1] + cuts[1:]) / 2, [cuts[-1] + 1.0]])
    grid = np.empty(2 * len(cuts) + 1)
    grid[0::2], grid[1::2] = probes, cuts
    fixed = float(np.sign(da[~moving]).sum())
    stat = (np.sign(db[moving])[None, :] * np.sign(ratio[None, :] - grid[:, None])).sum(axis=1) + fixed
    n = len(x)
    sigma = np.sqrt((n * (n - 1) * (2 * n + 5) - _ties(x)) / 18.0)
    z = NormalDist().inv_cdf(0.5 * (1 + level))
    ok = np.flatnonzero(np.abs(stat[0::2]) - 1 <= z * sigma)
    if len(ok) == 0 or ok[0] == 0 or ok[-1] == len(probes) - 1:
        return None
    least = np.flatnonzero(np.abs(stat) == np.abs(stat).min())
    centre = float((grid[least[0]] + grid[least[-1]]) / 2)
    return Slope(centre, float(cuts[ok[0] - 1]), float(cuts[ok[-1]]))


def complement(share: Slope) -> Slope:
    """1 - share, with its interval."""
    return Slope(1 - share.value, 1 - share.hi, 1 - share.lo)


_RANGE = {"host_fraction": (0.0, 1.0), "compute_share": (0.0, 1.0)}
"""The possible range of each reported quantity whose interval is cut to it (others: times, >= 0)."""


def edge_reason(
    key: str, value: float | None, interval: list[float] | None, estimator: str = "theil-sen"
) -> str | None:
    """Why the point ``value`` of quantity ``key`` does not lie strictly inside its ``interval``
    (None when it does, or without both): what the table prints beside such an interval.

    >>> edge_reason("t_step_ns", 2.0, [1.0, 3.0]) is None
    True
    >>> edge_reason("t_step_ns", 2.0, [2.0, 2.0])
    'no spread in the runs: an interval of zero width'
    >>> edge_reason("host_fraction", 1.0, [0.8, 1.0])
    'at the end of its possible range, where its interval is cut'
    >>> edge_reason("t_step_ns", 2.0, [2.0, 3.0], "min")
    "the min's percentile bootstrap, widened to reach the point"
    """
    if value is None or not interval:
        return None
    lo, hi = interval
    if lo < value < hi:
        return None
    if lo == hi:
        return "no spread in the runs: an interval of zero width"
    low, high = _RANGE.get(key, (0.0, np.inf))
    if value <= low or value >= high:
        return "at the end of its possible range, where its interval is cut"
    if estimator != "theil-sen":
        return f"the {estimator}'s percentile bootstrap, widened to reach the point"
    return "too few runs for an interval around the point"


def edge_reasons(values: dict[str, float | None], ci: dict, estimator: str = "theil-sen") -> dict[str, str]:
    """:func:`edge_reason` of every quantity in ``values`` that has an interval in ``ci``."""
    out = {}
    for key, value in values.items():
        why = edge_reason(key, value, ci.get(key), estimator)
        if why:
            out[key] = why
    return out
