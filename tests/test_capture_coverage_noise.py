"""Interval coverage under realistic run noise: heavy tails and slow periods spanning consecutive
runs, including the noise model fitted to this machine's own untraced repeats
(bench/results/noise-model.json, :func:`hostgap.stats.noise.fit_noise`), AR(1) noise with rho
0.8, and one-sided slow periods (:class:`hostgap.stats.noise.SlowPeriods`: interference that
only slows runs down, for stretches of runs, with no steal time or preemption to show it) whose
truth is the step without interference.

The draws follow the default protocol's shape and order: 5 untraced rounds (each a run of every
N of the sweep, shuffled), then the 8 traced runs in a shuffled order; one noise sequence in run
order runs through all of them. A traced run's busy time shares its run's noise on a CPU (the
same slow period slows the ops and the wall) and has its own 1 % on a GPU (kernel time does not
see the host's slow periods). 1,000 draws per case; the binomial standard error of a 95 %
coverage is then 0.7 points.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from hostgap.stats.differencing import Series, Slope, difference, sweep_points
from hostgap.stats.noise import NoiseModel, SlowPeriods

N1, N2 = 1, 128
SWEEP = sweep_points(N1, N2)
DRAWS = 1000
FITTED = Path(__file__).resolve().parent.parent / "bench/results/noise-model.json"


def _models() -> dict[str, NoiseModel | SlowPeriods]:
    doc = json.loads(FITTED.read_text())
    return {
        "fitted": NoiseModel.from_dict(doc["model"]),  # this machine, thread CPU time
        "ar1-0.6": NoiseModel(0.08, rho=0.6),  # slow periods over consecutive runs, symmetric
        "iid-t3": NoiseModel(0.05, dof=3),  # heavy tails, independent
        "ar1-0.8": NoiseModel(0.08, rho=0.8),  # longer symmetric periods (issue 45)
        # one-sided: a quarter of the runs in slow periods of 8 runs on average, each 10-30 %
        # slower, over quiet noise of 3 % (independent, or itself AR(1) with rho 0.6)
        "slow": SlowPeriods(NoiseModel(0.03)),
        "slow-ar": SlowPeriods(NoiseModel(0.03, rho=0.6)),
    }


def _by_n(order: list[int], y: np.ndarray) -> dict:
    out: dict = {n: [] for n in SWEEP}
    for n, v in zip(order, y):
        out[n].append(float(v))
    return out


def _ints(d: dict[int, list[float]]) -> dict[int, list[int]]:
    return {n: [int(k) for k in v] for n, v in d.items()}


def _draw(rng: np.random.Generator, model: NoiseModel | SlowPeriods, activity: str, i: int, own_sd: float = 0.01):
    shuffle = random.Random(i)
    order, rounds = [], []
    for k in range(5):
        ns = list(SWEEP)
        shuffle.shuffle(ns)
        order += ns
        rounds += [k] * len(ns)
    traced = list(SWEEP) + [N1, N2]
    shuffle.shuffle(traced)
    e = model.draw(rng, len(order) + len(traced))
    x, xt = np.asarray(order, float), np.asarray(traced, float)
    t_true, share = 0.8e6, 0.35
    wall = (5e6 + t_true * x) * (1 + e[: len(order)])
    et = e[len(order) :]
    own = 1 + own_sd * rng.standard_normal(len(traced))
    if activity == "gpu":
        tw = (6e6 + 1.05 * t_true * xt) * (1 + et)
        busy = (2e6 + share * t_true * xt) * own
    else:
        inflated = 2.5 * t_true  # the profiler inflates traced runs on a CPU; the share carries
        tw = (9e6 + inflated * xt) * (1 + et)
        busy = (3e6 + share * inflated * xt) * (1 + et) * own
    b = _by_n(traced, busy)
    s = Series(
        wall_ns=_by_n(order, wall),
        traced_wall_ns=_by_n(traced, tw),
        busy_ns=b,
        kernel_sum_ns=b,
        kernel_union_ns=b,
        kernel_count={n: [100 * n] * len(v) for n, v in b.items()},
        wall_rounds=_ints(_by_n(order, np.asarray(rounds))),
        wall_seq=_ints(_by_n(order, np.arange(len(order)))),
    )
    return s, {
        "t_step_ns": t_true,
        "g_step_ns": share * t_true,
        "h_step_ns": (1 - share) * t_true,
        "host_fraction": 1 - share,
    }


def _coverage(
    model: NoiseModel | SlowPeriods, activity: str, seed: int, own_sd: float = 0.01, draws: int = DRAWS
) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    hits = dict.fromkeys(("t_step_ns", "g_step_ns", "h_step_ns", "host_fraction"), 0)
    for i in range(draws):
        s, truth = _draw(rng, model, activity, i, own_sd)
        d = difference(s, N1, N2, activity=activity)
        for k in hits:
            ci = d.ci[k]
            hits[k] += ci is not None and ci[0] <= truth[k] <= ci[1]
    return {k: v / draws for k, v in hits.items()}


def test_the_fitted_model_is_recorded_with_its_provenance():
    doc = json.loads(FITTED.read_text())
    m = NoiseModel.from_dict(doc["model"])
    assert 0 < m.sd < 1 and 0 <= m.rho < 1 and "noise_fit.py" in m.source
    assert doc["summary"]["runs"] >= 200 and len(doc["wall_ns"]) == doc["summary"]["runs"]
    assert "loadavg_1m" in doc["conditions"]["readings"] and "steal_share" in doc["conditions"]["readings"]


@pytest.mark.parametrize("name", ["fitted", "ar1-0.6", "iid-t3"])
def test_wall_interval_covers_under_correlated_heavy_noise(name):
    """t_step (every platform) and, on a GPU where g comes from kernel time, h and the host
    fraction: 93-97 %."""
    cover = _coverage(_models()[name], "gpu", seed=11)
    assert 0.93 <= cover["t_step_ns"] <= 0.97, cover
    assert 0.93 <= cover["h_step_ns"] <= 0.97, cover
    # the host fraction's interval is a MOVER ratio of two intervals (slightly conservative):
    # 97.3 % under independent t(3) noise, within one binomial standard error of 97 %
    assert 0.93 <= cover["host_fraction"] <= 0.975, cover
    # g on a GPU: Sen's interval over 8 traced runs (6 distinct N) is coarse; it covers near 92 %
    assert 0.90 <= cover["g_step_ns"] <= 0.97, cover


@pytest.mark.slow
@pytest.mark.parametrize("activity", ["gpu", "cpu-compute"])
@pytest.mark.parametrize("name", ["ar1-0.8", "slow", "slow-ar"])
def test_intervals_cover_under_long_correlation_and_one_sided_slow_periods(name, activity):
    """Issue 45: AR(1) noise with rho 0.8, and one-sided slow periods (truth: the step without
    interference). Every interval 93-97 %, but g on a GPU (kernel time, Sen's interval over 8
    traced runs: >= 90 %). About 2 minutes a case on 2 cores: the fast suite runs 300 draws
    (below)."""
    cover = _coverage(_models()[name], activity, seed=11 if activity == "gpu" else 12)
    for k in ("t_step_ns", "h_step_ns", "host_fraction") + (("g_step_ns",) if activity != "gpu" else ()):
        assert 0.93 <= cover[k] <= 0.97, cover
    assert 0.90 <= cover["g_step_ns"] <= 0.97, cover


@pytest.mark.parametrize("name", ["ar1-0.8", "slow"])
def test_long_correlation_and_slow_periods_quickly(name):
    """The fast suite's share of the case above: 300 draws on a GPU basis (one binomial standard
    error is 1.3 points, so the bounds are a point wider)."""
    cover = _coverage(_models()[name], "gpu", seed=21, draws=300)
    for k in ("t_step_ns", "h_step_ns", "host_fraction"):
        assert 0.92 <= cover[k] <= 0.98, cover


def test_slow_periods_are_left_out_of_the_estimate():
    """One-sided slow periods bias a slope over every run upward; the wall's estimate, which
    leaves the runs on slow periods out, sits nearer the step without interference."""
    from hostgap.stats.confidence import theil_sen

    rng = np.random.default_rng(9)
    every, quiet, left = [], [], 0
    for i in range(150):
        s, truth = _draw(rng, _models()["slow"], "gpu", i)
        d = difference(s, N1, N2, activity="gpu")
        every.append(cast(Slope, theil_sen(s.wall_ns)).value / truth["t_step_ns"] - 1)
        quiet.append(d.t_step_ns / truth["t_step_ns"] - 1)
        left += d.ci["wall"]["left_out"] > 0
    assert np.mean(every) > 0.015 and abs(np.mean(quiet)) < 0.5 * np.mean(every)
    assert np.mean(np.abs(quiet)) < np.mean(np.abs(every))
    assert 0.3 < left / 150 < 0.9  # slow periods seen in about half the draws (some have none)


@pytest.mark.parametrize("name", ["fitted", "ar1-0.6"])
def test_cpu_split_intervals_cover_their_level(name):
    """CPU: the compute share's interval comes from the paired traced runs (Kendall's test of
    busy - c * wall inverted), so the noise a run's compute and wall share cancels; g and h are
    the untraced wall's slope times the share (MOVER). Every interval covers 93-97 %."""
    cover = _coverage(_models()[name], "cpu-compute", seed=12)
    for k in ("t_step_ns", "g_step_ns", "h_step_ns", "host_fraction"):
        assert 0.93 <= cover[k] <= 0.97, cover


