"""The fleet view on query_range answers worked out by hand (no Prometheus needed): each row is
watch's row for the same increases, the class calibration each vLLM instance uses, the fleet
summary and --fail-if across instances, and bad input as one line, exit 2.

Two 60 s intervals ending at t = 1060 and 1120. Increases over the first (the second: all 0, idle):

- i1 (vllm, m-a): 1920 steps, 7680 decode tokens (batch 4), 7680 ITL observations summing to
  120 s (period 1/64 s), 2560 prompt tokens (prefill share 0.25). Calibration cal-a (GPU
  1/256 + batch/1024 s, error 0.25, batches 2..8): GPU 1/128 s; share 1 − (1/128)/(1/64) = 0.5,
  low 1 − 1.25/2 = 0.375, high 1 − 0.75/2 = 0.625.
- i2 (vllm, m-a): 960 steps, 15360 decode tokens (batch 16, outside 2..8), ITL sum 480 s over
  15360 (period 1/32): GPU 1/256 + 16/1024 = 0.01953125; error 0.25 + 8/16 = 0.75; share
  1 − 0.625 = 0.375, low 1 − 0.625·1.75 → 0, high 1 − 0.625·0.25 = 0.84375.
- i3 (vllm, m-b, no calibration): as i1, no share.
- s1 (sglang, device timer): rank 0 forward 30 s, rank 1 37.5 s, each rank's stages run_batch
  45 s + schedule 15 s (busy 60 s; idle 10 s apart): share rank 0's 1 − 30/60 = 0.5, low rank
  1's 1 − 37.5/60 = 0.375, high 0.5. Rank 0's 240 decode passes, 960 decode tokens (batch 4), ITL
  960 observations summing to 15 s (period 1/64).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.server.fleet.classes import class_calibrations
from hostgap.server.fleet.fleet_session import FleetConfig, FleetSession, parse_duration, parse_time
from hostgap.server.fleet.promql import _matrix, check_selector
from hostgap.server.watch.loop import parse_conditions

CAL = str(Path(__file__).parent / "data" / "fleet" / "cal-a.json")


def _v(job: str, instance: str, **labels: str) -> dict:
    return {"job": job, "instance": instance, **labels}


VA = {"model_name": "m-a", "engine": "0"}
VB = {"model_name": "m-b", "engine": "0"}
SG = {"model_name": "m-s"}
FIRST = {
    "vllm:iteration_tokens_total_count": [
        (_v("vllm", "i1", **VA), 1920),
        (_v("vllm", "i2", **VA), 960),
        (_v("vllm", "i3", **VB), 1920),
    ],
    "vllm:iteration_tokens_total_sum": [
        (_v("vllm", "i1", **VA), 10240),
        (_v("vllm", "i2", **VA), 15360),
        (_v("vllm", "i3", **VB), 10240),
    ],
    "vllm:inter_token_latency_seconds_count": [
        (_v("vllm", "i1", **VA), 7680),
        (_v("vllm", "i2", **VA), 15360),
        (_v("vllm", "i3", **VB), 7680),
    ],
    "vllm:inter_token_latency_seconds_sum": [
        (_v("vllm", "i1", **VA), 120),
        (_v("vllm", "i2", **VA), 480),
        (_v("vllm", "i3", **VB), 120),
    ],
    "vllm:generation_tokens_total": [
        (_v("vllm", "i1", **VA), 7680),
        (_v("vllm", "i2", **VA), 15360),
        (_v("vllm", "i3", **VB), 7680),
    ],
    "vllm:prompt_tokens_total": [
        (_v("vllm", "i1", **VA), 2560),
        (_v("vllm", "i2", **VA), 0),
        (_v("vllm", "i3", **VB), 2560),
    ],
    "vllm:num_requests_running": [
        (_v("vllm", "i1", **VA), 4),
        (_v("vllm", "i2", **VA), 16),
        (_v("vllm", "i3", **VB), 4),
    ],
    "sglang:forward_execution_seconds_total": [
        (_v("sglang", "s1", tp_rank="0", **SG), 30),
        (_v("sglang", "s1", tp_rank="1", **SG), 37.5),
    ],
    "sglang:scheduler_stage_seconds_total": [
        (_v("sglang", "s1", tp_rank=r, category=c, **SG), x)
        for r in ("0", "1")
        for c, x in (("run_batch", 45), ("schedule", 15))
    ],
    "sglang:scheduler_idle_seconds_total": [(_v("sglang", "s1", tp_rank=r, **SG), 10) for r in ("0", "1")],
    "sglang:cuda_graph_passes_total": [
        (_v("sglang", "s1", tp_rank=r, mode="decode_none", **SG), 240) for r in ("0", "1")
    ],
    "sglang:realtime_tokens_total": [(_v("sglang", "s1", tp_rank=r, mode="decode", **SG), 960) for r in ("0", "1")],
    "sglang:inter_token_latency_seconds_count": [(_v("sglang", "s1", **SG), 960)],
    "sglang:inter_token_latency_seconds_sum": [(_v("sglang", "s1", **SG), 15)],
}
GAUGES = {"vllm:num_requests_running"}


def fetch(query: str, start: float, end: float, step: float) -> list[dict]:
    """query_range over FIRST: the first interval's increases at 1060, 0 at 1120 (gauges hold)."""
    name = re.match(r"(?:increase\()?([a-z_:]+)", query).group(1)
    times = [t for t in (1060.0, 1120.0) if start <= t <= end]
    out = []
    for labels, first in FIRST.get(name, []):
        values = [[t, str(first if t == 1060.0 or name in GAUGES else 0)] for t in times]
        if values:
            out.append({"metric": {"__name__": name, **labels} if name in GAUGES else labels, "values": values})
    return out


