"""hostgap watch against stand-in servers: SGLang's documented metrics (device timer on and
off, built by tests/metrics_standin.py), faults (missing endpoint, timeouts, a server that goes
away and comes back, counter resets, new label sets), the vLLM model estimate by hand, and the
CLI's outputs (--json, --jsonl, --fail-if, --serve, the stored run)."""

from __future__ import annotations

import json
import sqlite3
import threading
import urllib.request

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.server.metrics import Scrape, delta, parse, step_stats
from hostgap.server.watch import estimate as est
from hostgap.server.watch import loop as w
from metrics_standin import MetricsStandIn, SglangState, sglang_text

STEP = {
    "stages": {"recv_requests": 0.2, "get_next_batch": 0.3, "run_batch": 2.0, "process_batch_result": 0.5},
    "idle_s": 0.5,
    "forward_decode_s": 1.8,
    "passes": 200,
    "batch": 8,
    "itl_s": 0.015,
}
"""One interval of SGLang work: 3.0 s of busy scheduler loop, 1.8 s of it GPU forward time
(host share 1 − 1.8/3.0 = 0.4), 200 decode passes of 8 sequences, 15 ms between tokens."""


def states(n: int, occupancy_pct: float = 58.0) -> list[SglangState]:
    out = [SglangState(occupancy_pct=occupancy_pct)]
    for _ in range(n - 1):
        out.append(out[-1].advanced(**STEP))
    return out


def texts(n: int, device_timer: bool = True, ranks: int = 1) -> list[str]:
    return [sglang_text([s] * ranks, device_timer=device_timer) for s in states(n)]


def run_watch(
    script: list[str], interval: float = 0.15, n: int = 3, timeout: float | None = None, calibration=None
) -> tuple[list[dict], list[str]]:
    notes: list[str] = []
    with MetricsStandIn(script) as srv:
        cfg = w.WatchConfig(srv.url, interval_s=interval, timeout_s=timeout, calibration=calibration, max_intervals=n)
        rows = w.watch(cfg, lambda r: None, notes.append)
    return rows, notes


def test_sglang_device_timer_rows_by_hand():
    rows, notes = run_watch(texts(4))
    assert len(rows) == 3 and notes == []
    for r in rows:
        assert r["status"] == "ok" and r["engine"] == "sglang"
        assert r["host_share"] == pytest.approx(0.4)
        assert r["host_share_basis"] == "device timer"
        # the interval spans the rank's counters (0.40) and the occupancy gauge (1 − 0.58)
        assert (r["host_share_low"], r["host_share_high"]) == (pytest.approx(0.4), pytest.approx(0.42))
        assert r["tokens_per_step"] == pytest.approx(8.0) and r["seqs_per_step"] == pytest.approx(8.0)
        assert r["step_period_s"] == pytest.approx(0.015)
        assert r["gpu_s_per_step"] == pytest.approx(1.8 / 200)
        assert r["host_s_per_step"] == pytest.approx(1.2 / 200)
        assert r["host_breakdown"] == pytest.approx(
            {"get_next_batch": 0.1, "process_batch_result": 0.5 / 3, "recv_requests": 0.2 / 3, "run_batch": 2 / 3}
        )
    s = w.summary(rows, w.parse_conditions("host_share>0.3,host_share>0.5"))
    assert s["host_share"] == pytest.approx(0.4) and s["steps"] == 600
    assert s["host_breakdown"] == pytest.approx(rows[0]["host_breakdown"])
    assert [c["holds"] for c in s["fail_if"]] == [True, False]


def test_sglang_without_device_timer_says_the_variable():
    rows, notes = run_watch(texts(3, device_timer=False), n=2)
    assert any("SGLANG_ENABLE_METRICS_DEVICE_TIMER=1" in n for n in notes)
    assert all(r["host_share"] is None and r["host_share_basis"] == "none" for r in rows)
    assert all(r["tokens_per_step"] == pytest.approx(8.0) for r in rows)  # the telemetry still shows


def test_two_tensor_parallel_ranks_and_a_rank_that_appears():
    one, two = texts(4, ranks=1), texts(4, ranks=2)
    rows, notes = run_watch([one[0], two[1], two[2], two[3]])
    assert any("new series" in n for n in notes)
    assert rows[0]["status"] == "ok" and rows[0]["steps"] == 200  # rank 1's series wait a turn
    assert any("new series" in n for n in rows[0]["notes"])
    assert rows[1]["host_share"] == pytest.approx(0.4) and rows[1]["steps"] == 200


