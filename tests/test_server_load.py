"""The load generator against a stand-in server (tests/standin_server.py): tokens counted per
request, the room left before the first request ends, and restarting every request together."""

from __future__ import annotations

import time
import urllib.request

import pytest

from hostgap.server.attach.loadgen import (
    LoadGenerator,
    LoadSpec,
    chunk_tokens,
    late_streams,
    request_body,
    stream_was_late,
)
from hostgap.server.attach.steps_seen import load_turnover_notes
from test_server_attach import standin  # noqa: F401  (the stand-in server fixture)


def test_chunk_tokens_reads_the_running_usage():
    usage = b'{"choices": [{"text": "ab"}], "usage": {"prompt_tokens": 32, "completion_tokens": 9}}'
    assert chunk_tokens(usage, 4) == 9  # two tokens merged in one chunk: the usage says so
    assert chunk_tokens(b'{"choices": [], "usage": {"completion_tokens": 9}}', 9) == 9  # the closing usage
    assert chunk_tokens(b'{"choices": [{"text": "a"}]}', 4) == 5  # no usage: one per chunk
    assert chunk_tokens(b'{"usage": {"completion_tokens": 3}}', 4) == 5  # going back: not believed
    assert chunk_tokens(b'{"usage": {"completion_tokens": "9"}}', 4) == 5
    assert chunk_tokens(b'{"completion_tokens": 9', 4) == 5  # broken JSON
    body = request_body(LoadSpec(concurrency=1), "m", 0)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    # streamed (the tokens are counted as they come), every one of the output length decoded
    assert body["stream"] is True and body["ignore_eos"] is True and body["temperature"] == 0.0
    assert body["max_tokens"] == body["min_tokens"] == 256 and len(body["prompt"]) == 32


