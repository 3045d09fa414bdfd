"""Pieces of ``hostgap attach`` without a server: the version -> protocol choice, what the trace
shows of the profiler settings, the batch sizes and step period of the steps seen, the API
server's own time, and file completeness."""

from __future__ import annotations

import gzip

import pytest

from conftest import annotation, cpu_op, python_frame
from hostgap.analysis.trace import observed_settings
from hostgap.server.attach.steps_seen import (
    batches_seen,
    frontend_time,
    load_turnover_notes,
    step_medians,
    step_period_s,
)
from hostgap.server.attach.tracefiles import is_complete, is_complete_gzip
from hostgap.server.attach.vllm_routes import VllmClient, VllmTimedClient, client_for_version, trace_dir_of_config


@pytest.mark.parametrize(
    "version, cls",
    [
        ("0.32.0", VllmClient),
        ("0.32.0+cpu", VllmClient),
        ("1.0.0", VllmClient),
        ("0.31.9", VllmTimedClient),
        ("0.10.1", VllmTimedClient),
        ("garbage", VllmTimedClient),
    ],
)
def test_protocol_from_version(version, cls):
    assert type(client_for_version("http://h:1", version)) is cls


def test_bounded_request_and_timed_request():
    from hostgap.server.attach.client import ProfileRequest

    req = ProfileRequest(steps=8, skip=3, prefix="hostgap-x")
    assert VllmClient("http://h:1", "0.32.0").start_request(req) == (
        "/start_profile",
        {"profile_prefix": "hostgap-x", "delay_iterations": 3, "max_iterations": 8},
    )
    assert VllmTimedClient("http://h:1", "0.10.1").start_request(req) == ("/start_profile", None)


def test_trace_dir_from_reported_config():
    assert trace_dir_of_config({"profiler_config": {"torch_profiler_dir": "/t"}}) == "/t"
    assert trace_dir_of_config("ProfilerConfig(profiler='torch', torch_profiler_dir='/x/y', ...)") == "/x/y"
    assert trace_dir_of_config({}) is None and trace_dir_of_config(None) is None


def test_observed_settings(kineto_trace):
    plain = kineto_trace([cpu_op("aten::mm", ts=0, dur=5)], gz=True)
    assert observed_settings(plain) == {"with_stack": False, "record_shapes": False}
    op = cpu_op("aten::mm", ts=0, dur=5)
    op["args"]["Input Dims"] = [[2, 2]]
    stacked = kineto_trace([op, python_frame("f", ts=0, dur=5)])
    assert observed_settings(stacked) == {"with_stack": True, "record_shapes": True}


def test_observed_settings_reads_on_until_both_markers_are_seen(kineto_trace, monkeypatch):
    """The look stops early only once both markers were seen: a trace whose stacks come in its
    first piece and whose shapes only pieces later still reports both (pieces of 64 bytes here)."""
    from hostgap.readers import text

    monkeypatch.setattr(text, "READ_PIECE", 64)
    op = cpu_op("aten::mm", ts=900, dur=5)
    op["args"]["Input Dims"] = [[2, 2]]
    fillers = [cpu_op("aten::add", ts=10 * i, dur=1) for i in range(1, 40)]
    late_shapes = kineto_trace([python_frame("f", ts=0, dur=5), *fillers, op])
    assert observed_settings(late_shapes) == {"with_stack": True, "record_shapes": True}


