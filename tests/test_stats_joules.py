"""The decomposed energy model's arithmetic, pinned by hand (docs/energy.md)."""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.stats.confidence import Slope
from hostgap.stats.joules import decompose, line_value_interval, median_interval, median_rank

NS = [1, 4, 7, 10]


def exact(fixed_j: float, step_j: float, repeats: int = 5, jitter: float = 0.0):
    """Runs E(n) = fixed + n step (µJ) with walls W(n) = (1 + 0.1 n) s, in rounds."""
    rng = np.random.default_rng(0)
    e = {
        n: [int(round((fixed_j + n * step_j + jitter * rng.standard_normal()) * 1e6)) for _ in range(repeats)]
        for n in NS
    }
    w = {n: [int((1 + 0.1 * n) * 1e9)] * repeats for n in NS}
    rounds = {n: list(range(repeats)) for n in NS}
    return e, w, rounds


def test_the_decomposition_by_hand():
    e, w, rounds = exact(2.0, 0.5)
    out = decompose(e, w, 1, 10, batch=4, rounds=rounds)
    assert out["available"] and out["linear"]
    assert out["step_j"] == pytest.approx(0.5)
    assert out["fixed_j"] == pytest.approx(2.0)
    assert out["window_j"] == pytest.approx(7.0)  # 2 + 10 * 0.5
    assert out["request_j"] == pytest.approx(1.75)  # 7 / 4
    assert out["token_j"] == pytest.approx(0.175)  # 7 / (4 * 10)
    # runs' powers E / W: 2.5/1.1, 4/1.4, 5.5/1.7, 7/2.0 (five of each): the median lies between
    # the 10th and 11th of 20, 4/1.4 and 5.5/1.7
    assert out["power_w"] == pytest.approx((4 / 1.4 + 5.5 / 1.7) / 2)
    assert out["runs"] == 20 and out["runs_left_out"] == 0
    assert out["at_tokens"] == 10 and out["batch"] == 4
    ci = out["ci"]
    assert ci["step_j"][0] == pytest.approx(0.5) and ci["step_j"][1] == pytest.approx(0.5)
    assert ci["fixed_j"] == pytest.approx([2.0, 2.0])
    assert ci["request_j"] == pytest.approx([1.75, 1.75]) and ci["token_j"] == pytest.approx([0.175, 0.175])


def test_request_and_token_at_another_length_follow_the_line():
    e, w, rounds = exact(3.0, 0.25)
    out = decompose(e, w, 1, 10, batch=2, at=4, rounds=rounds)
    assert out["window_j"] == pytest.approx(4.0)  # 3 + 4 * 0.25
    assert out["request_j"] == pytest.approx(2.0) and out["token_j"] == pytest.approx(0.5)


def test_step_power_is_the_energy_slope_over_the_wall_slope():
    e, w, rounds = exact(2.0, 0.5)
    out = decompose(e, w, 1, 10, batch=1, rounds=rounds, t_step=Slope(0.1e9, 0.08e9, 0.125e9))
    assert out["step_power_w"] == pytest.approx(5.0)  # 0.5 J / 0.1 s
    lo, hi = out["ci"]["step_power_w"]
    assert lo < 5.0 < hi and lo >= 0.5 / 0.125 - 1e-9 and hi <= 0.5 / 0.08 + 1e-9


def test_noisy_runs_intervals_hold_the_values_and_scale_together():
    e, w, rounds = exact(2.0, 0.5, repeats=8, jitter=0.05)
    out = decompose(e, w, 1, 10, batch=4, rounds=rounds)
    ci = out["ci"]
    for k in ("step_j", "fixed_j", "window_j", "request_j", "token_j", "power_w"):
        assert ci[k][0] <= out[k] <= ci[k][1], k
    assert ci["request_j"] == pytest.approx([x / 4 for x in ci["window_j"]])
    assert ci["token_j"] == pytest.approx([x / 40 for x in ci["window_j"]])
    assert out["request_j"] == pytest.approx(out["fixed_j"] / 4 + 10 * out["step_j"] / 4)
    assert out["token_j"] == pytest.approx(out["window_j"] / 40)
    assert 0.45 < out["step_j"] < 0.55 and ci["fixed_j"][0] < 2.0 < ci["fixed_j"][1]


def test_unread_runs_are_left_out():
    e, w, rounds = exact(2.0, 0.5)
    e[4][0] = None
    e[10][3] = None
    out = decompose(e, w, 1, 10, batch=1, rounds=rounds)
    assert out["runs"] == 18 and out["runs_left_out"] == 2
    assert out["step_j"] == pytest.approx(0.5)


