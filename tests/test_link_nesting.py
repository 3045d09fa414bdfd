"""Links on hand-built event tables: nesting with ties (zero-length and touching intervals),
roots and children, innermost enclosure, and the launch join scoped by link key."""

from __future__ import annotations

import numpy as np

from hostgap.anatomy.link import Nesting, link
from hostgap.events import COLUMNS, NONE, EventTable, Kind, Trace, TraceMeta


def table(rows: list[dict]) -> Trace:
    """rows: dicts with kind, start, dur and optional tid, corr, key (the link key)."""
    n = len(rows)
    cols = {c: np.full(n, NONE, dtype=dt) for c, dt in COLUMNS.items()}
    cols["kind"] = np.array([r["kind"] for r in rows], np.int8)
    cols["start_ns"] = np.array([r["start"] for r in rows], np.int64)
    cols["dur_ns"] = np.array([r["dur"] for r in rows], np.int64)
    cols["tid"] = np.array([r.get("tid", 1) for r in rows], np.int64)
    cols["correlation"] = np.array([r.get("corr", NONE) for r in rows], np.int64)
    cols["link_key"] = np.array([r.get("key", NONE) for r in rows], np.int64)
    cols["name"] = np.arange(n, dtype=np.int32)
    cols["bytes"] = np.zeros(n, np.int64)
    cols["copy_kind"] = np.zeros(n, np.int8)
    return Trace(EventTable.from_columns(cols), tuple(f"e{i}" for i in range(n)), TraceMeta("t", "kineto"))


def op(start, dur, tid=1):
    return {"kind": Kind.CPU_OP, "start": start, "dur": dur, "tid": tid}


def test_nesting_with_zero_length_and_touching_intervals():
    """Thread 1: A [0, 100] > B [10, 40] > C [10, 10] (zero length at B's start) and
    G [20, 20]; D [40, 60] starts where B ends (B's sibling) > E [45, 50]; F [100, 120] starts
    where A ends (top level). Thread 2: H [5, 15] alone.
    Parents: B, D -> A; C, G -> B; E -> D; A, F, H none."""
    names = ["A", "B", "C", "G", "D", "E", "F", "H"]
    spans = [op(0, 100), op(10, 30), op(10, 0), op(20, 0), op(40, 20), op(45, 5), op(100, 20), op(5, 10, tid=2)]
    t = table(spans)
    nest = Nesting.build(t, np.ones(len(spans), dtype=bool))
    row_name = {int(r): names[int(t.events.name[r])] for r in nest.rows}
    pos_of = {row_name[int(r)]: i for i, r in enumerate(nest.rows)}

    def name_at(pos):
        return None if pos < 0 else row_name[int(nest.rows[pos])]

    parents = {n: name_at(nest.parent[pos_of[n]]) for n in names}
    assert parents == {"A": None, "B": "A", "C": "B", "G": "B", "D": "A", "E": "D", "F": None, "H": None}
    roots = {n: name_at(nest.root[pos_of[n]]) for n in names}
    assert roots == {"A": "A", "B": "A", "C": "A", "G": "A", "D": "A", "E": "A", "F": "F", "H": "H"}
    children = {n for n in names if nest.has_child[pos_of[n]]}
    assert children == {"A", "B", "D"}
    q = nest.innermost(np.array([1, 1, 1, 2, 3]), np.array([41, 46, 130, 6, 6]), np.array([42, 47, 131, 7, 7]))
    assert [name_at(p) for p in q] == ["D", "E", None, "H", None]


def test_improper_overlap_gets_no_parent():
    """X [0, 10] and Y [5, 15] overlap without nesting: Y has no parent."""
    t = table([op(0, 10), op(5, 10)])
    nest = Nesting.build(t, np.ones(2, dtype=bool))
    assert nest.parent.tolist() == [NONE, NONE]


def test_launch_join_is_scoped_by_link_key():
    """Correlation ids repeat across processes (link keys 1 and 2). Launches: L1 (key 1, corr 5),
    L2 (key 2, corr 5), L3 (key 1, corr 7). Kernels: K1 (key 2, corr 5) -> L2; K2 (key 1,
    corr 7) -> L3; K3 (key 1, corr 6), K4 (key 3, corr 5) and K5 (key 2, corr 9): no partner."""
    launch = Kind.LAUNCH
    rows = [
        {"kind": launch, "start": 0, "dur": 1, "corr": 5, "key": 1},
        {"kind": launch, "start": 1, "dur": 1, "corr": 5, "key": 2},
        {"kind": launch, "start": 2, "dur": 1, "corr": 7, "key": 1},
        {"kind": Kind.KERNEL, "start": 10, "dur": 1, "corr": 5, "key": 2},
        {"kind": Kind.KERNEL, "start": 11, "dur": 1, "corr": 7, "key": 1},
        {"kind": Kind.KERNEL, "start": 12, "dur": 1, "corr": 6, "key": 1},
        {"kind": Kind.KERNEL, "start": 13, "dur": 1, "corr": 5, "key": 3},
        {"kind": Kind.KERNEL, "start": 14, "dur": 1, "corr": 9, "key": 2},
    ]  # above key 2's ids
    lk = link(table(rows))
    assert lk.launch_of[3:].tolist() == [1, 2, NONE, NONE, NONE]
    assert lk.gpu_ops_of_launch[:3].tolist() == [0, 1, 1]
    assert lk.unlinked_gpu_ops == 3


def test_join_without_gpu_ops_or_without_host_calls():
    """Only host calls, or only GPU ops: nothing is linked, every GPU op counts as unlinked."""
    calls = [{"kind": Kind.LAUNCH, "start": 0, "dur": 1, "corr": 5, "key": 1}]
    kernels = [
        {"kind": Kind.KERNEL, "start": 2, "dur": 1, "corr": 5, "key": 1},
        {"kind": Kind.KERNEL, "start": 3, "dur": 1, "corr": 6, "key": 1},
    ]
    lk = link(table(calls))
    assert lk.launch_of.tolist() == [NONE] and lk.gpu_ops_of_launch.tolist() == [0] and lk.unlinked_gpu_ops == 0
    lk = link(table(kernels))
    assert lk.launch_of.tolist() == [NONE, NONE] and lk.unlinked_gpu_ops == 2
    lk = link(table([]))
    assert len(lk.launch_of) == 0 and lk.unlinked_gpu_ops == 0
