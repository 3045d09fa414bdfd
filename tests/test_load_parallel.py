"""A Kineto trace decoded on several threads (``load_trace(path, jobs=N)``) against the one-thread
decode: the same columns, names and metadata, or the same error, on every corpus trace, on the
fuzz generators' inputs and on documents built so that chunk cuts fall inside strings, escapes
and nested args. Chunks are made tiny here (``kineto_stream.CHUNK``) so that a small file is cut
hundreds of times and many of the cuts proposed without a decode are false; and the size below
which a load stays on one thread (``kineto.PARALLEL_MIN_BYTES``) is 0, so that the parallel path
runs on every file. With the pure-Python decoder (``HOSTGAP_PURE_PYTHON=1``) ``jobs`` changes
nothing and the same comparisons hold."""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
from pathlib import Path

import numpy as np
import pytest

import hostgap.readers.kineto as kineto
import hostgap.readers.kineto.stream as kstream
import hostgap.readers.text as text_mod
from hostgap.errors import HostgapError
from hostgap.events import COLUMNS
from hostgap.readers import default_jobs, load_trace
from hostgap.readers.kineto.compiled import native

_spec = importlib.util.spec_from_file_location(
    "hostgap_bench_fuzz_parallel", Path(__file__).resolve().parents[1] / "bench" / "fuzz.py"
)
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
KINETO = sorted(str(p) for p in TRACES.glob("*/*") if p.name.endswith((".json", ".json.gz"))) if TRACES.is_dir() else []
COMPILED = native() is not None


def outcome(path: str, jobs: int):
    """The loaded trace, or the text of the HostgapError."""
    try:
        return load_trace(path, jobs=jobs)
    except HostgapError as e:
        return f"hostgap error: {e.problem}"


def same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return (
        a.names == b.names
        and a.meta == b.meta
        and all(np.array_equal(getattr(a.events, c), getattr(b.events, c)) for c in COLUMNS)
    )


@pytest.fixture
def parallel(monkeypatch):
    """Every load takes the parallel path; returns the counts of speculated chunks and of
    chunks joined with the text after them (false cuts)."""
    counts = {"rejoined": 0, "pools": 0}
    rejoin = kstream._rejoin

    def spy(seg, rest):
        counts["rejoined"] += 1
        return rejoin(seg, rest)

    original = kstream.EventStream._events_parallel

    def spy_events(self):
        counts["pools"] += 1
        return original(self)

    monkeypatch.setattr(kstream, "_rejoin", spy)
    monkeypatch.setattr(text_mod, "READ_PIECE", 331)  # the text arrives in small pieces
    monkeypatch.setattr(text_mod, "OUT_PIECE", 331)
    monkeypatch.setattr(kstream.EventStream, "_events_parallel", spy_events)
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(kineto, "PARALLEL_FINISH_ROWS", 0)  # the columns joined on threads too
    return counts


def tricky_events(n: int) -> list:
    """Events whose text holds ``}, {`` where no event ends: in names (raw and escaped quotes),
    in nested args (lists of objects, objects in objects), in unknown fields."""
    out = []
    for i in range(n):
        corr = 1000 + i
        out.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": 10.0 * i,
                "dur": 1.0,
                "pid": 100,
                "tid": 1,
                "args": {"correlation": corr, "shapes": [{"a": [1, {"b": {}}]}, {"c": "}, {"}]},
            }
        )
        out.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": ['k}, {"ph": "X"}, {', 'k\\"}, {\\"', "k\u00e9}, {\u4e2d", "plain"][i % 4],
                "ts": 10.0 * i + 0.5,
                "dur": 2.0,
                "pid": 0,
                "tid": 7,
                "extra": {"nested": [{}, {}, {"x": "},{"}]},
                "args": {"correlation": corr, "device": 0, "stream": 7, "name": "}, {"},
            }
        )
        if i % 9 == 0:
            out.append({"ph": "i", "name": "}, {", "ts": 10.0 * i, "pid": 100, "tid": 1, "s": "t"})
    return out


