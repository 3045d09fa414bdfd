"""``watch --prometheus --calibrate``: a class's calibration renewed when its traffic leaves the
calibrated batches, by one attach to the instance farthest outside them, fitted with the class's
given runs; a class without one calibrated once for all its instances; the rows naming the
calibration they were read with. The attach is a stand-in here (the real one is attach's, tested
with the real vLLM server in tests/test_fleet_vllm.py)."""

from __future__ import annotations

import json
import re
import threading

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.server.fleet.classes import class_calibrations
from hostgap.server.fleet.fleet_session import FleetConfig, FleetSession
from hostgap.server.fleet.renew import ClassRenewal, class_key, class_self_calibration, instance_url, representative
from hostgap.server.watch.estimate import fit_calibration
from hostgap.server.watch.recalibrate import Policy
from test_server_watch_calibrate import decode_steps  # 1 ms + 0.5 ms per sequence of GPU time

STEPS = 1920  # engine steps per interval of every instance


def fleet(batches: dict[str, float], model: str = "m-a"):
    """query_range of vLLM instances (name → decode batch) at every step of the range: STEPS
    steps an interval, 8 ms a step, no prompts."""

    def fetch(query, start, end, step):
        name = re.match(r"(?:increase\()?([a-z_:]+)", query).group(1)
        per = {
            "vllm:iteration_tokens_total_count": lambda b: STEPS,
            "vllm:iteration_tokens_total_sum": lambda b: STEPS * b,
            "vllm:inter_token_latency_seconds_count": lambda b: STEPS * b,
            "vllm:inter_token_latency_seconds_sum": lambda b: STEPS * b * 0.008,
            "vllm:generation_tokens_total": lambda b: STEPS * b,
            "vllm:prompt_tokens_total": lambda b: 0,
            "vllm:num_requests_running": lambda b: b,
        }.get(name)
        if per is None:
            return []
        n = int(round((end - start) / step)) + 1
        out = []
        for inst, b in batches.items():
            labels = {"job": "vllm", "instance": inst, "model_name": model, "engine": "0"}
            if not query.startswith("increase"):
                labels["__name__"] = name
            out.append({"metric": labels, "values": [[start + k * step, str(per(b))] for k in range(n)]})
        return out

    return fetch


@pytest.fixture
def given(tmp_path):
    """A class m-a calibrated on one attach run at batches 2 and 4."""
    p = tmp_path / "r1.json"
    p.write_text(json.dumps({"run_id": "r1", "engine": "vllm", "model": "m-a", "steps": decode_steps((2, 4))}))
    return class_calibrations([str(p)])


class StandInAttach:
    """attach(cfg, note, cancel): a run of ``steps`` decode steps at the batch its server runs."""

    def __init__(self, batch_of: dict[str, float]):
        self.batch_of = batch_of
        self.servers: list[str] = []

    def __call__(self, cfg, note, cancel):
        self.servers.append(cfg.url)
        b = int(self.batch_of[cfg.url.removeprefix("http://")])
        return {"run_id": f"r{len(self.servers) + 1}", "steps": decode_steps((b,), cfg.steps)}


def renewal(classes, attach, notes=None):
    make = lambda key, g: class_self_calibration(  # noqa: E731
        key,
        g,
        policy=Policy(min_gap_s=0, persist=2),
        steps=24,
        output="unused",
        db=None,
        store=False,
        trace_dir=None,
        on_note=(notes.append if notes is not None else lambda m: None),
        attach=attach,
    )
    return ClassRenewal(classes, make, on_note=(notes.append if notes is not None else lambda m: None))


def joined(r: ClassRenewal):
    """Wait for every class calibration running now (the fake attach returns at once)."""
    for sc in r._cals.values():
        if sc._thread is not None:
            sc._thread.join(timeout=10)


def session(batches, classes, r, *, end=600.0):
    """A history read one interval at a time, as a live view reads (each read after the
    attaches the previous interval started have ended)."""
    import hostgap.server.fleet.fleet_session as fs

    fs_budget, fs.CELL_BUDGET = fs.CELL_BUDGET, len(batches)
    fs_min, fs.MIN_POINTS = fs.MIN_POINTS, 1
    fetch = fleet(batches)

    def settled(query, start, stop, step):  # each read sees the renewals the previous one started
        joined(r)
        return fetch(query, start, stop, step)

    config = FleetConfig("http://prom:9090", start=0.0, end=end, interval_s=60.0)
    try:
        return list(FleetSession(config, classes, settled, clock=lambda: 5000.0, renewal=r))
    finally:
        fs.CELL_BUDGET, fs.MIN_POINTS = fs_budget, fs_min
        joined(r)


