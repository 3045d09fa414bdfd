"""Sen's interval of a Theil-Sen slope against scipy's, on the tied data differencing gives
(every N repeated; repeated timings), and the tie term it rests on, by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import theilslopes

from hostgap.stats.confidence import _ties, theil_sen_line


def test_tie_term_by_hand():
    # groups of 2 and 3: 2*1*9 + 3*2*11 = 18 + 66; single values add nothing
    assert _ties(np.array([1.0, 1.0, 2.0, 2.0, 2.0, 3.0])) == 84.0
    assert _ties(np.array([4.0, 5.0, 6.0])) == 0.0


@pytest.mark.parametrize(("seed", "grain"), [(0, 1.0), (1, 1.0), (2, 1.0), (0, 10.0), (1, 10.0)])
def test_theil_sen_line_is_scipys_with_ties(seed, grain):
    """Five repeats at each of four N (ties in x), timings rounded to a clock's grain (ties in y;
    a coarse grain makes many): the slope, intercept and both ends of the interval are
    scipy.stats.theilslopes's."""
    rng = np.random.default_rng(seed)
    x = np.repeat([1.0, 2.0, 4.0, 8.0], 5)
    y = grain * np.round((100 + 7 * x + rng.normal(0, 3, len(x))) / grain)
    assert _ties(y) > 0  # the rounding made ties in y too
    ours = theil_sen_line(x, y, level=0.95)
    ref = theilslopes(y, x, alpha=0.95)
    assert ours == pytest.approx((ref.slope, ref.intercept, ref.low_slope, ref.high_slope), rel=1e-12, abs=1e-12)
    narrower = theil_sen_line(x, y, level=0.5)
    assert ours[2] <= narrower[2] <= narrower[3] <= ours[3]
