"""Measuring until the checks pass, within a budget (:mod:`hostgap.capture.protocol.converge`), and the
machine's own noise readings (:mod:`hostgap.stats.noise`). Simulated sequences and a fake
clock: nothing here depends on real timing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hostgap.capture.protocol import converge as cv
from hostgap.stats import noise
from hostgap.stats.differencing import Series, difference, sweep_points

SWEEP = sweep_points(1, 128)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _loop(statuses: list[cv.Status], round_s: float, budget: float, costs=(2.0, 3.0)):
    """Run converge over a scripted sequence of statuses; each round takes ``round_s`` on the
    fake clock. Returns (outcome, rounds measured)."""
    clock = Clock()
    seq = iter(statuses)
    done: list[cv.Round] = []

    def measure(r: cv.Round) -> None:
        done.append(r)
        clock.t += round_s

    out = cv.converge(lambda: next(seq), measure, clock, clock.t, budget, cv.Costs(*costs))
    return out, done


def test_passing_checks_measure_nothing_more():
    out, done = _loop([cv.Status(width=0.1)], 2.0, 40.0)
    assert done == [] and out.stopped == "checks pass" and out.rounds == []


def test_a_failing_wall_check_gets_untraced_rounds_until_it_passes():
    bad = cv.Status(wall_ok=False, why=("wall not linear",))
    out, done = _loop([bad, bad, cv.Status()], 2.0, 40.0)
    assert done == [cv.Round(True, False)] * 2
    assert out.stopped == "checks pass" and len(out.rounds) == 2
    assert out.rounds[0]["why"] == ["wall not linear"]


def test_device_check_and_a_wide_interval_get_traced_rounds():
    out, done = _loop([cv.Status(device_ok=False), cv.Status(width=0.5), cv.Status(width=0.15)], 2.0, 40.0)
    assert done == [cv.Round(False, True), cv.Round(False, True)] and out.stopped == "checks pass"


def test_the_budget_stops_the_rounds_and_says_how_much_more():
    bad = cv.Status(wall_ok=False, device_ok=False, why=("device time: one N lies 13% off the line",))
    out, done = _loop([bad] * 50, 5.0, 30.0)  # each round 5 s; 30 - reserve 4 leaves room for 5
    assert out.stopped == "budget" and out.why == list(bad.why)
    assert out.elapsed_s + out.needed_s + cv.RESERVE_S > 30.0
    assert out.elapsed_s <= 30.0 - cv.RESERVE_S
    assert len(done) == 5
    hint = cv.budget_hint(out.to_dict())
    assert hint and "--budget" in hint and int(hint.rsplit(" ", 1)[1]) > 30


def test_a_round_slower_than_predicted_raises_the_prediction():
    bad = cv.Status(wall_ok=False)
    out, done = _loop([bad] * 50, 9.0, 30.0, costs=(1.0, 1.0))
    # the first round took 9 s, predicted 1: the next is predicted at 9 and does not fit
    assert len(done) == 2 and out.needed_s == pytest.approx(9.0)


def test_rounds_are_capped_whatever_the_budget():
    out, done = _loop([cv.Status(wall_ok=False)] * 100, 0.1, 1e6)
    assert len(done) == cv.MAX_ROUNDS and out.stopped == "rounds"


def test_several_engines_need_a_round_when_any_does():
    w = cv.worst([cv.Status(), cv.Status(device_ok=False, width=0.3, why=("x",))])
    assert not w.done and w.width == 0.3 and w.why == ("x",)
    assert cv.wanted(w) == cv.Round(False, True)


# -- the status of a simulated sweep, and rounds that repair it ---------------------------


def _series(walls: dict, traced: int = 1) -> Series:
    busy: dict = {n: [0.4 * (3e6 + 1e6 * n)] * (2 if n in (1, 128) else traced) for n in SWEEP}
    tw: dict = {n: [3e6 + 1e6 * n] * len(v) for n, v in busy.items()}
    return Series(
        wall_ns=walls,
        traced_wall_ns=tw,
        busy_ns=busy,
        kernel_sum_ns=busy,
        kernel_union_ns=busy,
        kernel_count={n: [10 * n] * len(v) for n, v in busy.items()},
    )


def test_one_slow_n_fails_then_rounds_of_every_n_repair_it():
    """The case of the issue: one N measured during a slow period lies off the line; further
    rounds of every N (runs at ordinary speed) bring its median back, and the checks pass."""
    rng = np.random.default_rng(0)
    line = {n: 2e6 + 1e6 * n for n in SWEEP}
    walls = {n: list(line[n] * (1 + rng.normal(0, 0.01, 5))) for n in SWEEP}
    walls[72] = [line[72] * 1.25] * 5  # every repeat of N=72 fell in a slow period
    d = difference(_series(walls), 1, 128, activity="cpu-compute").to_dict()
    st = cv.status_of(d, 0.01)
    assert not st.wall_ok and st.why[0].startswith("wall")
    rounds = 0
    while not cv.status_of(difference(_series(walls), 1, 128, activity="cpu-compute").to_dict(), 0.01).wall_ok:
        for n in SWEEP:
            walls[n].append(line[n] * (1 + rng.normal(0, 0.01)))
        rounds += 1
        assert rounds <= 8
    assert rounds == 5  # the median of N=72 moves back once its ordinary runs outnumber the slow ones


def test_spread_alone_asks_for_untraced_rounds():
    d = difference(_series({n: [2e6 + 1e6 * n] * 5 for n in SWEEP}), 1, 128, activity="cpu-compute").to_dict()
    assert cv.status_of(d, 0.01).wall_ok
    st = cv.status_of(d, 0.40)
    assert not st.wall_ok and "repeat spread 40%" in st.why[0]


# -- noise readings -----------------------------------------------------------------------


def _fake_root(tmp_path, steal: int, idle: int, freq: list[int] | None = None, psi: int | None = 0):
    (tmp_path / "proc/pressure").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/stat").write_text(f"cpu  100 0 50 {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4\n")
    (tmp_path / "proc/loadavg").write_text("1.50 1.00 0.50 1/100 123\n")
    if psi is not None:
        (tmp_path / "proc/pressure/cpu").write_text(f"some avg10=0.00 avg60=0.00 avg300=0.00 total={psi}\n")
    for i, f in enumerate(freq or []):
        d = tmp_path / f"sys/devices/system/cpu/cpu{i}/cpufreq"
        d.mkdir(parents=True, exist_ok=True)
        (d / "scaling_cur_freq").write_text(f"{f}\n")
    return str(tmp_path)


def test_steal_share_from_proc_stat_and_the_flag(tmp_path):
    clock = iter([0, 2_000_000_000]).__next__
    a = noise.snapshot(_fake_root(tmp_path, steal=0, idle=1000), clock)
    b = noise.snapshot(_fake_root(tmp_path, steal=80, idle=1770), clock)  # 850 jiffies more, 80 stolen
    m = noise.machine_noise([a, b])
    assert m["steal_share"] == pytest.approx(80 / 850)
    assert m["freq_khz_min"] is None and m["throttle_events"] is None and m["seconds"] == pytest.approx(2.0)
    assert noise.noise_flags(m) == ["CPU steal 9% of CPU time (limit 5%): the hypervisor ran other work"]
    rows = dict((r[0], r[1]) for r in noise.check_rows(m, None))
    assert rows["CPU steal"] == "9.4 %" and rows["CPU frequency"] == "not exposed"


def test_frequency_range_and_pressure(tmp_path):
    clock = iter([0, 1_000_000_000]).__next__
    a = noise.snapshot(_fake_root(tmp_path, 0, 100, freq=[3_000_000, 2_900_000], psi=0), clock)
    b = noise.snapshot(_fake_root(tmp_path, 0, 200, freq=[2_400_000, 3_000_000], psi=250_000), clock)
    m = noise.machine_noise([a, b])
    assert (m["freq_khz_min"], m["freq_khz_max"]) == (2_400_000, 3_000_000)
    assert m["freq_range"] == pytest.approx(0.2) and m["pressure_share"] == pytest.approx(0.25)
    assert noise.noise_flags(m) == []  # frequency is reported, not contention
    rows = dict((r[0], r[2]) for r in noise.check_rows(m, None))
    assert "changed" in rows["CPU frequency"]


def test_nothing_exposed_reads_as_none(tmp_path):
    s = noise.snapshot(str(tmp_path))
    assert s["stat"] is None and s["freq_khz"] is None and s["psi_some_us"] is None
    m = noise.machine_noise([s, s])
    assert m["steal_share"] is None and noise.noise_flags(m) == []


def test_steal_makes_the_measurement_contended():
    from hostgap.capture.protocol.orchestrate import MeasureConfig, contention_of, resolve

    cfg = resolve(MeasureConfig(device="cpu"))
    raw = {
        "untraced_wall_ns": {"1": [100] * 3},
        "untraced_thread_ns": {"1": [100] * 3},
        "traced": {},
        "machine": {"steal_share": 0.2},
    }
    c = contention_of(cfg, raw)
    assert c["contended"] and "CPU steal 20%" in c["flags"][0]
    raw["machine"] = {"steal_share": 0.01}
    assert not contention_of(cfg, raw)["contended"]


# -- the noise model ----------------------------------------------------------------------


@pytest.mark.parametrize("rho,dof", [(0.0, math.inf), (0.6, 4.0), (0.3, 3.0)])
def test_noise_model_fit_recovers_its_parameters(rho, dof):
    true = noise.NoiseModel(sd=0.05, rho=rho, dof=dof)
    e = true.draw(np.random.default_rng(5), 20000)
    fit = noise.fit_noise(e)
    assert fit.sd == pytest.approx(0.05, rel=0.15)  # robust scale of an AR(1) sum of t draws: near, not exact
    assert fit.rho == pytest.approx(rho, abs=0.05)
    if math.isinf(dof):
        assert fit.dof > 20
    else:
        assert fit.dof == pytest.approx(dof, rel=0.35)


def test_noise_model_round_trips_and_rejects_too_little_data():
    m = noise.NoiseModel(sd=0.03, rho=0.4, dof=3.5, source="x")
    assert noise.NoiseModel.from_dict(m.to_dict()) == m
    assert noise.NoiseModel.from_dict(noise.NoiseModel(0.01).to_dict()).dof == math.inf
    with pytest.raises(ValueError):
        noise.fit_noise(np.array([0.1, 0.2]))


def test_slow_periods_model_keeps_its_share_and_length():
    """The simulation's one-sided interference: its share of slow runs, the mean length of a
    period, one factor per period within [lo, hi], and the base noise under it."""
    m = noise.SlowPeriods(noise.NoiseModel(0.0), share=0.25, mean_runs=8.0, lo=0.1, hi=0.3)
    slow = m.slow(np.random.default_rng(1), 200_000)
    on = slow > 0
    assert on.mean() == pytest.approx(0.25, abs=0.02)
    starts = np.flatnonzero(on[1:] & ~on[:-1])
    assert on.sum() / len(starts) == pytest.approx(8.0, rel=0.05)
    assert slow[on].min() >= 0.1 and slow[on].max() <= 0.3
    ends = np.flatnonzero(on[:-1] & ~on[1:])
    within = slow[starts[0] + 1 : ends[ends > starts[0]][0] + 1]
    assert len(set(within.tolist())) == 1  # one factor for the whole period
    e = noise.SlowPeriods(noise.NoiseModel(0.0), share=0.5).draw(np.random.default_rng(2), 1000)
    assert e.min() == 0.0 and e.max() > 0.1  # interference only slows
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    base = noise.NoiseModel(0.05)
    d = noise.SlowPeriods(base).draw(rng_a, 50)
    want = (1 + base.draw(rng_b, 50)) * (1 + noise.SlowPeriods(base).slow(rng_b, 50)) - 1
    assert d == pytest.approx(want)


def test_slow_periods_that_leave_too_few_rounds_ask_for_an_untraced_round():
    line = {"slope": 1.0, "intercept": 0.0, "r2": 0.999, "points": 6, "max_residual": 0.01, "lack_of_fit_p": 0.5}
    d = {"fit_wall": line, "fit_gpu": line, "ci": {"wall": {"left_out": 12, "runs": 18, "rounds": 2}}}
    st = cv.status_of(d, 0.1)
    assert not st.wall_ok and st.device_ok
    assert st.why == ("slow periods: 12 of 30 untraced runs left out, 2 usable round(s) remain (need 3)",)
    assert cv.wanted(st) == cv.Round(untraced=True, traced=False)
    d["ci"]["wall"]["rounds"] = 3
    assert cv.status_of(d, 0.1).wall_ok and cv.slow_reason(d["ci"]["wall"]) is None
    assert cv.slow_reason({"left_out": 0, "runs": 30, "rounds": 0}) is None and cv.slow_reason(None) is None


def test_a_busy_machine_gets_no_rounds():
    out, done = _loop([cv.Status(wall_ok=False, contended=True)], 1.0, 100.0)
    assert done == [] and out.stopped == "contended"


# -- the loop inside a measurement, with a stand-in engine --------------------------------


@pytest.fixture
def slow_stand(monkeypatch, quiet_machine):
    """A stand-in engine (exact walls) whose runs at N=4 are 30 % slow in the first 3 rounds; the
    machine's noise readings are quiet (the test machine's own steal must not decide validity)."""
    from hostgap.capture.protocol import engine as engine_mod
    from test_capture_interleave import LOG, StandA

    class SlowAtFour(StandA):
        name = "slow4"
        seen = 0

        def generate(self, n):
            w = super().generate(n)
            if n == 4:
                SlowAtFour.seen += 1
                if 2 <= SlowAtFour.seen <= 4:  # after the warm-up's call: the 3 default rounds
                    return int(w * 1.3)
            return w

    monkeypatch.setitem(engine_mod.ENGINES, "slow4", SlowAtFour)
    monkeypatch.setattr("hostgap.capture.protocol.interleave.time.sleep", lambda s: None)
    LOG.clear()
    yield SlowAtFour


def _cfg(tmp_path, **kw):
    from hostgap.capture.protocol.orchestrate import MeasureConfig

    base: dict = dict(
        preset="tiny",
        device="cpu",
        engine="slow4",
        n1=1,
        n2=8,
        repeats=3,
        traced_repeats=1,
        warmup=1,
        retries=0,
        n_boot=200,
        out=str(tmp_path / "runs"),
        keep_traces="none",
        sweep=(1, 2, 4, 6, 8),
    )
    base.update(kw)
    return MeasureConfig(**base)


def test_a_slow_n_is_measured_again_until_the_line_is_a_line(slow_stand, tmp_path):
    from hostgap.capture.protocol.orchestrate import measure

    r = measure(_cfg(tmp_path))
    conv = r["differencing"]["convergence"]
    assert r["valid"], r["invalid_reasons"]
    assert conv["stopped"] == "checks pass"
    # 3 slow runs of N=4 among the default 3: the median comes back once 4 ordinary runs outnumber them
    assert [x["untraced"] for x in conv["rounds"]] == [True] * 4
    assert not any(x["traced"] for x in conv["rounds"])
    assert conv["rounds"][0]["why"][0].startswith("wall")
    assert r["differencing"]["t_step_ns"] == pytest.approx(300_000, rel=1e-6)  # exact once repaired
    timings = json.loads((Path(r["run_dir"]) / "timings.json").read_text())
    assert sorted({k for v in timings["untraced_rounds"].values() for k in v}) == list(range(7))
    rows = dict((x[0], x[1]) for x in __import__("hostgap.report.run_rows", fromlist=["x"]).check_rows(r))
    assert rows["measured more"] == "4 + 0 round(s)"


def test_a_spent_budget_makes_it_invalid_with_advice(slow_stand, tmp_path):
    from hostgap.capture.protocol.orchestrate import measure

    r = measure(_cfg(tmp_path, budget=0.001))
    assert not r["valid"]
    assert r["differencing"]["convergence"]["stopped"] == "budget"
    assert r["invalid_reasons"][0].startswith("wall")
    assert "--budget" in r["invalid_reasons"][-1]


def test_bad_budget_is_bad_input():
    from hostgap.capture.protocol.orchestrate import MeasureConfig, validate
    from hostgap.errors import HostgapError

    with pytest.raises(HostgapError, match="--budget"):
        validate(MeasureConfig(budget=0))


def test_two_engines_get_each_round_together(slow_stand, tmp_path):
    """--engine A,B: a round is measured when either engine needs it, for both, interleaved; the
    difference then carries its MOVER interval."""
    from hostgap.capture.protocol import engine as engine_mod
    from hostgap.capture.protocol.orchestrate import measure_together
    from test_capture_interleave import StandB

    engine_mod.ENGINES["stand_b"] = StandB
    try:
        a, b = measure_together([_cfg(tmp_path), _cfg(tmp_path, engine="stand_b")])
    finally:
        del engine_mod.ENGINES["stand_b"]
    ca, cb = a["differencing"]["convergence"], b["differencing"]["convergence"]
    assert ca == cb and len(ca["rounds"]) == 4 and ca["stopped"] == "checks pass"
    ta = json.loads((Path(a["run_dir"]) / "timings.json").read_text())
    tb = json.loads((Path(b["run_dir"]) / "timings.json").read_text())
    assert ta["untraced_rounds"] == tb["untraced_rounds"]  # B measured in every round too
    assert a["valid"] and b["valid"] and a["engine_difference"]["valid"]
    d = a["engine_difference"]["wall_ns"]
    assert d["lo"] <= d["value"] <= d["hi"] and d["value"] == pytest.approx((StandB.STEP - 300) * 1000, rel=1e-6)


def test_a_wide_gpu_interval_asks_for_both_rounds():
    assert cv.wanted(cv.Status(width=0.3, wide_needs_wall=True)) == cv.Round(True, True)
    assert cv.status_of({"activity": "gpu", "ci": {"host_fraction": [0.1, 0.5]}}, None).wide_needs_wall
    assert not cv.status_of({"activity": "cpu-compute", "ci": {"host_fraction": [0.1, 0.5]}}, None).wide_needs_wall


def test_the_quiet_machine_fixture_reads_no_steal_and_leaves_fixture_roots_alone(quiet_machine, tmp_path):
    m = noise.machine_noise([noise.snapshot(), noise.snapshot()])
    assert m["steal_share"] == 0.0
    other = noise.snapshot(_fake_root(tmp_path, steal=7, idle=10))
    assert other["stat"]["steal"] == 7


# -- a noisy line against a bent one (hostgap.checks.noisy_line, lack_of_fit_p) -------------


def test_lack_of_fit_p_by_hand():
    """Means 10, 12, 10 at N = 1, 2, 3 (two runs each): the weighted line is flat at 32/3 (equal
    weights), lack = 2 (4/9 + 16/9 + 4/9) = 48/9, pure = 4 (both / line²); F = (48/9 / 1) / (4 / 3) = 4
    on (1, 3) degrees of freedom."""
    from scipy.stats import f

    from hostgap.stats.differencing import lack_of_fit_p

    p = lack_of_fit_p({1: [9, 11], 2: [12, 12], 3: [9, 11]})
    assert p == pytest.approx(float(f.sf(4.0, 1, 3)), rel=1e-9)
    # relative errors: the same sweep in other units gives the same p
    assert lack_of_fit_p({1: [9e6, 11e6], 2: [12e6, 12e6], 3: [9e6, 11e6]}) == pytest.approx(p, rel=1e-9)
    # no pure error: a departure is a bend (p 0), none is a line (p 1)
    assert lack_of_fit_p({1: [10, 10], 2: [25, 25], 3: [30, 30]}) == 0.0
    assert lack_of_fit_p({1: [10, 10], 2: [20, 20], 3: [30, 30]}) == 1.0
    assert lack_of_fit_p({1: [10, 10], 2: [20, 20]}) is None  # two N: nothing to test
    assert lack_of_fit_p({1: [-10, -10], 2: [20, 20], 3: [50, 50]}) is None  # no relative error


def test_a_noisy_line_passes_and_a_bend_fails_at_their_rates():
    """The default sweep's six N, five runs each, every run's pace off by 5 % (normal): the
    linearity check passes a true line about 99 % of the time (the limits alone: ~89 %) and
    refuses a bend that doubles the slope by N2 (~97 %); at 10 % with three runs the limits alone
    pass a true line ~14 % of the time, a noisy line ~78 % (docs/measure.md)."""
    from hostgap.stats.differencing import _fit, linear_enough

    rng = np.random.default_rng(5)
    ns = [1, 13, 23, 41, 72, 128]

    def rate(bend: float, sigma: float, runs: int, strict: bool = False) -> float:
        ok = 0
        for _ in range(300):
            s = {n: list((100 + n * (1 + bend * n / 128)) * (1 + sigma * rng.standard_normal(runs))) for n in ns}
            ok += linear_enough(_fit(s, "median"), strict=strict)
        return ok / 300

    assert rate(0.0, 0.05, 5) >= 0.96
    assert rate(1.0, 0.05, 5) <= 0.08
    assert rate(0.0, 0.10, 3) >= rate(0.0, 0.10, 3, strict=True) + 0.45


@pytest.mark.parametrize(
    "fit,ok",
    [
        ({"r2": 0.95, "max_residual": 0.20, "lack_of_fit_p": 0.01}, True),
        ({"r2": 0.9499, "max_residual": 0.10, "lack_of_fit_p": 0.5}, False),
        ({"r2": 0.99, "max_residual": 0.2001, "lack_of_fit_p": 0.5}, False),
        ({"r2": 0.99, "max_residual": 0.15, "lack_of_fit_p": 0.0099}, False),
        ({"r2": None, "max_residual": 0.15, "lack_of_fit_p": 0.5}, True),
    ],
)
def test_noisy_line_limits(fit, ok):
    from hostgap.checks import fit_reason, noisy_line

    assert noisy_line(fit) is ok
    assert (fit_reason("wall", fit) is None) is ok
    assert fit_reason("wall", fit, strict=True) is not None  # each misses a limit: strict refuses


def test_a_bend_names_the_test_that_refused_it():
    from hostgap.checks import fit_reason, reasons

    bent = {"r2": 0.97, "max_residual": 0.05, "lack_of_fit_p": 0.0004}
    assert (
        fit_reason("wall", bent)
        == "wall not linear in N (R² 0.9700 < 0.99; beyond the repeats' spread, lack-of-fit p 0.000)"
    )
    off = {"r2": 0.995, "max_residual": 0.12, "lack_of_fit_p": 0.003}
    assert fit_reason("device time", off) == (
        "device time: one N lies 12% off the line (limit 10%; beyond the repeats' spread, lack-of-fit p 0.003)"
    )
    assert fit_reason("wall", {"r2": 0.97, "max_residual": 0.05}) == "wall not linear in N (R² 0.9700 < 0.99)"
    assert fit_reason("wall", {"r2": 0.995, "max_residual": 0.05, "lack_of_fit_p": 0.0}) is None  # within limits
    d = {"t_step_ns": 1.0, "host_fraction": 0.5, "fit_wall": bent, "fit_gpu": dict(off, lack_of_fit_p=0.4)}
    assert reasons(d) == [fit_reason("wall", bent)]


@pytest.fixture
def noisy_stand(monkeypatch, quiet_machine):
    """A stand-in engine whose untraced runs at N=8 cycle through paces 1.12, 1.12, 1.12, 0.88
    (exact otherwise): any three or more in a row have their median 12 % off the line, with a
    spread that explains it;
    ``bent``: every run at N=8 12 % slow, no spread."""
    from hostgap.capture.protocol import engine as engine_mod
    from test_capture_interleave import LOG, StandA

    class Noisy(StandA):
        name = "noisy8"
        calls = 0
        paces = (1.12, 1.12, 1.12, 0.88)

        def generate(self, n):
            w = super().generate(n)
            if n == 8:
                Noisy.calls += 1
                return int(w * Noisy.paces[Noisy.calls % len(Noisy.paces)])
            return w

    monkeypatch.setitem(engine_mod.ENGINES, "noisy8", Noisy)
    monkeypatch.setattr("hostgap.capture.protocol.interleave.time.sleep", lambda s: None)
    LOG.clear()
    yield Noisy


@pytest.mark.parametrize("budget", [0.001, 600.0])
def test_a_noisy_line_is_measured_again_then_valid_with_its_note(noisy_stand, tmp_path, budget):
    from hostgap.capture.protocol.orchestrate import measure
    from hostgap.report.run_rows import check_rows

    r = measure(_cfg(tmp_path, engine="noisy8", budget=budget))
    conv = r["differencing"]["convergence"]
    fw = r["differencing"]["fit_wall"]
    assert fw["max_residual"] == pytest.approx(0.12, abs=1e-6) and fw["lack_of_fit_p"] > 0.05
    assert r["valid"], r["invalid_reasons"]
    # the limits ask for rounds while the budget lasts: none, or all it may have
    assert conv["stopped"] == ("budget" if budget < 1 else "rounds")
    assert len(conv["rounds"]) == (0 if budget < 1 else cv.MAX_ROUNDS)
    assert conv["why"][0].startswith("wall not linear in N (R² 0.97")
    rows = {x[0]: x[2] for x in check_rows(r)}
    assert "wall: noisy line, within its repeats' spread (lack-of-fit p" in rows["linearity R² wall / device"]
    assert "device:" not in rows["linearity R² wall / device"]


def test_a_bent_line_stays_invalid(noisy_stand, tmp_path):
    from hostgap.capture.protocol.orchestrate import measure
    from hostgap.report.run_rows import check_rows

    noisy_stand.paces = (1.12,)
    r = measure(_cfg(tmp_path, engine="noisy8", budget=0.001))
    assert not r["valid"]
    assert r["invalid_reasons"][0].startswith("wall not linear in N (R² 0.97")
    assert r["invalid_reasons"][0].endswith("; beyond the repeats' spread, lack-of-fit p 0.000)")
    assert "noisy line" not in {x[0]: x[2] for x in check_rows(r)}["linearity R² wall / device"]


def test_status_of_reads_every_check_and_asks_rounds_by_the_limits():
    noisy = {"slope": 1.0, "intercept": 0.0, "r2": 0.97, "points": 6, "max_residual": 0.12, "lack_of_fit_p": 0.3}
    line = dict(noisy, r2=0.999, max_residual=0.01)
    # a noisy device line is valid (checks) but still asks for a traced round while the budget lasts
    st = cv.status_of({"fit_wall": line, "fit_gpu": noisy, "ci": {"host_fraction": [0.40, 0.50]}}, 0.1)
    assert (st.wall_ok, st.device_ok, st.width) == (True, False, pytest.approx(0.10))
    assert st.why == (
        "device time not linear in N (R² 0.9700 < 0.99; beyond the repeats' spread, lack-of-fit p 0.300)",
    )
    assert cv.wanted(st) == cv.Round(untraced=False, traced=True)
    st = cv.status_of({"fit_wall": noisy, "fit_gpu": line, "ci": {"host_fraction": [0.40, 0.50]}}, 0.1)
    assert (st.wall_ok, st.device_ok) == (False, True) and cv.wanted(st) == cv.Round(untraced=True, traced=False)
    # a wide interval is named; a narrow one, or none, is not
    wide = cv.status_of({"fit_wall": line, "fit_gpu": line, "ci": {"host_fraction": [0.20, 0.50]}}, None)
    assert wide.width == pytest.approx(0.30) and wide.why == ("host fraction interval 30 points wide (target 20)",)
    assert cv.status_of({"fit_wall": line, "fit_gpu": line}, None).why == ()
    assert cv.status_of({"fit_wall": line, "fit_gpu": line}, None).width is None
    # the linear-enough default is the valid-or-not rule, noisy lines included
    from hostgap.stats.differencing import LinearFit, linear_enough

    f = LinearFit(**noisy)
    assert linear_enough(f) and not linear_enough(f, strict=True)


def test_lack_of_fit_p_weights_by_the_sloped_line():
    """A sloped sweep against an independent weighted least squares (lstsq, three reweightings
    from unweighted): the weights follow the line, not the data."""
    from scipy.stats import f

    from hostgap.stats.differencing import lack_of_fit_p

    s = {1: [9.0, 11.0], 5: [52.0, 47.0], 9: [95.0, 86.0], 13: [120.0, 131.0]}
    x = np.array([n for n in s for _ in s[n]], float)
    y = np.array([v for n in s for v in s[n]])
    w = np.ones_like(x)
    for _ in range(3):
        a = np.vstack([x, np.ones_like(x)]).T * np.sqrt(w)[:, None]
        slope, icpt = np.linalg.lstsq(a, y * np.sqrt(w), rcond=None)[0]
        w = 1.0 / (icpt + slope * x) ** 2
    fit = {n: icpt + slope * n for n in s}
    pure = sum(sum((v - np.mean(s[n])) ** 2 for v in s[n]) / fit[n] ** 2 for n in s)
    lack = sum(2 * (np.mean(s[n]) - fit[n]) ** 2 / fit[n] ** 2 for n in s)
    assert lack_of_fit_p(s) == pytest.approx(float(f.sf((lack / 2) / (pure / 4), 2, 4)), rel=1e-9)


def test_jitter_at_a_clocks_resolution_is_no_spread():
    """Runs that differ below a part per million (a stand-in's rounding, a clock's tick) carry no
    spread to test against: a line is a line (1.0), however the dust falls."""
    from hostgap.stats.differencing import lack_of_fit_p

    rng = np.random.default_rng(3)
    s = {n: list(1e6 * (n + 1) * (1 + 3e-7 * rng.standard_normal(2))) for n in (1, 2, 4, 6, 8, 10)}
    assert lack_of_fit_p(s) == 1.0