@pytest.mark.parametrize("chunk", [23, 97, 1000])
@pytest.mark.parametrize("gz", [False, True])
def test_cuts_inside_strings_escapes_and_nested_args_give_the_one_thread_result(
    tmp_path, parallel, monkeypatch, chunk, gz
):
    text = json.dumps({"traceEvents": tricky_events(120), "baseTimeNanoseconds": 5}).encode()
    assert text.count(b"}, {") > 3 * text.count(b'"ph"')  # most candidate cuts are false
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text) if gz else text)
    monkeypatch.setattr(kstream, "CHUNK", chunk)
    one = outcome(str(p), 1)
    assert parallel["pools"] == 0
    many = outcome(str(p), 3)
    assert not isinstance(one, str) and len(one.events) == 240
    assert same(one, many)
    if COMPILED:
        assert parallel["pools"] == 1 and parallel["rejoined"] > 10
    monkeypatch.setattr(kineto, "STREAMING", False)
    assert same(one, outcome(str(p), 1))  # and both are the whole-text path's


@pytest.mark.parametrize("path", KINETO or ["(corpus absent)"])
def test_corpus_traces_decode_the_same_on_three_threads(path, parallel, monkeypatch):
    if not KINETO:
        pytest.skip("shared trace corpus not available")
    monkeypatch.setattr(kstream, "CHUNK", 20_011)
    monkeypatch.setattr(text_mod, "READ_PIECE", 4096)
    monkeypatch.setattr(text_mod, "OUT_PIECE", 4096)
    one, many = outcome(path, 1), outcome(path, 3)
    assert not isinstance(one, str)
    assert same(one, many)
    if COMPILED:
        assert parallel["pools"] == 1


def test_fuzz_inputs_decode_the_same_on_two_threads(tmp_path, parallel, monkeypatch):
    monkeypatch.setattr(kstream, "CHUNK", 61)
    monkeypatch.setattr(text_mod, "READ_PIECE", 1024)
    monkeypatch.setattr(text_mod, "OUT_PIECE", 1024)
    # text held without a cut: small too, or a document without one (a gzip bomb of spaces) is
    # read to the limit in 331-byte steps, each a copy of what is held (both thread counts
    # alike: the limit only decides when the whole-text path takes over)
    monkeypatch.setattr(kstream, "MAX_PENDING", 1 << 15)
    rng = random.Random(11)
    loaded = 0
    for i in range(150):
        data, suffix, _ = fuzz.kineto_input(rng)
        p = tmp_path / f"f{i}{suffix}"
        p.write_bytes(data)
        one, many = outcome(str(p), 1), outcome(str(p), 2)
        assert same(one, many), (i, one if isinstance(one, str) else "loaded", many if isinstance(many, str) else "")
        loaded += not isinstance(one, str)
    assert loaded > 40
    if COMPILED:
        assert parallel["pools"] > 40 and parallel["rejoined"] > 0


def test_a_bad_event_in_the_middle_falls_back_to_the_whole_text(tmp_path, parallel, monkeypatch):
    """An event no cut can get past (invalid JSON) makes the stream give up, on every thread
    count alike, and the whole-text path decides: here, one error line."""
    ev = tricky_events(40)
    text = json.dumps({"traceEvents": ev}).encode().replace(b'"plain"', b'"pla"in"', 1)
    p = tmp_path / "bad.json"
    p.write_bytes(text)
    monkeypatch.setattr(kstream, "CHUNK", 200)
    monkeypatch.setattr(kstream, "MAX_PENDING", 3000)
    one, many = outcome(str(p), 1), outcome(str(p), 2)
    assert isinstance(one, str) and "invalid JSON" in one
    assert one == many


def test_progress_reports_the_bytes_read_up_to_the_file_size(tmp_path, parallel, monkeypatch):
    text = json.dumps({"traceEvents": tricky_events(200)}).encode()
    monkeypatch.setattr(kstream, "CHUNK", 4000)
    for name, data in (("t.json", text), ("t.json.gz", gzip.compress(text))):
        p = tmp_path / name
        p.write_bytes(data)
        for jobs in (1, 2):
            calls: list[tuple[int, int | None]] = []
            load_trace(str(p), jobs=jobs, progress=lambda done, total, calls=calls: calls.append((done, total)))
            assert len(calls) > 3
            assert all(total == len(data) for _, total in calls)
            done = [d for d, _ in calls]
            assert done == sorted(done) and done[-1] == len(data)