def test_server_gone_and_back_and_restarted():
    t = texts(4)
    restarted = sglang_text(
        [
            SglangState(
                decode_passes=10,
                decode_tokens=80,
                itl=((0.015, 80),),
                stages={"recv_requests": 0.1, "get_next_batch": 0.1, "run_batch": 0.5, "process_batch_result": 0.1},
                idle_s=0.1,
                forward_s={"decode": 0.3, "extend": 0.1},
            )
        ],
        device_timer=True,
    )
    rows, notes = run_watch([t[0], "close", "500", t[1], restarted, t[1]], n=5)
    assert [r["status"] for r in rows] == ["no-scrape", "no-scrape", "ok", "reset", "ok"]
    assert sum("scrape failed" in n for n in notes) == 1 and any("answering again" in n for n in notes)
    assert any("restarted" in n for n in notes)
    assert rows[2]["host_share"] == pytest.approx(0.4)  # the gap is one longer interval
    assert rows[3]["steps_per_s"] is None and rows[3]["host_share"] is None
    assert all(r["host_share"] is None or 0 <= r["host_share"] <= 1 for r in rows)


def test_scrape_timeout_is_a_row_not_a_hang():
    t = texts(3)
    rows, notes = run_watch([t[0], "hang", t[1]], interval=0.3, n=2, timeout=0.2)
    assert rows[0]["status"] == "no-scrape" and "timed out" in rows[0]["notes"][0]
    assert rows[1]["status"] == "ok"


def test_scrape_bounds():
    # the interval, held to [5, 10] s; a given --timeout as is; the opening scrape at least 15 s
    assert w.WatchConfig("u", interval_s=2).scrape_timeout_s == 5.0
    assert w.WatchConfig("u", interval_s=7).scrape_timeout_s == 7.0
    assert w.WatchConfig("u", interval_s=30).scrape_timeout_s == 10.0
    assert w.WatchConfig("u", interval_s=2, timeout_s=0.5).scrape_timeout_s == 0.5
    assert w.WatchConfig("u", interval_s=2, timeout_s=0.5).opening_timeout_s == 15.0
    assert w.WatchConfig("u", interval_s=2, timeout_s=20).opening_timeout_s == 20.0


def test_opening_scrape_waits_past_the_interval():
    # the server answers the first scrape after 0.6 s: longer than --timeout, within the opening bound
    with MetricsStandIn(["late"] + texts(1), hang_s=0.6) as srv:
        s = w.first_scrape(w.WatchConfig(srv.url, interval_s=0.2, timeout_s=0.3))
    assert s.engine is not None


def test_missing_endpoint_names_the_flag():
    with MetricsStandIn(["404"]) as srv:
        with pytest.raises(HostgapError, match="--enable-metrics"):
            w.first_scrape(w.WatchConfig(srv.url, interval_s=1))
    with MetricsStandIn(["some_metric 1\n"]) as srv:
        with pytest.raises(HostgapError, match="no vllm: or sglang: metrics"):
            w.first_scrape(w.WatchConfig(srv.url, interval_s=1))


# ---------------------------------------------------------------------- vLLM model estimate


def calibration_steps() -> list[dict]:
    """Decode steps whose GPU time is exactly 1 ms + 0.5 ms per sequence and host term 4 ms."""
    out = []
    for i in range(30):
        b = (2, 4, 8)[i % 3]
        gpu = 1_000_000 + 500_000 * b
        out.append(
            {
                "index": i,
                "kind": "decode",
                "wall_ns": gpu + 4_000_000,
                "gpu_active_ns": gpu,
                "gen_requests": b,
                "ctx_requests": 0,
                "partial": False,
                "queued": False,
            }
        )
    out.append(
        {"index": 30, "kind": "decode", "wall_ns": 1, "gpu_active_ns": 0, "gen_requests": 1, "partial": True}
    )  # flagged: left out
    out.append(
        {
            "index": 31,
            "kind": "decode",
            "wall_ns": 9_000_000,
            "gpu_active_ns": 100,
            "gen_requests": 4,
            "graph_flags": ["graph_kernels_missing"],
        }
    )  # a graph replay the trace under-records: left out
    return out