def session(fail_if: str | None = None, **cfg) -> FleetSession:
    config = FleetConfig("http://prom:9090", start=1000.0, end=1120.0, interval_s=60.0, **cfg)
    conditions = parse_conditions(fail_if) if fail_if else []
    return FleetSession(config, class_calibrations([CAL]), fetch, conditions=conditions, clock=lambda: 5000.0)


def _by(rows: list[dict], instance: str) -> list[dict]:
    return [r for r in rows if r["instance"] == instance]


def test_each_row_is_watchs_row_for_the_same_increases():
    rows = list(session())
    assert len(rows) == 8 and [r["t_end"] for r in rows] == [1060.0] * 4 + [1120.0] * 4
    i1, i1_idle = _by(rows, "i1")
    assert (i1["seqs_per_step"], i1["step_period_s"], i1["prefill_share"]) == (4.0, 1 / 64, 0.25)
    assert (i1["host_share"], i1["host_share_low"], i1["host_share_high"]) == (0.5, 0.375, 0.625)
    assert i1["steps_per_s"] == 32.0 and i1["running"] == 4.0 and i1["interval_s"] == 60.0
    assert (i1["t_start"], i1["t_end"], i1["t_rel_s"]) == (1000.0, 1060.0, 0.0)
    assert (i1_idle["t_start"], i1_idle["t_rel_s"]) == (1060.0, 60.0)
    assert i1["calibration"] == "cal-a" and i1["calibration_out_of_range"] is False and i1["model"] == "m-a"
    # expected 1/128 + 1/512 + (2560/1920) × 1/1024 = 0.009765625 + 1/768 = 0.0110677083 s; top × 1.5: 1/64 within
    assert i1["expected_period_s"] == pytest.approx(0.009765625 + 1 / 768, rel=1e-12) and i1["anomaly"] is False
    assert i1_idle["status"] == "idle" and i1_idle["host_share"] is None
    assert i1_idle["calibration_out_of_range"] is None
    i2 = _by(rows, "i2")[0]
    assert (i2["host_share"], i2["host_share_low"], i2["host_share_high"]) == (0.375, 0.0, 0.84375)
    assert i2["calibration_out_of_range"] is True
    assert i2["anomaly"] is False  # top 0.021484375 × 2 = 0.04296875 > 1/32: the batch explains it
    assert any("outside the calibrated batches" in n for n in i2["notes"])
    i3 = _by(rows, "i3")[0]
    assert i3["host_share"] is None and i3["calibration"] is None
    assert any(n.startswith("no calibration for class vllm/m-b") for n in i3["notes"])
    s1 = _by(rows, "s1")[0]
    assert s1["host_share_basis"] == "device timer" and s1["engine"] == "sglang"
    assert (s1["host_share"], s1["host_share_low"], s1["host_share_high"]) == (0.5, 0.375, 0.5)
    assert (s1["seqs_per_step"], s1["step_period_s"]) == (4.0, 1 / 64)


