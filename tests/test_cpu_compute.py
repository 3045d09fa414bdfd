"""The CPU-compute analogue of device-active time (anatomy/timeline.py:cpu_compute_mask)."""

import numpy as np

from anatomy_builders import Timeline
from hostgap.anatomy.steps import analyze
from hostgap.anatomy.timeline import cpu_compute_mask, totals

US = 1000


def linear_step() -> Timeline:
    """One step: aten::linear [10, 60] -> aten::t [11, 12] (metadata) and aten::addmm [15, 55]
    -> aten::expand [16, 17] (metadata), aten::copy_ [18, 22]; then aten::mean [70, 90] ->
    aten::sum [72, 80], aten::div_ [82, 86]; then aten::view [95, 96] alone."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 100)
    t.op("aten::linear", 10, 50)
    t.op("aten::t", 11, 1)
    t.op("aten::addmm", 15, 40)
    t.op("aten::expand", 16, 1)
    t.op("aten::copy_", 18, 4)
    t.op("aten::mean", 70, 20)
    t.op("aten::sum", 72, 8)
    t.op("aten::div_", 82, 4)
    t.op("aten::view", 95, 1)
    return t


def test_kernel_bearing_ops_count_wrappers_and_metadata_do_not(tmp_path):
    t = linear_step()
    t.op("aten::add", 97, 2)  # a plain compute op: no children at all
    trace = t.load(tmp_path)
    names = set(trace.names_of(np.flatnonzero(cpu_compute_mask(trace))))
    # addmm and mean compute in their own bodies; their copy_/sum/div_ children lie inside them
    assert names == {"aten::addmm", "aten::mean", "aten::add"}


def test_cpu_compute_union_and_step_split(tmp_path):
    trace = linear_step().load(tmp_path)
    tot = totals(trace)
    assert tot.activity == "cpu-compute"
    assert tot.busy_ns == (40 + 20) * US  # addmm [15, 55] and mean [70, 90]; children inside
    step = analyze(trace).steps[0]
    assert step["gpu_active_ns"] == 60 * US
    assert step["host_exposed_ns"] == step["wall_ns"] - 60 * US
    assert not step["queued"]


def test_nested_counted_ops_are_not_counted_twice(tmp_path):
    trace = linear_step().load(tmp_path)
    mask = cpu_compute_mask(trace)
    assert set(trace.names_of(np.flatnonzero(mask))) == {"aten::addmm", "aten::mean"}
    tot = totals(trace)
    assert tot.kernel_sum_ns == tot.kernel_union_ns == 60 * US