def test_batches_and_step_period():
    steps = [
        {"index": 0, "kind": "prefill", "ctx_requests": 2, "start_ns": 0},
        {"index": 1, "kind": "decode", "gen_requests": 2, "start_ns": 10},
        {"index": 2, "kind": "decode", "gen_requests": 2, "start_ns": 20},
        {"index": 3, "kind": "decode", "gen_requests": 3, "start_ns": 34},
        {"index": 4, "kind": "mixed", "ctx_requests": 1, "gen_requests": 3, "start_ns": 40},
    ]
    assert batches_seen(steps) == {"prefill": {"2": 1}, "decode": {"2": 2, "3": 1}, "mixed": {"4": 1}}
    assert step_period_s(steps) == pytest.approx(12e-9)  # gaps 10 (1->2) and 14 (2->3): median 12 ns
    assert step_period_s(steps[:2]) is None
    # a decode or prefill step without its own count is "?", never the other phase's count;
    # mixed and unknown steps count both phases
    odd = [
        {"kind": "decode", "ctx_requests": 0},
        {"kind": "prefill", "gen_requests": 2},
        {"kind": None, "ctx_requests": 1, "gen_requests": 2},
        {"kind": "mixed", "gen_requests": 4},
        {"kind": "mixed"},
    ]
    # sizes in numeric order, "?" last
    order = batches_seen([{"kind": "decode", "gen_requests": n} for n in (10, None, 9, 10)])["decode"]
    assert list(order.items()) == [("9", 1), ("10", 2), ("?", 1)]
    assert list(batches_seen(odd)["mixed"]) == ["4", "?"]
    assert batches_seen(odd) == {
        "decode": {"?": 1},
        "prefill": {"?": 1},
        "unknown": {"3": 1},
        "mixed": {"4": 1, "?": 1},
    }


def test_load_turnover_notes():
    steps = [
        {"kind": "prefill", "ctx_requests": 1, "gen_requests": 0},
        {"kind": "mixed", "ctx_requests": 1, "gen_requests": 2},
        {"kind": "decode", "gen_requests": 2},  # below the load of 3
        {"kind": "decode", "gen_requests": 3},  # at it
        {"kind": "decode", "gen_requests": 4},  # above it: other traffic
        {"kind": "decode", "gen_requests": 1, "partial": True},  # cut by the window: not counted
    ]
    fewer, more = load_turnover_notes(steps, 3, 64)
    assert fewer == (
        "3 of the 5 complete profiled steps held fewer requests than the load of 3 in decode "
        "(prefill: 1 at batch 1; mixed: 1 at batch 3; decode: 1 at batch 2): its requests of 64 tokens "
        "ended and were replaced inside the window; a larger --output-len (more steps per request than "
        "pass before the profile starts) keeps the batch steady"
    )
    assert more == "1 decode step(s) ran at a larger batch than the load of 3: other traffic shares the server"
    assert load_turnover_notes(steps[3:4], 3, 64) == []  # all at the load's batch
    assert load_turnover_notes(steps[3:], 3, 64) == [more]
    assert load_turnover_notes([{"kind": "decode"}], 1, 8)[0].startswith("1 of the 1 ")  # no batch: fewer


def test_frontend_time(kineto_trace):
    """Two threads: [0, 10] and [5, 12] on thread 1 (union 12 µs), [0, 3] on thread 2 (3 µs)."""
    path = kineto_trace([cpu_op("a", ts=0, dur=10), cpu_op("b", ts=5, dur=7), annotation("c", ts=0, dur=3, tid=2)])
    fe = frontend_time(path, engine_steps=5)
    assert fe["threads"] == 2 and fe["busy_ns"] == 15_000 and fe["span_ns"] == 12_000
    assert fe["per_step_ns"] == pytest.approx(3_000)
    # the span is last end minus first start, wherever the trace's clock begins
    late = kineto_trace(
        [cpu_op("a", ts=100, dur=10), cpu_op("b", ts=105, dur=7), annotation("c", ts=100, dur=3, tid=2)]
    )
    assert frontend_time(late, engine_steps=5)["span_ns"] == 12_000
    assert frontend_time(late, engine_steps=0)["per_step_ns"] is None


def test_file_completeness(tmp_path):
    whole = tmp_path / "a.json.gz"
    whole.write_bytes(gzip.compress(b'{"traceEvents": []}' * 1000))
    cut = tmp_path / "b.json.gz"
    cut.write_bytes(whole.read_bytes()[:-20])
    assert is_complete_gzip(whole) and not is_complete_gzip(cut)
    sizes: dict = {}
    assert not is_complete(whole, sizes)  # first look: size not yet known stable
    assert is_complete(whole, sizes) and not is_complete(cut, sizes) and not is_complete(cut, sizes)


