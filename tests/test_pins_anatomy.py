"""Exact values on hand-built timelines for anatomy numbers that the 60-mutant audit
(bench/results/mutation-audit-anatomy.md) found unpinned. Expected values are worked out by hand
in each docstring (µs, the builder's unit)."""

from __future__ import annotations

import pytest
from anatomy_builders import US, Timeline

from hostgap.anatomy.steps import AnatomyConfig, analyze


def run(t: Timeline, tmp_path, config: AnatomyConfig = AnatomyConfig()) -> dict:
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
