"""Pins of the energy model's intervals where the mutation audit found them loose."""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.stats.joules import decompose, line_value_interval, rounds_value_interval
from hostgap.stats.rounds import wall_estimate


def test_the_interval_holds_the_lowest_order_statistic_at_a_crossing():
    # two runs whose residual lines cross inside the slope interval (at b = 5): the second
    # smallest residual is 20 at both ends of [4, 6] and 10 at the crossing
    x = [-10.0, 10.0] + [0.0] * 7
    y = [-40.0, 60.0] + [100.0] * 7
    lo, hi = line_value_interval(x, y, 4.0, 6.0, 0.0, 0.95)
    assert lo == pytest.approx(10.0)
    assert hi == pytest.approx(100.0)


def test_fixed_and_window_intervals_join_two_intervals_at_half_the_error():
    rng = np.random.default_rng(3)
    ns = [1, 4, 7, 10]
    reps = 8
    e = {n: [int((2.0 + 0.5 * n + 0.05 * rng.standard_normal()) * 1e6) for _ in range(reps)] for n in ns}
    w = {n: [10**9] * reps for n in ns}
    rounds = {n: list(range(reps)) for n in ns}
    out = decompose(e, w, 1, 10, batch=2, rounds=rounds)
    ej = {n: [v * 1e-6 for v in vals] for n, vals in e.items()}
    wide = wall_estimate(ej, rounds, {}, 1, 10, 0.975)
    x = np.concatenate([np.full(reps, float(n)) for n in ns])
    y = np.concatenate([ej[n] for n in ns])
    rnd = np.concatenate([rounds[n] for n in ns])
    for key, at in (("fixed_j", 0.0), ("window_j", 10.0)):
        a = line_value_interval(x, y, wide.lo, wide.hi, at, 0.975)
        b = rounds_value_interval(x, y, rnd, at, 0.95)
        assert out["ci"][key] == pytest.approx([max(0.0, min(a[0], b[0])), max(a[1], b[1])]), key
    narrow = wall_estimate(ej, rounds, {}, 1, 10, 0.95)
    assert (narrow.lo, narrow.hi) != (wide.lo, wide.hi)  # the two levels differ here


def test_the_rounds_interval_carries_a_slow_round():
    # four rounds of exact runs, one of them slow throughout (every run 30 % more): the runs'
    # order statistics see a tight cloud, the rounds' values spread
    ns = [1, 4, 7, 10]
    e = {n: [int((2.0 + 0.5 * n) * f * 1e6) for f in (1.0, 1.0, 1.3, 1.0)] for n in ns}
    w = {n: [10**9] * 4 for n in ns}
    rounds = {n: [0, 1, 2, 3] for n in ns}
    out = decompose(e, w, 1, 10, batch=1, rounds=rounds)
    x = np.concatenate([np.full(4, float(n)) for n in ns])
    y = np.concatenate([[v * 1e-6 for v in e[n]] for n in ns])
    rv = rounds_value_interval(x, y, np.concatenate([rounds[n] for n in ns]), 10.0, 0.95)
    assert rv is not None and out["ci"]["window_j"][1] == pytest.approx(rv[1])
    assert rounds_value_interval(x, y, np.full(len(x), -1), 10.0, 0.95) is None  # no round
    assert rounds_value_interval(x[:8], y[:8], np.concatenate([rounds[n] for n in ns])[:8], 0.0, 0.95) is None


def test_without_rounds_the_runs_interval_alone():
    ns = [1, 4, 7, 10]
    rng = np.random.default_rng(5)
    e = {n: [int((2.0 + 0.5 * n + 0.05 * rng.standard_normal()) * 1e6) for _ in range(6)] for n in ns}
    w = {n: [10**9] * 6 for n in ns}
    out = decompose(e, w, 1, 10, batch=1)  # no rounds recorded
    x = np.concatenate([np.full(6, float(n)) for n in ns])
    y = np.concatenate([[v * 1e-6 for v in e[n]] for n in ns])
    from hostgap.stats.confidence import theil_sen

    wide = theil_sen({n: [v * 1e-6 for v in e[n]] for n in ns}, 0.975)
    a = line_value_interval(x, y, wide.lo, wide.hi, 10.0, 0.975)
    assert out["ci"]["window_j"] == pytest.approx(list(a))


def test_rounds_interval_by_hand():
    x = [1, 2, 3] * 3
    y = [3, 5, 7, 4, 6, 8, 2, 4, 6]  # three rounds of slope 2, intercepts 1, 2, 0
    lo, hi = rounds_value_interval(x, y, [0] * 3 + [1] * 3 + [2] * 3, 0.0, 0.95)
    q = 4.302652729911275 * 1.0 / np.sqrt(3)  # t(0.975, 2) x sd / sqrt(3)
    assert (lo, hi) == pytest.approx((1 - q, 1 + q))
    lo, hi = rounds_value_interval(x, y, [0] * 3 + [1] * 3 + [2] * 3, 2.0, 0.95)
    assert (lo, hi) == pytest.approx((5 - q, 5 + q))


def test_the_linearity_check_uses_the_runs_estimator():
    # at N = 10 every run but one is 3 J high: the minimum per N lies on a line, the median not
    ns = [1, 4, 7, 10]
    e = {n: [int((2 + 0.5 * n) * 1e6)] * 5 for n in ns}
    e[10] = [int(7e6)] + [int(10e6)] * 4
    w = {n: [10**9] * 5 for n in ns}
    assert decompose(e, w, 1, 10, batch=1, estimator="min")["linear"] is True
    assert decompose(e, w, 1, 10, batch=1, estimator="median")["linear"] is False


def test_too_few_runs_for_an_interval_show_none():
    # six runs and no rounds: the median's interval needs seven at 97.5 %, the rounds' three rounds
    e = {1: [int(2.5e6)] * 2, 4: [int(4e6)] * 2, 10: [int(7e6)] * 2}
    w = {n: [10**9] * 2 for n in e}
    out = decompose(e, w, 1, 10, batch=1, estimator="median")
    assert out["fixed_j"] == pytest.approx(2.0) and out["window_j"] == pytest.approx(7.0)
    assert out["ci"]["fixed_j"] is None and out["ci"]["window_j"] is None and out["ci"]["token_j"] is None
