"""The machine's noise readings between two snapshots, by hand: the stolen share counts only
the steal that happened between them, and throttling is the count's growth."""

from __future__ import annotations

import pytest

from hostgap.stats.noise import _STAT_FIELDS, machine_noise, steal_share


def stat(**ticks: int) -> dict:
    return {**dict.fromkeys(_STAT_FIELDS, 0), **ticks}


def test_steal_share_is_the_steal_between_the_readings():
    # 100 ticks passed: 80 idle, 20 stolen, of which 5 before the first reading
    before = stat(idle=100, steal=5)
    after = stat(idle=180, steal=25)
    assert steal_share(before, after) == 0.2
    assert steal_share(after, after) is None  # no time passed
    assert steal_share(None, after) is None


def test_machine_noise_between_two_snapshots():
    a = {
        "t_ns": 0,
        "stat": stat(user=10, steal=2),
        "psi_some_us": 1_000.0,
        "freq_khz": [2_000_000],
        "throttle_count": 3,
        "loadavg_1m": 0.5,
    }
    b = {
        "t_ns": 2_000_000_000,
        "stat": stat(user=100, steal=12),
        "psi_some_us": 501_000.0,
        "freq_khz": [1_500_000, 2_000_000],
        "throttle_count": 7,
        "loadavg_1m": 1.5,
    }
    m = machine_noise([a, b])
    assert m["steal_share"] == 0.1  # 10 of 100 ticks
    assert m["pressure_share"] == 0.25  # 0.5 s of 2 s
    assert m["throttle_events"] == 4
    assert (m["freq_khz_min"], m["freq_khz_max"], m["freq_range"]) == (1_500_000, 2_000_000, 0.25)
    assert m["loadavg_1m"] == 1.5 and m["seconds"] == 2.0
    unknown = machine_noise([{**a, "throttle_count": None}, b])
    assert unknown["throttle_events"] is None  # one reading without the count: not known
    assert machine_noise([a])["throttle_events"] is None


def test_fit_noise_centres_each_sequence_on_its_own_median():
    """Sequences measured at different levels (a slower or faster block of runs) are each
    centred on their median before the scale and the correlation are fitted: the fit is the one
    of the centred sequences, and the scale is the runs' spread, not the distance between the
    levels."""
    import numpy as np

    from hostgap.stats.noise import fit_noise

    rng = np.random.default_rng(5)
    runs = [rng.normal(0.0, 0.01, 60), rng.normal(0.0, 0.01, 60)]
    centred = [d - np.median(d) for d in runs]
    level = fit_noise([runs[0] + 0.2, runs[1] - 0.1])
    ref = fit_noise(centred)
    assert (level.sd, level.rho) == pytest.approx((ref.sd, ref.rho), rel=1e-9) and level.dof == ref.dof
    assert 0.005 < level.sd < 0.02


@pytest.mark.parametrize("side", [-1.0, 1.0])
def test_a_wild_run_weighs_no_more_than_four_scales_in_the_correlation(side):
    """Deviations are clipped at 4 robust scales, on both sides, before the lag-1 correlation:
    how far out one wild run lies does not change the fitted correlation."""
    import numpy as np

    from hostgap.stats.noise import fit_noise

    rng = np.random.default_rng(9)
    base = rng.normal(0.0, 0.01, 80)
    base[1:] += 0.5 * base[:-1]  # some correlation to fit
    near, far = base.copy(), base.copy()
    near[40], far[40] = side * 0.2, side * 2.0  # 20 and 200 scales out
    a, b = fit_noise(near), fit_noise(far)
    assert a.sd == b.sd and 0.0 < a.rho < 0.95
    assert a.rho == pytest.approx(b.rho, rel=1e-12)


def test_the_steal_row_names_its_limit_in_percent():
    """The summary's CPU-steal row (check_rows' docstring example, as a test): the limit is
    STEAL_LIMIT in percent (5 %), beside the measured share."""
    from hostgap.stats.noise import STEAL_LIMIT, check_rows

    machine = {"steal_share": 0.012, "pressure_share": None, "freq_khz_min": None, "throttle_events": None}
    assert STEAL_LIMIT == 0.05
    assert check_rows(machine, None)[0] == (
        "CPU steal",
        "1.2 %",
        "/proc/stat steal / all CPU time during the runs (limit 5 %)",
    )
