"""The event table's contract (hostgap.events): construction, validation, masks, name interning.

Small hand-made columns; each expectation follows from the documented contract.
"""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.events import COLUMNS, NONE, EventTable, Kind, NameTable, SkipCounter, Trace, TraceMeta


def columns(starts, durs=None, kinds=None) -> dict[str, np.ndarray]:
    n = len(starts)
    cols = {c: np.full(n, NONE, dtype=dt) for c, dt in COLUMNS.items()}
    cols["start_ns"] = np.asarray(starts, dtype=np.int64)
    cols["dur_ns"] = np.asarray(durs if durs is not None else [1] * n, dtype=np.int64)
    cols["kind"] = np.asarray(kinds if kinds is not None else [Kind.CPU_OP] * n, dtype=np.int8)
    cols["name"] = np.arange(n, dtype=np.int32)
    cols["bytes"] = np.zeros(n, dtype=np.int64)
    cols["copy_kind"] = np.zeros(n, dtype=np.int8)
    return cols


def test_from_columns_sorts_rows_by_start_stably_and_casts():
    c = columns([30, 10, 20, 10], durs=[1, 2, 3, 4])
    c["tid"] = [1, 2, 3, 4]  # a list: cast to the declared dtype
    t = EventTable.from_columns(c)
    assert t.start_ns.tolist() == [10, 10, 20, 30]
    assert t.dur_ns.tolist() == [2, 4, 3, 1]  # the two rows at 10 keep their order
    assert t.name.tolist() == [1, 3, 2, 0]
    assert t.tid.dtype == np.int64 and t.tid.tolist() == [2, 4, 3, 1]
    assert t.end_ns.tolist() == [12, 14, 23, 31]
    t.validate()


def test_from_columns_keeps_sorted_input_as_is():
    c = columns([1, 2, 2, 5])
    t = EventTable.from_columns(c)
    assert t.name.tolist() == [0, 1, 2, 3]
    # already typed and sorted: the table holds the caller's arrays, no copy
    assert np.shares_memory(t.start_ns, c["start_ns"]) and np.shares_memory(t.name, c["name"])
    assert len(EventTable.from_columns(columns([]))) == 0


def test_require_raises_only_when_the_condition_fails():
    from hostgap.errors import HostgapError
    from hostgap.events import require

    require(True, "trace.json", "never raised")
    with pytest.raises(HostgapError, match="trace.json.*no traceEvents"):
        require(False, "trace.json", "no traceEvents")


def test_from_columns_rejects_missing_and_unequal_columns():
    c = columns([1, 2])
    del c["stream"]
    with pytest.raises(ValueError, match=r"missing event columns: \['stream'\]"):
        EventTable.from_columns(c)
    c = columns([1, 2])
    c["pid"] = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match=r"unequal lengths: \[2, 3\]"):
        EventTable.from_columns(c)


def test_validate_names_each_problem():
    EventTable.empty().validate()
    assert len(EventTable.empty()) == 0
    good = EventTable.from_columns(columns([1, 2, 3]))
    good.validate()
    bad_dtype = EventTable(**{**{c: getattr(good, c) for c in COLUMNS}, "tid": good.tid.astype(np.int32)})
    with pytest.raises(ValueError, match="column tid: dtype int32"):
        bad_dtype.validate()
    bad_shape = EventTable(**{**{c: getattr(good, c) for c in COLUMNS}, "pid": np.zeros(2, np.int64)})
    with pytest.raises(ValueError, match=r"column pid: .* shape \(2,\)"):
        bad_shape.validate()
    unsorted = EventTable(**{**{c: getattr(good, c) for c in COLUMNS}, "start_ns": np.array([3, 1, 2])})
    with pytest.raises(ValueError, match="not sorted"):
        unsorted.validate()
    negative = EventTable(**{**{c: getattr(good, c) for c in COLUMNS}, "dur_ns": np.array([1, -1, 1])})
    with pytest.raises(ValueError, match="negative durations"):
        negative.validate()


def test_take_and_of_kind():
    t = EventTable.from_columns(columns([0, 1, 2, 3], kinds=[Kind.KERNEL, Kind.LAUNCH, Kind.MEMCPY, Kind.CPU_OP]))
    assert t.of_kind(Kind.KERNEL, Kind.MEMCPY).tolist() == [True, False, True, False]
    assert t.of_kind(Kind.PYTHON).tolist() == [False] * 4
    sub = t.take(np.array([3, 1]))
    assert sub.start_ns.tolist() == [3, 1] and sub.kind.tolist() == [Kind.CPU_OP, Kind.LAUNCH]
    assert t.take(t.of_kind(Kind.LAUNCH)).start_ns.tolist() == [1]
    assert t.of_kind().tolist() == [False] * 4 and t.of_kind(Kind.KERNEL, Kind.KERNEL).tolist() == [1, 0, 0, 0]


def test_of_kind_is_isin_on_every_subset():
    rng = np.random.default_rng(3)
    kinds = rng.integers(0, len(Kind), 5000)
    t = EventTable.from_columns(columns(list(range(5000)), kinds=[Kind(int(k)) for k in kinds]))
    for _ in range(40):
        pick = [Kind(int(k)) for k in rng.choice(len(Kind), size=int(rng.integers(1, 5)), replace=True)]
        np.testing.assert_array_equal(t.of_kind(*pick), np.isin(t.kind, np.array(pick, dtype=np.int8)))


def test_trace_names_masks_and_device_activity():
    ev = EventTable.from_columns(columns([0, 1, 2], kinds=[Kind.CPU_OP, Kind.LAUNCH, Kind.MEMSET]))
    ev = EventTable(**{**{c: getattr(ev, c) for c in COLUMNS}, "name": np.array([1, 0, 1], np.int32)})
    t = Trace(ev, ("cudaLaunchKernel", "aten::mm"), TraceMeta("x.json", "kineto"))
    assert t.name_of(0) == "aten::mm" and t.names_of(np.array([1, 2])) == ["cudaLaunchKernel", "aten::mm"]
    assert t.name_mask(lambda s: s.startswith("aten")).tolist() == [True, False, True]
    assert t.has_device_activity  # a memset is device activity
    host_only = Trace(EventTable.from_columns(columns([0], kinds=[Kind.LAUNCH])), ("a",), TraceMeta("y", "kineto"))
    assert not host_only.has_device_activity
    empty = Trace(EventTable.empty(), (), TraceMeta("z", "kineto"))
    assert empty.name_mask(lambda s: True).tolist() == []


def test_name_table_interns_in_first_seen_order():
    nt = NameTable()
    assert nt.code("a") == 0 and nt.code("b") == 1 and nt.code("a") == 0
    assert nt.codes(["c", "a", "c", "d"]).tolist() == [2, 0, 2, 3]
    assert nt.codes([]).dtype == np.int32
    assert nt.names() == ("a", "b", "c", "d")


def test_skip_counter_ignores_zero_counts():
    s = SkipCounter()
    s.add("bad ts")
    s.add("bad ts", 2)
    s.add("no name", 0)
    assert dict(s) == {"bad ts": 3}


def test_end_ns_is_computed_once_and_cannot_be_changed():
    cols = {c: np.zeros(3, dtype=dt) for c, dt in COLUMNS.items()}
    cols["start_ns"] = np.array([0, 5, 10], dtype=np.int64)
    cols["dur_ns"] = np.array([2, 0, 7], dtype=np.int64)
    t = EventTable(**cols)
    assert t.end_ns.tolist() == [2, 5, 17]
    assert t.end_ns is t.end_ns
    with pytest.raises(ValueError):
        t.end_ns[0] = 99
