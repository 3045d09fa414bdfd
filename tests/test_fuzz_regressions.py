"""Regressions found by fuzzing that are not loader-only: hangs in the analysis of degenerate
but loadable traces. Inputs are generated here."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from hostgap.anatomy.timeline import CPU_KERNEL_OPS, CPU_NON_COMPUTE, cpu_compute_mask
from hostgap.readers import load_trace

NAMES = ["aten::linear", "aten::addmm", "aten::copy_", "aten::add", "aten::empty", "aten::matmul", "aten::mm"]


def write(tmp_path, events, name="t.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return str(p)


def op(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def test_deep_nest_of_one_repeated_op_is_linear(tmp_path):
    """200,000 identical nested cpu_ops (the shape of a one-event fuzz file): one counted op,
    the outermost. The old level-by-level walk needed ~N passes of N (hours); pointer jumping
    needs log2 N passes, so the bound below is ~100x the expected time, not a benchmark."""
    path = write(tmp_path, [op("aten::add", 1, 5) for _ in range(200_000)])
    trace = load_trace(path)
    t0 = time.process_time()
    mask = cpu_compute_mask(trace)
    assert time.process_time() - t0 < 60
    assert int(mask.sum()) == 1


def _random_forest(rng, n_top: int, depth: int):
    """Properly nested intervals with distinct ends (µs): (name, start, end, ancestors)."""
    out = []

    def grow(lo, hi, level, ancestors):
        t = lo
        while t < hi - 2 and rng.random() < 0.8:
            a = t + int(rng.integers(0, 2))
            b = min(hi - 1, a + 2 + int(rng.integers(0, max(2, (hi - lo) // 2))))
            if b <= a + 1:
                break
            me = len(out)
            out.append((NAMES[int(rng.integers(len(NAMES)))], a, b, tuple(ancestors)))
            if level < depth:
                grow(a, b, level + 1, ancestors + [me])
            t = b

    for k in range(n_top):
        grow(k * 1000, k * 1000 + 900, 0, [])
    return out


@pytest.mark.parametrize("seed", range(12))
def test_outermost_counted_op_matches_an_ancestor_walk(tmp_path, seed):
    """Against an independent reference: an op is counted when it is not metadata and has no
    non-metadata child or is kernel-bearing; the mask keeps the counted ops none of whose
    ancestors (known from how the forest was generated) is counted."""
    rng = np.random.default_rng(seed)
    forest = _random_forest(rng, 3, 6)
    trace = load_trace(write(tmp_path, [op(n, a, b - a) for n, a, b, _ in forest]))
    metadata = [bool(CPU_NON_COMPUTE.match(n)) for n, *_ in forest]
    work_child = [False] * len(forest)
    for i, (_, _, _, anc) in enumerate(forest):
        if anc and not metadata[i]:
            work_child[anc[-1]] = True
    counted = [
        not metadata[i] and (not work_child[i] or bool(CPU_KERNEL_OPS.match(forest[i][0]))) for i in range(len(forest))
    ]
    want = sorted(
        (a * 1000, (b - a) * 1000)
        for i, (_, a, b, anc) in enumerate(forest)
        if counted[i] and not any(counted[j] for j in anc)
    )
    rows = np.flatnonzero(cpu_compute_mask(trace))
    got = sorted(zip(trace.events.start_ns[rows].tolist(), trace.events.dur_ns[rows].tolist()))
    assert got == want
