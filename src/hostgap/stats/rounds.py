"""The interval of the per-step wall from rounds of the sweep (batch means).

The untraced runs are taken in **rounds**: each round is one run of every N of the sweep, in a
shuffled order (:mod:`hostgap.capture.protocol.interleave`; the re-measurement rounds of
:mod:`hostgap.capture.protocol.converge` are rounds too). Run noise on a real machine is not independent
from run to run: slow periods span consecutive runs (frequency changes, a hypervisor's jitter;
this machine's own untraced repeats have a lag-1 autocorrelation of about 0.6,
bench/results/noise-model.json). Sen's interval assumes independent runs and then covers the
true slope in only ~75 % of draws. A round is long compared with such a slow period, so the
slopes of different rounds are nearly independent: the interval is the Theil-Sen slope over
every run (the estimate, unchanged) plus or minus ``t(0.975, R - 1) x sd(round slopes) / sqrt(R)``
(batch means over the R rounds, each round's own Theil-Sen slope). One slow run or a burst of
them makes its round's slope an outlier, which widens the interval; it barely moves the
estimate (the median of every pairwise slope).

Pure: arrays in, numbers out (imports nothing of hostgap; :mod:`hostgap.stats.differencing`
calls it).
"""

from __future__ import annotations

import numpy as np

MIN_ROUNDS = 3
"""Fewest complete rounds for the batch-means interval (else Sen's interval is kept)."""


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


def run_order_correlation(series: dict[int, list], seq: dict[int, list[int]], n1: int, n2: int) -> float:
    """Lag-1 autocorrelation, in run order (``seq``: each run's position), of the runs'
    relative residuals from the Theil-Sen line through all of them; clipped to [0, 0.9]; 0
    without the order.

    >>> s = {1: [10.0, 10.0], 2: [20.0, 20.0]}
    >>> run_order_correlation(s, {1: [0, 2], 2: [1, 3]}, 1, 2)
    0.0
    """
    pts = [(k, n, float(v)) for n, vals in series.items() if n1 <= n <= n2 for v, k in zip(vals, seq.get(n) or [])]
    if len(pts) < 4 or len({n for _k, n, _v in pts}) < 2:
        return 0.0
    pts.sort()
    x = np.array([n for _k, n, _v in pts], dtype=np.float64)
    y = np.array([v for _k, _n, v in pts])
    b, a = _line(x, y)
    line = a + b * x
    if np.any(line <= 0):
        return 0.0
    r = y / line - 1
    r = r - np.median(r)
    den = float(np.sum(r * r))
    return float(np.clip(np.sum(r[1:] * r[:-1]) / den, 0.0, 0.9)) if den > 0 else 0.0


def round_interval(
    estimate: float,
    series: dict[int, list],
    rounds: dict[int, list[int]],
    n1: int,
    n2: int,
    level: float = 0.95,
    seq: dict[int, list[int]] | None = None,
) -> tuple[float, float] | None:
    """(lo, hi): ``estimate`` plus or minus the batch-means half-width over the rounds; None with fewer than
    :data:`MIN_ROUNDS` rounds. With the run order (``seq``), the half-width is widened by
    ``sqrt(1 + rho)``, ``rho`` the runs' lag-1 autocorrelation (:func:`run_order_correlation`):
    slow periods that span the end of one round and the start of the next correlate adjacent
    rounds' slopes, which the spread of the slopes alone does not show (calibrated by the
    coverage simulation, tests/test_capture_coverage_noise.py: without it, 92-93 % under the
    fitted model).

    >>> s = {1: [10.0, 11.0, 10.0], 5: [50.0, 50.0, 52.0], 9: [90.0, 91.0, 89.0]}
    >>> r = {1: [0, 1, 2], 5: [0, 1, 2], 9: [0, 1, 2]}
    >>> lo, hi = round_interval(10.0, s, r, 1, 9)
    >>> (round(lo, 3), round(hi, 3))
    (9.821, 10.179)
    """
    from scipy.stats import t

    sl = np.asarray(round_slopes(series, rounds, n1, n2))
    if len(sl) < MIN_ROUNDS:
        return None
    rho = run_order_correlation(series, seq, n1, n2) if seq else 0.0
    q = float(t.ppf(0.5 * (1 + level), len(sl) - 1) * sl.std(ddof=1) / np.sqrt(len(sl)) * np.sqrt(1 + rho))
    return float(estimate) - q, float(estimate) + q
