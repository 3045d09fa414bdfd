"""Invariants of the step anatomy over generated timelines (hypothesis).

A generated timeline has 1-4 ProfilerSteps; in each, host threads run a sequence of
(optionally framed) framework ops, each launching 0-3 kernels, a graph or a copy, plus bare
launches; GPU work runs serially per stream, sometimes right after its launch, sometimes queued
behind earlier work or delayed. Markers may end before their host work does.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from anatomy_builders import H100, Timeline
from budget import examples
from hostgap.anatomy.steps import AnalysisOptions, analyze
from hostgap.events import GPU_OP_KINDS, Kind

SETTINGS = settings(**examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""60 examples per property; bench/properties.py runs them at >= 10,000."""
FOLDER = tempfile.mkdtemp(prefix="hostgap-anatomy-props-")
atexit.register(shutil.rmtree, FOLDER, ignore_errors=True)


@st.composite
def timelines(draw) -> Timeline:
    t = Timeline(props=H100)
    free = {}  # stream -> when its last op ends

    def gpu_start(stream, launch_at):
        lag = draw(st.sampled_from([1, 2, 3, 5, 40]))
        start = max(launch_at + lag, free.get(stream, 0))
        return start + draw(st.sampled_from([0, 0, 0, 2]))

    def run_kernels(stream, launch_at, n):
        out = []
        for _ in range(n):
            s = gpu_start(stream, launch_at)
            d = draw(st.integers(1, 30))
            free[stream] = s + d
            out.append((s, d))
            launch_at = s
        return out

    def host_work(tid, stream, cursor):
        """One op (maybe framed) or a bare call on thread ``tid`` from ``cursor``; returns end."""
        what = draw(st.sampled_from(["op", "op", "graph", "copy", "bare", "idle"]))
        if what == "idle":
            return cursor + draw(st.integers(1, 10))
        framed = draw(st.booleans())
        f_start = cursor
        cursor += draw(st.integers(0, 3))
        o_start = cursor
        cursor += draw(st.integers(0, 2))
        n_launch = draw(st.integers(0, 3)) if what == "op" else 1
        for _ in range(n_launch):
            cursor += draw(st.integers(0, 4))
            dur = draw(st.integers(1, 3))
            if what in ("op", "bare"):
                ((ks, kd),) = run_kernels(stream, cursor, 1)
                t.launch_kernel(cursor, dur, f"k{draw(st.integers(0, 3))}", ks, kd, stream=stream, tid=tid)
            elif what == "graph":
                ks = run_kernels(stream, cursor, draw(st.integers(1, 4)))
                t.graph_launch(cursor, dur, [(f"g{j}", s, d) for j, (s, d) in enumerate(ks)], stream=stream, tid=tid)
            else:
                ((cs, cd),) = run_kernels(stream, cursor, 1)
                t.copy(
                    cursor,
                    dur,
                    cs,
                    cd,
                    draw(st.integers(1, 4096)),
                    direction=draw(st.sampled_from(["HtoD", "DtoH"])),
                    stream=stream,
                    tid=tid,
                )
            cursor += dur
        if what == "op" and draw(st.booleans()):  # an inner op around the launches
            t.op("aten::inner", o_start, cursor - o_start, tid=tid)
        cursor += draw(st.integers(0, 2))
        if what != "bare":
            t.op(f"aten::op{draw(st.integers(0, 2))}", o_start, cursor - o_start, tid=tid)
        cursor += draw(st.integers(0, 2))
        if framed and what != "bare":
            t.frame("<built-in function linear>", f_start, cursor - f_start, tid=tid)
            if draw(st.booleans()):  # an outer frame
                t.frame("model.py(1): forward", f_start, cursor + 1 - f_start, tid=tid)
                cursor += 1
        return cursor

    n_steps = draw(st.integers(1, 4))
    two_threads = draw(st.booleans())
    cursor = 0
    for i in range(n_steps):
        start = cursor
        end = {1: start + draw(st.integers(0, 3))}
        if two_threads:
            end[2] = start + draw(st.integers(0, 3))
        if i == 0:  # at least one GPU op: CPU-only traces are tested elsewhere
            t.launch_kernel(end[1], 1, "k0", end[1] + 2, draw(st.integers(1, 30)), stream=7)
            free[7] = t.events[-1]["ts"] + t.events[-1]["dur"]
            end[1] += 1
        for _ in range(draw(st.integers(0, 5))):
            tid = draw(st.sampled_from(sorted(end)))
            end[tid] = host_work(tid, 7 if tid == 1 else draw(st.sampled_from([8, 9])), end[tid])
        cursor = max(end.values()) + draw(st.integers(0, 5))
        marker_dur = max(1, int((cursor - start) * draw(st.sampled_from([0.3, 1.0, 1.0]))))
        t.annotation(f"ProfilerStep#{i + 1}", start, marker_dur)
        cursor += 1
    return t


