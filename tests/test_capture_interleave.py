"""Two engines measured together (``measure --engine A,B``) with stand-in engines: the runs are
interleaved, each side gets its own contention and validity checks, and the difference carries
an interval or is marked invalid. No torch or vLLM needed: the stand-ins write tiny CPU traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hostgap.capture.protocol import engine as engine_mod
from hostgap.capture.protocol.engine import Engine
from hostgap.capture.protocol.interleave import pair_order
from hostgap.capture.protocol.orchestrate import MeasureConfig, measure_together
from hostgap.report.run_view import difference_line
from hostgap.stats.differencing import mover_difference, slope_with_interval, sweep_points
from hostgap.stats.engine_diff import engine_difference

LOG: list[tuple] = []
US = 1000


class _Stand(Engine):
    """A stand-in engine: a run of N tokens takes CONST + N x STEP µs (exactly), of which
    COMPUTE µs per step is CPU compute in its trace; ``busy`` says in which attempts (1-based)
    other processes used the whole wall of every untraced run."""

    name = "stand"
    CONST, STEP, COMPUTE = 2000, 300, 120
    busy: tuple[int, ...] = ()

    def __init__(self, workload, **_kw):
        super().__init__(workload)
        self.attempt = 0
        self.last_thread_ns = 0
        self.last_other_cpu_ns = 0

    def prepare(self):
        LOG.append((self.name, "prepare"))

    def _wall(self, n: int) -> int:
        return (self.CONST + n * self.STEP) * US

    def generate(self, n):
        w = self._wall(n)
        LOG.append((self.name, n, "untraced"))
        self.last_other_cpu_ns = w if self.attempt in self.busy else 0
        return w

    def generate_traced(self, n, trace_dir):
        LOG.append((self.name, "traced", n))
        trace_dir = Path(trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        events, t = [], 0
        for i in range(n):  # one prefill step, then decode steps
            kind = "prefill" if i == 0 else "decode"
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": self.STEP,
                    "name": f"hostgap.step#{i}:{kind}:b1:q{128 if i == 0 else 1}:s{129 + i}",
                    "args": {},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 10,
                    "dur": self.COMPUTE,
                    "name": "aten::addmm",
                    "args": {},
                }
            )
            t += self.STEP
        path = trace_dir / f"{self.name}_{n}_{len(LOG)}.json"
        path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
        return self._wall(n), path

    def describe(self):
        return {"engine": self.name, "device_name": "stand-in CPU"}

    def close(self):
        LOG.append((self.name, "close"))


class StandA(_Stand):
    name = "stand_a"


class StandB(_Stand):
    name = "stand_b"
    STEP, COMPUTE = 500, 100


@pytest.fixture
def stands(monkeypatch, quiet_machine):
    monkeypatch.setitem(engine_mod.ENGINES, "stand_a", StandA)
    monkeypatch.setitem(engine_mod.ENGINES, "stand_b", StandB)
    monkeypatch.setattr("hostgap.capture.protocol.interleave.time.sleep", lambda s: None)
    LOG.clear()
    yield
    StandA.busy = StandB.busy = ()


def _cfgs(tmp_path, **kw) -> list[MeasureConfig]:
    base = dict(
        preset="tiny",
        device="cpu",
        n1=1,
        n2=8,
        repeats=3,
        traced_repeats=1,
        warmup=1,
        retries=0,
        n_boot=200,
        out=str(tmp_path / "runs"),
        keep_traces="none",
    )
    base.update(kw)
    return [MeasureConfig(engine=e, **base) for e in ("stand_a", "stand_b")]


def _attempts(monkeypatch):
    """Count attempts on each stand-in: every attempt starts with the warm-up's traced call."""

    def gen_traced(self, n, d, _orig=_Stand.generate_traced):
        if Path(d).name == ".warmup":
            self.attempt += 1
        return _orig(self, n, d)

    monkeypatch.setattr(_Stand, "generate_traced", gen_traced)