def test_the_fleet_summary_and_fail_if_across_instances():
    s = session("host_share>0.45")
    list(s)
    doc = s.document(1)
    summ = doc["summary"]
    assert summ["instances"] == 4 and summ["instances_with_share"] == 3
    assert summ["host_bound"] == ["s1 (sglang)", "i1 (vllm)", "i2 (vllm)"]  # all ≥ 0.25
    assert [(w["instance"], w["host_share"]) for w in summ["worst"]] == [
        ("s1 (sglang)", 0.5),
        ("i1 (vllm)", 0.5),
        ("i2 (vllm)", 0.375),
    ]
    per = {i["instance"]: i for i in summ["per_instance"]}
    assert per["i1"]["calibration"] == "cal-a" and per["i3"]["calibration"] is None
    assert (per["i1"]["model"], per["i3"]["model"], per["s1"]["model"]) == ("m-a", "m-b", None)
    assert (per["i1"]["engine"], per["s1"]["engine"]) == ("vllm", "sglang")
    assert (per["i1"]["judged_intervals"], per["i1"]["anomaly_intervals"], summ["anomalous"]) == (1, 0, [])
    assert per["i2"]["calibration_out_of_range_share"] == 1.0 and per["i1"]["calibration_out_of_range_share"] == 0.0
    assert summ["fail_if"] == [
        {
            "condition": "host_share>0.45",
            "metric": "host_share",
            "holds": True,
            "instances": ["s1 (sglang)", "i1 (vllm)"],
        }
    ]
    assert doc["failed"] == ["host_share>0.45"] and doc["intervals_total"] == 8
    assert session("host_share>0.6").document(1)["failed"] == []


def test_a_long_history_is_read_in_chunks(monkeypatch):
    import hostgap.server.fleet.fleet_session as fs

    calls: list[tuple[float, float]] = []

    def counting(query, start, end, step):
        calls.append((start, end))
        return fetch(query, start, end, step)

    monkeypatch.setattr(fs, "CELL_BUDGET", 1)
    monkeypatch.setattr(fs, "MIN_POINTS", 1)
    config = FleetConfig("http://prom:9090", start=1000.0, end=1120.0, interval_s=60.0)
    rows = list(FleetSession(config, class_calibrations([CAL]), counting, clock=lambda: 5000.0))
    assert sorted({c for c in calls}) == [(1060.0, 1060.0), (1120.0, 1120.0)]
    assert len(rows) == 8


def _many(instances: int):
    """query_range of ``instances`` vLLM instances at every step from start to end."""

    def many(query, start, end, step):
        name = re.match(r"(?:increase\()?([a-z_:]+)", query).group(1)
        first = {labels["instance"]: v for labels, v in FIRST.get(name, []) if labels["instance"] == "i1"}
        if not first:
            return []
        n = int(round((end - start) / step)) + 1
        values = [[start + k * step, str(first["i1"])] for k in range(n)]
        return [
            {"metric": {"__name__": name, **_v("vllm", f"n{i}", **VA)} if name in GAUGES else _v("vllm", f"n{i}", **VA),
             "values": values}
            for i in range(instances)
        ]  # fmt: skip

    return many