def analysed(t: Timeline):
    trace = t.load(FOLDER)
    a = analyze(trace, AnalysisOptions(launch_floor_ns=4500.0))
    return trace, a, a.to_dict()


@SETTINGS
@given(timelines())
def test_step_invariants(t):
    trace, a, doc = analysed(t)
    for s in doc["steps"]:
        assert s["kernel_union_ns"] <= s["kernel_sum_ns"]
        assert s["gpu_active_ns"] <= s["kernel_sum_ns"] + s["h2d_ns"] + s["d2h_ns"]
        assert s["kernel_union_ns"] <= s["gpu_active_ns"]
        assert 0 <= s["host_wait_ns"] <= s["wall_ns"]
        assert 0 <= s["runtime_api_in_idle_ns"] <= s["wall_ns"]
        assert s["host_exposed_ns"] == max(s["wall_ns"] - s["gpu_active_ns"], 0)
        if s["host_fraction"] is not None:
            assert 0.0 <= s["host_fraction"] <= 1.0
        tb = s["taxbreak"]
        if tb["hdbi"] is not None:
            assert 0.0 < tb["hdbi"] <= 1.0
        else:
            assert s["kernel_sum_ns"] == 0
        assert tb["ft_ns"] >= 0 and tb["ct_ns"] >= 0 and tb["kt_fw_ns"] >= 0 and tb["unattributed_ns"] >= 0
        assert tb["orchestrate_ns"] == tb["ft_ns"] + tb["ct_ns"] + tb["kt_ns"]
    v = doc["verdict"]
    for key in ("host_fraction", "host_wait_share", "hdbi"):
        assert v[key] is None or 0.0 <= v[key] <= 1.0
    tax = doc["taxbreak"]
    assert tax["unique_ratio"] is None or 0.0 < tax["unique_ratio"] <= 1.0
    for row in doc["top_ops"] + doc["top_frames"]:
        assert 0.0 <= row["share"] <= 1.0


@SETTINGS
@given(timelines())
def test_every_gpu_op_in_at_most_one_step(t):
    trace, a, doc = analysed(t)
    ev = trace.events
    kernels = ev.kind == Kind.KERNEL
    copies = ev.kind == Kind.MEMCPY
    steps = doc["steps"]
    in_steps = sum(s["kernel_count"] + s["h2d_count"] + s["d2h_count"] for s in steps)
    total = int(np.sum(ev.of_kind(*GPU_OP_KINDS)))
    assert in_steps + doc["unassigned"]["gpu_ops_outside_steps"] == total
    assert sum(s["kernel_sum_ns"] for s in steps) <= int(ev.dur_ns[kernels].sum())
    assert sum(s["h2d_ns"] + s["d2h_ns"] for s in steps) <= int(ev.dur_ns[copies].sum())
    assert sum(s["kernel_count"] for s in steps) == doc["taxbreak"]["total_kernels"]


@SETTINGS
@given(timelines())
def test_per_launch_host_intervals_never_overlap_on_a_thread(t):
    trace, a, doc = analysed(t)
    k = a.kernels
    ev = trace.events
    assert np.all(k.t_py_ns >= 0) and np.all(k.t_dispatch_ns >= 0) and np.all(k.sync_ns >= 0)
    # the generated timelines hold no synchronising calls: the intervals are the terms
    assert np.array_equal(k.t_py_ns, k.py_end_ns - k.py_start_ns)
    assert np.array_equal(k.t_dispatch_ns, k.dispatch_end_ns - k.dispatch_start_ns)
    assert not k.sync_ns.any()
    assert np.all((k.t_wrapper_ns >= 0) & (k.t_wrapper_ns <= k.t_dispatch_ns))
    for th in np.unique(k.thread):
        sel = np.flatnonzero(k.thread == th)
        lr = k.launch_row[sel]
        s = np.concatenate((k.py_start_ns[sel], k.dispatch_start_ns[sel], ev.start_ns[lr]))
        e = np.concatenate((k.py_end_ns[sel], k.dispatch_end_ns[sel], ev.end_ns[lr]))
        keep = e > s
        order = np.lexsort((e[keep], s[keep]))
        s, e = s[keep][order], e[keep][order]
        assert np.all(e[:-1] <= s[1:]), "two TaxBreak intervals on one thread overlap"