def test_instance_urls_and_classes():
    assert instance_url("10.0.0.7:8000") == "http://10.0.0.7:8000"
    assert instance_url("https://a:443") == "https://a:443"
    assert instance_url("b:1", "https") == "https://b:1"
    assert class_key({"engine": "vllm", "model": "m", "hardware": "h100"}) == ("vllm", "m", "h100")
    assert class_key({"engine": "vllm", "model": None}) is None
    assert class_key({"engine": "sglang", "model": "m"}) is None


def test_the_representative_is_the_farthest_outside_else_the_busiest():
    c = fit_calibration(decode_steps((2, 4)), "c")
    rows = [
        {"instance": "a", "status": "ok", "steps": 100, "seqs_per_step": 3.0},
        {"instance": "b", "status": "ok", "steps": 50, "seqs_per_step": 16.0},
        {"instance": "c", "status": "ok", "steps": 300, "seqs_per_step": 8.0},
        {"instance": "d", "status": "idle", "steps": 0, "seqs_per_step": None},
    ]
    assert representative(rows, c)["instance"] == "b"  # 12/16 beyond the range: the farthest
    inside = [rows[0], {**rows[2], "seqs_per_step": 4.0}, rows[3]]
    assert representative(inside, c)["instance"] == "c"  # all inside: the busiest
    assert representative(inside, None)["instance"] == "c"
    assert representative([rows[3]], c)["instance"] == "d"  # nothing decodes: the row as it is


def test_a_class_whose_batch_leaves_the_range_is_renewed_on_the_farthest_instance(given):
    batches = {"a:8000": 4.0, "b:8000": 16.0, "c:8000": 12.0}
    attach = StandInAttach(batches)
    notes: list[str] = []
    r = renewal(given, attach, notes)
    rows = session(batches, given, r)
    assert attach.servers == ["http://b:8000"]  # one attach for the class, on the farthest instance
    by_t = {}
    for row in rows:
        by_t.setdefault(row["t_end"], set()).add(row["calibration"])
    # persist=2: the first two intervals are read with r1 (the second starts the attach), the
    # third after it ended, with r1 + r2 fitted together
    assert by_t[60.0] == {"r1"} and by_t[120.0] == {"r1"}
    assert all(v == {"r1+r2"} for t, v in by_t.items() if t >= 180.0)
    (cls,) = r.classes()
    assert cls.name == "r1+r2" and cls.calibration.batches == (2, 4, 16)
    assert cls.calibration.runs == ("r1", "r2")
    # 1 ms + 0.5 ms per sequence, fitted on both runs' steps: exact
    assert cls.calibration.gpu_s(16) == pytest.approx(0.009, rel=1e-9)
    (state,) = r.to_dict()
    assert state["class"] == "vllm/m-a/any" and state["calibration"] == "r1+r2" and state["attempts"] == 1
    assert state["history"][0]["server"] == "http://b:8000" and state["history"][0]["reason"] == "batch"
    assert any(n.startswith("class vllm/m-a/any: calibration (batch)") for n in notes)
    # the interval after the one that started it (the profile ran during it); only then
    calibrating = {(row["t_end"], row["instance"]) for row in rows if row["calibrating"]}
    assert calibrating == {(180.0, "b:8000")}  # the profiled instance's, not its class's others


def test_a_class_in_range_is_never_profiled(given):
    batches = {"a:8000": 2.0, "b:8000": 4.0}
    attach = StandInAttach(batches)
    r = renewal(given, attach)
    rows = session(batches, given, r)
    assert attach.servers == [] and {row["calibration"] for row in rows} == {"r1"}
    assert r.to_dict()[0]["attempts"] == 0


def test_a_class_without_calibration_gets_one_attach_for_all_its_instances():
    batches = {"a:8000": 4.0, "b:8000": 8.0}
    attach = StandInAttach(batches)
    notes: list[str] = []
    r = renewal([], attach, notes)
    rows = session(batches, [], r)
    # the start: one attach for the class (both instances equally busy: the first); its batch 4
    # leaves b's 8 outside by 4/8 > 0.25, so two intervals later b is profiled and fitted with it
    assert attach.servers == ["http://a:8000", "http://b:8000"]
    first = [row for row in rows if row["t_end"] == 60.0]
    assert all(row["calibration"] is None and row["host_share"] is None for row in first)
    assert {row["calibration"] for row in rows if row["t_end"] == 120.0} == {"r2"}
    assert {row["calibration"] for row in rows if row["t_end"] >= 240.0} == {"r2+r3"}
    assert all(row["host_share"] is not None for row in rows if row["t_end"] >= 120.0)
    assert any("no calibration; one attach" in n for n in notes)
    (cls,) = r.classes()
    assert cls.calibration.batches == (4, 8) and [h["reason"] for h in r.to_dict()[0]["history"]] == ["start", "batch"]
    config = FleetConfig("http://prom:9090", start=0.0, end=60.0, interval_s=60.0)
    doc = FleetSession(config, [], fleet(batches), clock=lambda: 5000.0, renewal=r).document(1)
    assert doc["renewal"][0]["calibration"] == "r2+r3" and doc["classes"][0]["calibration"] == "r2+r3"


