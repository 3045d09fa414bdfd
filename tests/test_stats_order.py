"""The binomial tail under a median's distribution-free interval (hostgap.stats.order), against
scipy's binomial distribution, and the two ranks built on it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from hostgap.model.levers import arithmetic as A
from hostgap.stats import joules as J
from hostgap.stats.order import EXACT_MAX_N, half_binomial_quantile


def scipy_quantile(n: int, q: float) -> int:
    ok = np.flatnonzero(binom.cdf(np.arange(n + 1), n, 0.5) <= q)
    return int(ok[-1]) if len(ok) else -1


@pytest.mark.parametrize("q", [0.025, (1 - 0.95) / 2, 0.05, 0.005, 0.1, 0.001])
def test_it_agrees_with_scipy_exact_and_in_log_space(q):
    ns = [*range(0, 400), EXACT_MAX_N - 1, EXACT_MAX_N, EXACT_MAX_N + 1, 7919, 50_001, 400_000]
    assert [half_binomial_quantile(n, q) for n in ns] == [scipy_quantile(n, q) for n in ns]


def test_hand_worked_values():
    # n = 9: P(X <= 1) = 10/512 = 0.0195 <= 0.025 < P(X <= 2) = 46/512
    assert half_binomial_quantile(9, 0.025) == 1
    assert half_binomial_quantile(9, 10 / 512) == 1 and half_binomial_quantile(9, 10 / 512 - 1e-12) == 0
    # n = 5: P(X <= 0) = 1/32 = 0.03125 > 0.025: no interval
    assert half_binomial_quantile(5, 0.025) == -1 and half_binomial_quantile(5, 1 / 32) == 0
    # the whole distribution at q = 1; nothing below 0
    assert half_binomial_quantile(7, 1.0) == 7 and half_binomial_quantile(7, -0.1) == -1
    assert half_binomial_quantile(0, 0.5) == -1 and half_binomial_quantile(0, 1.0) == 0  # Bin(0): X = 0
    # exact ties: P(X <= 7) of Bin(15, 1/2) is exactly 1/2
    assert half_binomial_quantile(15, 0.5) == 7 and half_binomial_quantile(15, 0.5 - 1e-15) == 6
    assert half_binomial_quantile(EXACT_MAX_N + 10, 0.0) == -1
    with pytest.raises(ValueError):
        half_binomial_quantile(-1, 0.025)


def test_the_ranks_built_on_it():
    # levers: a 0-based index, None below 6 steps
    assert [A.median_rank(n) for n in (5, 6, 7, 8, 9, 30, 100)] == [None, 0, 0, 0, 1, 9, 39]
    # energy: a 1-based rank, None when even the extremes fall short
    assert [J.median_rank(n) for n in (5, 6, 9, 30, 100)] == [None, 1, 2, 10, 40]
    assert J.median_rank(30, 0.5) == 13  # P(X <= 12) = 0.1808 <= 0.25 < P(X <= 13) = 0.2923: k - 1 = 12