def test_step_medians_over_the_steady_steps():
    """The steady decode steps (the summary's indices) when there are some, else every complete
    decode step; prefill and partial steps never count."""

    def step(i, kind, wall, dev, partial=False):
        return {
            "index": i,
            "kind": kind,
            "partial": partial,
            "wall_ns": wall,
            "gpu_active_ns": dev,
            "host_exposed_ns": wall - dev,
            "host_fraction": (wall - dev) / wall,
        }

    steps = [
        step(0, "prefill", 900, 800),
        step(1, "decode", 100, 40),
        step(2, "decode", 200, 150),
        step(3, "decode", 300, 150),
        step(4, "decode", 1000, 100, partial=True),
        step(5, "decode", 500, 100),
    ]
    doc = {"steps": steps, "summary": {"steady": {"indices": [2, 3]}}, "activity": "cpu"}
    assert step_medians(doc) == {
        "t_step_ns": 250.0,
        "g_step_ns": 150.0,
        "h_step_ns": 100.0,
        "host_fraction": pytest.approx((0.25 + 0.5) / 2),
        "activity": "cpu",
        "steps": 2,
        "basis": "median of the steady decode steps of the attached trace",
    }
    # no steady set: the complete decode steps 1, 2, 3, 5 (walls 100, 200, 300, 500)
    plain = step_medians({"steps": steps})
    assert plain["steps"] == 4 and plain["t_step_ns"] == 250.0 and plain["g_step_ns"] == 125.0
    assert plain["h_step_ns"] == 105.0 and plain["basis"] == "median of the decode steps of the attached trace"
    assert step_medians({"steps": steps, "summary": {"steady": {"indices": [9]}}})["steps"] == 4
    assert step_medians({"steps": steps[:1]}) == {"steps": 0, "basis": "no decode steps"}


def test_no_trace_reason_says_what_the_folder_holds(tmp_path):
    """Each way a profile's engine trace can be missing gets its own reason."""
    from hostgap.server.attach.profile import no_trace_reason

    client = VllmClient("http://h:1", "0.32.0")
    pre = "hostgap-20261204-000000-attach-abc123"
    (tmp_path / "old_rank0.1.pt.trace.json.gz").write_bytes(b"x")
    before = {"old_rank0.1.pt.trace.json.gz"}

    def reason(steps=8, prefix=pre):
        return no_trace_reason(tmp_path, before, client, prefix, steps, 120.0)

    assert reason(steps=0) == "the server ran no steps while profiled (no traffic): give --load C to drive it"
    assert reason() == (
        f"no trace of this profile ({pre}*) appeared in {tmp_path}: the server writes its traces elsewhere "
        "(check --trace-dir) or failed writing them (its log says which)"
    )
    assert reason(prefix=None).startswith(f"no trace of this profile appeared in {tmp_path}: ")
    assert reason(steps=None).startswith("no trace of this profile (")  # nothing counted: not "no traffic"
    # another client's profile: files under another prefix
    (tmp_path / "other_rank0.2.pt.trace.json.gz").write_bytes(b"y")
    assert reason() == (
        f"no trace named {pre}* appeared in {tmp_path}, but other new traces did "
        "(other_rank0.2.pt.trace.json.gz): another client's profile wrote them"
    )
    assert reason(prefix=None).startswith("the engine's trace of this profile appeared")  # no prefix: it is ours
    # the API server's file of this profile, no engine's
    (tmp_path / f"{pre}_host_1.async_llm.3.pt.trace.json.gz").write_bytes(b"z")
    assert reason() == (
        f"the API server's trace of this profile ({pre}_host_1.async_llm.3.pt.trace.json.gz) appeared in "
        f"{tmp_path} but no engine's: the engine recorded no step or failed writing its trace "
        "(the server's log says which)"
    )
    # the engine's file came but never completed
    (tmp_path / f"{pre}_rank0.4.pt.trace.json.gz").write_bytes(b"12345")
    assert reason() == (
        f"the engine's trace of this profile appeared in {tmp_path} but was not complete after 120 s: "
        f"{pre}_rank0.4.pt.trace.json.gz (5 bytes): the server is still writing it or failed writing it "
        "(its log says which)"
    )