def test_calibration_fit_and_model_estimate_by_hand():
    cal = est.fit_calibration(calibration_steps(), "hand")
    assert cal.steps == 30 and cal.batches == (2, 4, 8)
    assert cal.gpu_intercept_s == pytest.approx(1e-3) and cal.gpu_slope_s == pytest.approx(0.5e-3)
    assert cal.host_intercept_s == pytest.approx(4e-3) and cal.host_slope_s == pytest.approx(0, abs=1e-12)
    assert cal.block_rel_err == pytest.approx(0, abs=1e-9)
    stats = _stats(batch=4, period=0.010)
    e = est.vllm_model(stats, cal)
    # GPU time at batch 4 = 3 ms of a 10 ms step: host share 0.7, exact model: no width
    assert e.basis == "model estimate"
    assert e.host_share == pytest.approx(0.7) and e.low == pytest.approx(0.7) and e.high == pytest.approx(0.7)
    assert e.model_period_s == pytest.approx(0.007)
    # a batch of 16 lies outside [2, 8]: extrapolated, interval widened by (16 − 8) / 16
    e16 = est.vllm_model(_stats(batch=16, period=0.020), cal)
    assert e16.host_share == pytest.approx(1 - 0.009 / 0.020)
    assert e16.low == pytest.approx(1 - 0.009 * 1.5 / 0.020) and "outside" in e16.note


def test_model_estimate_never_outside_unit_interval():
    cal = est.fit_calibration(calibration_steps(), "hand")
    e = est.vllm_model(_stats(batch=8, period=0.003), cal)  # GPU alone 5 ms > 3 ms period
    assert e.host_share is None and "recalibrate" in e.note
    assert est.vllm_model(_stats(batch=4, period=0.010), None).note.startswith("no calibration")


def test_one_batch_calibration_extrapolates_with_a_wide_interval():
    steps = [s for s in calibration_steps() if s.get("gen_requests") == 4]
    cal = est.fit_calibration(steps, "b4")
    assert cal.batches == (4,) and cal.gpu_slope_s == 0
    e = est.vllm_model(_stats(batch=8, period=0.010), cal)
    # GPU time 3 ms at batch 4 is somewhere in [3, 6] ms at batch 8: ± 100 %
    assert e.host_share == pytest.approx(0.7) and e.low == pytest.approx(0.4) and e.high == pytest.approx(1.0)


def _stats(batch: float, period: float):
    """StepStats of a vLLM interval: 100 steps of ``batch`` decode sequences, mean ITL ``period``."""
    return step_stats(delta(_vllm_scrape(0, 0, 0.0, 0.0), _vllm_scrape(100, 100 * batch, 100 * batch * period, 1.0)))


def _vllm_scrape(steps: float, tokens: float, itl_sum: float, t: float) -> Scrape:
    text = (
        "# TYPE vllm:iteration_tokens_total histogram\n"
        f'vllm:iteration_tokens_total_bucket{{le="+Inf"}} {steps}\n'
        f"vllm:iteration_tokens_total_count {steps}\nvllm:iteration_tokens_total_sum {tokens}\n"
        "# TYPE vllm:inter_token_latency_seconds histogram\n"
        f'vllm:inter_token_latency_seconds_bucket{{le="+Inf"}} {tokens}\n'
        f"vllm:inter_token_latency_seconds_count {tokens}\nvllm:inter_token_latency_seconds_sum {itl_sum}\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        f"vllm:generation_tokens_total {tokens}\n"
        "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 0\n"
    )
    counters, gauges, hist = parse(text)
    return Scrape("http://x/metrics", 1000 + t, t, 0.0, counters, gauges, hist)


# ---------------------------------------------------------------------- the command


