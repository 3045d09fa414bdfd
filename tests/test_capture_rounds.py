"""The wall's estimate from rounds and run order (hostgap.stats.rounds): each piece against a
reference written out the long way, and the slow-period rule on constructed run sequences."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hostgap.stats import rounds as R

SWEEP = [1, 13, 23, 41, 72, 128]


def _runs(values, order=None, rounds=None) -> R.Runs:
    """Runs in run order from (n, y) pairs; rounds of six by default."""
    n = np.array([v[0] for v in values], dtype=np.float64)
    y = np.array([v[1] for v in values], dtype=np.float64)
    k = np.arange(len(n)) // 6 if rounds is None else np.asarray(rounds)
    pos = np.arange(len(n), dtype=np.float64) if order is None else np.asarray(order, dtype=np.float64)
    return R.Runs(n, y, k.astype(np.int64), pos)


def _measurement(pace, order_seed=0, rounds=5):
    """``rounds`` rounds of the default sweep, shuffled, a run's wall scaled by its pace."""
    rng = np.random.default_rng(order_seed)
    ns = [int(n) for _ in range(rounds) for n in rng.permutation(SWEEP)]
    pace = np.resize(np.asarray(pace, dtype=np.float64), len(ns))
    return [(n, (5e6 + 0.8e6 * n) * p) for n, p in zip(ns, pace)]