def test_progress_is_called_on_the_whole_text_path_and_for_nsys_too(tmp_path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": tricky_events(5)}))
    monkeypatch.setattr(kineto, "STREAMING", False)
    calls: list = []
    load_trace(str(p), progress=lambda *a: calls.append(a))
    assert calls == [(p.stat().st_size, p.stat().st_size)]


def test_small_files_stay_on_one_thread(tmp_path, monkeypatch):
    seen = []
    original = kstream.EventStream.__init__

    def spy(self, *a, **kw):
        original(self, *a, **kw)
        seen.append(self.jobs)

    monkeypatch.setattr(kstream.EventStream, "__init__", spy)
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": tricky_events(50)}))
    load_trace(str(p), jobs=4)
    assert seen == [1]
    monkeypatch.setattr(kineto, "PARALLEL_MIN_BYTES", p.stat().st_size)
    load_trace(str(p), jobs=4)
    assert seen == [1, 4 if COMPILED else 1]


def test_size_hint_reads_the_gzip_trailer(tmp_path):
    text = b'{"traceEvents": [' + b" " * 100_000 + b"]}"
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text))
    assert kineto.text_size_hint(str(p)) == len(text)
    q = tmp_path / "t.json"
    q.write_bytes(text)
    assert kineto.text_size_hint(str(q)) == len(text)


def test_default_jobs_follows_the_environment_then_the_affinity(monkeypatch):
    monkeypatch.delenv("HOSTGAP_JOBS", raising=False)
    import os

    assert default_jobs() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("HOSTGAP_JOBS", "3")
    assert default_jobs() == 3
    for bad in ("0", "-2", "two", "\u0663"):
        monkeypatch.setenv("HOSTGAP_JOBS", bad)
        with pytest.raises(HostgapError, match="HOSTGAP_JOBS"):
            default_jobs()


def test_jobs_below_one_is_refused(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": tricky_events(2)}))
    with pytest.raises(ValueError, match="at least 1"):
        load_trace(str(p), jobs=0)


@pytest.mark.skipif(not COMPILED, reason="the compiled decoder is not built")
@pytest.mark.parametrize(("spaces", "cut"), [(254, True), (255, True), (257, False)])
def test_a_cut_needs_the_next_event_within_256_bytes(tmp_path, parallel, monkeypatch, spaces, cut):
    """Between ``},`` and the next ``{`` up to 255 bytes of whitespace still make a candidate cut
    (what the one-thread stream accepts too); more, and no chunk is cut there: the text is read
    on until the end and decoded at once."""
    sep = b"}," + b" " * spaces + b"{"
    plain = [
        {"ph": "X", "cat": "cpu_op", "name": "k", "ts": float(i), "dur": 0.5, "pid": 1, "tid": 1, "args": {"a": i}}
        for i in range(60)
    ]
    text = json.dumps({"traceEvents": plain}).encode().replace(b"}, {", sep)
    assert text.count(b"},") == text.count(sep) == 59
    p = tmp_path / "t.json"
    p.write_bytes(text)
    monkeypatch.setattr(kstream, "CHUNK", 2000)
    monkeypatch.setattr(kstream, "MAX_PENDING", 1 << 30)
    speculated = []
    original = kineto._speculator

    def counting(ext):
        f = original(ext)
        return lambda t: speculated.append(len(t)) or f(t)

    monkeypatch.setattr(kineto, "_speculator", counting)
    assert same(outcome(str(p), 1), outcome(str(p), 2))
    assert (len(speculated) > 5) == cut
    chunks = list(kstream.EventStream(str(p)))  # the one-thread stream, the same rule
    assert sum(map(len, chunks)) == 60 and (len(chunks) > 5) == cut


def decoding_threads() -> list[str]:
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith(("hostgap-decode", "hostgap-columns"))]


@pytest.mark.skipif(not COMPILED, reason="the compiled decoder is not built")
def test_no_decoding_thread_outlives_the_load(tmp_path, parallel, monkeypatch):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": tricky_events(300)}))
    monkeypatch.setattr(kstream, "CHUNK", 3000)
    for _ in range(3):
        load_trace(str(p), jobs=3)
        assert not decoding_threads()
    assert parallel["pools"] == 3


def test_a_stream_closed_early_waits_for_the_chunks_in_flight(tmp_path, monkeypatch):
    """Stopping the iteration (an error in the caller, a fallback to the whole text) returns only
    once every worker is done with its chunk: no thread outlives the stream."""
    import time

    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": tricky_events(300)}))
    monkeypatch.setattr(kstream, "CHUNK", 3000)
    monkeypatch.setattr(text_mod, "READ_PIECE", 1000)

    def slow(text):
        time.sleep(0.3)
        return None

    stream = kstream.EventStream(str(p), lambda view, spec=None: kstream._RAWS.decode(view), speculate=slow, jobs=3)
    it = iter(stream)
    assert next(it)
    it.close()
    assert not decoding_threads()
