"""The per-step wall and its interval from the untraced runs: rounds, run order, slow periods.

The untraced runs are taken in **rounds**: each round is one run of every N of the sweep, in a
shuffled order (:mod:`hostgap.capture.protocol.interleave`; the re-measurement rounds of
:mod:`hostgap.capture.protocol.converge` are rounds too), and their position in run order is recorded.
Run noise on a real machine is not independent from run to run: slow periods span consecutive
runs (frequency changes, a hypervisor's jitter, a neighbour on the memory bus; this machine's
own untraced repeats have a lag-1 autocorrelation of about 0.6, bench/results/noise-model.json).

**Slow periods** (:func:`slow_runs`). Interference only ever slows a run down. The runs' pace
(wall / the line through the per-N medians), in run order, is explained two ways: one AR(1) process (the
machine's own correlated noise, symmetric), or a few **levels** the runs stay on for stretches
(a quiet level and one or two slower ones; 1-D k-means with a Markov chain for the changes).
When the levels fit better by BIC, with a margin of :data:`BIC_MARGIN`, the runs on a level
above the lowest are slow periods and are left out of the estimate, provided the lowest level
holds at least :data:`MIN_QUIET` runs and each level counted holds a stretch of
:data:`MIN_PERIOD` consecutive runs (an isolated slow run is no period, and the Theil-Sen slope
barely feels it). The estimate is then the Theil-Sen slope over the quiet runs. Its interval
takes each reading's end on the side where that reading can err: interference only slows, so
the slope over every run errs high (if the runs left out were slow) and the quiet runs' slope
errs low (if they were not), and the interval runs from the quiet runs' lower end to the higher
of the two upper ends. Simulated (1,500 measurements twice, slow periods over 3 % quiet noise,
independent or AR(1)), it covered the step without interference in 94.7-95.8 % (median width
21-30 % of the step); the quiet runs' interval reaching up to every run's estimate only, in
93.5-94.5 % (8-11 %, too close to 93 %); the quiet runs' interval alone, 90.2-92.7 %; the hull
of both intervals, 96.0-96.7 % (30-39 %).

**The interval** (:func:`wall_estimate`): the Theil-Sen slope (the estimate) plus or minus
``t(0.975, R - 1) x sd(round slopes) / sqrt(R)`` (batch means over the R rounds, each round's own
Theil-Sen slope), times ``sqrt(F)``: F is the ratio of the estimate's variance to what batch
means expects, both computed for this measurement's own run order under AR(1) noise with the
lag-1 autocorrelation of the runs' pace (:func:`variance_factors`). A slow stretch shifts whole rounds the
same way (a run's pace scales its total, so a round's slope carries its pace), which the spread
of the rounds' slopes alone does not show. The autocorrelation of 30 runs is biased low (by
about (1 + 3 rho) / n) and noisy, so it is taken with three times that correction
(:func:`correlation`, :data:`BIAS_TIMES`): calibrated by the coverage simulation
(tests/test_capture_coverage_noise.py). With fewer than :data:`MIN_ROUNDS`
usable rounds, Sen's interval is widened by the factor of the independent-runs variance.

Pure: arrays in, numbers out (imports nothing of hostgap but the interval primitives;
:mod:`hostgap.stats.differencing` calls it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from hostgap.stats.confidence import theil_sen_line

MIN_ROUNDS = 3
"""Fewest rounds (each with three or more distinct N) for the batch-means interval (else Sen's)."""
BIC_MARGIN = 6.0
"""How much better (BIC) the levels must fit than one AR(1) process before runs are left out:
simulated, one-sided detections then stay under 1 % of measurements under symmetric noise
(independent, t(3), AR(1) with rho 0.6 and 0.8, the fitted model)."""
MIN_QUIET = 3
"""Fewest runs on the quiet (lowest) level for the levels to count."""
MIN_PERIOD = 2
"""A level counts only with a stretch of this many consecutive runs on it."""
RHO_MAX = 0.95
"""Largest autocorrelation the interval is widened for."""
BIAS_TIMES = 3.0
"""How many times the lag-1 autocorrelation's first-order bias, (1 + 3 rho) / n, is added back
(:func:`correlation`). One time corrects the estimate's mean, but 30 runs estimate rho with a
spread of about 0.15 and the interval's factor grows steeply with rho, so the draws that
underestimate it under-cover: simulated (2,000 draws, AR(1) with rho 0.8, 8 %), the wall covered
92.7 % with two times, 93.5 % with 2.5 and 94.3 % with three, while independent noise stayed at
95.5 % and its interval's width moved by under 1 %."""


def _line(x, y) -> tuple[float, float]:
    """(slope, intercept) of the Theil-Sen line: the median pairwise slope between points at
    different x, and median(y) - slope * median(x).

    >>> _line([1, 2, 3], [2.0, 4.0, 7.0])
    (2.5, -1.0)
    """
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(len(xa), k=1)
    keep = xa[j] != xa[i]
    b = float(np.median((ya[j] - ya[i])[keep] / (xa[j] - xa[i])[keep]))
    return b, float(np.median(ya) - b * np.median(xa))


def round_slopes(series: dict[int, list], rounds: dict[int, list[int]], n1: int, n2: int) -> list[float]:
    """The Theil-Sen slope of each round's runs within ``n1..n2`` (rounds with fewer than
    three distinct N are left out; a round index below 0 marks a run outside any round)."""
    by: dict[int, tuple[list[float], list[float]]] = {}
    for n, vals in series.items():
        if not n1 <= n <= n2:
            continue
        for v, k in zip(vals, rounds.get(n) or []):
            if k >= 0:
                xs, ys = by.setdefault(int(k), ([], []))
                xs.append(float(n))
                ys.append(float(v))
    return [_line(xs, ys)[0] for _k, (xs, ys) in sorted(by.items()) if len(set(xs)) >= 3]


@dataclass(frozen=True)
class Runs:
    """Untraced runs in run order: token count ``n``, wall ``y``, round (-1: outside any round)
    and position ``pos`` in run order."""

    n: np.ndarray
    y: np.ndarray
    round: np.ndarray
    pos: np.ndarray

    def take(self, mask: np.ndarray) -> Runs:
        return Runs(self.n[mask], self.y[mask], self.round[mask], self.pos[mask])


def in_run_order(
    series: dict[int, list], rounds: dict[int, list[int]], seq: dict[int, list[int]], n1: int, n2: int
) -> tuple[Runs, bool]:
    """The runs within ``n1..n2`` sorted by their position in run order, and whether that order
    is known (``seq`` gives every run's position; otherwise positions follow the series)."""
    rows = []
    known = True
    for n, vals in series.items():
        if not n1 <= n <= n2:
            continue
        pos, rnd = seq.get(n) or [], rounds.get(n) or []
        known = known and len(pos) == len(vals)
        for i, v in enumerate(vals):
            rows.append((pos[i] if i < len(pos) else -1, n, float(v), rnd[i] if i < len(rnd) else -1))
    if known:
        rows.sort()
    arr = np.array([r[1:] for r in rows], dtype=np.float64).reshape(-1, 3)
    p = np.array([r[0] for r in rows], dtype=np.float64) if known else np.arange(len(rows), dtype=np.float64)
    return Runs(arr[:, 0], arr[:, 1], arr[:, 2].astype(np.int64), p), known


def reference_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float] | None:
    """(intercept, slope) of the least-squares line through the per-N medians, weighted by
    1 / line(N)² (run noise is relative: a slow period stretches a whole run), so that a run's
    relative deviation is measured as well at N1 as at N2; None where the line is not positive.

    >>> a, b = reference_line(np.array([1.0, 1, 2, 2, 4, 4]), np.array([3.0, 3.2, 5, 5.2, 9, 9.2]))
    >>> round(a, 3), round(b, 3)
    (1.1, 2.0)
    """
    ns, at = np.unique(x, return_inverse=True)
    med = np.array([np.median(y[at == k]) for k in range(len(ns))])
    w = np.ones(len(ns))
    for _ in range(3):  # unweighted first, then weighted by the previous line
        sw, sx, sy = w.sum(), w @ ns, w @ med
        b = (sw * (w @ (ns * med)) - sx * sy) / (sw * (w @ (ns * ns)) - sx * sx)
        a = (sy - b * sx) / sw
        line = a + b * ns
        if np.any(line <= 0):
            return None
        w = 1.0 / line**2
    return float(a), float(b)


