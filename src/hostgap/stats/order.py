"""The binomial tail under the distribution-free interval of a median (order statistics).

Among n independent values, the count below their median is Binomial(n, 1/2), so the interval
[x_(k), x_(n-k+1)] holds the median with probability 1 - 2 P(Bin(n, 1/2) <= k - 1). Finding the
rank k needs only that tail: it is computed here, exactly (integers) up to :data:`EXACT_MAX_N`
values and in log space above, instead of importing ``scipy.stats`` for it (0.6-0.8 s of a
command's start-up, paid by every ``analyze --json`` for one number).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

EXACT_MAX_N = 4096
"""Up to this many values the tail is summed in integers (exact); above it, in floating point
log space, where a rank could differ from the exact one only if the tail came within about
1e-12 (relative) of the bound."""


def half_binomial_quantile(n: int, q: float) -> int:
    """The largest j with ``P(Bin(n, 1/2) <= j) <= q`` (at most n), or -1 when even
    ``P(X <= 0) = 2^-n`` exceeds q.

    >>> half_binomial_quantile(9, 0.025), half_binomial_quantile(5, 0.025), half_binomial_quantile(30, 0.025)
    (1, -1, 9)
    """
    if n < 0:
        raise ValueError(f"n must be at least 0, not {n}")
    if q >= 1.0:
        return n
    if q < 0.0:
        return -1
    if n <= EXACT_MAX_N:
        bound = Fraction(q)  # the float's exact value: the comparison scipy's cdf <= q makes
        limit = bound.numerator << n  # P(X <= j) <= q  <=>  sum_{i<=j} C(n, i) * den <= num * 2^n
        c, total = 1, 0
        for i in range(n + 1):
            total += c
            if total * bound.denominator > limit:
                return i - 1
            c = c * (n - i) // (i + 1)
        return n
    at = np.arange(1, n + 1, dtype=np.float64)
    log_pmf = np.concatenate(([-n * math.log(2.0)], -n * math.log(2.0) + np.cumsum(np.log(n - at + 1) - np.log(at))))
    log_cdf = np.logaddexp.accumulate(log_pmf)
    ok = np.flatnonzero(log_cdf <= math.log(q)) if q > 0 else np.zeros(0, dtype=np.int64)
    return int(ok[-1]) if len(ok) else -1