def test_pair_order_alternates_which_engine_goes_first():
    assert [pair_order(2, i) for i in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert [pair_order(1, i) for i in range(3)] == [[0], [0], [0]]


def test_runs_interleave_and_the_difference_is_exact(stands, tmp_path, monkeypatch):
    _attempts(monkeypatch)
    a, b = measure_together(_cfgs(tmp_path))
    # both engines built before the first timed run; each closed once at the end
    assert LOG.index(("stand_b", "prepare")) < min(i for i, e in enumerate(LOG) if e[2:] == ("untraced",))
    assert LOG[-2:] in ([("stand_b", "close"), ("stand_a", "close")], [("stand_a", "close"), ("stand_b", "close")])
    # untraced runs after the warm-up come in pairs: same N, both engines, first engine alternating
    sched = a["interleaved"]["untraced_schedule"]
    assert sched == b["interleaved"]["untraced_schedule"]
    sweep = sweep_points(1, 8)
    assert len(sched) == 2 * 3 * len(sweep)
    pairs = [sched[i : i + 2] for i in range(0, len(sched), 2)]
    assert all(p[0][1] == p[1][1] for p in pairs)
    assert [p[0][0] for p in pairs] == ["stand_a" if i % 2 == 0 else "stand_b" for i in range(len(pairs))]
    timed = [e for e in LOG if e[2:] == ("untraced",)][2:]  # after one warm-up call each
    assert [[e[0], e[1]] for e in timed] == sched
    # traced runs interleave too
    traced = [e for e in LOG if e[1] == "traced"][2:]  # after one warm-up call each
    assert [e[0] for e in traced] == [
        ["stand_a", "stand_b"][j] for i in range(len(traced) // 2) for j in pair_order(2, i)
    ]
    # each side valid, with its own split; the difference is B - A, exactly
    assert a["valid"] and b["valid"] and a["engine"] == "stand_a" and b["engine"] == "stand_b"
    assert a["differencing"]["preempted_basis"] == "other-cpu" and a["differencing"]["preempted_share"] == 0
    diff = a["engine_difference"]
    assert diff == b["engine_difference"] and diff["valid"] and diff["schedule"] == "interleaved"
    assert diff["wall_ns"]["value"] == pytest.approx((500 - 300) * US)
    # host-exposed per step = step - compute (CPU split: traced compute share x untraced wall)
    assert diff["host_exposed_ns"]["value"] == pytest.approx(((500 - 100) - (300 - 120)) * US)
    assert diff["wall_ns"]["lo"] <= diff["wall_ns"]["value"] <= diff["wall_ns"]["hi"]
    line = difference_line(diff)
    assert line.startswith("stand_b - stand_a (interleaved, 95 % CI): wall +0.200 ms/step [")
    # the results written to disk carry the difference
    on_disk = json.loads((Path(a["run_dir"]) / "results.json").read_text())
    assert on_disk["engine_difference"]["wall_ns"]["value"] == diff["wall_ns"]["value"]


def test_one_busy_engine_measures_both_again(stands, tmp_path, monkeypatch):
    _attempts(monkeypatch)
    StandB.busy = (1,)  # other work beside every run of B's first attempt only
    a, b = measure_together(_cfgs(tmp_path, retries=1))
    assert a["differencing"]["attempts"] == b["differencing"]["attempts"] == 2  # both measured again
    assert a["valid"] and b["valid"] and a["engine_difference"]["valid"]


def test_a_busy_engine_makes_the_difference_invalid(stands, tmp_path, monkeypatch):
    _attempts(monkeypatch)
    StandB.busy = (1,)
    a, b = measure_together(_cfgs(tmp_path))
    assert a["valid"] and not b["valid"]
    assert b["differencing"]["preempted_share"] == 1.0
    diff = a["engine_difference"]
    assert not diff["valid"] and diff["wall_ns"] is None and diff["host_exposed_ns"] is None
    assert diff["invalid_reasons"][0].startswith("stand_b: machine busy: 100% of untraced runs beside other work")
    assert difference_line(diff).startswith("stand_b - stand_a: invalid, no difference reported: stand_b: machine busy")


def test_cli_prints_the_difference_and_exits_3_when_invalid(stands, tmp_path, monkeypatch):
    from hostgap.cli import cli

    _attempts(monkeypatch)
    args = [
        "measure",
        "-p",
        "tiny",
        "--engine",
        "stand_a,stand_b",
        "--device",
        "cpu",
        "--n2",
        "8",
        "-r",
        "3",
        "--traced-repeats",
        "1",
        "--warmup",
        "1",
        "--retries",
        "0",
        "--no-db",
        "-q",
        "-o",
        str(tmp_path),
    ]
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "stand_b - stand_a (interleaved, 95 % CI): wall +0.200 ms/step" in r.stdout
    StandB.busy = (1, 2)
    LOG.clear()
    r = CliRunner().invoke(cli, args + ["--json"], catch_exceptions=False)
    assert r.exit_code == 3
    runs = json.loads(r.stdout)
    assert [x["engine"] for x in runs] == ["stand_a", "stand_b"] and not runs[0]["engine_difference"]["valid"]
    bad = CliRunner().invoke(cli, ["measure", "--engine", "hf,hf", "--no-db"])
    assert bad.exit_code == 2 and "--engine" in bad.stderr


def _result(engine: str, t: float, lo: float, hi: float, h=None, valid=True) -> dict:
    h = h or (t / 2, lo / 2, hi / 2)
    return {
        "engine": engine,
        "run_id": engine,
        "valid": valid,
        "invalid_reasons": [] if valid else ["x"],
        "interleaved": {"engines": ["a", "b"]},
        "differencing": {
            "t_step_ns": t,
            "h_step_ns": h[0],
            "ci": {"level": 0.95, "t_step_ns": [lo, hi], "h_step_ns": [h[1], h[2]]},
        },
    }


def test_difference_interval_by_hand():
    """MOVER: d = 5 - 3 = 2; lower 2 - hypot(5 - 4, 3.5 - 3) = 2 - 1.1180; upper
    2 + hypot(7 - 5, 3 - 2) = 2 + 2.2361."""
    d = engine_difference(_result("a", 3.0, 2.0, 3.5), _result("b", 5.0, 4.0, 7.0))
    assert d["valid"] and d["base"] == "a" and d["other"] == "b"
    assert d["wall_ns"]["value"] == 2.0
    assert d["wall_ns"]["lo"] == pytest.approx(2 - np.hypot(1.0, 0.5))
    assert d["wall_ns"]["hi"] == pytest.approx(2 + np.hypot(2.0, 1.0))
    no_ci = _result("b", 5.0, 4.0, 7.0)
    no_ci["differencing"]["ci"]["h_step_ns"] = None
    d = engine_difference(_result("a", 3.0, 2.0, 3.5), no_ci)
    assert not d["valid"] and d["invalid_reasons"] == ["no interval for the host-exposed of b"]
    d = engine_difference(_result("a", 3.0, 2.0, 3.5, valid=False), _result("b", 5.0, 4.0, 7.0))
    assert not d["valid"] and d["invalid_reasons"] == ["a: x"] and d["wall_ns"] is None


@pytest.mark.parametrize("noise,drift", [("normal", 0.0), ("heavy", 0.0), ("spikes", 0.0), ("normal", 0.03)])
def test_difference_interval_covers_at_its_level(noise, drift):
    """Two engines with known per-step slopes, measured with the default protocol's shape (sweep
    1..128, 5 repeats): per-run jitter (normal 1 %, Student t, or 10 % of runs 10-100 % slower)
    and, in the last case, a 3 % drift shared by the two runs of each interleaved pair. Over 500
    draws the 95 % interval of the difference covers the truth in 90-99 % of draws (the
    tolerance test_capture_coverage uses); a shared drift only makes it more conservative."""
    rng = np.random.default_rng({"normal": 1, "heavy": 2, "spikes": 3}[noise] + int(100 * drift))
    ns = sweep_points(1, 128)
    ta, tb, c = 0.8e6, 1.1e6, 5e6

    def jitter(size):
        if noise == "normal":
            return rng.normal(0, 0.01, size)
        if noise == "heavy":
            return 0.01 * rng.standard_t(3, size) / np.sqrt(3)
        return rng.normal(0, 0.01, size) + (rng.random(size) < 0.10) * rng.uniform(0.10, 1.0, size)

    hits, draws = 0, 500
    for _ in range(draws):
        shared = 1 + drift * rng.standard_normal((5, len(ns)))
        sa = {n: list((c + ta * n) * shared[:, i] * (1 + jitter(5))) for i, n in enumerate(ns)}
        sb = {n: list((c + tb * n) * shared[:, i] * (1 + jitter(5))) for i, n in enumerate(ns)}
        d = mover_difference(slope_with_interval(sb, 1, 128, "theil-sen"), slope_with_interval(sa, 1, 128, "theil-sen"))
        hits += d.lo <= tb - ta <= d.hi
    cover = hits / draws
    assert (0.93 <= cover <= 1.0) if drift else (0.90 <= cover <= 0.99), cover


def test_the_engine_learns_which_trace_is_analysed_in_the_attempt_kept(stands, tmp_path, monkeypatch):
    """An engine that derives more from the analysed trace (vLLM's per-process split) is told
    which trace that is: the first traced N2 run of the attempt whose results are kept, not of
    an earlier, contended attempt."""
    _attempts(monkeypatch)
    chosen: dict[str, list[tuple[int, Path]]] = {}
    monkeypatch.setattr(
        _Stand,
        "chose_anatomy_trace",
        lambda self, path: chosen.setdefault(self.name, []).append((self.attempt, Path(path))),
        raising=False,
    )
    StandB.busy = (1,)
    a, b = measure_together(_cfgs(tmp_path, retries=1))
    for r in (a, b):
        calls = chosen[r["engine"]]
        assert [attempt for attempt, _ in calls] == [1, 2]  # told once per attempt, the kept one last
        assert calls[-1][1] == Path(r["run_dir"]) / r["anatomy_trace"]