def test_the_first_read_learns_the_fleets_size_then_chunks_hold_the_cell_budget(monkeypatch):
    import gc

    import hostgap.server.fleet.fleet_session as fs

    calls: list[tuple[float, float]] = []
    many = _many(4)

    def counting(query, start, end, step):
        calls.append((start, end))
        return many(query, start, end, step)

    monkeypatch.setattr(fs, "CELL_BUDGET", 8)  # 4 instances: 2 intervals a read
    monkeypatch.setattr(fs, "MIN_POINTS", 1)
    config = FleetConfig("http://prom:9090", start=0.0, end=600.0, interval_s=60.0)
    rows = list(FleetSession(config, class_calibrations([CAL]), counting, clock=lambda: 5000.0))
    reads = sorted(set(calls))
    # before any instance is seen, one interval; then 8 cells // 4 instances = 2 intervals
    assert reads == [(60.0, 60.0), (120.0, 180.0), (240.0, 300.0), (360.0, 420.0), (480.0, 540.0), (600.0, 600.0)]
    assert len(rows) == 40 and {r["instance"] for r in rows} == {"n0", "n1", "n2", "n3"}
    assert gc.isenabled()
    # a fleet larger than the budget allows MIN_POINTS intervals: reads of 3 however many
    calls.clear()
    monkeypatch.setattr(fs, "MIN_POINTS", 3)
    assert len(list(FleetSession(config, class_calibrations([CAL]), counting, clock=lambda: 5000.0))) == 40
    assert sorted(set(calls)) == [(60.0, 60.0), (120.0, 240.0), (300.0, 420.0), (480.0, 600.0)]


def test_the_collector_is_on_again_after_a_failed_read():
    import gc

    def failing(query, start, end, step):
        assert not gc.isenabled()  # held off while the chunk is read
        raise HostgapError("http://prom:9090", "cannot reach the Prometheus HTTP API")

    config = FleetConfig("http://prom:9090", start=0.0, end=120.0, interval_s=60.0)
    with pytest.raises(HostgapError):
        list(FleetSession(config, class_calibrations([CAL]), failing, clock=lambda: 5000.0))
    assert gc.isenabled()


def test_the_default_interval_cuts_a_history_into_240():
    assert FleetConfig("u", start=0.0, end=86400.0).step_s(0) == 360.0
    assert FleetConfig("u", start=0.0, end=600.0).step_s(0) == 15.0


def test_query_range_answers_are_read_and_refusals_named():
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": fetch("x", 0, 2000, 60)}})
    assert _matrix(body.encode(), "u") == []
    with pytest.raises(HostgapError, match="query_range failed: .*bad_data"):
        _matrix(json.dumps({"status": "error", "error": "bad_data"}).encode(), "u")
    with pytest.raises(HostgapError, match="did not answer JSON"):
        _matrix(b"<html>", "u")


@pytest.mark.parametrize(
    ("text", "want"),
    [("90s", 90.0), ("2h", 7200.0), ("1h30m", 5400.0), ("15", 15.0), ("500ms", 0.5)],
)
def test_durations(text, want):
    assert parse_duration(text) == want