def lag1(r: np.ndarray) -> float:
    """Lag-1 autocorrelation of ``r`` about its median; 0 without spread.

    >>> lag1(np.array([1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0, -1.0]))
    0.125
    """
    d = r - np.median(r)
    den = float(np.sum(d * d))
    return float(np.sum(d[1:] * d[:-1]) / den) if den > 0 else 0.0


def correlation(r: np.ndarray) -> float:
    """The autocorrelation the interval is widened for: lag-1 of ``r`` plus
    :data:`BIAS_TIMES` times its first-order bias in a short series, ``(1 + 3 rho) / n``,
    clipped to [0, :data:`RHO_MAX`].

    >>> correlation(np.zeros(10)), round(correlation(np.array([1.0, 1, 1, -1, -1, -1] * 5)), 3)
    (0.0, 0.577)
    """
    if len(r) < 3 or not np.any(r != r[0]):
        return 0.0
    rho = lag1(r)
    return float(np.clip(rho + BIAS_TIMES * (1 + 3 * rho) / len(r), 0.0, RHO_MAX))


def _ols_weights(x: np.ndarray) -> np.ndarray:
    d = x - x.mean()
    return d / float(np.sum(d * d))


def variance_factors(runs: Runs, line: np.ndarray, rho: float, usable: list[int]) -> tuple[float, float]:
    """(batch means, independent runs): the variance of the slope over every run (least-squares
    weights) under relative AR(1) noise with ``rho`` in run order, divided by what batch means
    over the rounds ``usable`` expects, and by the variance for independent runs. Both are 1
    with ``rho`` 0 and complete rounds; the first is 0 (unused) without two usable rounds."""
    gap = np.abs(runs.pos[:, None] - runs.pos[None, :])
    cov = line[:, None] * line[None, :] * rho**gap
    c = _ols_weights(runs.n)
    true = float(c @ cov @ c)
    indep = float(c @ (line**2 * c))
    if len(usable) < 2:
        return 0.0, true / indep
    w = np.zeros((len(usable), len(runs.n)))
    for i, k in enumerate(usable):
        m = runs.round == k
        w[i, m] = _ols_weights(runs.n[m])
    dev = (np.eye(len(usable)) - 1.0 / len(usable)) @ w
    expect = float(np.trace(dev @ cov @ dev.T)) / (len(usable) * (len(usable) - 1))
    return true / expect, true / indep