def _series(values, with_order=True):
    series: dict[int, list] = {}
    rnd: dict[int, list] = {}
    seq: dict[int, list] = {}
    for i, (n, y) in enumerate(values):
        series.setdefault(n, []).append(y)
        rnd.setdefault(n, []).append(i // 6)
        seq.setdefault(n, []).append(i)
    return series, rnd, (seq if with_order else {})


def test_levels_is_the_best_split_by_brute_force():
    rng = np.random.default_rng(2)
    for _ in range(6):
        r = rng.normal(size=7) + rng.integers(0, 3, size=7) * 2.0
        for k in (2, 3):
            best = math.inf
            for labels in itertools.product(range(k), repeat=len(r)):
                lab = np.array(labels)
                if len(set(labels)) < k:
                    continue
                best = min(best, sum(float(np.sum((r[lab == j] - r[lab == j].mean()) ** 2)) for j in range(k)))
            rss, lab = R.levels(r, k)
            assert rss == pytest.approx(best, abs=1e-9)
            got = sum(float(np.sum((r[lab == j] - r[lab == j].mean()) ** 2)) for j in range(k))
            assert got == pytest.approx(rss, abs=1e-9)
            means = [r[lab == j].mean() for j in range(k)]
            assert means == sorted(means)  # level 0 is the lowest


def test_level_loglik_by_hand():
    r = np.array([0.0, 0.1, 0.0, 1.0, 1.1, 1.0, 0.1, 0.0])
    ll, lab = R.level_loglik(r, 2)
    assert lab.tolist() == [0, 0, 0, 1, 1, 1, 0, 0]
    rss = sum(float(np.sum((r[lab == j] - r[lab == j].mean()) ** 2)) for j in (0, 1))
    n = len(r)
    want = -0.5 * n * (math.log(2 * math.pi * rss / n) + 1) - math.log(2)
    want += 5 * math.log(5 / 7) + 2 * math.log(2 / 7)  # 5 stays, 2 moves, shared by one other level
    assert ll == pytest.approx(want)
    r3 = np.array([0.0, 0.0, 5.0, 5.0, 9.0, 9.1, 0.1])
    ll3, lab3 = R.level_loglik(r3, 3)
    assert lab3.tolist() == [0, 0, 1, 1, 2, 2, 0]
    rss3 = 0.02 / 3 + 0.005  # the three near 0 about 1/30, 9 and 9.1 about 9.05
    want3 = -3.5 * (math.log(2 * math.pi * rss3 / 7) + 1) - math.log(3)
    want3 += 3 * math.log(3 / 6) + 3 * math.log(3 / 6 / 2)  # 3 stays; 3 moves, each to one of two levels
    assert ll3 == pytest.approx(want3)


def test_ar1_loglik_is_the_exact_likelihood_at_its_best_rho():
    rng = np.random.default_rng(3)
    e = np.zeros(40)
    for i in range(1, 40):
        e[i] = 0.6 * e[i - 1] + rng.normal()
    e += 2.0

    def exact(rho):
        n = len(e)
        c0 = math.sqrt(1 - rho**2)
        z = np.concatenate([[e[0] * c0], e[1:] - rho * e[:-1]])
        c = np.concatenate([[c0], np.full(n - 1, 1 - rho)])
        mu = float(z @ c / (c @ c))
        s2 = float(np.sum((z - c * mu) ** 2) / n)
        return -0.5 * n * (math.log(2 * math.pi * s2) + 1) + math.log(c0)

    grid = np.linspace(0.0, 0.98, 50)
    assert R.ar1_loglik(e) == pytest.approx(max(exact(float(g)) for g in grid))
    # white noise: rho 0 is on the grid and the likelihood is the plain Gaussian one
    w = rng.normal(size=30)
    plain = -0.5 * 30 * (math.log(2 * math.pi * np.var(w)) + 1)
    assert R.ar1_loglik(w) >= plain - 1e-9


def test_reference_line_goes_through_the_medians_relatively():
    x = np.array([1.0, 1, 1, 10, 10, 10, 100, 100, 100])
    y = 2.0 + 3.0 * x
    y[[0, 3, 6]] *= 1.5  # one slow run per N: the medians ignore it
    a, b = R.reference_line(x, y)
    assert (a, b) == pytest.approx((2.0, 3.0))
    assert R.reference_line(np.array([1.0, 2.0, 3.0]), np.array([5.0, 1.0, -3.0])) is None


def test_lag1_and_its_correction():
    rng = np.random.default_rng(9)
    x = rng.normal(size=60)
    assert R.lag1(x + 5.0) == pytest.approx(R.lag1(x))  # about the median: a pace, not a deviation
    d = x - np.median(x)
    assert R.lag1(x) == pytest.approx(float(np.sum(d[1:] * d[:-1]) / np.sum(d * d)))
    y = np.repeat(rng.normal(size=30), 2)  # pairs: a clear, unclipped correlation
    rho = R.lag1(y)
    assert 0.2 < rho + R.BIAS_TIMES * (1 + 3 * rho) / 60 < R.RHO_MAX
    assert R.correlation(y) == pytest.approx(rho + R.BIAS_TIMES * (1 + 3 * rho) / 60)
    r = np.array([1.0, -1.0] * 10)
    assert R.lag1(r) == pytest.approx(-19 / 20)
    assert R.correlation(r) == 0.0  # clipped at 0
    assert R.correlation(np.ones(5)) == 0.0 and R.correlation(np.array([1.0, 2.0])) == 0.0
    s = np.array([1.0] * 10 + [-1.0] * 10)
    rho = R.lag1(s)
    assert rho == pytest.approx(17 / 20)
    assert R.correlation(s) == pytest.approx(min(rho + R.BIAS_TIMES * (1 + 3 * rho) / 20, R.RHO_MAX))


def test_variance_factors_are_one_without_correlation_and_grow_with_it():
    runs = _runs(_measurement([1.0]))
    line = 5e6 + 0.8e6 * runs.n
    fr, fs = R.variance_factors(runs, line, 0.0, [0, 1, 2, 3, 4])
    assert fr == pytest.approx(1.0) and fs == pytest.approx(1.0)
    f6, s6 = R.variance_factors(runs, line, 0.6, [0, 1, 2, 3, 4])
    f9, s9 = R.variance_factors(runs, line, 0.9, [0, 1, 2, 3, 4])
    assert 1 < f6 < f9 and 1 < s6 < s9
    # the factors written out: the slope's variance over its batch-means expectation
    n = len(runs.n)
    cov = np.outer(line, line) * 0.6 ** np.abs(np.subtract.outer(runs.pos, runs.pos))
    c = (runs.n - runs.n.mean()) / np.sum((runs.n - runs.n.mean()) ** 2)
    w = np.zeros((5, n))
    for k in range(5):
        m = runs.round == k
        w[k, m] = (runs.n[m] - runs.n[m].mean()) / np.sum((runs.n[m] - runs.n[m].mean()) ** 2)
    expect = sum(float((w[k] - w.mean(axis=0)) @ cov @ (w[k] - w.mean(axis=0))) for k in range(5)) / (5 * 4)
    assert f6 == pytest.approx(float(c @ cov @ c) / expect)
    assert s6 == pytest.approx(float(c @ cov @ c) / float(c @ (line**2 * c)))
    assert R.variance_factors(runs, line, 0.6, [0])[0] == 0.0


def test_run_order_sorts_by_position_and_keeps_rounds():
    series = {1: [10.0, 11.0], 5: [50.0, 52.0]}
    runs, known = R.in_run_order(series, {1: [0, 1], 5: [0, -1]}, {1: [2, 0], 5: [1, 3]}, 1, 5)
    assert known and runs.y.tolist() == [11.0, 50.0, 10.0, 52.0] and runs.round.tolist() == [1, 0, 0, -1]
    assert runs.pos.tolist() == [0, 1, 2, 3] and runs.n.tolist() == [1, 5, 1, 5]
    runs, known = R.in_run_order(series, {}, {1: [2, 0]}, 1, 5)  # positions missing at N 5
    assert not known and runs.y.tolist() == [10.0, 11.0, 50.0, 52.0] and runs.round.tolist() == [-1] * 4
    runs, _ = R.in_run_order({**series, 9: [90.0]}, {}, {}, 1, 5)  # outside n1..n2: left out
    assert 9 not in runs.n


def test_a_slow_period_is_left_out_and_the_interval_holds_both_readings():
    """Quiet runs with 2 % noise, runs 7-16 of 30 20 % slower: those ten runs are left out, the
    estimate is the quiet slope, and the interval holds the every-run interval too."""
    rng = np.random.default_rng(4)
    pace = 1 + 0.02 * rng.standard_normal(30)
    pace[7:17] *= 1.2
    values = _measurement(pace)
    runs = _runs(values)
    slow, evidence = R.slow_runs(runs, R.reference_line(runs.n, runs.y))
    assert np.flatnonzero(slow).tolist() == list(range(7, 17)) and evidence > R.BIC_MARGIN
    w = R.wall_estimate(*_series(values), 1, 128)
    assert w.left_out == 10 and w.runs == 20 and w.evidence == pytest.approx(evidence)
    every = R.wall_estimate(*_series(values, with_order=False), 1, 128)  # no run order: no detection
    assert every.left_out == 0 and every.evidence is None and every.rho is None
    assert abs(w.value / 0.8e6 - 1) < 0.01 and every.value > w.value  # slow runs pull every run's up
    assert w.lo < w.value < w.hi and w.lo <= 0.8e6 <= w.hi
    assert w.hi >= w.every  # the interval reaches up to every run's upper end
    kept = runs.take(~slow)
    quiet = R._estimate(kept, True, 0.95, R.reference_line(kept.n, kept.y))
    full = R._estimate(runs, True, 0.95, R.reference_line(runs.n, runs.y))
    assert (w.value, w.basis, w.rounds, w.rho) == (pytest.approx(quiet.value), quiet.basis, quiet.rounds, quiet.rho)
    assert w.lo == pytest.approx(quiet.lo) and w.hi == pytest.approx(max(quiet.hi, full.hi))
    assert w.every == pytest.approx(full.value) and every.every is None
    assert full.rho > quiet.rho  # the slow period reads as correlation in every run's residuals
    assert w.to_dict() == {
        "basis": w.basis,
        "runs": 20,
        "rounds": w.rounds,
        "rho": w.rho,
        "left_out": 10,
        "evidence": w.evidence,
        "every": w.every,
    }


def test_the_evidence_is_the_bic_difference_written_out():
    rng = np.random.default_rng(4)
    pace = 1 + 0.02 * rng.standard_normal(30)
    pace[7:17] *= 1.2
    runs = _runs(_measurement(pace))
    ref = R.reference_line(runs.n, runs.y)
    r = runs.y / (ref[0] + ref[1] * runs.n)
    n = len(r)
    ar1 = -2 * R.ar1_loglik(r) + 3 * math.log(n)
    best = min(-2 * R.level_loglik(r, k)[0] + (k + 2) * math.log(n) for k in (2, 3))
    assert R.slow_runs(runs, ref)[1] == pytest.approx(ar1 - best)
    # runs exactly on their line keep one pace: nothing to tell
    flat = _runs([(n, 5e6 + 0.8e6 * n) for n in SWEEP * 5])
    slow, evidence = R.slow_runs(flat, R.reference_line(flat.n, flat.y))
    assert not slow.any() and evidence is None


def test_symmetric_noise_and_isolated_slow_runs_are_not_slow_periods():
    rng = np.random.default_rng(5)
    runs = _runs(_measurement(1 + 0.05 * rng.standard_normal(30)))
    slow, evidence = R.slow_runs(runs, R.reference_line(runs.n, runs.y))
    assert not slow.any() and evidence is not None and evidence <= R.BIC_MARGIN
    pace = 1 + 0.01 * rng.standard_normal(30)
    pace[[4, 11, 19, 26]] *= 1.4  # single slow runs: no stretch, no period
    runs = _runs(_measurement(pace))
    assert not R.slow_runs(runs, R.reference_line(runs.n, runs.y))[0].any()
    # too few runs to tell, or no spread at all
    short = _runs(_measurement(pace, rounds=2)[: 4 * R.MIN_QUIET - 1])
    slow, evidence = R.slow_runs(short, R.reference_line(short.n, short.y))
    assert not slow.any() and len(slow) == 4 * R.MIN_QUIET - 1 and evidence is None
    flat = _runs(_measurement([1.0]))
    assert R.slow_runs(flat, None)[1] is None


def test_a_quiet_level_needs_runs_and_a_stretch():
    """Two low runs in a slow measurement are too few for a quiet level (MIN_QUIET); three low
    runs scattered one by one are no stretch (MIN_PERIOD)."""
    rng = np.random.default_rng(6)
    base = 1 + 0.01 * rng.standard_normal(30)
    two = base.copy()
    two[[5, 6]] /= 1.25
    runs = _runs(_measurement(two))
    slow, evidence = R.slow_runs(runs, R.reference_line(runs.n, runs.y))
    assert not slow.any() and evidence > R.BIC_MARGIN  # the levels fit, the quiet level is too small
    scattered = base.copy()
    scattered[[3, 12, 21]] /= 1.25
    runs = _runs(_measurement(scattered))
    assert not R.slow_runs(runs, R.reference_line(runs.n, runs.y))[0].any()
    three = base.copy()
    three[[20, 21, 22]] /= 1.25  # a stretch of three fast runs: the rest is the slow level
    runs = _runs(_measurement(three))
    slow, _ = R.slow_runs(runs, R.reference_line(runs.n, runs.y))
    assert np.flatnonzero(~slow).tolist() == [20, 21, 22] or not slow.any()  # three N at most
    # a quiet level on too few N for a slope is not used
    assert len(np.unique(runs.n[~slow])) >= 3 or not slow.any()


def test_wall_interval_without_rounds_is_sens_widened_and_with_rounds_batch_means():
    rng = np.random.default_rng(7)
    values = _measurement(1 + 0.03 * rng.standard_normal(30))
    series, rnd, seq = _series(values)
    w = R.wall_estimate(series, rnd, seq, 1, 128)
    assert w.basis == "rounds" and w.rounds == 5 and w.runs == 30 and w.lo < w.value < w.hi
    from hostgap.stats.confidence import theil_sen_line

    runs, _ = R.in_run_order(series, rnd, seq, 1, 128)
    b, _a, lo, hi = theil_sen_line(runs.n, runs.y)
    assert w.value == pytest.approx(b)
    slopes = R.round_slopes(series, rnd, 1, 128)
    from scipy.stats import t

    ref = R.reference_line(runs.n, runs.y)
    line = ref[0] + ref[1] * runs.n
    f, _ = R.variance_factors(runs, line, R.correlation(runs.y / line), [0, 1, 2, 3, 4])
    q = t.ppf(0.975, 4) * np.std(slopes, ddof=1) / math.sqrt(5) * math.sqrt(f)
    assert (w.lo, w.hi) == pytest.approx((b - q, b + q))
    one = R.wall_estimate(series, {}, seq, 1, 128)  # no rounds: Sen's, widened for the order
    _f, fs = R.variance_factors(runs, line, R.correlation(runs.y / line), [])
    assert one.basis == "sen" and one.rounds == 0
    assert (one.lo, one.hi) == pytest.approx((b - (b - lo) * math.sqrt(fs), b + (hi - b) * math.sqrt(fs)))
    assert R.wall_estimate({1: [1.0, 2.0]}, {}, {}, 1, 128) is None


def test_slow_periods_shift_whole_rounds_and_the_interval_widens_for_it():
    """AR(1) pace with rho 0.8: the interval is wider than plain batch means by the factor."""
    rng = np.random.default_rng(8)
    e = np.zeros(30)
    for i in range(1, 30):
        e[i] = 0.8 * e[i - 1] + 0.05 * rng.standard_normal()
    series, rnd, seq = _series(_measurement(1 + e))
    w = R.wall_estimate(series, rnd, seq, 1, 128)
    plain = R.wall_estimate(series, rnd, {}, 1, 128)
    assert w.rho is not None and w.rho > 0.5 and plain.rho is None
    assert w.hi - w.lo > 1.2 * (plain.hi - plain.lo)
    # without the run order: plain batch means (complete rounds, no correlation: F = 1)
    from scipy.stats import t

    slopes = R.round_slopes(series, rnd, 1, 128)
    q = t.ppf(0.975, 4) * np.std(slopes, ddof=1) / math.sqrt(5)
    assert (plain.lo, plain.hi) == pytest.approx((plain.value - q, plain.value + q))


def test_the_paired_share_centre_against_exact_arithmetic():
    """The paired ratio's estimate is the middle of the ratios where Kendall's statistic is
    smallest in size, S(c) the sum over pairs at different N of sign(d num - c d den): checked
    with exact fractions, pairs whose den does not move included, odd and even numbers of cuts."""
    from fractions import Fraction

    from hostgap.stats.confidence import paired_ratio

    rng = np.random.default_rng(10)
    checked = 0
    for trial in range(12):
        ns = [1, 2, 3, 5, 8, 13, 21][: 5 + trial % 3]
        den = {n: [int(v)] for n, v in zip(ns, rng.integers(10, 40, len(ns)) * 4 + 3 * np.array(ns))}
        den[ns[1]] = list(den[ns[0]])  # one pair whose den does not move
        num = {n: [int(v)] for n, v in zip(ns, rng.integers(0, 30, len(ns)) + 2 * np.array(ns))}
        got = paired_ratio(num, den, level=0.5)
        x = [n for n in ns]
        a = [Fraction(num[n][0]) for n in ns]
        b = [Fraction(den[n][0]) for n in ns]
        pairs = [(a[j] - a[i], b[j] - b[i]) for i in range(len(x)) for j in range(i + 1, len(x))]
        cuts = sorted({da / db for da, db in pairs if db != 0})

        def s(c, pairs=pairs):
            return sum((da - c * db > 0) - (da - c * db < 0) for da, db in pairs)

        cand = [cuts[0] - 1] + [
            v for k, c in enumerate(cuts) for v in ([c] + ([(c + cuts[k + 1]) / 2] if k + 1 < len(cuts) else []))
        ]
        cand.append(cuts[-1] + 1)
        least = min(abs(s(c)) for c in cand)
        best = [c for c in cand if abs(s(c)) == least]
        if got is not None:
            assert got.value == pytest.approx(float((best[0] + best[-1]) / 2), rel=1e-12)
            assert got.lo < got.value < got.hi
            checked += 1
    assert checked >= 4, checked
