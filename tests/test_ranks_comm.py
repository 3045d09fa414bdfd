"""The communication class per step, on hand-built traces (values derived by hand)."""

from __future__ import annotations

from conftest import annotation, cpu_op, kernel, launch
from hostgap.anatomy.collectives import TYPES
from hostgap.anatomy.comm import step_comm
from hostgap.readers import load_trace

AR, SR = TYPES.index("allreduce"), TYPES.index("sendrecv")
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_bf16"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def test_collectives_numbered_per_step_and_type(kineto_trace):
    """Step 0 (0-100 µs) launches all-reduce (10-15), send/recv (20-25), all-reduce (30-35) and a
    gemm (40-60); step 1 (100-200) an all-reduce (110-112). Sorted by step, type, start:
    (0, AR, #0, 10), (0, AR, #1, 30), (0, SR, #0, 20), (1, AR, #0, 110)."""
    ev = [annotation("ProfilerStep#1", ts=0, dur=100), annotation("ProfilerStep#2", ts=100, dur=100)]
    for corr, (name, ts, dur, at) in enumerate(
        [
            (ALLREDUCE, 10, 5, 1),
            (SENDRECV, 20, 5, 2),
            (ALLREDUCE, 30, 5, 3),
            ("gemm", 40, 20, 4),
            (ALLREDUCE, 110, 2, 101),
        ],
        start=1,
    ):
        ev += [launch(ts=at, dur=0.5, corr=corr), kernel(name, ts=ts, dur=dur, corr=corr)]
    c = step_comm(load_trace(kineto_trace(ev)))
    assert c.coll_step.tolist() == [0, 0, 0, 1]
    assert c.coll_type.tolist() == [AR, AR, SR, AR]
    assert c.coll_ordinal.tolist() == [0, 1, 0, 0]
    assert c.coll_start_ns.tolist() == [10_000, 30_000, 20_000, 110_000]
    assert c.coll_dur_ns.tolist() == [5_000, 5_000, 5_000, 2_000]
    assert c.comm_count.tolist() == [3, 1]
    assert c.comm_active_ns.tolist() == [15_000, 2_000] and c.compute_active_ns.tolist() == [20_000, 0]
    assert c.comm_overlap_ns.tolist() == [0, 0]
    assert c.step_dict(1) == {"compute_active_ns": 0, "comm_active_ns": 2_000, "comm_overlap_ns": 0, "comm_count": 1}


def test_ops_launched_outside_every_step_are_not_counted(kineto_trace):
    """The all-reduce is launched at 150 µs, after the only step (0-100) ended: no step has it."""
    ev = [
        annotation("ProfilerStep#1", ts=0, dur=100),
        launch(ts=150, dur=1, corr=1),
        kernel(ALLREDUCE, ts=160, dur=5, corr=1),
        launch(ts=10, dur=1, corr=2),
        kernel("gemm", ts=20, dur=10, corr=2),
    ]
    c = step_comm(load_trace(kineto_trace(ev)))
    assert c.comm_count.tolist() == [0] and c.comm_active_ns.tolist() == [0] and len(c.coll_step) == 0
    assert c.compute_active_ns.tolist() == [10_000]


def test_gloo_on_a_cpu_only_trace(kineto_trace):
    """CPU-only: aten::mm 10-40 µs on one thread, gloo:all_reduce 30-60 µs on another, in a
    0-100 µs step: compute 30, communication 30, overlap 10 (30-40)."""
    ev = [
        annotation("ProfilerStep#1", ts=0, dur=100),
        cpu_op("aten::mm", ts=10, dur=30),
        cpu_op("gloo:all_reduce", ts=30, dur=30, tid=2),
    ]
    c = step_comm(load_trace(kineto_trace(ev)))
    assert (c.compute_active_ns.tolist(), c.comm_active_ns.tolist(), c.comm_overlap_ns.tolist()) == (
        [30_000],
        [30_000],
        [10_000],
    )
    assert c.coll_type.tolist() == [AR]
