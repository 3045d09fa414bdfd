"""Pieces of ``hostgap attach`` without a server: the version -> protocol choice, what the trace
shows of the profiler settings, the batch sizes and step period of the steps seen, the API
server's own time, and file completeness."""

from __future__ import annotations

import gzip

import pytest

from conftest import annotation, cpu_op, python_frame
from hostgap.server.result import (
    batches_seen,
    frontend_time,
    load_turnover_notes,
    observed_settings,
    step_period_s,
)
from hostgap.server.tracefiles import is_complete, is_complete_gzip
from hostgap.server.vllm_client import VllmClient, VllmTimedClient, client_for_version, trace_dir_of_config


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
    from hostgap.server.client import ProfileRequest

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


def test_file_completeness(tmp_path):
    whole = tmp_path / "a.json.gz"
    whole.write_bytes(gzip.compress(b'{"traceEvents": []}' * 1000))
    cut = tmp_path / "b.json.gz"
    cut.write_bytes(whole.read_bytes()[:-20])
    assert is_complete_gzip(whole) and not is_complete_gzip(cut)
    sizes: dict = {}
    assert not is_complete(whole, sizes)  # first look: size not yet known stable
    assert is_complete(whole, sizes) and not is_complete(cut, sizes) and not is_complete(cut, sizes)
