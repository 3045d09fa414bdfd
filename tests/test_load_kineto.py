"""Kineto JSON loader: timestamps, metadata, categories (current and legacy), API names, skips,
and whole-file errors. Hand-written micro traces with exact expected values."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from conftest import (
    annotation,
    cpu_op,
    flow,
    gpu_annotation,
    kernel,
    launch,
    memcpy,
    memset,
    process_name,
    python_frame,
    runtime,
)
from hostgap.errors import HostgapError
from hostgap.events import NONE, CopyKind, Kind
from hostgap.readers import load_trace, sniff
from hostgap.readers.apis import base_api_name, classify_api, copy_kind_from_name
from hostgap.readers.kineto import load_kineto


def rows_of(trace, kind):
    return np.flatnonzero(trace.events.kind == kind)


def only(trace, kind):
    rows = rows_of(trace, kind)
    assert len(rows) == 1, f"expected one {kind.name}, got {len(rows)}"
    return int(rows[0])


# -- timestamps ------------------------------------------------------------------------


def test_float_us_timestamps_keep_ns_precision(kineto_trace):
    t = load_trace(kineto_trace([kernel("k", ts=1.001, dur=0.001), kernel("k2", ts=2.9996, dur=4.0004)]))
    ev = t.events
    assert ev.start_ns.tolist() == [1001, 3000]  # rounded, never truncated
    assert ev.dur_ns.tolist() == [1, 4000]
    assert ev.start_ns.dtype == np.int64 and ev.dur_ns.dtype == np.int64


def test_large_float_timestamp_exact_to_the_ns(kineto_trace):
    t = load_trace(kineto_trace([kernel("k", ts=1428625731896.179, dur=2.345)]))
    assert int(t.events.start_ns[0]) == 1428625731896179
    assert int(t.events.dur_ns[0]) == 2345
    assert int(t.events.end_ns[0]) == 1428625731898524


def test_integer_us_timestamps(kineto_trace):
    t = load_trace(kineto_trace([kernel("k", ts=1629064, dur=7), launch(ts=1629050, dur=3, corr=1)]))
    assert sorted(t.events.start_ns.tolist()) == [1629050000, 1629064000]
    assert sorted(t.events.dur_ns.tolist()) == [3000, 7000]


def test_rows_sorted_by_start(kineto_trace):
    t = load_trace(kineto_trace([kernel("c", ts=30), kernel("a", ts=10), kernel("b", ts=20)]))
    assert t.events.start_ns.tolist() == [10000, 20000, 30000]
    assert t.names_of(np.arange(3)) == ["a", "b", "c"]
    t.events.validate()


@pytest.mark.parametrize(
    "base, expected",
    [
        (1767189312000000000, 1767189312000000000),
        ("1767189312000000000", 1767189312000000000),
        (None, None),
        ("not a number", None),
    ],
)
def test_base_time_ns_int_or_string(kineto_trace, base, expected):
    top = {} if base is None else {"baseTimeNanoseconds": base}
    t = load_trace(kineto_trace([kernel("k", ts=1)], **top))
    assert t.meta.base_time_ns == expected


# -- metadata --------------------------------------------------------------------------


def test_device_properties_names_and_missing_name(kineto_trace):
    props = [
        {
            "id": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "totalGlobalMem": 85045641216,
            "computeMajor": 9,
            "computeMinor": 0,
            "numSms": 132,
        },
        {"id": 1, "name": ""},
        {"id": 3, "name": "NVIDIA H100 80GB HBM3"},  # listed but no activity: not a trace device
    ]
    events = [kernel("a", ts=1, device=0), kernel("b", ts=2, device=1), kernel("c", ts=3, device=2)]
    t = load_trace(kineto_trace(events, deviceProperties=props))
    devs = {d.index: d for d in t.meta.devices}
    assert sorted(devs) == [0, 1, 2]
    assert devs[0].name == "NVIDIA H100 80GB HBM3" and devs[0].name_source == "trace"
    assert devs[0].memory_bytes == 85045641216 and devs[0].sm_count == 132
    assert devs[0].compute_capability == "9.0"
    for idx in (1, 2):  # empty name, and a device absent from deviceProperties
        assert devs[idx].name_source == "missing"
        assert devs[idx].name == f"GPU {idx} (name not in trace)"
        assert devs[idx].memory_bytes is None


def test_no_device_properties_at_all(kineto_trace):
    t = load_trace(kineto_trace([kernel("a", ts=1, device=5, stream=3)]))
    (d,) = t.meta.devices
    assert (d.index, d.name_source) == (5, "missing")
    assert "5" in d.name


@pytest.mark.parametrize(
    "info, rank, world",
    [
        ({"backend": "nccl", "rank": 3, "world_size": 8}, 3, 8),
        ({"rank": 1}, 1, None),  # the 2021 files carry the rank only
        (None, None, None),
        ({"rank": "zero", "world_size": True}, None, None),
    ],
)
def test_distributed_info(kineto_trace, info, rank, world):
    top = {} if info is None else {"distributedInfo": info}
    t = load_trace(kineto_trace([kernel("k", ts=1)], **top))
    assert (t.meta.rank, t.meta.world_size) == (rank, world)


def test_process_names_and_flow_count(kineto_trace):
    events = [
        process_name(100, "python"),
        process_name(0, "GPU 0"),
        launch(ts=1, corr=5),
        flow(1, 5, "s"),
        kernel("k", ts=3, corr=5),
        flow(3, 5, "f", pid=0, tid=7),
    ]
    t = load_trace(kineto_trace(events))
    assert t.meta.processes == {100: "python", 0: "GPU 0"}
    assert t.meta.flows == 2
    assert t.meta.skipped == {}
    assert len(t.events) == 2


def test_meta_format_and_path(kineto_trace):
    path = kineto_trace([kernel("k", ts=1)])
    t = load_trace(path)
    assert t.meta.format == "kineto" and t.meta.path == path


def test_gzip_and_plain_give_the_same_table(kineto_trace):
    events = [launch(ts=1, corr=1), kernel("k", ts=2.5, dur=1.25, corr=1), cpu_op("aten::mm", ts=0.5, dur=2)]
    a = load_trace(kineto_trace(events))
    b = load_trace(kineto_trace(events, gz=True))
    assert a.names == b.names
    for col in ("kind", "start_ns", "dur_ns", "pid", "tid", "correlation", "name"):
        assert getattr(a.events, col).tolist() == getattr(b.events, col).tolist()


# -- categories and columns --------------------------------------------------------------


def test_current_categories_to_kinds(kineto_trace):
    events = [
        kernel("k", ts=10, dur=2, corr=1, ext=7),
        memcpy("Memcpy DtoH (Device -> Pinned)", ts=13, dur=1, nbytes=4096, corr=2),
        memset(ts=15, dur=1, nbytes=128, corr=3),
        gpu_annotation("ProfilerStep#1", ts=9, dur=8),
        launch(ts=1, dur=1, corr=1, ext=7),
        runtime("cudaMemcpyAsync", ts=3, dur=1, corr=2),
        runtime("cudaMemsetAsync", ts=5, dur=1, corr=3),
        cpu_op("aten::mm", ts=0.5, dur=2, ext=7),
        python_frame("model.py(1): forward", ts=0, dur=20),
        annotation("ProfilerStep#1", ts=0, dur=20),
    ]
    t = load_trace(kineto_trace(events))
    ev = t.events
    counts = {k: int(np.sum(ev.kind == k)) for k in Kind}
    assert counts == {
        Kind.KERNEL: 1,
        Kind.MEMCPY: 1,
        Kind.MEMSET: 1,
        Kind.GPU_ANNOTATION: 1,
        Kind.LAUNCH: 1,
        Kind.GRAPH_LAUNCH: 0,
        Kind.RUNTIME: 2,
        Kind.CPU_OP: 1,
        Kind.PYTHON: 1,
        Kind.ANNOTATION: 1,
        Kind.LIBRARY: 0,
    }
    k = only(t, Kind.KERNEL)
    assert (ev.device[k], ev.stream[k], ev.correlation[k], ev.external_id[k]) == (0, 7, 1, 7)
    m = only(t, Kind.MEMCPY)
    assert (ev.bytes[m], ev.copy_kind[m]) == (4096, CopyKind.D2H)
    s = only(t, Kind.MEMSET)
    assert (ev.bytes[s], ev.copy_kind[s]) == (128, CopyKind.OTHER)
    lr = only(t, Kind.LAUNCH)
    assert (ev.device[lr], ev.stream[lr], ev.pid[lr], ev.tid[lr]) == (NONE, NONE, 100, 1)
    assert ev.external_id[only(t, Kind.CPU_OP)] == 7
    assert ev.bytes[lr] == 0  # bytes only on copies
    assert t.has_device_activity


def test_legacy_2021_categories(kineto_trace):
    events = [
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 1074,
            "tid": 1074,
            "ts": 100,
            "dur": 5,
            "args": {"correlation": 11, "external id": 3},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "legacy_kernel",
            "pid": 0,
            "tid": 7,
            "ts": 110,
            "dur": 10,
            "args": {"device": 0, "stream": 7, "correlation": 11, "external id": 3},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "pid": 0,
            "tid": 7,
            "ts": 121,
            "dur": 2,
            "args": {"device": 0, "stream": 7, "bytes": 64},
        },
        {
            "ph": "X",
            "cat": "Operator",
            "name": "aten::add",
            "pid": 1074,
            "tid": 1074,
            "ts": 99,
            "dur": 7,
            "args": {"external id": 3},
        },
        flow(100, 11, "s", cat="async_gpu"),
        flow(110, 11, "f", cat="async_gpu", pid=0, tid=7),
    ]
    t = load_trace(kineto_trace(events, distributedInfo={"rank": 1}))
    ev = t.events
    k, lr, m, op = only(t, Kind.KERNEL), only(t, Kind.LAUNCH), only(t, Kind.MEMCPY), only(t, Kind.CPU_OP)
    assert ev.external_id[k] == ev.external_id[lr] == ev.external_id[op] == 3
    assert ev.correlation[k] == ev.correlation[lr] == 11
    assert (ev.bytes[m], ev.copy_kind[m]) == (64, CopyKind.H2D)
    assert t.meta.flows == 2 and t.meta.skipped == {}
    assert t.meta.rank == 1 and t.meta.world_size is None


def test_gpu_op_device_and_stream_fall_back_to_pid_tid(kineto_trace):
    ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 3, "tid": 21, "ts": 1, "dur": 1, "args": {}}
    t = load_trace(kineto_trace([ev]))
    assert (t.events.device[0], t.events.stream[0]) == (3, 21)
    assert [d.index for d in t.meta.devices] == [3]


def test_string_thread_ids_do_not_collide(kineto_trace):
    events = [
        cpu_op("a", ts=1, tid="stream 7"),
        cpu_op("b", ts=2, tid="stream 8"),
        cpu_op("c", ts=3, tid="12"),
        cpu_op("d", ts=4, tid="stream 7"),
    ]
    tid = load_trace(kineto_trace(events)).events.tid.tolist()
    assert tid[2] == 12
    assert tid[0] == tid[3] != tid[1]
    assert min(tid[0], tid[1]) < NONE  # never a real id, never NONE


@pytest.mark.parametrize(
    "name, kind",
    [
        ("cudaLaunchKernel", Kind.LAUNCH),
        ("cudaLaunchKernelExC", Kind.LAUNCH),
        ("cudaLaunchKernelExC_v11060", Kind.LAUNCH),
        ("cudaLaunchCooperativeKernel", Kind.LAUNCH),
        ("cudaLaunchKernel_v7000", Kind.LAUNCH),
        ("cuLaunchKernel", Kind.LAUNCH),
        ("cuLaunchKernel_ptsz", Kind.LAUNCH),
        ("cuLaunchKernelEx", Kind.LAUNCH),
        ("hipLaunchKernel", Kind.LAUNCH),
        ("hipExtModuleLaunchKernel", Kind.LAUNCH),
        ("hipModuleLaunchKernel", Kind.LAUNCH),
        ("cudaGraphLaunch", Kind.GRAPH_LAUNCH),
        ("cudaGraphLaunch_v10000", Kind.GRAPH_LAUNCH),
        ("hipGraphLaunch", Kind.GRAPH_LAUNCH),
        ("cudaMemcpyAsync", Kind.RUNTIME),
        ("hipMemcpyWithStream", Kind.RUNTIME),
        ("cudaStreamSynchronize", Kind.RUNTIME),
        ("cudaGetDevice", Kind.RUNTIME),
        ("cudaLaunchHostFunc", Kind.RUNTIME),
    ],
)
def test_api_names(name, kind):
    assert classify_api(name) == kind


def test_api_names_through_the_loader(kineto_trace):
    events = [
        launch(ts=1, name="hipLaunchKernel"),
        launch(ts=2, name="hipExtModuleLaunchKernel"),
        launch(ts=3, name="hipGraphLaunch"),
        runtime("hipMemcpyAsync", ts=4),
        runtime("cuLaunchKernel", ts=5, cat="cuda_driver"),
    ]
    t = load_trace(kineto_trace(events))
    assert t.events.kind.tolist() == [Kind.LAUNCH, Kind.LAUNCH, Kind.GRAPH_LAUNCH, Kind.RUNTIME, Kind.LAUNCH]


def test_base_api_name():
    assert base_api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert base_api_name("cuLaunchKernel_ptsz") == "cuLaunchKernel"
    assert base_api_name("cudaMemcpyAsync_ptsz_v7000") == "cudaMemcpyAsync"
    assert base_api_name("hipLaunchKernel") == "hipLaunchKernel"


@pytest.mark.parametrize(
    "name, kind",
    [
        ("Memcpy HtoD (Pageable -> Device)", CopyKind.H2D),
        ("Memcpy DtoH (Device -> Pinned)", CopyKind.D2H),
        ("Memcpy DtoD (Device -> Device)", CopyKind.D2D),
        ("Memcpy PtoP (Device -> Device)", CopyKind.P2P),
        ("CopyHostToDevice", CopyKind.H2D),
        ("CopyDeviceToHost", CopyKind.D2H),
        ("Memcpy", CopyKind.OTHER),
    ],
)
def test_copy_direction(name, kind):
    assert copy_kind_from_name(name) == kind


def test_cpu_only_trace(kineto_trace):
    events = [
        annotation("ProfilerStep#1", ts=0, dur=100),
        cpu_op("aten::mm", ts=1, dur=50),
        python_frame("train.py(3): step", ts=0, dur=90),
    ]
    t = load_trace(kineto_trace(events, deviceProperties=[]))
    assert not t.has_device_activity
    assert t.meta.devices == ()
    assert len(t.events) == 3


# -- event-level problems: skipped and counted ---------------------------------------------


def test_event_level_problems_are_counted_by_reason(kineto_trace):
    good = kernel("good", ts=1, dur=1)
    no_ts = {k: v for k, v in kernel("no_ts", dur=1).items() if k != "ts"}
    no_dur = {k: v for k, v in kernel("no_dur", ts=2).items() if k != "dur"}
    events = [
        good,
        no_ts,
        no_dur,
        kernel("neg", ts=3, dur=-1),
        {"ph": "X", "cat": "mystery", "name": "m", "pid": 1, "tid": 1, "ts": 4, "dur": 1},
        {"ph": "X", "cat": "mystery", "name": "m2", "pid": 1, "tid": 1, "ts": 5, "dur": 1},
        {"ph": "X", "cat": "cuda_sync", "name": "cudaDeviceSynchronize", "pid": 0, "tid": 7, "ts": 6, "dur": 1},
        {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": 1, "tid": 1, "ts": 7, "s": "t"},
        {"ph": "X", "name": "no category", "pid": 1, "tid": 1, "ts": 8, "dur": 1},
    ]
    t = load_trace(kineto_trace(events))
    assert t.names_of(np.arange(len(t.events))) == ["good"]
    sk = t.meta.skipped
    assert sk["missing ts or dur"] == 2
    assert sk["negative duration"] == 1
    assert sk["unknown category: mystery"] == 2
    assert sk["ignored category: cuda_sync"] == 1
    assert sk["instant or other non-duration events"] == 1
    assert sum(v for k, v in sk.items() if k.startswith("unknown category")) == 3  # incl. the missing cat
    assert sum(sk.values()) == len(events) - 1


def test_wrong_types_do_not_stop_the_load(kineto_trace):
    events = [
        kernel("good", ts=1, dur=1, corr=1),
        kernel("bad_args", ts=2, dur=1, corr="abc"),  # args salvaged: the event is kept
        {"ph": "X", "cat": "kernel", "name": "str_ts", "pid": 0, "tid": 7, "ts": "3", "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "bool_dur", "pid": 0, "tid": 7, "ts": 4, "dur": True},
        {"ph": "X", "cat": "kernel", "name": "list_pid", "pid": [0], "tid": 7, "ts": 5, "dur": 1},
        "not an event",
        17,
        {"ph": "X", "cat": "kernel", "name": "args_list", "pid": 0, "tid": 7, "ts": 6, "dur": 1, "args": [1, 2]},
    ]
    t = load_trace(kineto_trace(events))
    names = t.names_of(np.arange(len(t.events)))
    assert "good" in names and "bad_args" in names and "args_list" in names
    assert not {"str_ts", "bool_dur", "list_pid"} & set(names)
    sk = t.meta.skipped
    # malformed events are located: their indices in traceEvents follow the reason
    assert sk["not an object at traceEvents[5, 6]"] == 2
    assert sk["malformed fields at traceEvents[4]"] == 1  # the list pid
    assert sk["ts or dur not a number"] == 2  # a string ts, a boolean dur
    assert sk["malformed args (event kept)"] == 2
    bad = names.index("bad_args")
    assert t.events.correlation[bad] == NONE and t.events.stream[bad] == 7  # stream kept


def test_out_of_range_numbers_are_skipped(kineto_trace):
    events = [
        kernel("ok", ts=1, dur=1),
        kernel("huge_ts", ts=1e300, dur=1),
        kernel("huge_int_ts", ts=123456789012345678901234567890, dur=1),
        kernel("huge_dur", ts=2, dur=1e20),
        {"ph": "X", "cat": "cpu_op", "name": "huge_pid", "pid": 99999999999999999999, "tid": 1, "ts": 3, "dur": 1},
        kernel("huge_corr", ts=4, dur=1, corr=2**70),
    ]
    t = load_trace(kineto_trace(events))
    names = t.names_of(np.arange(len(t.events)))
    assert "ok" in names
    assert not {"huge_ts", "huge_int_ts", "huge_dur", "huge_pid"} & set(names)
    # 1e300 µs, a 30-digit integer µs and a 1e20 µs duration: all read exactly, all too large
    assert t.meta.skipped["timestamp out of range"] == 3
    assert t.meta.skipped["malformed fields at traceEvents[4]"] == 1  # an integer pid beyond int64
    assert t.meta.skipped["malformed args (event kept)"] == 1
    assert "huge_corr" in names and t.events.correlation[names.index("huge_corr")] == NONE
    assert int(t.events.end_ns.max()) < 2**62


# -- whole-file problems -----------------------------------------------------------------


def _write(tmp_path, name, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"


def bad_files(tmp_path) -> dict[str, tuple[str, str]]:
    """name -> (path, a word the one-line message must contain)."""
    full = gzip.compress(b'{"traceEvents": [' + b'{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1},' * 200 + b"]}")
    return {
        "truncated gzip": (_write(tmp_path, "trunc.json.gz", full[: len(full) // 2]), "gzip"),
        "invalid json": (_write(tmp_path, "bad.json", b'{"traceEvents": [{"ph": "X",'), "JSON"),
        "no traceEvents": (_write(tmp_path, "other.json", b'{"hello": 1}'), "traceEvents"),
        "json array": (_write(tmp_path, "array.json", b'[{"ph": "X"}]'), "traceEvents"),
        "traceEvents not a list": (_write(tmp_path, "obj.json", b'{"traceEvents": {"a": 1}}'), "traceEvents"),
        "empty file": (_write(tmp_path, "empty.json", b""), "empty"),
        "empty gzip": (_write(tmp_path, "empty.json.gz", gzip.compress(b"")), "empty"),
        "whitespace": (_write(tmp_path, "blank.json", b"   \n  "), "trace"),
        "png": (_write(tmp_path, "picture.json", PNG), "not a trace"),
        "plain text": (_write(tmp_path, "notes.txt", b"hello, this is not a trace\n"), "not a trace"),
        "nsys-rep": (_write(tmp_path, "profile.nsys-rep", b"\x00\x01binary report" * 10), "nsys export"),
        "directory": (str(tmp_path), "directory"),
        "missing": (str(tmp_path / "nope.json"), "no such file"),
        "sqlite without cuda tables": (_sqlite_without_cuda(tmp_path), "sqlite"),
    }


def _sqlite_without_cuda(tmp_path) -> str:
    import sqlite3

    p = tmp_path / "plain.sqlite"
    con = sqlite3.connect(p)
    con.execute("create table t (a int)")
    con.commit()
    con.close()
    return str(p)


@pytest.mark.parametrize(
    "case",
    [
        "truncated gzip",
        "invalid json",
        "no traceEvents",
        "json array",
        "traceEvents not a list",
        "empty file",
        "empty gzip",
        "whitespace",
        "png",
        "plain text",
        "nsys-rep",
        "directory",
        "missing",
        "sqlite without cuda tables",
    ],
)
def test_whole_file_problems_raise_hostgap_error(tmp_path, case):
    path, word = bad_files(tmp_path)[case]
    with pytest.raises(HostgapError) as info:
        load_trace(path)
    err = info.value
    assert err.source == path
    msg = str(err)
    assert "\n" not in msg and msg.startswith(path)
    assert word.lower() in msg.lower()


def test_load_kineto_direct_reports_non_kineto_json(tmp_path):
    with pytest.raises(HostgapError, match="traceEvents"):
        load_kineto(_write(tmp_path, "x.json", b'{"schemaVersion": 1}'))


def test_sniff_from_content_not_name(tmp_path, kineto_trace):
    gz = kineto_trace([kernel("k", ts=1)], gz=True)
    renamed = tmp_path / "trace.bin"
    renamed.write_bytes(open(gz, "rb").read())
    assert sniff(str(renamed)) == "kineto"
    assert len(load_trace(str(renamed)).events) == 1


# -- batching and gzip framing -------------------------------------------------------------


def test_batches_share_names_and_counts(kineto_trace, monkeypatch):
    import hostgap.readers.kineto as kineto_mod

    events = []
    for i in range(50):
        events += [
            launch(ts=10 * i, dur=1, corr=i),
            kernel(f"k{i % 3}", ts=10 * i + 5, dur=2, corr=i),
            flow(10 * i, i, "s"),
            process_name(100, "python"),
        ]
    events[37] = {"ph": "X", "cat": "kernel", "name": "k0", "pid": 0, "tid": 7, "ts": "bad", "dur": 1}
    events[89] = kernel("odd_args", ts=1000, dur=1, corr="x")
    whole = load_trace(kineto_trace(events))
    monkeypatch.setattr(kineto_mod, "BATCH", 7)  # many batches, some needing the lenient path
    batched = load_trace(kineto_trace(events))
    for t in (whole, batched):
        assert t.meta.flows == 50 and t.meta.processes == {100: "python"}
        assert t.meta.skipped == {"ts or dur not a number": 1, "malformed args (event kept)": 1}
    assert whole.names_of(np.arange(len(whole.events))) == batched.names_of(np.arange(len(batched.events)))
    for col in ("kind", "start_ns", "dur_ns", "correlation", "device", "stream"):
        assert getattr(whole.events, col).tolist() == getattr(batched.events, col).tolist()


def test_multi_member_gzip_with_padding(tmp_path):
    body = json.dumps({"traceEvents": [kernel("k", ts=1, dur=1)]}).encode()
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(body[:10]) + gzip.compress(body[10:]) + b"\x00" * 8)
    t = load_trace(str(p))
    assert t.names_of(np.arange(len(t.events))) == ["k"]


@pytest.mark.parametrize("cut", [1, 3, 8, 200])
def test_gzip_cut_anywhere_is_one_error(tmp_path, cut):
    body = json.dumps({"traceEvents": [kernel(f"k{i}", ts=i, dur=1) for i in range(300)]}).encode()
    data = gzip.compress(body)
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[:-cut])
    with pytest.raises(HostgapError, match="gzip"):
        load_trace(str(p))


def test_invalid_utf8_inside_an_event_skips_that_event_only(tmp_path):
    p = tmp_path / "utf8.json"
    p.write_bytes(
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ok", "ts": 1, "dur": 1},'
        b'{"ph": "X", "cat": "kernel", "name": "\xff\xfe", "ts": 1, "dur": 1}]}'
    )
    t = load_trace(str(p))
    assert t.names_of(np.arange(len(t.events))) == ["ok"]
    (reason,) = t.meta.skipped
    assert reason.startswith("undecodable event") and reason.endswith(" at traceEvents[1]")
    assert t.meta.skipped[reason] == 1
    assert list(t.meta.extra["skipped_at"].values()) == [[1]]


def test_bogus_gzip_trailer_does_not_allocate_its_size(tmp_path):
    import tracemalloc

    body = json.dumps({"traceEvents": [kernel(f"k{i}", ts=i, dur=1) for i in range(300)]}).encode()
    data = gzip.compress(body)
    p = tmp_path / "bogus.json.gz"
    p.write_bytes(data[: len(data) // 2] + b"\xff\xff\xff\xff")  # cut, ending in "4 GiB"
    tracemalloc.start()
    try:
        with pytest.raises(HostgapError, match="gzip"):
            load_trace(str(p))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20