def test_cli_json_jsonl_fail_if_and_stored_run(tmp_path):
    db = tmp_path / "runs.sqlite"
    jsonl = tmp_path / "w.jsonl"
    with MetricsStandIn(texts(5)) as srv:
        res = CliRunner().invoke(
            cli,
            [
                "watch",
                srv.url,
                "--interval",
                "0.15",
                "--duration",
                "0.45",
                "--json",
                "--jsonl",
                str(jsonl),
                "--fail-if",
                "host_share>0.3",
                "--db",
                str(db),
                "-o",
                str(tmp_path / "runs"),
            ],
        )
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    assert doc["engine"] == "sglang" and 1 <= len(doc["intervals"]) <= 3  # a slow tick is skipped, not doubled
    for r in doc["intervals"]:
        assert {"t_start", "steps_per_s", "tokens_per_step", "step_period_s", "host_share", "host_share_basis"} <= set(
            r
        )
    assert doc["summary"]["host_share"] == pytest.approx(0.4)
    assert doc["summary"]["fail_if"][0]["holds"] is True
    assert "fail-if held" in res.stderr
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert [x["host_share"] for x in lines] == [r["host_share"] for r in doc["intervals"]]
    con = sqlite3.connect(db)
    (stored,) = con.execute("SELECT results FROM runs WHERE run_id = ?", (doc["run_id"],)).fetchone()
    con.close()
    assert json.loads(stored)["watch"]["summary"]["host_share"] == pytest.approx(0.4)
    assert (tmp_path / "runs" / doc["run_id"] / "watch.jsonl").exists()
    shown = CliRunner().invoke(cli, ["show", doc["run_id"], "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert "host-exposed share 0.40 [0.40-0.42] (device timer" in shown.stdout
    listed = CliRunner().invoke(cli, ["runs", "--db", str(db)])
    assert listed.exit_code == 0 and doc["run_id"] in listed.stdout
    # every interval names its top lever: a host share of 0.4 and no calibration (SGLang's device
    # timer): a 1.4x faster core takes 0.4 x (1 - 1/1.4) of the step, an upper bound (no launch floor)
    for r in doc["intervals"]:
        assert r["top_lever"]["lever"] == "cpu" and r["top_lever"]["target"] == {"speed": 1.4}
        assert r["top_lever"]["gain"] == pytest.approx(r["host_share"] * (1 - 1 / 1.4))
    assert doc["summary"]["top_lever"]["lever"] == "cpu"
    assert doc["summary"]["top_lever"]["intervals"] == len(doc["intervals"])
    assert "top lever: cpu in" in shown.stdout and "cpu +11%" in shown.stdout
    advised = CliRunner().invoke(cli, ["advise", str(tmp_path / "runs" / doc["run_id"]), "--json"])
    assert advised.exit_code == 0, advised.output
    levers = {x["lever"]: x for x in json.loads(advised.stdout)["levers"]}
    assert levers["cpu"]["applicable"] and not levers["graphs"]["applicable"]
    assert "an engine's metrics carry none" in levers["graphs"]["reason"]
    assert "calibration" in levers["batch"]["reason"]
    shown_json = json.loads(CliRunner().invoke(cli, ["show", doc["run_id"], "--db", str(db), "--json"]).stdout)
    assert shown_json["levers"][0]["lever"] == "cpu"


def test_cli_bad_inputs_exit_2():
    r = CliRunner()
    assert r.invoke(cli, ["watch", "localhost:8000"]).exit_code == 2
    res = r.invoke(cli, ["watch", "http://127.0.0.1:9", "--fail-if", "host_shar>0.3"])
    assert res.exit_code == 2 and "unknown metric" in res.output
    assert r.invoke(cli, ["watch", "http://127.0.0.1:9", "--interval", "0"]).exit_code == 2
    res = r.invoke(cli, ["watch", "http://127.0.0.1:9", "--interval", "1", "--timeout", "0.5", "--no-store"])
    assert res.exit_code == 2 and "no metrics from the server" in res.output and "Traceback" not in res.output
    with MetricsStandIn(["404"]) as srv:
        res = r.invoke(cli, ["watch", srv.url, "--no-store"])
    assert res.exit_code == 2 and "--enable-metrics" in res.output
    with MetricsStandIn(texts(2)) as srv:
        res = r.invoke(cli, ["watch", srv.url, "--jsonl", "/nonexistent-dir/w.jsonl", "--no-store"])
    assert res.exit_code == 2 and "cannot write the --jsonl file" in res.output


def test_calibration_inputs(tmp_path):
    from hostgap.server.watch.calibration import load_calibration

    steps = calibration_steps()
    (tmp_path / "steps.json").write_text(json.dumps({"steps": steps}))  # `hostgap steps --json` form
    (tmp_path / "attach.json").write_text(
        json.dumps({"analysis": {"kind": "trace_set", "ranks": [{"steps": steps}, {"steps": []}]}})
    )
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"steps_decode": steps}))
    for ref in ("steps.json", "attach.json", "run"):
        cal = load_calibration([str(tmp_path / ref)])
        assert cal.steps == 30 and cal.gpu_slope_s == pytest.approx(0.5e-3), ref
    saved = tmp_path / "cal.json"
    saved.write_text(json.dumps({"calibration": cal.to_dict()}))
    assert load_calibration([str(saved)]) == cal
    (tmp_path / "few.json").write_text(json.dumps({"steps": steps[:3]}))
    with pytest.raises(HostgapError, match="cannot calibrate: 3 usable decode steps"):
        load_calibration([str(tmp_path / "few.json")])
    with pytest.raises(HostgapError, match="not a file, a run directory or a run id"):
        load_calibration(["no-such-run"], db=str(tmp_path / "empty.sqlite"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(HostgapError, match="not valid JSON"):
        load_calibration([str(tmp_path / "bad.json")])


def test_serve_exports_the_estimate(tmp_path):
    t = texts(8)
    got: dict[str, str] = {}
    with MetricsStandIn(t) as srv:
        from hostgap.server.watch.exporter import Exporter, engine_labels

        first = w.first_scrape(w.WatchConfig(srv.url, interval_s=0.15))
        exp = Exporter(0, engine_labels(first))
        try:
            stop = threading.Event()

            def on_row(row):
                exp.update(row)
                with urllib.request.urlopen(f"http://127.0.0.1:{exp.port}/metrics", timeout=5) as r:
                    got["text"] = r.read().decode()
                stop.set()

            w.watch(w.WatchConfig(srv.url, interval_s=0.15, duration_s=3), on_row, lambda m: None, stop, first)
        finally:
            exp.close()
    counters, gauges, _ = parse(got["text"])
    (labels,) = gauges["hostgap_host_exposed_share"]
    server = srv.url.split("//")[1]
    assert dict(labels) == {"model_name": "tiny", "engine_type": "unified", "engine_kind": "sglang", "server": server}
    assert gauges["hostgap_host_exposed_share"][labels] == pytest.approx(0.4)
    assert gauges["hostgap_step_period_seconds"][labels] == pytest.approx(0.015)
    assert exp.listener.address.host == "127.0.0.1"


def test_report_draws_a_stored_watch(tmp_path):
    db = tmp_path / "runs.sqlite"
    with MetricsStandIn(texts(4)) as srv:
        res = CliRunner().invoke(
            cli,
            [
                "watch",
                srv.url,
                "--interval",
                "0.15",
                "--duration",
                "0.45",
                "--json",
                "--db",
                str(db),
                "-o",
                str(tmp_path / "runs"),
                "-q",
            ],
        )
    assert res.exit_code == 0, res.output
    run_id = json.loads(res.stdout)["run_id"]
    out = tmp_path / "r.html"
    rep = CliRunner().invoke(cli, ["report", run_id, "--db", str(db), "-o", str(out), "--json", "-q"])
    assert rep.exit_code == 0, rep.output
    data = json.loads(rep.stdout)
    (entry,) = data["watch_runs"]
    assert entry["run_id"] == run_id and entry["engine"] == "sglang"
    n = len(entry["drawn"]["host_share"])
    assert n >= 1 and entry["drawn"]["host_share"] == pytest.approx([0.4] * n)
    assert entry["drawn"]["seqs_per_step"] == pytest.approx([8.0] * n)
    page = out.read_text()
    assert "fig-watch-0" in page and "<svg" in page
    # the run directory works as an input too
    rep2 = CliRunner().invoke(cli, ["report", str(tmp_path / "runs" / run_id), "-o", str(out), "-q"])
    assert rep2.exit_code == 0, rep2.output


def test_ctrl_c_ends_the_watch_with_its_summary(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from metrics_standin import wait_for

    with MetricsStandIn(texts(40)) as srv:
        p = subprocess.Popen(
            [sys.executable, "-m", "hostgap", "watch", srv.url, "--interval", "0.2", "--json", "--no-store", "-q"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert wait_for(lambda: srv.served >= 4, 60), "the watch never scraped"
            time.sleep(0.1)
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 0, err
    doc = json.loads(out)
    assert len(doc["intervals"]) >= 2 and doc["summary"]["host_share"] == pytest.approx(0.4)


def test_serve_port_in_use_is_bad_input():
    import socket

    with socket.socket() as s, MetricsStandIn(texts(2)) as srv:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = CliRunner().invoke(
            cli, ["watch", srv.url, "--serve", str(port), "--interval", "0.5", "--duration", "1", "--no-store"]
        )
    assert res.exit_code == 2 and "cannot listen on 127.0.0.1" in res.output


def test_exporter_labels_of_a_recorded_vllm_server():
    from pathlib import Path

    from hostgap.server.watch.exporter import engine_labels

    text = (Path(__file__).parent / "data" / "watch" / "vllm_c4_a.txt").read_text()
    counters, gauges, hist = parse(text)
    s = Scrape("http://x/metrics", 0.0, 0.0, 0.0, counters, gauges, hist)
    assert engine_labels(s) == {
        "engine": "0",
        "model_name": "/tmp/vllm-server/model",
        "engine_kind": "vllm",
        "server": "x",
    }
