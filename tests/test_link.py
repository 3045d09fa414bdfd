"""Links: launch → GPU op(s) (one-to-many for graphs), launch → innermost op → top-level op →
Python frame, and GPU ops without a launch partner (kept and counted)."""

from __future__ import annotations

import numpy as np

from conftest import cpu_op, kernel, launch, memcpy, python_frame, runtime
from hostgap.anatomy.link import Nesting, link
from hostgap.events import NONE, Kind
from hostgap.readers import load_trace


def row(trace, name, kind=None):
    hits = [
        i
        for i in range(len(trace.events))
        if trace.name_of(i) == name and (kind is None or trace.events.kind[i] == kind)
    ]
    assert len(hits) == 1, (name, hits)
    return hits[0]


def test_launch_op_top_op_frame_chain(kineto_trace):
    events = [
        python_frame("<built-in method forward>", ts=0, dur=100),
        python_frame("model.py(20): layer", ts=1, dur=50),
        cpu_op("aten::linear", ts=2, dur=40),
        cpu_op("aten::addmm", ts=3, dur=30),
        cpu_op("aten::empty", ts=4, dur=1),  # a sibling that ends before the launch
        launch(ts=10, dur=4, corr=1),
        kernel("gemm", ts=20, dur=5, corr=1),
        cpu_op("aten::relu", ts=60, dur=10),  # frame: only the outer python frame encloses it
        launch(ts=62, dur=2, corr=2),
        kernel("relu", ts=70, dur=1, corr=2),
        launch(ts=200, dur=2, corr=3),  # no op, no frame
        kernel("bare", ts=210, dur=1, corr=3),
    ]
    t = load_trace(kineto_trace(events))
    lk = link(t)
    launches = np.flatnonzero(t.events.kind == Kind.LAUNCH)
    l1, l2, l3 = (int(r) for r in launches)  # rows sorted by start
    assert lk.launch_of[row(t, "gemm")] == l1
    assert lk.launch_of[row(t, "relu", Kind.KERNEL)] == l2
    assert lk.launch_of[row(t, "bare")] == l3
    assert lk.op_of[l1] == row(t, "aten::addmm")
    assert lk.top_op_of[l1] == row(t, "aten::linear")
    assert lk.op_of[l2] == lk.top_op_of[l2] == row(t, "aten::relu")
    assert lk.op_of[l3] == lk.top_op_of[l3] == NONE
    assert lk.frame_of[row(t, "aten::linear")] == row(t, "model.py(20): layer")  # innermost frame
    assert lk.frame_of[row(t, "aten::relu")] == row(t, "<built-in method forward>")
    assert lk.frame_of[row(t, "aten::addmm")] == NONE  # frames are linked for top-level ops
    assert lk.unlinked_gpu_ops == 0
    assert lk.gpu_ops_of_launch[[l1, l2, l3]].tolist() == [1, 1, 1]


def test_ops_on_another_thread_do_not_enclose(kineto_trace):
    events = [
        cpu_op("aten::mm", ts=0, dur=100, tid=2),
        launch(ts=10, dur=1, corr=1, tid=1),
        kernel("k", ts=20, dur=1, corr=1),
    ]
    t = load_trace(kineto_trace(events))
    lk = link(t)
    assert lk.op_of[row(t, "cudaLaunchKernel")] == NONE


def test_partial_overlap_is_not_enclosure(kineto_trace):
    events = [cpu_op("aten::a", ts=0, dur=10), launch(ts=9, dur=3, corr=1), kernel("k", ts=20, dur=1, corr=1)]
    t = load_trace(kineto_trace(events))
    assert link(t).op_of[row(t, "cudaLaunchKernel")] == NONE


def test_kernels_without_launch_partner_are_kept_and_counted(kineto_trace):
    events = [
        launch(ts=1, dur=1, corr=1),
        kernel("linked", ts=5, dur=1, corr=1),
        kernel("orphan", ts=7, dur=1, corr=2),
        kernel("no_corr", ts=9, dur=1),
        memcpy(ts=11, dur=1, corr=77),
    ]
    t = load_trace(kineto_trace(events))
    lk = link(t)
    assert np.sum(t.events.kind == Kind.KERNEL) == 3  # nothing dropped
    assert lk.unlinked_gpu_ops == 3
    assert lk.launch_of[row(t, "orphan")] == NONE and lk.launch_of[row(t, "no_corr")] == NONE


def test_graph_launch_one_to_many(kineto_trace):
    n = 421
    events = [runtime("cudaGraphLaunch", ts=0, dur=30, corr=9)]
    events += [kernel(f"k{i}", ts=50 + 2 * i, dur=1, corr=9) for i in range(n)]
    events += [runtime("cudaStreamSynchronize", ts=40, dur=900, corr=10)]
    t = load_trace(kineto_trace(events))
    lk = link(t)
    g = row(t, "cudaGraphLaunch")
    assert t.events.kind[g] == Kind.GRAPH_LAUNCH
    kernels = np.flatnonzero(t.events.kind == Kind.KERNEL)
    assert (lk.launch_of[kernels] == g).all()
    assert lk.gpu_ops_of_launch[g] == n
    assert lk.gpu_ops_of_launch[row(t, "cudaStreamSynchronize")] == 0
    assert lk.unlinked_gpu_ops == 0


