"""Property-based tests: mutated Kineto traces never raise anything but HostgapError, and the
analyze document keeps its invariants over generated timelines (METHOD.md §1)."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budget import examples
from conftest import annotation, cpu_op, gpu_annotation, kernel, launch, memcpy, memset, python_frame, runtime
from hostgap.anatomy.overview import overview
from hostgap.errors import HostgapError
from hostgap.readers import load_trace

FUZZ = settings(**examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def base_events() -> list[dict]:
    return [
        python_frame("model.py(1): forward", ts=0, dur=100),
        annotation("ProfilerStep#1", ts=0, dur=100),
        cpu_op("aten::mm", ts=1, dur=10, ext=3),
        launch(ts=2, dur=3, corr=1, ext=3),
        runtime("cudaMemcpyAsync", ts=6, dur=1, corr=2),
        launch(ts=8, dur=1, corr=3, name="hipGraphLaunch"),
        kernel("gemm", ts=10.5, dur=5.25, corr=1, ext=3),
        memcpy(ts=16, dur=1, nbytes=64, corr=2),
        memset(ts=18, dur=1, nbytes=8, stream=8),
        kernel("k1", ts=20, dur=2, corr=3),
        kernel("k2", ts=23, dur=2, corr=3, stream=8),
        gpu_annotation("ProfilerStep#1", ts=9, dur=20),
        {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 100, "tid": 1, "ts": 2},
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
    ]


TOP = {
    "baseTimeNanoseconds": 1767189312000000000,
    "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
    "distributedInfo": {"rank": 0, "world_size": 2},
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**63 - 1, 2**63, -(2**63), 2**64, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 1e-320, 5e-324, 0.0005, 9.2e15]),
    st.text(max_size=12),
    st.sampled_from(["NaN", "nan", "Infinity", "-inf", "", "12", "1.5", "\u00b2", "\U0001f600", "\ud7ff"]),
)
garbage = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)
FIELDS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args", "id"]
ARG_KEYS = ["correlation", "External id", "external id", "device", "stream", "bytes", "name"]


@st.composite
def mutation(draw):
    what = draw(st.sampled_from(["drop", "set", "set_arg", "drop_arg", "insert", "top", "unicode_name"]))
    return (
        what,
        draw(st.integers(0, 100)),
        draw(st.sampled_from(FIELDS)),
        draw(st.sampled_from(ARG_KEYS)),
        draw(garbage),
    )


def apply(doc: dict, mutations) -> dict:
    events = doc["traceEvents"]
    for what, i, field, arg, value in mutations:
        ev = events[i % len(events)] if events else {}
        if not isinstance(ev, dict):  # an inserted garbage value: mutate a throwaway instead
            ev = {}
        if what == "drop":
            ev.pop(field, None)
        elif what == "set":
            ev[field] = value
        elif what == "set_arg":
            if isinstance(ev.get("args"), dict):
                ev["args"][arg] = value
            else:
                ev["args"] = {arg: value}
        elif what == "drop_arg" and isinstance(ev.get("args"), dict):
            ev["args"].pop(arg, None)
        elif what == "insert":
            events.insert(i % (len(events) + 1), value)
        elif what == "top":
            doc[["baseTimeNanoseconds", "deviceProperties", "distributedInfo", "traceEvents"][i % 4]] = value
            if not isinstance(doc.get("traceEvents"), list):
                return doc
            events = doc["traceEvents"]
        elif what == "unicode_name":
            ev["name"] = "\u03bc\u00e9\U0001f680 " + str(value)[:20]
    return doc


def load_bytes(data: bytes):
    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return load_trace(path)
    finally:
        os.unlink(path)


def check_loaded(trace) -> None:
    trace.events.validate()
    assert int(trace.events.name.max(initial=-1)) < len(trace.names)
    assert all(v > 0 for v in trace.meta.skipped.values())
    doc = overview(trace)
    check_document(doc)
    json.dumps(doc)


@FUZZ
@given(st.lists(mutation(), min_size=1, max_size=6))
def test_mutated_traces_raise_only_hostgap_error(mutations):
    doc = apply({**json.loads(json.dumps(TOP)), "traceEvents": base_events()}, mutations)
    try:
        data = json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return
    try:
        trace = load_bytes(data)
    except HostgapError as e:
        assert "\n" not in str(e)
        return
    check_loaded(trace)


@FUZZ
@given(st.binary(max_size=64), st.integers(0, 2000))
def test_byte_level_corruption(junk, cut):
    data = json.dumps({**TOP, "traceEvents": base_events()}).encode()
    data = data[:cut] + junk + data[cut:]
    try:
        trace = load_bytes(data)
    except HostgapError:
        return
    check_loaded(trace)


# -- invariants over generated timelines -------------------------------------------------------

op_kinds = st.sampled_from(["kernel", "kernel", "kernel", "memcpy", "memset"])


@st.composite
def timeline(draw):
    n = draw(st.integers(1, 40))
    events, ops = [], []
    for i in range(n):
        start = draw(st.integers(0, 200_000))  # ns
        dur = draw(st.integers(0, 30_000))
        dev = draw(st.integers(0, 1))
        stream = draw(st.sampled_from([7, 8, 20]))
        kind = draw(op_kinds)
        linked = draw(st.booleans())
        corr = i + 1 if linked else None
        ts, du = start / 1000, dur / 1000
        if kind == "kernel":
            events.append(kernel(f"k{i % 4}", ts=ts, dur=du, corr=corr, device=dev, stream=stream))
        elif kind == "memcpy":
            events.append(
                memcpy(ts=ts, dur=du, nbytes=draw(st.integers(0, 1 << 20)), corr=corr, device=dev, stream=stream)
            )
        else:
            events.append(memset(ts=ts, dur=du, corr=corr, device=dev, stream=stream))
        if linked:
            lstart = draw(st.integers(max(0, start - 50_000), start))
            events.append(launch(ts=lstart / 1000, dur=draw(st.integers(0, 5_000)) / 1000, corr=corr))
        ops.append((dev, start, start + dur, kind))
    for j in range(draw(st.integers(0, 3))):
        lo = draw(st.integers(0, 200_000))
        hi = draw(st.integers(lo, 250_000))
        maker = draw(st.sampled_from([annotation, gpu_annotation]))
        events.append(maker(f"ProfilerStep#{j}", ts=lo / 1000, dur=(hi - lo) / 1000))
    return events, ops


def naive_union(intervals) -> int:
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


def check_document(doc: dict) -> None:
    for entry in doc["devices"] + doc["windows"]:
        assert entry["kernel_union_ns"] <= entry["kernel_sum_ns"]
        assert entry["busy_ns"] <= entry["kernel_sum_ns"] + entry["memcpy_ns"] + entry["memset_ns"]
        assert entry["kernel_union_ns"] <= entry["busy_ns"]
        assert entry["idle_ns"] == entry["span_ns"] - entry["busy_ns"] >= 0
    for d in doc["devices"]:
        g = d["idle_gaps"]
        assert min(g["count"].values()) >= 0 and min(g["total_ns"].values()) >= 0


@settings(**examples(100), deadline=None)
@given(timeline(), st.integers(1, 100_000))
def test_document_invariants(tl, threshold_ns):
    events, ops = tl
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"traceEvents": events}, f)
    try:
        doc = overview(load_trace(path), gap_threshold_ns=threshold_ns)
    finally:
        os.unlink(path)
    check_document(doc)
    by_dev = {d["device"]: d for d in doc["devices"]}
    assert set(by_dev) == {o[0] for o in ops}
    for dev, d in by_dev.items():
        mine = [o for o in ops if o[0] == dev]
        ker = [(s, e) for _, s, e, k in mine if k == "kernel"]
        assert d["busy_ns"] == naive_union([(s, e) for _, s, e, _ in mine])
        assert d["kernel_union_ns"] == naive_union(ker)
        assert d["kernel_sum_ns"] == sum(e - s for s, e in ker)
        assert d["kernel_count"] == len(ker)
        assert d["span_ns"] == max(e for _, _, e, _ in mine) - min(s for _, s, _, _ in mine)
        assert d["idle_gaps"]["threshold_ns"] == threshold_ns
    for w in doc["windows"]:
        lo, hi = w["start_ns"], w["end_ns"]
        mine = [(max(s, lo), min(e, hi)) for dev, s, e, _ in ops if dev == w["device"] and min(e, hi) > max(s, lo)]
        assert w["span_ns"] == hi - lo
        assert w["busy_ns"] == naive_union(mine)


@settings(**examples(100), deadline=None)
@given(st.integers(0, 2**43), st.integers(0, 999))
def test_float_us_timestamps_to_ns(us, frac_ns):
    """Exact below 2**41 µs (~25 days of uptime on Kineto's clock), within 1 ns up to 2**43 µs:
    the float64 the file's decimal parses to is the limit, not the conversion."""
    ts_text = f"{us}.{frac_ns:03d}"  # what a profiler writes: µs with 3 decimals
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        f.write(
            '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
            f'"ts": {ts_text}, "dur": 0.001}}]}}'
        )
    try:
        t = load_trace(path)
    finally:
        os.unlink(path)
    ns = us * 1000 + frac_ns
    got = int(t.events.start_ns[0])
    if us < 2**41:
        assert got == ns
    else:
        assert abs(got - ns) <= 1
    assert np.array_equal(t.events.dur_ns, [1])