def test_times_and_selectors():
    assert parse_time("2026-12-07T04:00:00Z", "--start") == parse_time("2026-12-07T04:00:00", "--start")
    assert parse_time("1700000000", "--start") == 1.7e9
    assert check_selector('{job="vllm", model_name=~"llama.*"}') == 'job="vllm", model_name=~"llama.*"'
    assert check_selector(None) == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--match", "job=vllm"], "--match"),
        (["--since", "2h", "--start", "0"], "not both"),
        (["--end", "100"], "give --start with --end"),
        (["--since", "soon"], "give a duration"),
        (["--start", "yesterday"], "give unix seconds or a time"),
        (["--start", "100", "--end", "50"], "not after the start"),
        (["--interval", "-1"], "give seconds > 0"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    res = CliRunner().invoke(cli, ["watch", "--prometheus", "http://127.0.0.1:9", *args, "-q"])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_an_unreachable_prometheus_is_one_line_exit_2():
    res = CliRunner().invoke(cli, ["watch", "--prometheus", "http://127.0.0.1:9", "--since", "1m", "-q"])
    assert res.exit_code == 2 and "cannot reach the Prometheus HTTP API" in res.output


def test_a_server_url_and_prometheus_are_not_both_given():
    res = CliRunner().invoke(cli, ["watch", "http://127.0.0.1:8000", "--prometheus", "http://127.0.0.1:9"])
    assert res.exit_code == 2 and "not both" in res.output
    res = CliRunner().invoke(cli, ["watch"])
    assert res.exit_code == 2 and "give the server's URL" in res.output
    res = CliRunner().invoke(cli, ["watch", "http://127.0.0.1:8000", "--since", "2h"])
    assert res.exit_code == 2 and "need --prometheus" in res.output


def test_the_queries_read_each_engine_series_over_the_interval():
    from hostgap.server.fleet.view import queries

    qs = {q.promql for q in queries('job="vllm"', 60.0)}
    assert 'increase(vllm:generation_tokens_total{job="vllm"}[60s])' in qs
    assert 'increase(vllm:inter_token_latency_seconds_sum{job="vllm"}[60s])' in qs
    assert 'vllm:num_requests_running{job="vllm"}' in qs
    assert "increase(sglang:forward_execution_seconds_total{}[1500ms])" in {q.promql for q in queries("", 1.5)}


def test_the_fleet_window_counts_out_of_range_and_anomalous_intervals():
    from hostgap.server.fleet.view import FleetWindow

    base = {"job": "vllm", "instance": "i9", "model": "m-a", "engine": "vllm", "calibration": "cal-a"}
    base |= {
        "status": "ok",
        "interval_s": 60.0,
        "steps": 100.0,
        "host_share": 0.5,
        "host_share_basis": "model estimate",
    }
    w = FleetWindow()
    for out, anomaly in ((False, False), (False, True), (True, True), (None, None)):
        w.add({**base, "calibration_out_of_range": out, "anomaly": anomaly})
    (i9,) = w.summary()["per_instance"]
    assert (i9["calibration_out_of_range_intervals"], i9["calibration_out_of_range_share"]) == (1, 1 / 3)
    assert (i9["anomaly_intervals"], i9["judged_intervals"]) == (2, 3)
    assert w.summary()["anomalous"] == ["i9 (vllm)"]


def test_the_hardware_label_picks_each_instances_class(tmp_path):
    doc = json.loads(Path(CAL).read_text())
    paths = []
    for hw, slope in (("h100", 0.0009765625), ("l4", 0.001953125)):
        d = {**doc, "run_id": f"cal-{hw}", "device": hw, "calibration": {**doc["calibration"], "gpu_slope_s": slope}}
        paths.append(tmp_path / f"{hw}.json")
        paths[-1].write_text(json.dumps(d))
    classes = class_calibrations([str(p) for p in paths])

    def labelled(query, start, end, step):  # i1 on l4, i2 on h100
        out = fetch(query, start, end, step)
        for s in out:
            inst = s["metric"].get("instance")
            s["metric"] = {**s["metric"], "gpu": {"i1": "l4", "i2": "h100"}.get(inst, "")}
        return out

    config = FleetConfig("u", start=1000.0, end=1060.0, interval_s=60.0, hardware_label="gpu")
    rows = list(FleetSession(config, classes, labelled, clock=lambda: 5000.0))
    got = {r["instance"]: (r["calibration"], r["gpu_s_per_step"]) for r in rows if r["instance"] in ("i1", "i2")}
    # i1 on l4: 1/256 + 4 × 1/512 = 0.01171875; i2 on h100: 1/256 + 16/1024 = 0.01953125
    assert got == {"i1": ("cal-l4", 0.01171875), "i2": ("cal-h100", 0.01953125)}


def test_live_reads_each_interval_once_prometheus_has_had_the_lag_to_scrape_its_end():
    import time

    seen: list[tuple[float, float]] = []
    spans: set[tuple[float, float]] = set()
    many = _many(2)

    def timed(query, start, end, step):
        seen.append((end, time.time()))
        spans.add((start, end))
        return many(query, start, end, step)

    config = FleetConfig("http://prom:9090", interval_s=0.2, lag_s=0.3, duration_s=1.2)
    rows = list(FleetSession(config, class_calibrations([CAL]), timed))
    assert rows and seen
    # never an interval whose end is less than the lag ago: Prometheus may not have scraped it
    assert all(read_at - end >= 0.3 - 1e-6 for end, read_at in seen)
    reads = sorted(spans)  # each interval once, in turn: a read starts one interval after the last
    assert all(b[0] - a[1] == pytest.approx(0.2) for a, b in zip(reads, reads[1:]))