@pytest.mark.parametrize("own_sd", [0.03, 0.08])
def test_cpu_share_interval_widens_with_noise_of_its_own(own_sd):
    """Compute time with noise of its own (3 %, 8 % per traced run, besides the run's shared
    slow periods; the real traced runs' compute/wall ratios at one N spread about 1 %): the
    share's interval widens with the data and still covers (8 %: one point short); g and h,
    products of two intervals, turn slightly conservative."""
    cover = _coverage(_models()["fitted"], "cpu-compute", seed=13, own_sd=own_sd)
    # the compute's own noise grows with N, which Kendall's test does not assume: the share
    # covers 92.9 % at 3 % (three times the measured) and about 93 % at 8 % (seeds 12, 13), one
    # binomial standard error short of 93 %
    assert 0.92 <= cover["host_fraction"] <= 0.97, cover
    for k in ("g_step_ns", "h_step_ns"):
        assert 0.93 <= cover[k] <= 0.985, cover


def test_the_paired_share_interval_is_narrower_than_treating_the_slopes_as_independent():
    """The same draws: the paired interval is the one reported, and it is narrower than the MOVER
    ratio of the two slopes' own intervals (which covered 99-100 %)."""
    from hostgap.stats.differencing import mover_ratio, theil_sen

    rng = np.random.default_rng(5)
    for i in range(20):
        s, _ = _draw(rng, _models()["fitted"], "cpu-compute", i)
        d = difference(s, N1, N2, activity="cpu-compute")
        g, t = cast(Slope, theil_sen(s.busy_ns)), cast(Slope, theil_sen(s.traced_wall_ns))
        wide = cast(Slope, mover_ratio(g, t))
        lo, hi = d.ci["compute_share"]
        assert wide.lo < lo < d.compute_share < hi < wide.hi
        assert "paired traced runs" in d.ci["method"]


