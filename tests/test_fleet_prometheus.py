"""The fleet view and the recording rules against a REAL Prometheus (127.0.0.1, a temporary data
directory, stopped after) scraping two tiny exporters of vLLM-format metrics: one of the
calibrated class m-a, one of m-b without a calibration.

i1 (m-a): per second 32 steps, 128 decode tokens (batch 4), an ITL sum of 2 s over 128
observations (period 1/64 s), 64 prompt tokens. Calibration cal-a: GPU 1/256 + 4/1024 = 1/128 s
at batch 4, so share = 1 − (1/128)/(1/64) = 0.5, [0.375, 0.625] (tests/data/fleet/rules_test.yml).
The exporter's counters are rate × time, so Prometheus' increases over any interval keep those
ratios (up to float rounding)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import hostgap
from hostgap.api._fleet import fleet_watch
from hostgap.cli import cli
from prometheus_server import MISSING, PROMETHEUS, Rates, exporter, prometheus, query

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason=MISSING)
CAL = str(Path(__file__).parent / "data" / "fleet" / "cal-a.json")
I1 = Rates("m-a", steps=32, decode=128, itl_sum=2, prompt=64)
I3 = Rates("m-b", steps=32, decode=128, itl_sum=2, prompt=64)


def _wait(url: str, expr: str, n: int, timeout_s: float = 60) -> list[dict]:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        got = query(url, expr)
        if len(got) >= n:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{expr}: fewer than {n} series after {timeout_s} s")


def test_rules_and_the_fleet_view_on_a_real_prometheus(tmp_path):
    rules = tmp_path / "fleet-rules.yml"
    hostgap.rules(CAL, window="4s").write(str(rules))
    with exporter(I1) as t1, exporter(I3) as t3, prometheus(tmp_path, [t1, t3], [rules]) as url:
        _wait(url, "vllm:generation_tokens_total", 2)
        t_first = time.time()
        got = _wait(url, "hostgap:host_exposed_share", 1)
        time.sleep(max(0.0, t_first + 9 - time.time()))  # a few 2 s intervals of history
        # the rules: the calibrated instance only (m-b has no calibration: no series, not a 0)
        got = query(url, "hostgap:host_exposed_share")
        assert [g["metric"]["instance"] for g in got] == [t1]
        assert got[0]["metric"]["calibration"] == "cal-a"
        assert float(got[0]["value"][1]) == pytest.approx(0.5, abs=1e-6)
        (low,) = query(url, "hostgap:host_exposed_share_low")
        assert float(low["value"][1]) == pytest.approx(0.375, abs=1e-6)
        assert query(url, 'hostgap:host_exposed_share{model_name="m-b"}') == []

        # the fleet view over the history just recorded
        end = time.time() - 2
        fleet = hostgap.watch(prometheus=url, start=end - 6, end=end, interval=2, calibration=CAL).run()
        doc = fleet.to_dict()
        rows = [r for r in doc["intervals"] if r["status"] == "ok"]
        by = {t1: [r for r in rows if r["instance"] == t1], t3: [r for r in rows if r["instance"] == t3]}
        assert len(by[t1]) >= 2 and len(by[t3]) >= 2
        for r in by[t1]:
            assert r["seqs_per_step"] == pytest.approx(4.0, rel=1e-6)
            assert r["step_period_s"] == pytest.approx(1 / 64, rel=1e-6)
            assert r["steps_per_s"] == pytest.approx(32, rel=0.3)  # Prometheus' extrapolation
            assert (r["host_share"], r["host_share_low"], r["host_share_high"]) == pytest.approx(
                (0.5, 0.375, 0.625), abs=1e-6
            )
            assert r["calibration"] == "cal-a" and r["host_share_basis"] == "model estimate"
            assert r["calibration_out_of_range"] is False
        for r in by[t3]:
            assert r["host_share"] is None and any("no calibration for class vllm/m-b" in n for n in r["notes"])
        s = doc["summary"]
        assert s["instances"] == 2 and s["instances_with_share"] == 1
        assert s["host_bound"] == [f"{t1} (vllm)"] and s["worst"][0]["calibration"] == "cal-a"

        # the command line: --json, --fail-if across the fleet (exit 1 naming the instance)
        res = CliRunner().invoke(
            cli,
            ["watch", "--prometheus", url, "--match", '{model_name="m-a"}', "--start", str(end - 6)]
            + ["--end", str(end), "--interval", "2", "--calibration", CAL, "--fail-if", "host_share>0.4", "--json"],
        )
        assert res.exit_code == 1, res.output
        out = json.loads(res.stdout)
        assert out["kind"] == "fleet_watch" and out["summary"]["instances"] == 1
        assert out["summary"]["fail_if"][0]["instances"] == [f"{t1} (vllm)"]

        # live: follows the present for a few seconds
        live = fleet_watch(url, interval=2, duration=7, calibration=CAL, lag=1.5).run().to_dict()
        seen = [r for r in live["intervals"] if r["instance"] == t1 and r["status"] == "ok"]
        assert live["end"] is None and live["start"] > end
        assert seen and all(r["host_share"] == pytest.approx(0.5, abs=1e-6) for r in seen)