def wait_until(cond, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_room_and_refresh(standin):  # noqa: F811
    s = standin("sglang", "--step-ms", "10")
    with LoadGenerator(s.url, LoadSpec(concurrency=2, output_len=300)) as load:
        assert load.room() == 0  # nothing streams yet
        assert load.wait_streaming(30)
        wait_until(lambda: load.stats.tokens >= 2 * 40)
        room = load.room()
        assert 0 < room <= 300 - 40  # both requests are 40+ tokens in (one step makes one token each)
        assert load.stats.tokens == load.stats.chunks  # the stand-in sends no usage: one token a chunk
        assert load.stats.started == 2 and load.stats.restarted == 0
        assert load.refresh(30)
        after = load.room()
        assert after > room and after >= 300 - 20  # fresh requests, streaming again
        st = load.stats.to_dict()
        assert st["requests_restarted"] == 2 and st["requests_started"] == 4 and st["errors"] == 0
        assert st["refreshes"] == 1
        assert st["requests_finished"] == 0  # ended by the refresh, not finished
        # the counted tokens keep growing across the refresh (attach's step counter reads them)
        before = load.stats.tokens
        wait_until(lambda: load.stats.tokens >= before + 10)
    assert load.alive == 0


def test_requests_that_end_leave_no_room_until_replaced(standin):  # noqa: F811
    s = standin("sglang", "--step-ms", "5")
    with LoadGenerator(s.url, LoadSpec(concurrency=1, output_len=5)) as load:
        assert load.wait_streaming(30)
        wait_until(lambda: load.stats.finished >= 3)
        rooms = set()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            rooms.add(load.room())
            time.sleep(0.002)
        assert rooms <= set(range(0, 5)) and min(rooms) == 0  # 5-token requests: at most 4 left
    assert load.stats.restarted == 0 and load.stats.tokens >= 15


def test_late_is_all_tokens_in_the_last_quarter_for_half_the_requests():
    assert not stream_was_late(0.0, 0.05, 1.75)  # the prefill, then tokens as they are decoded
    assert stream_was_late(0.0, 1.39, 1.40)  # 1.39 s of nothing, then the whole request
    assert not stream_was_late(0.0, 0.75, 1.0) and stream_was_late(0.0, 0.76, 1.0)  # the quarter's edge
    assert stream_was_late(10.0, 10.76, 11.0)  # from the request's own sending
    assert late_streams({"streams_timed": 4, "streams_late": 2}) and late_streams(
        {"streams_timed": 1, "streams_late": 1}
    )
    assert not late_streams({"streams_timed": 5, "streams_late": 2}) and not late_streams({"streams_timed": 0})
    assert not late_streams(None) and not late_streams({"streams_timed": 0, "streams_late": 0})


def test_short_batches_are_put_down_to_late_streams_only_when_they_were():
    steps = [{"kind": "decode", "gen_requests": 1}, {"kind": "decode", "gen_requests": 2}]
    (plain,) = load_turnover_notes(steps, 2, 64)
    (late,) = load_turnover_notes(steps, 2, 64, late=True)
    head = "1 of the 2 complete profiled steps held fewer requests than the load of 2 in decode (decode: 1 at batch 1)"
    assert plain.startswith(head) and late.startswith(head)
    assert plain.endswith(
        "a larger --output-len (more steps per request than pass before the profile starts) keeps the batch steady"
    )
    assert late.endswith(
        "inside the window; the server streamed them late (see the notes), so their ends could not be seen"
    )


def test_short_batches_after_a_restart_are_put_down_to_a_server_behind_its_streams():
    """Requests restarted together just before the start have more tokens than the window has
    steps: a short batch inside it cannot be their end, so no longer --output-len is advised.
    Late streams, where both hold, are the cause named (they are measured, per request)."""
    from hostgap.server.attach.config import AttachConfig
    from hostgap.server.attach.record import load_notes

    steps = [{"kind": "decode", "gen_requests": 1}, {"kind": "decode", "gen_requests": 2}]
    cfg = AttachConfig("http://127.0.0.1:1", load=LoadSpec(concurrency=2, output_len=64))
    quiet = {"streams_timed": 4, "streams_late": 1, "refreshes": 0}
    (plain,) = load_notes(cfg, steps, quiet)
    (restarted,) = load_notes(cfg, steps, {**quiet, "refreshes": 1})
    (late,) = load_notes(cfg, steps, {**quiet, "streams_late": 2, "refreshes": 1})
    head = (
        "1 of the 2 complete profiled steps held fewer requests than the load of 2 in decode (decode: 1 at batch 1): "
    )
    assert [plain] == load_turnover_notes(steps, 2, 64) and plain.startswith(head)
    assert restarted == head + (
        "its requests were restarted together just before the start, each with 64 tokens, more than the "
        "window has steps: the server ran behind what it streamed (its API process behind its engine, or "
        "the start slow to reach the engine), and the window's batch could not be chosen from the client"
    )
    assert [late] == load_turnover_notes(steps, 2, 64, late=True) and "--output-len" not in late
    assert load_notes(cfg, steps[1:], {**quiet, "refreshes": 1}) == []  # all at the load's batch
    assert load_notes(AttachConfig("http://127.0.0.1:1"), steps, quiet) == []  # no load: nothing to say


def test_a_finished_request_counts_exactly_its_tokens(standin):  # noqa: F811
    """Only the stream's data lines count, and its closing ``[DONE]`` is no token: the blank
    line after each event, or the end marker, counted would make a request of 20 tokens 21."""
    s = standin("sglang", "--step-ms", "5")
    with LoadGenerator(s.url, LoadSpec(concurrency=1, output_len=20)) as load:
        wait_until(lambda: load.stats.finished >= 2)
        with load._lock:
            tokens, finished, current = load.stats.tokens, load.stats.finished, dict(load._current)
    assert tokens == 20 * finished + current.get(0, 0), (tokens, finished, current)


def test_streams_as_decoded_are_not_late(standin):  # noqa: F811
    s = standin("sglang", "--step-ms", "20")
    with LoadGenerator(s.url, LoadSpec(concurrency=2, output_len=20)) as load:
        assert load.wait_streaming(30)
        wait_until(lambda: load.stats.finished >= 4, 60)
    st = load.stats.to_dict()
    assert st["streams_timed"] >= 4 and not late_streams(st), st


def test_late_streams_reach_decode_and_are_counted(standin):  # noqa: F811
    """A server that sends each request's tokens at its end (an API process behind its engine):
    no moment has both requests streaming, yet the load reaches decode, a refresh comes back,
    and the finished requests are counted late."""
    s = standin("sglang", "--step-ms", "5", "--late-streams")
    with LoadGenerator(s.url, LoadSpec(concurrency=2, output_len=40)) as load:
        assert load.wait_streaming(30)
        assert load.refresh(30)
        wait_until(lambda: load.stats.finished >= 4)
    st = load.stats.to_dict()
    assert st["streams_timed"] >= 4 and st["streams_late"] == st["streams_timed"] and late_streams(st), st
    assert st["refreshes"] == 1, st


@pytest.mark.parametrize("bad", [0, -1])
def test_load_spec_rejects_bad_lengths(bad):
    from hostgap.errors import HostgapError

    with pytest.raises(HostgapError, match="--output-len"):
        LoadSpec(concurrency=1, output_len=bad)


def test_prompts_stay_inside_the_vocabulary():
    spec = LoadSpec(concurrency=2, prompt_len=400, vocab=6)
    ids = [i for w in range(2) for i in request_body(spec, "m", w)["prompt"]]
    assert set(ids) == {3, 4, 5}  # 0-2 are often special; vocab-1 is the last id
    assert request_body(spec, "m", 0)["prompt"] != request_body(spec, "m", 1)["prompt"]  # no shared prefix
    assert request_body(spec, "m", 1) == request_body(spec, "m", 1)  # fixed per worker


def test_the_model_is_the_servers_first_unless_given(standin):  # noqa: F811
    s = standin("sglang")
    with LoadGenerator(s.url, LoadSpec(concurrency=1, output_len=4)) as load:
        assert load.model == "standin-model"
    with LoadGenerator(s.url, LoadSpec(concurrency=1, output_len=4, model="mine")) as load:
        assert load.model == "mine"


def test_waits_end_false_when_nothing_streams(standin):  # noqa: F811
    s = standin("sglang")
    load = LoadGenerator(s.url, LoadSpec(concurrency=1))  # never started
    assert load.wait_streaming(0.1) is False and load.refresh(0.1) is False and load.room() == 0


def test_stop_does_not_wait_on_a_hung_server(standin):  # noqa: F811
    """A worker blocked on a server that never answers is left behind (a daemon) after
    ``join_s``: stop returns long before the worker's own read timeout."""
    s = standin("sglang", "--hang-after-start")
    req = urllib.request.Request(s.url + "/start_profile", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    load = LoadGenerator(s.url, LoadSpec(concurrency=1, model="m", timeout_s=120)).start()
    wait_until(lambda: load.stats.started == 1)
    t0 = time.monotonic()
    load.stop(join_s=0.2)
    assert time.monotonic() - t0 < 60  # a hang check, not a speed one: the read timeout is 120 s
    assert load.alive == 1  # still blocked in its read, as a daemon


def test_errors_before_a_wait_do_not_end_it():
    """A refresh after failed requests: the wait counts only the errors of its own time, so it
    goes on until the requests stream."""
    import threading

    load = LoadGenerator("http://127.0.0.1:9", LoadSpec(concurrency=2, model="m"))  # never started
    load.stats.errors = 5
    threading.Timer(0.2, lambda: load.stats.reached.update({0, 1})).start()
    assert load.wait_streaming(60) is True


def test_wait_ends_on_errors():
    """Nothing listens at the port: the requests fail and the wait says so at the first error,
    not after its timeout."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    with LoadGenerator(f"http://127.0.0.1:{port}", LoadSpec(concurrency=2, model="m")) as load:
        t0 = time.monotonic()
        assert load.wait_streaming(120) is False
        assert time.monotonic() - t0 < 60  # a hang check: the first error ends the wait
        assert load.stats.errors >= 1 and "URLError" in (load.stats.first_error or "")
        assert load.room() == 0
