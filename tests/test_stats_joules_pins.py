"""Pins of the energy model's intervals where the mutation audit found them loose."""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.stats.joules import decompose, line_value_interval
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
    want_fixed = line_value_interval(x, y, wide.lo, wide.hi, 0.0, 0.975)
    want_window = line_value_interval(x, y, wide.lo, wide.hi, 10.0, 0.975)
    assert out["ci"]["fixed_j"] == pytest.approx([max(0.0, want_fixed[0]), want_fixed[1]])
    assert out["ci"]["window_j"] == pytest.approx(list(want_window))
    narrow = wall_estimate(ej, rounds, {}, 1, 10, 0.95)
    assert (narrow.lo, narrow.hi) != (wide.lo, wide.hi)  # the two levels differ here