# -- slow periods ---------------------------------------------------------------------------


def ar1_loglik(r: np.ndarray) -> float:
    """Gaussian log-likelihood of ``r`` as one AR(1) process (exact, the first value from the
    stationary law), maximised over its mean and variance and over rho on a grid of 50 values
    in [0, 0.98]."""
    n = len(r)
    rho = np.linspace(0.0, 0.98, 50)[:, None]
    c0 = np.sqrt(1 - rho**2)
    z0, zs, cs = r[0] * c0, r[None, 1:] - rho * r[None, :-1], 1 - rho
    mu = (z0 * c0 + (zs * cs).sum(axis=1, keepdims=True)) / (c0**2 + (n - 1) * cs**2)
    s2 = ((z0 - c0 * mu) ** 2 + ((zs - cs * mu) ** 2).sum(axis=1, keepdims=True)) / n
    ll = -0.5 * n * (np.log(2 * np.pi * np.maximum(s2, 1e-300)) + 1) + np.log(c0)
    return float(ll.max())


def levels(r: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """The best split of ``r`` into ``k`` (2 or 3) levels by least squares (1-D k-means, exact:
    every split of the sorted values is tried): (residual sum of squares, each value's level,
    0 the lowest).

    >>> levels(np.array([0.0, 5.0, 0.2, 5.2, 9.0]), 3)[1].tolist()
    [0, 1, 0, 1, 2]
    """
    order = np.argsort(r, kind="stable")
    s = r[order]
    m = len(s)
    c1, c2 = np.concatenate([[0.0], np.cumsum(s)]), np.concatenate([[0.0], np.cumsum(s * s)])
    i, j = np.meshgrid(np.arange(m + 1), np.arange(m + 1), indexing="ij")
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = c2[j] - c2[i] - (c1[j] - c1[i]) ** 2 / (j - i)
    cost = np.where(j > i, np.maximum(cost, 0.0), np.inf)
    if k == 2:
        total = cost[0, 1:m] + cost[1:m, m]
        cut = [int(np.argmin(total)) + 1]
    else:
        total = cost[0, :, None] + cost + cost[None, :, m]
        a, b = np.unravel_index(int(np.argmin(total)), total.shape)
        cut = [int(a), int(b)]
    rank = np.searchsorted(np.array(cut), np.arange(m), side="right")
    lab = np.empty(m, dtype=np.int64)
    lab[order] = rank
    return float(total.min()), lab


def level_loglik(r: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """Log-likelihood of ``r`` as ``k`` levels (:func:`levels`) with one Gaussian noise around
    them, the level of each run a Markov chain in run order (one chance to stay, the others
    shared); and the levels."""
    rss, lab = levels(r, k)
    n = len(r)
    ll = -0.5 * n * (math.log(2 * math.pi * max(rss / n, 1e-300)) + 1) - math.log(k)
    stays = int(np.sum(lab[1:] == lab[:-1]))
    moves = n - 1 - stays
    if stays:
        ll += stays * math.log(stays / (n - 1))
    if moves:
        ll += moves * math.log(moves / (n - 1) / (k - 1))
    return ll, lab


def longest_stretch(mask: np.ndarray) -> int:
    """Most consecutive True values.

    >>> longest_stretch(np.array([True, False, True, True, False]))
    2
    """
    best = cur = 0
    for v in mask:
        cur = cur + 1 if v else 0
        best = max(best, cur)
    return best


def slow_runs(runs: Runs, ref: tuple[float, float] | None) -> tuple[np.ndarray, float | None]:
    """The runs (in ``runs``' order) on slow periods, and the evidence: BIC of one AR(1) process
    minus BIC of the best levels (positive: the levels fit better), both over the runs' pace
    (wall / ``ref``, :func:`reference_line`); no runs and None when the runs are too few to
    tell or keep one pace (module doc, "Slow periods")."""
    none = np.zeros(len(runs.y), dtype=bool)
    if ref is None or len(runs.y) < 4 * MIN_QUIET:
        return none, None
    r = runs.y / (ref[0] + ref[1] * runs.n)  # each run's pace relative to the line
    if not np.any(r != r[0]):
        return none, None
    n = len(r)
    ar1 = -2 * ar1_loglik(r) + 3 * math.log(n)
    fits = []
    for k in (2, 3):
        ll, lab = level_loglik(r, k)
        fits.append((-2 * ll + (k + 2) * math.log(n), k, lab))
    bic, k, lab = min(fits, key=lambda f: f[0])
    evidence = ar1 - bic
    quiet = lab == 0
    if evidence <= BIC_MARGIN or quiet.sum() < MIN_QUIET or longest_stretch(quiet) < MIN_PERIOD:
        return none, evidence
    slow = none.copy()
    for level in range(1, k):
        if longest_stretch(lab == level) >= MIN_PERIOD:
            slow |= lab == level
    if len(np.unique(runs.n[~slow])) < 3:  # too few N left for a slope
        return none, evidence
    return slow, evidence


# -- the wall's estimate and interval -------------------------------------------------------


@dataclass(frozen=True)
class WallEstimate:
    """The per-step wall (``value``) and its interval; ``basis`` ``"rounds"`` (batch means) or
    ``"sen"``; ``rho`` the autocorrelation it was widened for (None: run order unknown);
    ``left_out`` runs on slow periods (``evidence``: :func:`slow_runs`), ``every`` the estimate
    over every run then."""

    value: float
    lo: float
    hi: float
    basis: str
    runs: int
    rounds: int
    rho: float | None
    left_out: int = 0
    evidence: float | None = None
    every: float | None = None  # with runs left out: the Theil-Sen slope over every run

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("value"), d.pop("lo"), d.pop("hi")
        return d


def _estimate(runs: Runs, ordered: bool, level: float, ref: tuple[float, float] | None) -> WallEstimate:
    """Theil-Sen slope over ``runs`` and its interval (module doc); ``ref``:
    :func:`reference_line` of the runs."""
    from scipy.stats import t

    b, _a, lo, hi = theil_sen_line(runs.n, runs.y, level)
    line = (ref[0] + ref[1] * runs.n) if ref else np.maximum(runs.y, 1e-300)
    rho = correlation(runs.y / line) if ordered and ref else 0.0
    usable = [int(k) for k in np.unique(runs.round) if k >= 0 and len(np.unique(runs.n[runs.round == k])) >= 3]
    f_rounds, f_sen = variance_factors(runs, line, rho, usable)
    seen = rho if ordered else None
    if len(usable) < MIN_ROUNDS:
        s = math.sqrt(f_sen)
        return WallEstimate(
            b, b - (b - min(lo, b)) * s, b + (max(hi, b) - b) * s, "sen", len(runs.y), len(usable), seen
        )
    slopes = np.array([_line(runs.n[runs.round == k], runs.y[runs.round == k])[0] for k in usable])
    q = float(t.ppf(0.5 * (1 + level), len(slopes) - 1) * slopes.std(ddof=1) / math.sqrt(len(slopes)))
    q *= math.sqrt(f_rounds)
    return WallEstimate(b, b - q, b + q, "rounds", len(runs.y), len(usable), seen)


def wall_estimate(
    series: dict[int, list],
    rounds: dict[int, list[int]],
    seq: dict[int, list[int]],
    n1: int,
    n2: int,
    level: float = 0.95,
) -> WallEstimate | None:
    """The per-step wall from the untraced runs within ``n1..n2`` (module doc): slow periods left
    out where the run order shows them, the Theil-Sen slope, its interval widened for the runs'
    correlation in run order (and, with slow periods left out, reaching up to every run's upper
    end); None with fewer than two distinct N.

    >>> s = {1: [10.0, 11.0, 10.0], 5: [50.0, 50.0, 52.0], 9: [90.0, 91.0, 89.0]}
    >>> r = {1: [0, 1, 2], 5: [0, 1, 2], 9: [0, 1, 2]}
    >>> w = wall_estimate(s, r, {}, 1, 9)
    >>> (w.value, round(w.lo, 3), round(w.hi, 3), w.basis)
    (10.0, 9.821, 10.179, 'rounds')
    """
    runs, ordered = in_run_order(series, rounds, seq, n1, n2)
    if len(np.unique(runs.n)) < 2:
        return None
    ref = reference_line(runs.n, runs.y)
    every = _estimate(runs, ordered, level, ref)
    slow, evidence = slow_runs(runs, ref) if ordered else (np.zeros(len(runs.y), dtype=bool), None)
    if not slow.any():
        return WallEstimate(**{**asdict(every), "evidence": evidence})
    kept = runs.take(~slow)
    quiet = _estimate(kept, ordered, level, reference_line(kept.n, kept.y))
    return WallEstimate(
        quiet.value,
        quiet.lo,
        max(quiet.hi, every.hi),
        quiet.basis,
        quiet.runs,
        quiet.rounds,
        quiet.rho,
        int(slow.sum()),
        evidence,
        every.value,
    )
