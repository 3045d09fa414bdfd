"""The differencing math: exact answers on constructed series, invariants on generated ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from hostgap.stats.differencing import (
    Series,
    bootstrap_slopes,
    difference,
    estimate,
    linear_fit,
    percentile_ci,
    slope_agreement,
    sweep_points,
    two_point_slope,
)


def _series(ns, wall_fn, busy_fn, k0=100, k=50, repeats=4, noisy=True):
    rng = np.random.default_rng(0)
    noise = lambda: int(rng.integers(0, 1000)) if noisy else 0  # noqa: E731
    return Series(
        wall_ns={n: [wall_fn(n) + noise() for _ in range(repeats)] for n in ns},
        traced_wall_ns={n: [int(wall_fn(n) * 1.2)] for n in ns},
        busy_ns={n: [busy_fn(n) + noise() for _ in range(2)] for n in ns},
        kernel_sum_ns={n: [busy_fn(n) + 10 * n] for n in ns},
        kernel_union_ns={n: [busy_fn(n)] for n in ns},
        kernel_count={n: [k0 + k * (n - 1)] for n in ns},
        copies={n: [2 * n] for n in ns},
        copy_ns={n: [3 * n] for n in ns},
        h2d_bytes={n: [8 * n] for n in ns},
        d2h_bytes={n: [8 * n] for n in ns},
    )


def test_exact_line_gives_exact_split():
    ns = [1, 13, 23, 41, 72, 128]
    s = _series(ns, lambda n: 10_000_000 + 4_000_000 * n, lambda n: 1_000_000 + 500_000 * n, noisy=False)
    d = difference(s, 1, 128, prompt_len=128)
    assert d.t_step_ns == pytest.approx(4_000_000)
    assert d.g_step_ns == pytest.approx(500_000)
    assert d.h_step_ns == pytest.approx(3_500_000)
    assert d.host_fraction == pytest.approx(3.5 / 4)
    assert d.k_step == pytest.approx(50)
    assert d.r2_wall == pytest.approx(1.0) and d.r2_gpu == pytest.approx(1.0)
    assert d.slope_agreement == pytest.approx(0, abs=1e-9)
    assert d.sum_minus_union_step_ns == pytest.approx(10)
    assert d.copies_per_step == pytest.approx(2)
    assert d.profiler_inflation == pytest.approx(0.2, rel=1e-6)
    assert d.kv_range == (129, 255)
    assert d.fit_kernels.r2 == pytest.approx(1.0)


def test_noisy_repeats_give_a_ci_around_the_estimate():
    ns = [1, 16, 32, 64]
    s = _series(ns, lambda n: 5_000_000 + 2_000_000 * n, lambda n: 300_000 * n)
    d = difference(s, 1, 64)
    lo, hi = d.ci["t_step_ns"]
    assert lo <= d.t_step_ns <= hi
    assert hi - lo < 100  # noise is < 1000 ns per run over 63 steps
    assert d.ci["repeats_untraced"] == [4, 4]
    hlo, hhi = d.ci["h_step_ns"]
    assert hlo <= d.h_step_ns <= hhi


def test_two_point_slope_and_errors():
    assert two_point_slope(1, 10.0, 11, 60.0) == 5.0
    with pytest.raises(ValueError):
        two_point_slope(3, 1.0, 3, 2.0)
    with pytest.raises(ValueError):
        difference(_series([1, 2], lambda n: n, lambda n: n), 2, 1)


def test_linear_fit_r2_drops_for_a_curve():
    n = np.arange(1, 20)
    assert linear_fit(n, 3 * n + 1).r2 == pytest.approx(1.0)
    assert linear_fit(n, n**3).r2 < 0.95
    with pytest.raises(ValueError):
        linear_fit([2, 2, 2], [1, 2, 3])


def test_slope_agreement():
    assert slope_agreement(101.0, 100.0) == pytest.approx(0.01)
    assert slope_agreement(1.0, 0.0) is None


def test_estimators_and_bootstrap_bounds():
    x = [5, 1, 9, 3]
    assert estimate(x, "min") == 1 and estimate(x, "median") == 4 and estimate(x, "mean") == 4.5
    with pytest.raises(ValueError):
        estimate(x, "max")
    b = bootstrap_slopes([10, 12, 11], [110, 130, 120], 10, "min", n_boot=500)
    # every resampled min lies within the sample range, so the slope does too
    assert b.min() >= (110 - 12) / 10 and b.max() <= (130 - 10) / 10
    lo, hi = percentile_ci(b)
    assert lo <= hi


@pytest.mark.parametrize("n1,n2", [(1, 128), (1, 64), (4, 512), (1, 10)])
def test_sweep_points_span_a_decade(n1, n2):
    pts = sweep_points(n1, n2)
    assert pts[0] == n1 and pts[-1] == n2
    assert pts == sorted(set(pts))
    assert len(pts) >= 5
    assert pts[1] <= max(n1 + 1, round(n2 / 10))


@settings(**examples(60), deadline=None)
@given(
    t=st.floats(1e3, 1e8),
    gshare=st.floats(0.01, 0.99),
    base=st.floats(0, 1e9),
    n2=st.integers(3, 600),
    repeats=st.integers(1, 6),
)
def test_split_invariants(t, gshare, base, n2, repeats):
    g = t * gshare
    ns = sweep_points(1, n2)
    s = Series(
        wall_ns={n: [int(base + t * n)] * repeats for n in ns},
        traced_wall_ns={n: [int(base + 1.1 * t * n)] for n in ns},
        busy_ns={n: [int(base / 2 + g * n)] for n in ns},
        kernel_sum_ns={n: [int(base / 2 + g * n)] for n in ns},
        kernel_union_ns={n: [int(base / 2 + g * n)] for n in ns},
        kernel_count={n: [7 * n] for n in ns},
    )
    d = difference(s, 1, n2, n_boot=50)
    assert d.h_step_ns == pytest.approx(d.t_step_ns - d.g_step_ns)
    assert 0 < d.host_fraction < 1
    assert math.isclose(d.host_fraction, 1 - gshare, abs_tol=1e-2 + 2 / (t * (n2 - 1)))
    assert d.k_step == 7


def test_thread_time_cross_check_and_preemption():
    from hostgap.capture.protocol.orchestrate import disturbed, preempted_share

    ns = [1, 8, 16, 32]
    base = _series(ns, lambda n: 1_000_000 * n, lambda n: 100_000 * n, noisy=False)
    s = Series(**{**base.__dict__, "thread_ns": {n: [900_000 * n] * 4 for n in ns}})
    d = difference(s, 1, 32)
    assert d.thread_t_step_ns == pytest.approx(900_000) and d.r2_thread == pytest.approx(1.0)
    assert difference(base, 1, 32).thread_t_step_ns is None
    raw = {
        "untraced_wall_ns": {"1": [100, 100], "8": [100, 200]},
        "untraced_thread_ns": {"1": [99, 100], "8": [100, 100]},
    }
    assert preempted_share(raw) == pytest.approx(0.25)
    assert preempted_share({"untraced_wall_ns": {"1": [5]}, "untraced_thread_ns": {"1": [0]}}) is None
    assert disturbed(100, 94) and not disturbed(100, 96) and not disturbed(100, 0)


def test_default_estimator_is_theil_sen_over_every_run():
    # runs at N = 1, 2, 3 with values chosen so the median pairwise slope (not the two-point
    # slope of minima or medians) is the answer: pairs (1,2): 10-0=10, (1,3): (21-0)/2=10.5,
    # (2,3): 11 -> slopes over all runs, median 10.5
    s = Series(
        wall_ns={1: [0.0], 2: [10.0], 3: [21.0]},
        traced_wall_ns={1: [0.0], 3: [30.0]},
        busy_ns={1: [0.0], 2: [1.0], 3: [2.0]},
        kernel_sum_ns={},
        kernel_union_ns={},
        kernel_count={1: [1], 3: [3]},
    )
    d = difference(s, 1, 3)
    assert d.estimator == "theil-sen" and d.t_step_ns == pytest.approx(10.5)
    assert d.g_step_ns == pytest.approx(1.0) and d.h_step_ns == pytest.approx(9.5)
    assert d.ci["t_step_ns"][0] <= 10.5 <= d.ci["t_step_ns"][1]
    assert "Theil-Sen" in d.ci["method"]
    m = difference(s, 1, 3, estimator="min", n_boot=50)
    assert m.t_step_ns == pytest.approx(10.5) and "bootstrap" in m.ci["method"]
    with pytest.raises(ValueError, match="unknown estimator"):
        difference(s, 1, 3, estimator="max")


def test_slope_uses_only_runs_between_n1_and_n2():
    from hostgap.stats.differencing import slope_with_interval

    runs = {1: [0.0, 0.0], 5: [40.0, 40.0], 9: [80.0, 80.0], 50: [0.0, 0.0]}
    s = slope_with_interval(runs, 1, 9, "theil-sen")
    assert (s.value, s.lo, s.hi) == (10.0, 10.0, 10.0)
    # the median per N feeds the bootstrap estimators
    b = slope_with_interval({1: [0.0, 2.0, 100.0], 9: [80.0, 82.0, 84.0]}, 1, 9, "median", n_boot=200)
    assert b.value == pytest.approx((82 - 2) / 8) and b.lo <= b.value <= b.hi


def test_cpu_split_needs_a_traced_wall_and_reports_its_share_interval():
    from hostgap.stats.differencing import Slope, split

    t, g = Slope(1.0, 0.9, 1.1), Slope(0.5, 0.45, 0.55)
    with pytest.raises(ValueError):
        split(t, g, "cpu-compute", None)
    sp = split(t, g, "cpu-compute", Slope(2.0, 1.8, 2.2))
    assert sp["share"] == pytest.approx(0.25) and sp["host_fraction"] == pytest.approx(0.75)
    lo, hi = sp["ci_share"]
    assert lo < 0.25 < hi and sp["ci_host_fraction"] == pytest.approx([1 - hi, 1 - lo])
    assert sp["ci_g"][0] < 0.25 < sp["ci_g"][1] and sp["ci_h"][0] < 0.75 < sp["ci_h"][1]
    # an interval reaching zero has no log-scale MOVER: the point stays, the interval is None
    sp = split(t, Slope(0.5, -0.1, 1.0), "cpu-compute", Slope(2.0, 1.8, 2.2))
    assert sp["g"].value == pytest.approx(0.25) and sp["ci_g"] is None and sp["ci_host_fraction"] is None
    gpu = split(t, g, "gpu")
    assert gpu["g"] is g and gpu["h"].value == pytest.approx(0.5) and gpu["share"] == pytest.approx(0.5)


def test_intervals_are_cut_to_the_possible_range():
    """A wide wall interval makes the MOVER bounds of h and the host fraction impossible
    (h below 0, a fraction below 0 or above 1); the reported interval is cut to the range,
    its other bound unchanged."""
    from hostgap.stats.differencing import Slope, _interval, complement, mover_difference, mover_ratio, split

    t, g = Slope(1.0, 0.2, 1.8), Slope(0.9, 0.8, 1.0)
    raw_h = mover_difference(t, g)
    raw_f = complement(mover_ratio(g, t))
    assert raw_h.lo < 0 and raw_f.lo < 0  # the uncut bounds are impossible
    sp = split(t, g, "gpu")
    assert sp["ci_h"] == [0.0, pytest.approx(raw_h.hi)]
    assert sp["ci_host_fraction"] == [0.0, pytest.approx(min(raw_f.hi, 1.0))]
    lo, hi = sp["ci_share"]
    assert 0.0 <= lo <= hi <= 1.0
    # by hand: cut to [0, 1]; wholly outside -> None; a NaN bound -> None
    assert _interval(Slope(0.5, -0.2, 1.3), 0.0, 1.0) == [0.0, 1.0]
    assert _interval(Slope(0.5, 0.1, 0.4), 0.0, 1.0) == [0.1, 0.4]
    assert _interval(Slope(-2.0, -3.0, -1.0), 0.0) is None
    assert _interval(Slope(1.0, float("nan"), float("nan")), 0.0) is None
    assert _interval(None) is None


def test_percentile_interval_by_hand():
    """The bootstrap interval's ends are the (1 - level) / 2 and (1 + level) / 2 quantiles: on
    0, 1, ..., 100 the 90 % interval is [5, 95] and the 50 % interval [25, 75] (mutation audit:
    a lower end taken at 50 (1 + level) made every interval zero-width, unnoticed)."""
    samples = np.arange(101.0)
    assert percentile_ci(samples, 0.90) == pytest.approx((5.0, 95.0), abs=1e-9)
    assert percentile_ci(samples, 0.50) == pytest.approx((25.0, 75.0), abs=1e-9)
    assert percentile_ci(samples[::-1], 0.90) == pytest.approx((5.0, 95.0), abs=1e-9)  # sample order does not matter


def _kendall_accepts(num, den, c, level=0.95):
    """Brute force: Kendall's S of num - c * den against N over every pair at different N, its
    tie-corrected normal approximation with continuity correction."""
    from statistics import NormalDist

    x = [n for n, v in num.items() for _ in v]
    r = [a - c * b for n in num for a, b in zip(num[n], den[n])]
    s = sum(
        np.sign(x[j] - x[i]) * np.sign(r[j] - r[i]) for i in range(len(x)) for j in range(i + 1, len(x)) if x[i] != x[j]
    )
    m = len(x)
    ties = sum(k * (k - 1) * (2 * k + 5) for k in (x.count(v) for v in set(x)))
    sigma = math.sqrt((m * (m - 1) * (2 * m + 5) - ties) / 18)
    return abs(s) - 1 <= NormalDist().inv_cdf(0.5 + level / 2) * sigma


def test_paired_ratio_is_the_set_kendall_accepts():
    """The interval's ends are the outermost ratios the test accepts (a fine scan agrees), the
    runs' shared noise cancels (a run stretched 20 % in both moves nothing), and num/den and
    den/num give reciprocal intervals."""
    from hostgap.stats.differencing import paired_ratio

    rng = np.random.default_rng(4)
    ns = [1, 1, 13, 23, 41, 72, 128, 128]
    num: dict[int, list[float]] = {}
    den: dict[int, list[float]] = {}
    for n in ns:
        slow = 1 + 0.2 * rng.random()  # shared by the run's compute and wall
        num.setdefault(n, []).append((3e6 + 0.7e6 * n) * slow * (1 + 0.01 * rng.standard_normal()))
        den.setdefault(n, []).append((9e6 + 2e6 * n) * slow)
    c = paired_ratio(num, den)
    assert c is not None and c.hi - c.lo < 0.02 and abs(c.value - 0.35) < 0.005  # the truth: 0.35
    grid = np.linspace(0.30, 0.40, 20001)
    ok = [g for g in grid if _kendall_accepts(num, den, g)]
    step = grid[1] - grid[0]
    assert abs(min(ok) - c.lo) <= step and abs(max(ok) - c.hi) <= step
    inv = paired_ratio(den, num)
    assert inv is not None and inv.lo == pytest.approx(1 / c.hi) and inv.hi == pytest.approx(1 / c.lo)
    # the estimate is the test's centre: the median of the pairwise increment ratios (den grows
    # with N in every pair here), strictly inside its interval
    x = [n for n in num for _ in num[n]]
    a = [v for n in num for v in num[n]]
    b = [v for n in den for v in den[n]]
    pairs = [(a[j] - a[i]) / (b[j] - b[i]) for i in range(len(x)) for j in range(i + 1, len(x)) if x[i] != x[j]]
    assert c.value == pytest.approx(float(np.median(pairs)))
    assert c.lo < c.value < c.hi and inv.lo < inv.value < inv.hi


def test_paired_ratio_needs_paired_runs_and_a_bounded_answer():
    from hostgap.stats.differencing import paired_ratio

    assert paired_ratio({1: [1.0, 2.0], 2: [3.0]}, {1: [1.0], 2: [3.0]}) is None  # unpaired
    assert paired_ratio({1: [1.0], 2: [3.0]}, {1: [1.0], 2: [3.0]}) is None  # two runs
    assert paired_ratio({1: [1.0, 1.1, 0.9]}, {1: [1.0, 1.0, 1.0]}) is None  # one N
    # den without a trend: every ratio is accepted, no bounded interval
    assert paired_ratio({1: [1.0, 2.0], 2: [1.5, 1.7]}, {1: [5.0, 5.0], 2: [5.0, 5.0]}) is None


def test_cpu_difference_reports_the_paired_share_and_falls_back_when_unpaired():
    """The traced runs' compute and wall paired: the share interval is the paired one; a series
    whose traced wall lacks a run falls back to the MOVER ratio, said in the method."""
    from hostgap.stats.differencing import paired_ratio

    ns = [1, 2, 4, 8]
    s = _series(ns, lambda n: 1_000_000 + 400_000 * n, lambda n: 500_000 + 100_000 * n)
    tw = {n: [int((1_000_000 + 400_000 * n) * 1.2) + 37 * k * n for k in range(2)] for n in ns}
    paired = Series(**{**s.__dict__, "traced_wall_ns": tw})
    d = difference(paired, 1, 8, activity="cpu-compute")
    want = paired_ratio(paired.busy_ns, tw)
    assert want is not None and d.ci["compute_share"] == pytest.approx([want.lo, want.hi])
    assert d.compute_share == pytest.approx(want.value) and want.lo < d.compute_share < want.hi
    assert "paired traced runs" in d.ci["method"]
    d1 = difference(s, 1, 8, activity="cpu-compute")  # one traced wall per N, two busy: unpaired
    assert "paired" not in d1.ci["method"] and d1.ci["compute_share"] is not None


def test_linear_fit_needs_two_distinct_n():
    with pytest.raises(ValueError, match="two distinct n"):
        linear_fit([5], [1.0])
    with pytest.raises(ValueError, match="two distinct n"):
        linear_fit([3, 3], [1.0, 2.0])


def test_bootstrap_interval_is_per_step():
    """The other estimators' interval is a slope too: runs 127 tokens apart, each wall within
    1 µs of the line, so the interval lies within 1000 / 127 ns of 4 ms per step."""
    ns = [1, 13, 23, 41, 72, 128]
    s = _series(ns, lambda n: 10_000_000 + 4_000_000 * n, lambda n: 1_000_000 + 500_000 * n)
    for est in ("median", "min", "mean"):
        d = difference(s, 1, 128, estimator=est, n_boot=200)
        lo, hi = d.ci["t_step_ns"]
        assert 4_000_000 - 1000 / 127 <= lo <= d.t_step_ns <= hi <= 4_000_000 + 1000 / 127
        if est != "min":  # the median and the mean move both ways under resampling: a two-sided interval
            assert lo < d.t_step_ns < hi


def test_rounds_interval_only_with_theil_sen():
    """Runs taken in rounds widen the Theil-Sen wall interval by the rounds' spread; the other
    estimators keep their bootstrap interval whatever the rounds."""
    import dataclasses

    ns = [1, 13, 23, 41, 72, 128]
    s = _series(ns, lambda n: 10_000_000 + 4_000_000 * n, lambda n: 1_000_000 + 500_000 * n)
    rounds = {n: list(range(len(v))) for n, v in s.wall_ns.items()}
    s = dataclasses.replace(s, wall_rounds=rounds)
    med = difference(s, 1, 128, estimator="median", n_boot=200)
    assert med.ci["method"].startswith("percentile bootstrap")
    assert (
        med.ci["t_step_ns"]
        == difference(dataclasses.replace(s, wall_rounds={}), 1, 128, estimator="median", n_boot=200).ci["t_step_ns"]
    )
    assert "rounds' slopes" in difference(s, 1, 128).ci["method"]


def test_series_from_raw_keeps_only_known_thread_times():
    """A thread time of 0 means unknown (an engine in other processes): such an N, or an empty
    one, has no thread-time series; the others are read as they are."""
    from hostgap.stats.differencing import series_from_raw

    stat = {k: 1 for k in ("wall_ns", "busy_ns", "kernel_sum_ns", "kernel_union_ns", "kernel_count")}
    stat.update(copies=0, copy_ns=0, h2d_bytes=0, d2h_bytes=0)
    raw = {
        "traced": {"1": [stat], "8": [stat]},
        "untraced_wall_ns": {"1": [10, 11], "8": [80, 81], "16": [160]},
        "untraced_thread_ns": {"1": [9, 10], "8": [0, 79], "16": []},
        "untraced_rounds": {"1": [0, 1], "8": [0, 1]},
    }
    s = series_from_raw(raw)
    assert s.thread_ns == {1: [9, 10]}
    assert s.wall_ns == {1: [10, 11], 8: [80, 81], 16: [160]} and s.wall_rounds == {1: [0, 1], 8: [0, 1]}
    assert s.busy_ns == {1: [1], 8: [1]} and s.wall_seq == {}


def test_no_traced_wall_at_n2_gives_no_inflation():
    import dataclasses

    ns = [1, 13, 23, 41, 72, 128]
    s = _series(ns, lambda n: 10_000_000 + 4_000_000 * n, lambda n: 1_000_000 + 500_000 * n, noisy=False)
    s = dataclasses.replace(s, traced_wall_ns={n: v for n, v in s.traced_wall_ns.items() if n != 128})
    assert difference(s, 1, 128).profiler_inflation is None