def test_a_failed_attach_leaves_the_class_on_its_calibration(given):
    batches = {"a:8000": 16.0}

    def failing(cfg, note, cancel):
        from hostgap.errors import HostgapError

        raise HostgapError(cfg.url, "cannot reach the server")

    r = renewal(given, failing)
    rows = session(batches, given, r)
    assert {row["calibration"] for row in rows} == {"r1"}
    (state,) = r.to_dict()
    assert state["history"][0]["ok"] is False and "cannot reach" in state["history"][0]["problem"]


def test_close_cancels_a_running_attach(given):
    started, cancelled = threading.Event(), threading.Event()

    def slow(cfg, note, cancel):
        started.set()
        cancel.wait(10)
        cancelled.set()
        from hostgap.server.attach.client import CANCELLED, AttachError

        raise AttachError(cfg.url, "cancelled", reason=CANCELLED)

    r = renewal(given, slow)
    fetch = fleet({"a:8000": 16.0})
    s = FleetSession(
        FleetConfig("http://prom:9090", start=0.0, end=180.0, interval_s=60.0),
        given,
        fetch,
        clock=lambda: 5000.0,
        renewal=r,
    )
    list(s)
    assert started.wait(10)
    s.close()
    assert cancelled.is_set()


def test_calibrate_is_refused_over_history():
    res = CliRunner().invoke(cli, ["watch", "--prometheus", "http://127.0.0.1:9", "--since", "1h", "--calibrate", "-q"])
    assert res.exit_code == 2
    assert "--calibrate" in res.output and "give no --end or --since" in res.output
    assert "Traceback" not in res.output


def test_calibrate_with_a_new_database_starts_without_calibrations(tmp_path, monkeypatch):
    from hostgap.api._fleet import fleet_watch

    db = str(tmp_path / "runs.sqlite")  # does not exist yet: --calibrate stores its runs there
    fleet = fleet_watch("http://127.0.0.1:9", duration=0.1, calibrate=True, db=db)
    assert fleet.to_dict()["classes"] == [] and fleet.to_dict()["renewal"] == []
    fleet.stop()
    # without --calibrate the same database is a calibration source that is not there
    from hostgap.errors import HostgapError

    with pytest.raises(HostgapError, match="no runs database"):
        fleet_watch("http://127.0.0.1:9", duration=0.1, db=db)


def test_a_class_named_by_its_runs_device_is_the_models_class_without_a_hardware_label(tmp_path):
    p = tmp_path / "r1.json"
    run = {"run_id": "r1", "engine": "vllm", "model": "m-a", "device": "cpu", "steps": decode_steps((2, 4))}
    p.write_text(json.dumps(run))
    given = class_calibrations([str(p)])
    assert given[0].hardware == "cpu"
    batches = {"a:8000": 4.0}
    attach = StandInAttach(batches)
    r = renewal(given, attach)  # no hardware label: the rows' hardware is null
    rows = session(batches, given, r)
    assert attach.servers == [] and {row["calibration"] for row in rows} == {"r1"}  # no start: it has one
    (state,) = r.to_dict()
    assert state["class"] == "vllm/m-a/any" and state["calibration"] == "r1"
    assert r.classes() == given
    # keyed by hardware (a --hardware-label), an instance on other hardware is another class
    make = lambda key, g: class_self_calibration(  # noqa: E731
        key, g, policy=Policy(min_gap_s=0), steps=24, output="unused", db=None, store=False, trace_dir=None,
        on_note=lambda m: None, attach=attach,
    )  # fmt: skip
    by_hw = ClassRenewal(given, make, by_hardware=True)
    row = {"engine": "vllm", "model": "m-a", "hardware": "h100", "instance": "a:8000", "t_end": 60.0}
    by_hw.observe([{**row, "status": "ok", "steps": 100, "seqs_per_step": 4.0, "prefill_share": 0.0}])
    joined(by_hw)
    assert attach.servers == ["http://a:8000"]
    assert [s["class"] for s in by_hw.to_dict()] == ["vllm/m-a/cpu", "vllm/m-a/h100"]


def test_calibrate_steps_are_checked_as_watchs():
    res = CliRunner().invoke(
        cli, ["watch", "--prometheus", "http://127.0.0.1:9", "--calibrate", "--calibrate-steps", "4", "-q"]
    )
    assert res.exit_code == 2 and "--calibrate-steps" in res.output and ">= 8" in res.output
