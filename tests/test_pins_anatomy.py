"""Exact values on hand-built timelines for anatomy numbers that the 60-mutant audit
(bench/results/mutation-audit-anatomy.md) found unpinned. Expected values are worked out by hand
in each docstring (µs, the builder's unit)."""

from __future__ import annotations

import pytest

from anatomy_builders import US, Timeline
from hostgap.anatomy.steps import AnalysisOptions, analyze


def run(t: Timeline, tmp_path, config: AnalysisOptions = AnalysisOptions()) -> dict:
    return analyze(t.load(tmp_path), config).to_dict()


def test_cpu_top_ops_first_op_counts_from_its_step_start_not_the_trace_start(tmp_path):
    """A CPU-only trace whose first step starts 40 µs after the trace does::

        aten::mul [0, 5]                    before any step: not in the table
        ProfilerStep#1 [40, 90]
          aten::linear [50, 70] > aten::addmm [55, 65]   (addmm is compute)

    linear: (50 - 40) since the step start + (20 - 10) outside compute = 20 µs; one step, so
    20 µs per step and the whole share. Counting from the trace start would give 60 µs.
    """
    t = Timeline()
    t.op("aten::mul", 0, 5)
    t.annotation("ProfilerStep#1", 40, 50)
    t.op("aten::linear", 50, 20)
    t.op("aten::addmm", 55, 10)
    doc = run(t, tmp_path)
    assert doc["activity"] == "cpu-compute"
    got = [(r["name"], r["host_ns"], r["host_ns_per_step"], r["launches"], r["share"]) for r in doc["top_ops"]]
    assert got == [("aten::linear", 20 * US, 20 * US, 1, pytest.approx(1.0))]


def test_taxbreak_launch_before_the_first_step_has_no_python_time(tmp_path):
    """One thread, no Python frames::

        cudaLaunchKernel [2, 4] -> k [5, 6]      before the step: no step start, no previous unit
        ProfilerStep#1 [10, 50]
          aten::mul [20, 30]: cudaLaunchKernel [22, 24] -> k [30, 33]

    The early launch is the thread's first unit: T_py counts from nothing, so 0 (not from the
    clock's zero: 2 µs); its dispatch is 0 (it is its own unit). The step's launch: T_py = 20 - 10
    = 10 µs (from the step start), T_dispatch = 22 - 20 = 2 µs; unattributed = window 40 -
    covered [10, 24] = 26 µs.
    """
    t = Timeline()
    t.annotation("ProfilerStep#1", 10, 40)
    t.launch_kernel(2, 2, "k", 5, 1)
    t.op("aten::mul", 20, 10)
    t.launch_kernel(22, 2, "k", 30, 3)
    a = analyze(t.load(tmp_path), AnalysisOptions(launch_floor_ns=1000.0))
    k = a.kernels
    order = k.launch_row.argsort()
    assert k.step[order].tolist() == [-1, 0]
    assert k.t_py_ns[order].tolist() == [0, 10 * US]
    assert k.t_dispatch_ns[order].tolist() == [0, 2 * US]
    assert a.steps[0]["taxbreak"]["unattributed_ns"] == 26 * US


# -- trim: GPU work kept by the kept steps' walls (anatomy/trim.py) -------------------------


def _kept_names(trace, a, b):
    from hostgap.anatomy.trim import trim_rows

    rows = trim_rows(trace, a, b)
    return sorted(trace.names_of(rows))


def test_trim_last_step_wall_ends_with_its_last_gpu_op_not_its_marker(tmp_path):
    """Keeping the last step (steps 1:): its wall runs to the end of the GPU work it launched
    (200 µs), past its marker's end (110 µs); an op launched before the capture that runs at
    150-160 µs lies inside that wall and is kept."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(10, 2, "k_step1", 20, 30)
    t.annotation("ProfilerStep#2", 100, 10)
    t.launch_kernel(102, 2, "k_step2", 105, 95)  # ends at 200
    t.kernel("queued_before_capture", 150, 10, stream=8)  # no launch in the trace
    trace = t.load(tmp_path)
    names = _kept_names(trace, 1, 2)
    # (k_step1 is kept too: its stream's last op before the range)
    assert "queued_before_capture" in names and "k_step2" in names


def test_trim_keeps_gpu_annotations_up_to_the_last_kept_gpu_op(tmp_path):
    """Steps 0:1 of two: the step's own kernel ends at 50 µs; an unlaunched op starting inside
    the step's wall (90 µs) runs to 150 µs and is kept, so a GPU annotation at 120-130 µs,
    inside the kept GPU work, is kept too; one at 160 µs, after it, is not."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(10, 2, "k_step1", 20, 30)  # ends at 50
    t.kernel("queued_before_capture", 90, 60, stream=8)  # 90-150, no launch in the trace
    t.gpu_annotation("inside_kept_work", 120, 10)
    t.gpu_annotation("after_kept_work", 160, 5)
    t.annotation("ProfilerStep#2", 100, 100)
    t.launch_kernel(110, 2, "k_step2", 170, 10)
    trace = t.load(tmp_path)
    names = _kept_names(trace, 0, 1)
    assert "queued_before_capture" in names and "inside_kept_work" in names
    assert "after_kept_work" not in names and "k_step2" not in names