def test_too_few_runs_say_so():
    out = decompose({1: [None, None], 10: [5, 6]}, {1: [1, 1], 10: [2, 2]}, 1, 10, batch=1)
    assert out == {
        "batch": 1,
        "at_tokens": 10,
        "runs": 2,
        "runs_left_out": 2,
        "available": False,
        "reason": "too few runs with an energy reading at two token counts",
    }


def test_impossible_values_are_not_shown():
    e, w, rounds = exact(-1.0, 0.5)  # a negative intercept: noise larger than the fixed part
    out = decompose(e, w, 1, 10, batch=1, rounds=rounds)
    assert out["fixed_j"] is None and out["ci"]["fixed_j"] is None
    assert out["step_j"] == pytest.approx(0.5) and out["window_j"] == pytest.approx(4.0)
    assert "fixed energy below 0 (noise larger than it): not shown" in out["notes"]
    e, w, rounds = exact(2.0, -0.01)
    out = decompose(e, w, 1, 10, batch=1, rounds=rounds)
    assert out["step_j"] is None and out["window_j"] is None and out["token_j"] is None
    assert out["ci"]["step_j"] is None and out["ci"]["token_j"] is None
    assert any("energy per step not above 0" in n for n in out["notes"])


def test_other_estimators_take_the_two_point_slope():
    e, w, _r = exact(2.0, 0.5)
    e[10] = [e[10][0] + 1_000_000] + e[10][1:]  # one run 1 J high: min ignores it
    out = decompose(e, w, 1, 10, batch=1, estimator="min")
    assert out["step_j"] == pytest.approx(0.5)
    assert decompose({1: [1], 4: [2]}, {1: [1], 4: [1]}, 1, 10, batch=1, estimator="min")["available"] is False


def test_a_bent_series_fails_the_linearity_check():
    e = {n: [int((2 + 0.5 * n + (3.0 if n == 10 else 0)) * 1e6)] * 5 for n in NS}
    w = {n: [10**9] * 5 for n in NS}
    out = decompose(e, w, 1, 10, batch=1, estimator="median")
    assert out["linear"] is False and any("energy" in n for n in out["notes"])


def test_median_rank_and_interval():
    assert [median_rank(n) for n in (5, 6, 9, 10, 30)] == [None, 1, 2, 2, 10]
    assert median_interval([3, 1, 2, 6, 5, 4]) == (1.0, 6.0)
    assert median_interval([]) is None


def test_median_interval_covers_at_its_level():
    rng = np.random.default_rng(1)
    x = rng.standard_exponential((4000, 25))
    k = median_rank(25)
    s = np.sort(x, axis=1)
    covered = (s[:, k - 1] <= np.log(2)) & (np.log(2) <= s[:, 25 - k])
    assert covered.mean() >= 0.945  # exact coverage 95.7 % for n = 25, k = 8


def test_line_value_interval_by_hand():
    x = [1, 1, 1, 2, 2, 2, 3, 3, 3]
    y = [11, 12, 13, 21, 22, 23, 31, 32, 33]
    assert line_value_interval(x, y, 10, 10, 0, 0.95) == (1.0, 3.0)  # residuals 1,2,3 (x3): k = 2
    assert line_value_interval(x, y, 10, 10, 2, 0.95) == (21.0, 23.0)
    # slopes 9 .. 11: the residuals at 0 move by up to 3; the ends are reached at the slope ends
    lo, hi = line_value_interval(x, y, 9, 11, 0, 0.95)
    assert lo == pytest.approx(min(np.sort(np.array(y) - 11 * np.array(x))[1], 1.0))
    assert hi == pytest.approx(np.sort(np.array(y) - 9 * np.array(x))[-2])
    assert line_value_interval([1, 2, 3], [1, 2, 3], 1, 1, 0, 0.95) is None


def test_line_value_interval_tries_where_the_runs_cross():
    # two runs whose residual order swaps inside the slope interval: the k-th residual is lowest
    # at the crossing, not at either end
    x = np.array([0.0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2])
    y = np.array([5.0, 5, 5, 5, 5, 5, 15, 15, 15, 15, 15, 15])
    got = line_value_interval(x, y, 4.0, 6.0, 1.0, 0.95)
    grid = np.linspace(4.0, 6.0, 2001)
    k = median_rank(12, 0.95)
    r = np.sort(y[None, :] - grid[:, None] * (x[None, :] - 1.0), axis=1)
    assert got[0] == pytest.approx(r[:, k - 1].min()) and got[1] == pytest.approx(r[:, 12 - k].max())