def test_copy_linked_to_its_runtime_call(kineto_trace):
    events = [runtime("cudaMemcpyAsync", ts=1, dur=2, corr=5), memcpy(ts=4, dur=1, corr=5, nbytes=8)]
    t = load_trace(kineto_trace(events))
    lk = link(t)
    assert lk.launch_of[row(t, "Memcpy HtoD (Pageable -> Device)")] == row(t, "cudaMemcpyAsync")


def test_external_id_kept_for_op_launch_kernel(kineto_trace):
    events = [
        cpu_op("aten::mm", ts=0, dur=10, ext=55),
        launch(ts=2, dur=1, corr=1, ext=55),
        kernel("k", ts=5, dur=1, corr=1, ext=55),
    ]
    t = load_trace(kineto_trace(events))
    assert set(t.events.external_id.tolist()) == {55}


def test_nesting_deep_and_many_threads():
    # a synthetic trace: 3 threads, each a chain of 40 nested ops and a leaf query per level
    from hostgap.events import EventTable, Trace, TraceMeta

    rows = []
    for th in range(3):
        for depth in range(40):
            rows.append((th, depth * 10, 10_000 - depth * 10))
    n = len(rows)
    cols = {
        c: np.zeros(n, dtype=np.int64)
        for c in ("pid", "device", "stream", "correlation", "link_key", "external_id", "bytes", "copy_kind")
    }
    cols.update(
        kind=np.full(n, Kind.CPU_OP),
        tid=np.array([r[0] for r in rows]),
        start_ns=np.array([r[1] for r in rows]),
        dur_ns=np.array([r[2] - r[1] for r in rows]),
        name=np.arange(n),
    )
    t = Trace(EventTable.from_columns(cols), tuple(f"op{i}" for i in range(n)), TraceMeta("synthetic", "kineto"))
    nest = Nesting.build(t, np.ones(n, dtype=bool))
    depth = np.zeros(len(nest.rows), dtype=int)
    for i in range(len(nest.rows)):
        p = nest.parent[i]
        while p >= 0:
            depth[i] += 1
            p = nest.parent[p]
    assert sorted(depth.tolist()) == sorted(list(range(40)) * 3)
    assert (nest.rows[nest.root] == nest.rows[nest.root[nest.root]]).all()
    q_thread = np.array([0, 1, 2, 2])
    q_start = np.array([395, 5, 0, 20_000])
    q_end = q_start + 1
    pos = nest.innermost(q_thread, q_start, q_end)
    assert nest.start[pos[0]] == 390 and nest.thread[pos[0]] == 0
    assert nest.start[pos[1]] == 0 and nest.thread[pos[1]] == 1
    assert nest.start[pos[2]] == 0
    assert pos[3] == NONE


def test_row_links_are_int32_below_two_to_the_31_rows(kineto_trace):
    from hostgap.anatomy.link import row_dtype

    assert row_dtype(0) == np.int32 and row_dtype(2**31 - 1) == np.int32
    assert row_dtype(2**31) == np.int64  # a row index past int32, and NONE, still fit
    events = [cpu_op("aten::mm", ts=0, dur=10), launch(ts=1, dur=2, corr=1), kernel("k", ts=5, dur=1, corr=1)]
    lk = link(load_trace(kineto_trace(events)))
    for a in (lk.launch_of, lk.gpu_ops_of_launch, lk.op_of, lk.top_op_of, lk.frame_of, lk.ops.rows, lk.ops.parent):
        assert a.dtype == np.int32
    assert lk.ops.root.dtype == np.int32
    assert (lk.frame_of == NONE).all() and lk.gpu_ops_of_launch.sum() == 1


def test_no_python_frames_no_frame_links_and_no_memory_for_them(kineto_trace):
    events = [cpu_op("aten::mm", ts=0, dur=10), launch(ts=1, dur=2, corr=1), kernel("k", ts=5, dur=1, corr=1)]
    t = load_trace(kineto_trace(events))
    lk = link(t)
    assert len(lk.frame_of) == len(t.events) and (lk.frame_of == NONE).all()
    assert lk.frame_of.dtype == np.int32 and not lk.frame_of.flags.writeable
    assert lk.frame_of.strides == (0,)  # one value for every row
    # with a frame: a real row array, the op's frame in it
    lk = link(load_trace(kineto_trace([python_frame("f", ts=0, dur=20), *events])))
    assert lk.frame_of.strides == (4,) and (lk.frame_of >= 0).sum() == 1
