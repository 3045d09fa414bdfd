"""Streaming Kineto ingest (hostgap.readers.kineto.stream) against the whole-text path.

The whole-text path (``kineto.STREAMING = False``) is the reference: every result must be
identical, on the real corpus (full ``analyze --json``) and on hand-made documents that probe
where a chunk may be cut. Documents the stream cannot split must fall back to it, and the
stream must hold a bounded amount of memory whatever the size of the text.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner

import hostgap.readers.kineto as kineto
import hostgap.readers.kineto.stream as kstream
import hostgap.readers.text as text_mod
from conftest import TRACES, VENDORED
from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.events import COLUMNS
from hostgap.readers import load_trace

BASE = TRACES if TRACES.is_dir() else VENDORED  # without the corpus: its trimmed copies
CORPUS = sorted(str(p.relative_to(BASE)) for p in BASE.glob("*/*") if p.name.endswith((".json", ".json.gz", ".sqlite")))


@pytest.fixture
def whole_path_calls(monkeypatch):
    """Records every use of the whole-text path (so a test knows which path loaded a file); the
    analysis cache is off, so every call decodes."""
    monkeypatch.setenv("HOSTGAP_NO_CACHE", "1")
    calls = []
    original = kineto._load_whole

    def spy(path):
        calls.append(path)
        return original(path)

    monkeypatch.setattr(kineto, "_load_whole", spy)
    return calls


def analyze_json(path: str) -> str:
    res = CliRunner().invoke(cli, ["analyze", "--json", "--quiet", path])
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("rel", CORPUS)
@pytest.mark.parametrize("chunk", [kstream.CHUNK, 5003])
def test_corpus_analyze_json_identical_to_whole_text_path(rel, chunk, monkeypatch, whole_path_calls):
    path = str(BASE / rel)
    monkeypatch.setattr(kineto, "STREAMING", False)
    reference = analyze_json(path)
    n_whole = len(whole_path_calls)
    monkeypatch.setattr(kineto, "STREAMING", True)
    monkeypatch.setattr(kstream, "CHUNK", chunk)  # 5003 bytes: hundreds of cuts on every file
    streamed = analyze_json(path)
    assert len(whole_path_calls) == n_whole, "the streaming path fell back to the whole text"
    assert streamed == reference
    if rel.endswith(".sqlite"):
        assert n_whole == 0
    else:
        assert n_whole == 1 and '"format": "kineto"' in reference


# -- hand-made documents ----------------------------------------------------------------


def kernel(name: str, ts: float, dur: float = 2.0, **args) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": 0,
        "tid": 7,
        "args": {"correlation": int(ts), "device": 0, "stream": 7, **args},
    }


def launch(ts: float, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "ts": ts,
        "dur": 1.0,
        "pid": 100,
        "tid": 1,
        "args": {"correlation": corr},
    }


def events(n: int = 60) -> list:
    out = []
    for i in range(n):
        out += [launch(10.0 * i, 10 * i), kernel(f"k{i % 7}", 10.0 * i + 0.5)]
    out[5]["name"] = 'quote }, {"ph": "X"} and ] inside'  # a cut candidate inside a string
    out[9]["args"]["shapes"] = [{"a": [1]}, {"b": [2, [3]]}]  # "}, {" inside an event
    return out


def write(tmp_path, text: bytes, name: str = "t.json") -> str:
    p = tmp_path / name
    p.write_bytes(text)
    return str(p)


def load_both(path: str, monkeypatch, whole_path_calls, chunk: int = 97):
    """(streamed, whole) loads of ``path`` and whether streaming fell back."""
    monkeypatch.setattr(kstream, "CHUNK", chunk)
    monkeypatch.setattr(kineto, "STREAMING", True)
    before = len(whole_path_calls)
    streamed = load_trace(path)
    fell_back = len(whole_path_calls) > before
    monkeypatch.setattr(kineto, "STREAMING", False)
    return streamed, load_trace(path), fell_back


def assert_same(a, b) -> None:
    for c in COLUMNS:
        np.testing.assert_array_equal(getattr(a.events, c), getattr(b.events, c), err_msg=c)
    assert a.names == b.names
    assert a.meta == b.meta


LAYOUTS = {
    "compact": lambda d: json.dumps(d, separators=(",", ":")).encode(),
    "spaced": lambda d: json.dumps(d).encode(),
    "pretty": lambda d: json.dumps(d, indent=2).encode(),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("chunk", [1, 97, 4096, 1 << 20])
def test_any_cut_gives_the_whole_text_result(tmp_path, monkeypatch, whole_path_calls, layout, chunk):
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU-A"}],
        "traceEvents": events(),
        "traceName": "x",
        "logs": ["[a]", "b]"],
        "distributedInfo": {"rank": 3, "world_size": 4},
    }
    path = write(tmp_path, LAYOUTS[layout](doc))
    streamed, whole, fell_back = load_both(path, monkeypatch, whole_path_calls, chunk)
    assert not fell_back
    assert_same(streamed, whole)
    assert len(streamed.events) == 120 and streamed.meta.rank == 3 and streamed.meta.devices[0].name == "GPU-A"


def test_metadata_after_the_events_overrides_the_one_before(tmp_path, monkeypatch, whole_path_calls):
    text = (
        b'{"baseTimeNanoseconds": 1, "traceEvents": '
        + json.dumps(events(6)).encode()
        + b', "baseTimeNanoseconds": 2, "distributedInfo": {"rank": 5}}'
    )
    streamed, whole, fell_back = load_both(write(tmp_path, text), monkeypatch, whole_path_calls)
    assert not fell_back
    assert_same(streamed, whole)
    assert streamed.meta.base_time_ns == 2 and streamed.meta.rank == 5


def test_gzip_members_padding_and_bom(tmp_path, monkeypatch, whole_path_calls):
    text = b"\xef\xbb\xbf" + json.dumps({"traceEvents": events()}, indent=1).encode()
    half = len(text) // 2
    data = gzip.compress(text[:half]) + gzip.compress(text[half:]) + b"\x00" * 16
    streamed, whole, fell_back = load_both(write(tmp_path, data, "t.json.gz"), monkeypatch, whole_path_calls)
    assert not fell_back
    assert_same(streamed, whole)
    assert len(streamed.events) == 120


def test_misfit_and_malformed_events_keep_their_true_index(tmp_path, monkeypatch, whole_path_calls):
    ev = events(40)
    ev[13]["ts"] = "soon"  # a misfit: skipped and counted
    ev[50] = 17  # not an object
    ev[61]["args"]["correlation"] = [1]  # malformed args: the event is kept
    streamed, whole, fell_back = load_both(
        write(tmp_path, json.dumps({"traceEvents": ev}).encode()), monkeypatch, whole_path_calls
    )
    assert not fell_back
    assert_same(streamed, whole)
    assert streamed.meta.extra["skipped_at"] == {"not an object": [50]}
    assert streamed.meta.skipped["not an object at traceEvents[50]"] == 1


@pytest.mark.parametrize(
    "case", ["comma_on_next_line", "key_ends_another_string", "twice", "lone_surrogate", "nested_key_first"]
)
def test_documents_the_stream_cannot_split_fall_back(tmp_path, monkeypatch, whole_path_calls, case):
    body = json.dumps(events(6))
    text = {
        "comma_on_next_line": '{"traceEvents": %s}' % body.replace("}, {", "}\n, {"),
        "key_ends_another_string": '{"x\\"traceEvents": [1], "traceEvents": %s}' % body,
        "twice": '{"traceEvents": [%s], "traceEvents": %s}' % (json.dumps(kernel("first", 1.0)), body),
        "lone_surrogate": '{"traceEvents": %s}' % body.replace('"k1"', '"k\\ud800"'),
        "nested_key_first": '{"meta": {"traceEvents": [1]}, "traceEvents": %s}' % body,
    }[case]
    streamed, whole, fell_back = load_both(write(tmp_path, text.encode()), monkeypatch, whole_path_calls)
    assert fell_back
    assert_same(streamed, whole)
    assert "first" not in streamed.names


@pytest.mark.parametrize(
    "text, problem",
    [
        (b'{"traceEvents": []}', "traceEvents is empty"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1}]} trailing', "invalid JSON"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1},]}', "invalid JSON"),
        (b'{"traceEvents": [{"ph": "i", "ts": 1}]}', "none of the 1 events"),
        (b'{"traceEvents": 3}', "not a list"),
    ],
)
def test_whole_file_errors_are_the_same(tmp_path, monkeypatch, problem, text):
    path = write(tmp_path, text)
    messages = []
    for streaming in (True, False):
        monkeypatch.setattr(kineto, "STREAMING", streaming)
        with pytest.raises(HostgapError, match=problem) as e:
            load_trace(path)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_an_event_larger_than_the_pending_limit_falls_back(tmp_path, monkeypatch, whole_path_calls):
    ev = events(6)
    ev[3]["name"] = "n" * 5000
    monkeypatch.setattr(kstream, "MAX_PENDING", 2000)
    monkeypatch.setattr(text_mod, "READ_PIECE", 300)
    streamed, whole, fell_back = load_both(
        write(tmp_path, json.dumps({"traceEvents": ev}).encode()), monkeypatch, whole_path_calls, chunk=500
    )
    assert fell_back
    assert_same(streamed, whole)


# -- bounded memory ---------------------------------------------------------------------


def peak_bytes(path: str) -> int:
    tracemalloc.start()
    try:
        load_trace(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def long_events_text(n: int) -> bytes:
    """~1.3 kB of JSON per event, most of it arg text the loader does not keep."""
    filler = {"Input Dims": [[i % 97, 4096] for i in range(60)], "Call stack": "frame;" * 80}
    ev = [dict(kernel(f"k{i % 11}", float(i)), args={"correlation": i, **filler}) for i in range(n)]
    return json.dumps({"traceEvents": ev}).encode()


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("gz", [False, True])
def test_memory_grows_with_the_columns_not_the_text(tmp_path, monkeypatch, gz, jobs):
    monkeypatch.setenv("HOSTGAP_JOBS", str(jobs))
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)  # both sizes on the same path
    monkeypatch.setattr(kstream, "CHUNK", 1 << 20)
    monkeypatch.setattr(text_mod, "AHEAD", 1)  # the inflated pieces queued: a constant, kept small
    peaks = {}
    for n in (6_000, 18_000):
        text = long_events_text(n)
        path = write(tmp_path, gzip.compress(text, 1) if gz else text, f"{n}.json.gz" if gz else f"{n}.json")
        for streaming in (True, False):
            monkeypatch.setattr(kineto, "STREAMING", streaming)
            peaks[n, streaming] = peak_bytes(path), len(text)
    (small, small_text), (big, big_text) = peaks[6_000, True], peaks[18_000, True]
    whole_small, whole_big = peaks[6_000, False][0], peaks[18_000, False][0]
    assert whole_big - whole_small > big_text - small_text  # the reference holds the text: seen
    # streamed: the extra events cost their columns (~0.1 kB each), not their text (~1.3 kB)
    assert big - small < 0.3 * (big_text - small_text)


# -- inflating ahead on a worker thread ---------------------------------------------------


def test_ahead_keeps_order_and_raises_the_workers_error_in_place():
    def items():
        yield from (b"a", b"b", b"c")
        raise ValueError("broken stream")

    got = []
    with pytest.raises(ValueError, match="broken stream"):
        for x in text_mod.ahead(items(), depth=1):
            got.append(x)
    assert got == [b"a", b"b", b"c"]


def test_closing_ahead_early_stops_and_closes_the_producer():
    import threading

    closed = []

    def items():
        try:
            for i in range(10_000):
                yield bytes([i % 256])
        finally:
            closed.append(True)

    gen = text_mod.ahead(items(), depth=2)
    assert next(gen) == b"\x00"
    gen.close()
    assert closed == [True]
    assert not [t for t in threading.enumerate() if t.name == "hostgap-inflate"]


def test_a_corrupt_gzip_tail_is_one_error_on_both_paths(tmp_path, monkeypatch):
    data = gzip.compress(json.dumps({"traceEvents": events()}).encode())
    path = write(tmp_path, data[: len(data) - 40] + b"\x00" * 40, "t.json.gz")
    messages = []
    for streaming in (True, False):
        monkeypatch.setattr(kineto, "STREAMING", streaming)
        with pytest.raises(HostgapError, match="truncated or corrupt gzip") as e:
            load_trace(path)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_raw_control_characters_are_fenced_up_to_the_bound(tmp_path, monkeypatch):
    # each raw control character costs one whole-text decode attempt: a few are fenced (their
    # events skipped), more than kineto.MAX_FENCES refuse the file
    def text(n_bad: int) -> bytes:
        ev = [kernel(f"k{i}", float(i)) for i in range(kineto.MAX_FENCES + 10)]
        body = json.dumps({"traceEvents": ev})
        for i in range(n_bad):
            body = body.replace(f'"k{i}"', f'"k\x01{i}"', 1)
        return body.encode()

    t = load_trace(write(tmp_path, text(3), "few.json"))
    assert len(t.events) == kineto.MAX_FENCES + 7
    assert t.meta.extra["skipped_at"][kineto.UNDECODABLE] == [0, 1, 2]
    with pytest.raises(HostgapError, match="invalid JSON"):
        load_trace(write(tmp_path, text(kineto.MAX_FENCES + 1), "many.json"))


@pytest.mark.parametrize("max_prefix, falls_back", [(64 << 20, False), (300, True)])
def test_a_long_prefix_is_read_in_pieces_up_to_its_bound(
    tmp_path, monkeypatch, whole_path_calls, max_prefix, falls_back
):
    # ~3 kB of metadata before traceEvents, read 7 bytes at a time
    props = [{"id": i, "name": f"GPU-{i}", "totalGlobalMem": 2**36, "numSms": 132} for i in range(40)]
    text = json.dumps({"schemaVersion": 1, "deviceProperties": props, "traceEvents": events(6)}).encode()
    assert text.index(b'"traceEvents"') > 2500
    monkeypatch.setattr(text_mod, "READ_PIECE", 7)
    monkeypatch.setattr(kstream, "MAX_PREFIX", max_prefix)
    streamed, whole, fell_back = load_both(write(tmp_path, text), monkeypatch, whole_path_calls, chunk=50)
    assert fell_back is falls_back
    assert_same(streamed, whole)
    assert [d.name for d in streamed.meta.devices] == ["GPU-0"]


def test_the_tail_tries_only_brackets_that_can_end_the_list(tmp_path, monkeypatch, whole_path_calls):
    """The end of traceEvents follows an event's "}" (or the list's own "["): the "]" of the
    3,000 nested lists and the "}]" inside a string in the last events are not tried as its end,
    so the tail is decoded a few times, not once per bracket (a fuzzed 2 MB document with
    thousands of nested brackets took 12 s instead of 0.1 s)."""
    ev = events(20)
    ev[-1]["args"]["shapes"] = [[i] for i in range(3000)]
    ev[-2]["name"] = "ends like a list }] here"
    path = write(tmp_path, json.dumps({"traceEvents": ev, "traceName": "t"}).encode())
    calls = []

    def counting(view):
        calls.append(len(view))
        return kstream._RAWS.decode(view)

    monkeypatch.setattr(kstream, "CHUNK", 1 << 20)  # one buffer: the whole text is the tail
    assert sum(len(b) for b in kstream.EventStream(path, decode=counting)) == 40
    # the candidates: "}]" in the string (truncated there) and the true end
    assert len(calls) <= 3
    streamed, whole, fell_back = load_both(path, monkeypatch, whole_path_calls, chunk=1 << 20)
    assert not fell_back
    assert_same(streamed, whole)
    assert "ends like a list }] here" in streamed.names


def test_a_tail_malformed_before_its_end_falls_back_without_trying_every_bracket(
    tmp_path, monkeypatch, whole_path_calls
):
    """Bytes that do not decode before a candidate "]" lie before every later one: the stream
    stops at the first such candidate and the whole-text path gives the file's own error."""
    body = json.dumps(events(6))
    text = (
        body[:-1]
        + ', {"ph": "X", "cat": "kernel", "ts": 1, x}'
        + "".join(', {"ph": "X", "args": {}}' for _ in range(200))
        + "]"
    )
    path = write(tmp_path, ('{"traceEvents": %s}' % text).encode())
    calls = []

    def counting(view):
        calls.append(len(view))
        return kstream._RAWS.decode(view)

    monkeypatch.setattr(kstream, "CHUNK", 1 << 20)
    with pytest.raises(kstream.NotStreamable):
        list(kstream.EventStream(path, decode=counting))
    # the usual cut's tries, then one in the tail (the 200 events after "x" hold 200 more "]")
    assert len(calls) <= kstream.CUT_TRIES + 2
    for streaming in (True, False):
        monkeypatch.setattr(kineto, "STREAMING", streaming)
        with pytest.raises(HostgapError, match="invalid JSON"):
            load_trace(path)