@SETTINGS
@given(timelines())
def test_step_taxbreak_adds_up_to_the_trace(t):
    trace, a, doc = analysed(t)
    tax = doc["taxbreak"]
    steps = doc["steps"]
    for key in ("ft_ns", "ct_ns", "kt_ns", "unattributed_ns", "device_active_ns"):
        assert abs(sum(s["taxbreak"][key] for s in steps) - tax[key]) <= len(steps), key
    assert sum(s["launches"] + s["graph_launches"] for s in steps) >= tax["launches"] + tax["graph_launches"]


# -- a naive reference for launch-time assignment ---------------------------------------------


def _union_len(intervals) -> int:
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


def _step_of(markers, t):
    """Index of the step whose CPU window (marker start -> next marker start; the last: its
    marker end) holds time t, or None."""
    i = max((j for j, m in enumerate(markers) if m[0] <= t), default=None)
    if i is None or (i == len(markers) - 1 and t > markers[-1][1]):
        return None
    return i


def naive_steps(events: list[dict]) -> list[dict]:
    """Per-step numbers straight from the event dicts, one event at a time (µs → ns)."""
    ns = 1000
    markers = sorted((e["ts"] * ns, (e["ts"] + e["dur"]) * ns) for e in events if e["cat"] == "user_annotation")
    starts = [m[0] for m in markers]

    def step_of(t):
        return _step_of(markers, t)

    launch_at = {
        e["args"]["correlation"]: e["ts"] * ns
        for e in events
        if e["cat"] == "cuda_runtime" and "correlation" in e["args"]
    }
    out = [{"kernels": [], "ops": [], "launches": 0, "graph_launches": 0} for _ in markers]
    for e in events:
        if e["cat"] == "cuda_runtime":
            i = step_of(e["ts"] * ns)
            if i is not None and e["name"] == "cudaLaunchKernel":
                out[i]["launches"] += 1
            if i is not None and e["name"] == "cudaGraphLaunch":
                out[i]["graph_launches"] += 1
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            at = launch_at.get(e["args"].get("correlation"))
            i = None if at is None else step_of(at)
            if i is not None:
                iv = (e["ts"] * ns, (e["ts"] + e["dur"]) * ns)
                out[i]["ops"].append(iv)
                if e["cat"] == "kernel":
                    out[i]["kernels"].append(iv)
    # host_wait (docs/method.md §3, causal rule): at an instant t in a device-idle gap, the GPU
    # waited on the host when no op starting at or after the gap's end had been handed over
    # (its launch call ended) by t. The device's first gap is outside the capture, whole, when
    # its op waited more than 30 µs after its launch. The last step's wall may end after it.
    ends = []
    for i, row in enumerate(out):
        if i + 1 < len(markers):
            ends.append(starts[i + 1])
        else:
            ends.append(max([markers[i][1]] + [e for _, e in row["ops"]]))
    launch_end = {
        e["args"]["correlation"]: (e["ts"] + e["dur"]) * ns
        for e in events
        if e["cat"] == "cuda_runtime" and "correlation" in e["args"]
    }
    ops = sorted(
        (e["ts"] * ns, (e["ts"] + e["dur"]) * ns, launch_end[e["args"]["correlation"]])
        for e in events
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    lo = min([starts[0]] + [s for s, _, _ in ops])
    hi = max(ends + [e for _, e, _ in ops])
    host = []  # host-caused intervals
    reach, first_gap = lo, True
    for s, e, _ in ops:
        if s > reach:
            handed = min(h for s2, _, h in ops if s2 >= s)
            cut = min(max(handed, reach), s)
            if not (first_gap and s - cut > 30_000):
                host.append((reach, cut))
        first_gap = False
        reach = max(reach, e)
    host.append((reach, hi))
    host_wait = [sum(max(0, min(b, ends[i]) - max(a, starts[i])) for a, b in host) for i in range(len(markers))]
    rows = []
    for i, step in enumerate(out):
        if i + 1 < len(markers):
            wall = starts[i + 1] - starts[i]
        else:
            wall = max([markers[i][1]] + [e for _, e in step["ops"]]) - starts[i]
        rows.append(
            {
                "host_wait_ns": host_wait[i],
                "kernel_count": len(step["kernels"]),
                "kernel_sum_ns": sum(e - s for s, e in step["kernels"]),
                "kernel_union_ns": _union_len(step["kernels"]),
                "gpu_active_ns": _union_len(step["ops"]),
                "wall_ns": wall,
                "launches": step["launches"],
                "graph_launches": step["graph_launches"],
            }
        )
    return rows


def two_threads_two_streams() -> Timeline:
    """The timeline on which an earlier rule and this reference disagreed (step 4's gap 14-21 µs
    ends with two kernels at 21: one handed over at 15, one at 19; only 14-15 is host-caused).
    Hand-derived values: tests/test_anatomy_pinned.py::test_gap_after_the_work_was_launched_is_not_host."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 1)
    t.runtime("cudaLaunchKernel", 0, 1, corr=1)
    t.kernel("k0", 2, 1, corr=1, stream=7)
    t.op("aten::op0", 2, 0)
    t.annotation("ProfilerStep#2", 2, 1)
    t.op("aten::op0", 4, 0)
    t.op("aten::op0", 4, 0)
    t.annotation("ProfilerStep#3", 4, 1)
    t.annotation("ProfilerStep#4", 5, 16)
    t.op("aten::op0", 6, 9)
    t.frame("<built-in function linear>", 6, 9)
    t.runtime("cudaLaunchKernel", 9, 3, corr=5)
    t.kernel("k0", 10, 4, corr=5, stream=7)
    t.op("aten::op0", 13, 8, tid=2)
    t.frame("<built-in function linear>", 13, 8, tid=2)
    t.runtime("cudaLaunchKernel", 14, 1, corr=6)
    t.op("aten::op0", 15, 0)
    for j, ts in enumerate((18, 19, 20)):
        t.runtime("cudaLaunchKernel", ts, 1, corr=2 + j, tid=2)
    t.kernel("k0", 21, 2, corr=2, stream=8)
    t.kernel("k0", 21, 1, corr=6, stream=7)
    t.kernel("k0", 23, 1, corr=3, stream=8)
    t.kernel("k0", 24, 1, corr=4, stream=8)
    return t


@SETTINGS
@given(timelines())
def test_idle_causes_tile_the_idle_time(t):
    """Per step and per device: busy + host + dependency + outside + unexplained = wall, and
    host_wait is the host cause (docs/method.md §3)."""
    trace, a, doc = analysed(t)
    total = dict.fromkeys(("host_ns", "dependency_ns", "outside_ns", "unexplained_ns"), 0)
    for s in doc["steps"]:
        for part in [s] + s["devices"]:
            causes = part["idle_causes"]
            assert all(v >= 0 for v in causes.values())
            assert part["busy_ns"] + sum(causes.values()) == s["wall_ns"]
            assert part["idle_ns"] == s["wall_ns"] - part["busy_ns"]
            assert part["host_wait_ns"] == causes["host_ns"]
        assert s["host_wait_ns"] <= s["idle_ns"]
        assert s["host_cause_fraction"] == (s["host_wait_ns"] / s["wall_ns"] if s["wall_ns"] else None)
        for k in total:
            total[k] += s["idle_causes"][k]
    assert {k: doc["idle_causes"][k] for k in total} == total
    assert doc["idle_causes"]["busy_ns"] == sum(s["busy_ns"] for s in doc["steps"])
    assert doc["idle_causes"]["idle_ns"] == sum(s["idle_ns"] for s in doc["steps"])


@SETTINGS
@given(timelines())
@example(t=two_threads_two_streams())
def test_steps_match_a_naive_reference(t):
    trace, a, doc = analysed(t)
    got = [
        {
            k: s[k]
            for k in (
                "host_wait_ns",
                "kernel_count",
                "kernel_sum_ns",
                "kernel_union_ns",
                "gpu_active_ns",
                "wall_ns",
                "launches",
                "graph_launches",
            )
        }
        for s in doc["steps"]
    ]
    assert got == naive_steps(t.events)


def _started_in(markers, t) -> int:
    """Index of the last marker starting at or before t (-1: none)."""
    return max((j for j, m in enumerate(markers) if m[0] <= t), default=-1)


def naive_taxes(events: list[dict]) -> dict[int, dict]:
    """T_py, T_dispatch, T_launch and queued per launch correlation id, one event at a time."""
    ns = 1000

    def iv(e):
        return e["ts"] * ns, (e["ts"] + e["dur"]) * ns

    annotations = sorted((e for e in events if e["cat"] == "user_annotation"), key=lambda e: e["ts"])
    markers = [iv(e) for e in annotations]
    marker_tid = [e["tid"] for e in annotations]
    gpu = [e for e in events if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")]
    first_gpu = {}
    for e in gpu:
        c = e["args"].get("correlation")
        if c is not None:
            first_gpu[c] = min(first_gpu.get(c, iv(e)), iv(e))
    launches = [
        e
        for e in events
        if e["name"] in ("cudaLaunchKernel", "cudaGraphLaunch") and e["args"].get("correlation") in first_gpu
    ]
    ops = [e for e in events if e["cat"] == "cpu_op"]
    frames = [e for e in events if e["cat"] == "python_function"]

    def encloses(outer, inner):
        return outer["tid"] == inner["tid"] and iv(outer)[0] <= iv(inner)[0] and iv(inner)[1] <= iv(outer)[1]

    top_ops = [o for o in ops if not any(p is not o and encloses(p, o) and iv(p) != iv(o) for p in ops)]

    def unit_of(launch):
        outer = [o for o in top_ops if encloses(o, launch)]
        return min(outer, key=lambda o: (iv(o)[0], -iv(o)[1])) if outer else launch

    units = {id(x): x for x in top_ops + [ln for ln in launches if unit_of(ln) is ln]}.values()

    # the stream's previous work end before each GPU op (running max over earlier starts)
    lane_prev = {}
    for key in {(e["pid"], e["tid"]) for e in gpu}:
        lane = sorted((e for e in gpu if (e["pid"], e["tid"]) == key), key=lambda e: e["ts"])
        reach = None
        for e in lane:
            lane_prev[id(e)] = reach
            reach = iv(e)[1] if reach is None else max(reach, iv(e)[1])
    first_op_of = {}
    for e in gpu:
        c = e["args"].get("correlation")
        if c is not None and iv(e) == first_gpu[c] and c not in first_op_of:
            first_op_of[c] = e

    out = {}
    for ln in launches:
        c = ln["args"]["correlation"]
        u = unit_of(ln)
        same_unit = sorted((x for x in launches if unit_of(x) is u), key=lambda x: x["ts"])
        k = same_unit.index(ln)
        l_start = iv(ln)[0]
        if k == 0:
            earlier = [x for x in units if x["tid"] == u["tid"] and iv(x)[0] < iv(u)[0]]
            prev_end = iv(max(earlier, key=lambda x: iv(x)[0]))[1] if earlier else None
            fr = [f for f in frames if encloses(f, u)]
            step = _step_of(markers, l_start)
            if fr:
                frame_start = iv(max(fr, key=lambda f: (iv(f)[0], -iv(f)[1])))[0]
            elif step is None or marker_tid[step] == u["tid"]:
                frame_start = markers[step][0] if step is not None else None
            else:  # another thread than the marker's: from its previous unit of the same step only
                frame_start = None
                prev_step = None if not earlier else _started_in(markers, iv(max(earlier, key=lambda x: iv(x)[0]))[0])
                if prev_step != _started_in(markers, iv(u)[0]):
                    prev_end = None
            cands = [x for x in (frame_start, prev_end) if x is not None]
            py_from = min(max(cands), iv(u)[0]) if cands else iv(u)[0]
            # intervals are clipped to the launch's step (they never reach into an earlier step)
            lo = markers[step][0] if step is not None else py_from  # outside every step: no clip
            t_py = max(iv(u)[0], lo) - max(py_from, lo)
            t_dispatch = l_start - max(iv(u)[0], lo)
        else:
            t_py = 0
            step = _step_of(markers, l_start)
            prev = iv(same_unit[k - 1])[1]
            lo = markers[step][0] if step is not None else prev
            t_dispatch = l_start - max(prev, lo)
        prev = lane_prev[id(first_op_of[c])]
        out[c] = {
            "t_py_ns": t_py,
            "t_dispatch_ns": max(t_dispatch, 0),
            "t_launch_ns": first_gpu[c][0] - l_start,
            "queued": prev is not None and prev > l_start,
        }
    return out


@SETTINGS
@given(timelines())
def test_taxbreak_terms_match_a_naive_reference(t):
    trace, a, doc = analysed(t)
    k = a.kernels
    ev = trace.events
    got = {
        int(ev.correlation[r]): {
            "t_py_ns": int(k.t_py_ns[i]),
            "t_dispatch_ns": int(k.t_dispatch_ns[i]),
            "t_launch_ns": int(k.t_launch_ns[i]),
            "queued": bool(k.queued[i]),
        }
        for i, r in enumerate(k.launch_row)
    }
    assert got == naive_taxes(t.events)
