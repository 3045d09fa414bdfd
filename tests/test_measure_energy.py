"""`measure` with a fake powercap tree whose counter rises at a known constant power, through
wraps of the counter: the energy per step is that power times the measured wall per step, and
request and token energy follow the decomposition (docs/energy.md). Without a counter, no
number appears and the reason does."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hostgap.cli import cli  # noqa: E402
from hostgap.energy import powercap as pc  # noqa: E402

POWER_W = 20.0
RANGE_UJ = 10**9  # 1 kJ: half of it (500 J, 25 s at 20 W) is far above any run's energy


class ClockCounter:
    """A powercap counter rising at ``POWER_W``, read from the clock when read. Every other run
    starts with the counter 1 µJ below its top, so that run's reading wraps (the counter's phase
    is free: where it stands when a run starts is chance; here a wrap is made certain)."""

    def __init__(self, real):
        self.real = real
        self.calls = 0
        self.base = 0.0
        self.start = 0
        self.windows: list[float] = []  # each run's counted time (s), in run order

    def __call__(self, path: Path) -> int:
        if path.name != "energy_uj":
            return self.real(path)
        now = time.perf_counter()
        self.calls += 1
        if self.calls == 1:  # the meter's opening read
            return 0
        if self.calls % 2 == 0:  # before a run: the counter's phase for this run
            self.base = now
            self.start = RANGE_UJ - 1 if self.calls % 4 == 0 else RANGE_UJ // 3
            return self.start
        self.windows.append(now - self.base)
        return int(self.start + POWER_W * (now - self.base) * 1e6) % RANGE_UJ


ARGS = ["measure", "-p", "tiny", "--no-db", "--n2", "32", "-r", "5", "--traced-repeats", "1"]
ARGS += ["--sweep", "1,8,16,32", "--retries", "0", "--json", "-q"]


def _run(tmp_path: Path, monkeypatch, root: Path) -> dict:
    monkeypatch.setenv("HOSTGAP_POWERCAP_ROOT", str(root))
    r = CliRunner().invoke(cli, [*ARGS, "--out", str(tmp_path / "runs")], catch_exceptions=False)
    assert r.exit_code in (0, 3), r.output[-3000:]  # 3: marked invalid on a busy machine
    return json.loads(r.output[r.output.index("{") :])


@pytest.mark.slow
def test_energy_per_step_is_power_times_wall_through_wraps(tmp_path, monkeypatch):
    z = tmp_path / "powercap" / "intel-rapl:0"
    z.mkdir(parents=True)
    (z / "name").write_text("package-0\n")
    (z / "energy_uj").write_text("0\n")
    (z / "max_energy_range_uj").write_text(f"{RANGE_UJ}\n")
    fake = ClockCounter(pc._read_int)
    monkeypatch.setattr(pc, "_read_int", fake)
    res = _run(tmp_path, monkeypatch, tmp_path / "powercap")
    e = res["energy"]
    assert e["available"] and e["source"] == "powercap" and e["of"] == ["package-0"]
    wraps = e["counter_events"]["package-0"]["wrap"]
    runs = sum(
        len(v) for v in json.loads((Path(res["run_dir"]) / "timings.json").read_text())["untraced_wall_ns"].values()
    )
    assert wraps >= runs // 2 - 1 and e["runs_left_out"] == 0  # every other run wrapped; none lost
    # every run's energy, wrapped or not, is the power times the time its counter counted
    timings = json.loads((Path(res["run_dir"]) / "timings.json").read_text())
    per_n, seq = timings["untraced_energy_uj"]["package-0"], timings["untraced_seq"]
    for n, uj in per_n.items():
        for k, v in zip(seq[n], uj):
            assert v == pytest.approx(POWER_W * 1e6 * fake.windows[k], abs=2), (n, k)
    # the counter's window is the run's call, its wall the engine's timed part of it: on a quiet
    # machine the two agree; a busy one (the result marked invalid) stretches the untimed part
    if res["valid"]:
        t_step_s = res["differencing"]["t_step_ns"] * 1e-9
        assert e["step_j"] == pytest.approx(POWER_W * t_step_s, rel=0.10)
        assert e["step_power_w"] == pytest.approx(POWER_W, rel=0.10)
        assert e["power_w"] == pytest.approx(POWER_W, rel=0.10)  # the counter's window holds the run's wall
    n, b = e["at_tokens"], e["batch"]
    assert (n, b) == (32, 1)
    assert e["request_j"] == pytest.approx(e["fixed_j"] / b + n * e["step_j"] / b)
    assert e["token_j"] == pytest.approx(e["request_j"] / n)
    for k in ("step_j", "fixed_j", "request_j", "token_j", "power_w"):
        lo, hi = e["ci"][k]
        assert 0 <= lo <= e[k] <= hi, k
    assert e["domains"]["package-0"]["step_j"] == e["step_j"]
    assert timings["energy_meter"]["domains"]["package-0"]["max_range"] == RANGE_UJ
    assert set(timings["untraced_energy_uj"]["package-0"]) == set(timings["untraced_wall_ns"])


@pytest.mark.slow
def test_without_a_counter_no_number_and_the_reason(tmp_path, monkeypatch):
    res = _run(tmp_path, monkeypatch, tmp_path / "none")
    assert res["energy"] == {
        "available": False,
        "reason": f"no energy counter: no powercap at {tmp_path / 'none'}; NVML not asked for",
    }