def test_one_slow_run_or_a_burst_moves_the_slope_less_than_its_interval():
    """A 50 % slow run, or five runs of one round 30 % slow, moves the wall slope over every run
    by less than the half-width of its interval. (Where runs were left out as slow periods the
    reported slope is the quiet runs' and the interval reaches up to every run's slope.)"""
    rng = np.random.default_rng(3)
    model = _models()["fitted"]
    for i in range(200):
        s, _truth = _draw(rng, model, "cpu-compute", i)
        base = difference(s, N1, N2, activity="cpu-compute")
        for slow in ("one", "burst"):
            walls = {n: list(v) for n, v in s.wall_ns.items()}
            if slow == "one":
                n = SWEEP[i % len(SWEEP)]
                walls[n][0] *= 1.5
            else:  # five consecutive runs of one round (a round holds every N once)
                for n in SWEEP[(i % 2) : (i % 2) + 5]:
                    walls[n][i % 5] *= 1.3
            d = difference(Series(**{**s.__dict__, "wall_ns": walls}), N1, N2, activity="cpu-compute")
            lo, hi = d.ci["t_step_ns"]
            half = (hi - lo) / 2
            every = d.ci["wall"]["every"] or d.t_step_ns
            was = base.ci["wall"]["every"] or base.t_step_ns
            assert lo < d.t_step_ns < hi and lo <= every <= hi
            assert abs(every - was) <= half, (i, slow, every, was, half)
