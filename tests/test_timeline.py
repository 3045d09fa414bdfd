"""Every metric of the ``hostgap analyze`` document on hand-written micro traces, exact to the ns.

The main micro trace (µs; device 0, streams 7 and 8; host thread 100/1)::

    host  L1 cudaLaunchKernel [3, 8]     corr 1  -> K1 gemm  s7 [10, 20]
          L2 cudaLaunchKernel [9, 11]    corr 2  -> K2 relu  s8 [15, 25]   (overlaps K1 by 5)
          cudaMemcpyAsync     [12, 13]   corr 3  -> M1 HtoD  s7 [30, 34]   4096 B
          cudaMemsetAsync     [35, 36]   corr 4  -> S1       s7 [36, 38]   512 B
          L5 cudaLaunchKernel [36.5, 37.5] corr 5 -> K3 gemm s7 [100, 120]
          L6 cudaLaunchKernel [50, 52]   corr 6  -> K4 relu  s8 [60, 65]
          (no launch)                    corr 99 -> K5 attn  s8 [66, 70]
    windows  ProfilerStep#1: GPU-side [5, 35] (CPU-side [0, 40]); ProfilerStep#2: CPU only [40, 110]

Gaps: s7 20→30 (10, launched at 12: kernel-wait), 34→36 (2, launched at 35 > 34: host-wait),
38→100 (62, launched at 36.5: other); s8 25→60 (35, launched at 50: host-wait),
65→66 (1, no launch: kernel-wait).
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import annotation, cpu_op, gpu_annotation, kernel, launch, memcpy, memset, python_frame, runtime
from hostgap.anatomy.intervals import clip, gaps, merge, overlap_ns, union_ns
from hostgap.anatomy.overview import overview
from hostgap.anatomy.timeline import GpuTimes, gpu_times, windows
from hostgap.events import GPU_OP_KINDS
from hostgap.readers import load_trace

US = 1000


def main_events() -> list[dict]:
    return [
        python_frame("model.py(10): forward", ts=0, dur=60),
        annotation("ProfilerStep#1", ts=0, dur=40),
        annotation("ProfilerStep#2", ts=40, dur=70),
        cpu_op("aten::linear", ts=1, dur=11),
        cpu_op("aten::addmm", ts=2, dur=9.5),
        launch(ts=3, dur=5, corr=1),
        launch(ts=9, dur=2, corr=2),
        runtime("cudaMemcpyAsync", ts=12, dur=1, corr=3),
        runtime("cudaMemsetAsync", ts=35, dur=1, corr=4),
        launch(ts=36.5, dur=1, corr=5),
        cpu_op("aten::relu", ts=49, dur=4),
        launch(ts=50, dur=2, corr=6),
        kernel("gemm", ts=10, dur=10, corr=1, stream=7),
        kernel("relu", ts=15, dur=10, corr=2, stream=8),
        memcpy("Memcpy HtoD (Pageable -> Device)", ts=30, dur=4, nbytes=4096, corr=3, stream=7),
        memset("Memset (Device)", ts=36, dur=2, nbytes=512, corr=4, stream=7),
        kernel("gemm", ts=100, dur=20, corr=5, stream=7),
        kernel("relu", ts=60, dur=5, corr=6, stream=8),
        kernel("attn", ts=66, dur=4, corr=99, stream=8),
        gpu_annotation("ProfilerStep#1", ts=5, dur=30, stream=7),
    ]


PROPS = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045641216}]


@pytest.fixture
def main_doc(kineto_trace):
    return overview(load_trace(kineto_trace(main_events(), deviceProperties=PROPS)))


def test_device_times(main_doc):
    (d,) = main_doc["devices"]
    assert (d["device"], d["name"], d["name_source"]) == (0, "NVIDIA H100 80GB HBM3", "trace")
    assert (d["start_ns"], d["end_ns"]) == (10 * US, 120 * US)
    expected = {
        "span_ns": 110 * US,
        "busy_ns": 50 * US,  # [10,25] + [30,34] + [36,38] + [60,65] + [66,70] + [100,120]
        "idle_ns": 60 * US,
        "kernel_sum_ns": 49 * US,  # 10 + 10 + 20 + 5 + 4
        "kernel_union_ns": 44 * US,  # K1 and K2 overlap by 5
        "kernel_count": 5,
        "memcpy_count": 1,
        "memcpy_ns": 4 * US,
        "memcpy_bytes": 4096,
        "memset_count": 1,
        "memset_ns": 2 * US,
        "memset_bytes": 512,
    }
    assert {k: d[k] for k in expected} == expected
    assert d["streams"] == 2


def test_top_kernels(main_doc):
    top = main_doc["devices"][0]["top_kernels"]
    assert [(k["name"], k["count"], k["total_ns"]) for k in top] == [
        ("gemm", 2, 30 * US),
        ("relu", 2, 15 * US),
        ("attn", 1, 4 * US),
    ]
    assert top[0]["mean_ns"] == 15 * US
    assert top[0]["share"] == pytest.approx(30 / 49)
    assert sum(k["share"] for k in top) == pytest.approx(1.0)


def test_top_kernels_limit(kineto_trace):
    doc = overview(load_trace(kineto_trace(main_events())), top=1)
    assert [k["name"] for k in doc["devices"][0]["top_kernels"]] == ["gemm"]


def test_idle_gap_classes_default_threshold(main_doc):
    g = main_doc["devices"][0]["idle_gaps"]
    assert main_doc["idle_gap_threshold_ns"] == g["threshold_ns"] == 30 * US
    assert g["count"] == {"host_wait": 2, "kernel_wait": 2, "other": 1}
    assert g["total_ns"] == {"host_wait": 37 * US, "kernel_wait": 11 * US, "other": 62 * US}
    # histogram: log2 µs bins [0,1) [1,2) [2,4) [4,8) [8,16) [16,32) [32,64) ...
    assert g["histogram"]["host_wait"][:7] == [0, 0, 1, 0, 0, 0, 1]  # 2 µs, 35 µs
    assert g["histogram"]["kernel_wait"][:7] == [0, 1, 0, 0, 1, 0, 0]  # 1 µs, 10 µs
    assert g["histogram"]["other"][:7] == [0, 0, 0, 0, 0, 0, 1]  # 62 µs
    assert all(sum(h) == g["count"][c] for c, h in g["histogram"].items())


@pytest.mark.parametrize(
    "threshold_ns, kernel_wait, other",
    [
        (5 * US, (1, 1 * US), (2, 72 * US)),  # 1 µs stays kernel-wait; 10 and 62 become other
        (10 * US, (1, 1 * US), (2, 72 * US)),  # "shorter than": exactly the threshold is other
        (10 * US + 1, (2, 11 * US), (1, 62 * US)),
        (100 * US, (3, 73 * US), (0, 0)),
    ],
)
def test_idle_gap_threshold(kineto_trace, threshold_ns, kernel_wait, other):
    doc = overview(load_trace(kineto_trace(main_events())), gap_threshold_ns=threshold_ns)
    g = doc["devices"][0]["idle_gaps"]
    assert doc["idle_gap_threshold_ns"] == g["threshold_ns"] == threshold_ns
    assert (g["count"]["host_wait"], g["total_ns"]["host_wait"]) == (2, 37 * US)  # checked first
    assert (g["count"]["kernel_wait"], g["total_ns"]["kernel_wait"]) == kernel_wait
    assert (g["count"]["other"], g["total_ns"]["other"]) == other


def test_idle_gaps_sum_to_stream_idle(main_doc):
    g = main_doc["devices"][0]["idle_gaps"]
    # per-stream gaps between first and last op of each stream: s7 [10,120] busy 36, s8 [15,70] busy 19
    assert sum(g["total_ns"].values()) == (110 - 36) * US + (55 - 19) * US


def test_launch_stats(main_doc):
    (s,) = main_doc["launch_stats"]  # copies/memsets go through plain runtime calls
    assert (s["api"], s["count"], s["gpu_ops"]) == ("cudaLaunchKernel", 4, 4)
    a, d = s["api_dur_ns"], s["delay_ns"]
    assert a["n"] == 4 and a["min"] == 1 * US and a["max"] == 5 * US
    assert a["mean"] == pytest.approx((5 + 2 + 1 + 2) * US / 4)
    assert a["p50"] == pytest.approx(2 * US)
    delays = np.array([7, 6, 63.5, 10]) * US  # kernel start - launch start
    assert d["n"] == 4 and d["min"] == 6 * US and d["max"] == 63.5 * US
    assert d["mean"] == pytest.approx(delays.mean())
    for q in (10, 50, 90, 95, 99):
        assert d[f"p{q}"] == pytest.approx(np.percentile(delays, q))


def test_links_section(main_doc):
    assert main_doc["links"] == {
        "launches": 4,
        "graph_launches": 0,
        "graph_replayed_ops": 0,
        "gpu_ops": 7,
        "unlinked_gpu_ops": 1,
        "flow_events": 0,
    }


def test_windows_gpu_annotation_and_cpu_fallback(main_doc):
    w1, w2 = main_doc["windows"]
    assert (w1["name"], w1["device"], w1["source"]) == ("ProfilerStep#1", 0, "gpu_user_annotation")
    assert (w1["start_ns"], w1["end_ns"]) == (5 * US, 35 * US)  # the GPU-side range, not CPU [0, 40]
    assert {
        k: w1[k]
        for k in (
            "span_ns",
            "busy_ns",
            "idle_ns",
            "kernel_sum_ns",
            "kernel_union_ns",
            "kernel_count",
            "memcpy_count",
            "memcpy_ns",
            "memcpy_bytes",
            "memset_count",
        )
    } == {
        "span_ns": 30 * US,
        "busy_ns": 19 * US,
        "idle_ns": 11 * US,
        "kernel_sum_ns": 20 * US,
        "kernel_union_ns": 15 * US,
        "kernel_count": 2,
        "memcpy_count": 1,
        "memcpy_ns": 4 * US,
        "memcpy_bytes": 4096,
        "memset_count": 0,
    }
    assert (w2["name"], w2["device"], w2["source"]) == ("ProfilerStep#2", 0, "cpu_annotation")
    assert (w2["start_ns"], w2["end_ns"]) == (40 * US, 110 * US)
    # K4 [60,65], K5 [66,70], K3 [100,120] clipped to [100,110]; S1 [36,38] lies outside
    assert {
        k: w2[k]
        for k in ("span_ns", "busy_ns", "idle_ns", "kernel_sum_ns", "kernel_union_ns", "kernel_count", "memset_count")
    } == {
        "span_ns": 70 * US,
        "busy_ns": 19 * US,
        "idle_ns": 51 * US,
        "kernel_sum_ns": 19 * US,
        "kernel_union_ns": 19 * US,
        "kernel_count": 3,
        "memset_count": 0,
    }


def test_window_clipping_both_edges(kineto_trace):
    events = [
        kernel("a", ts=0, dur=10),
        kernel("b", ts=15, dur=10),
        kernel("c", ts=30, dur=1),
        annotation("ProfilerStep#0", ts=5, dur=15),
    ]
    (w,) = windows(load_trace(kineto_trace(events)))
    t = w.times
    assert (w.start_ns, w.end_ns, w.source) == (5 * US, 20 * US, "cpu_annotation")
    assert (t.span_ns, t.busy_ns, t.idle_ns, t.kernel_sum_ns, t.kernel_count) == (15 * US, 10 * US, 5 * US, 10 * US, 2)


def test_windows_per_device_prefer_that_devices_gpu_range(kineto_trace):
    events = [
        kernel("a", ts=10, dur=10, device=0),
        kernel("b", ts=10, dur=10, device=1),
        annotation("ProfilerStep#3", ts=0, dur=30),
        gpu_annotation("ProfilerStep#3", ts=12, dur=4, device=1),
    ]
    ws = {(w.device, w.name): w for w in windows(load_trace(kineto_trace(events)))}
    assert ws[(0, "ProfilerStep#3")].source == "cpu_annotation"
    assert ws[(0, "ProfilerStep#3")].times.busy_ns == 10 * US
    assert ws[(1, "ProfilerStep#3")].source == "gpu_user_annotation"
    assert ws[(1, "ProfilerStep#3")].times.busy_ns == 4 * US


def test_non_profiler_step_annotations_are_not_windows(kineto_trace):
    events = [kernel("a", ts=1), annotation("forward", ts=0, dur=5), annotation("ProfilerStep#x", ts=0, dur=5)]
    assert windows(load_trace(kineto_trace(events))) == []


def test_document_top_level(main_doc):
    for key in (
        "schema_version",
        "trace",
        "format",
        "devices",
        "windows",
        "skipped",
        "rank",
        "world_size",
        "base_time_ns",
        "events",
        "device_activity",
        "links",
        "launch_stats",
        "idle_gap_threshold_ns",
    ):
        assert key in main_doc
    assert main_doc["format"] == "kineto" and main_doc["device_activity"] is True
    assert main_doc["events"] == len(main_events())
    assert main_doc["skipped"] == {}


def test_two_devices(kineto_trace):
    events = [
        kernel("a", ts=0, dur=4, device=0),
        kernel("b", ts=1, dur=2, device=1, stream=3),
        kernel("c", ts=10, dur=2, device=1, stream=3),
    ]
    doc = overview(load_trace(kineto_trace(events)))
    d0, d1 = doc["devices"]
    assert (d0["device"], d0["span_ns"], d0["busy_ns"], d0["kernel_count"]) == (0, 4 * US, 4 * US, 1)
    assert (d1["device"], d1["span_ns"], d1["busy_ns"], d1["idle_ns"]) == (1, 11 * US, 4 * US, 7 * US)
    assert d1["idle_gaps"]["count"] == {"host_wait": 0, "kernel_wait": 1, "other": 0}


def test_graph_launch_replays_many_kernels(kineto_trace):
    n = 300
    events = [launch(ts=10, dur=7, corr=42, name="hipGraphLaunch")]
    events += [kernel(f"k{i % 3}", ts=20 + i, dur=0.5, corr=42, stream=0) for i in range(n)]
    events += [launch(ts=1, dur=2, corr=1, name="hipLaunchKernel"), kernel("eager", ts=5, dur=1, corr=1, stream=0)]
    doc = overview(load_trace(kineto_trace(events)))
    assert doc["links"]["graph_launches"] == 1 and doc["links"]["launches"] == 1
    assert doc["links"]["graph_replayed_ops"] == n and doc["links"]["unlinked_gpu_ops"] == 0
    stats = {s["api"]: s for s in doc["launch_stats"]}
    g = stats["hipGraphLaunch"]
    assert (g["count"], g["gpu_ops"]) == (1, n)
    assert g["delay_ns"]["min"] == g["delay_ns"]["max"] == 10 * US  # first replayed kernel at 20
    assert (stats["hipLaunchKernel"]["count"], stats["hipLaunchKernel"]["gpu_ops"]) == (1, 1)
    d = doc["devices"][0]
    assert d["kernel_count"] == n + 1
    assert d["kernel_sum_ns"] == n * 500 + 1000
    assert d["busy_ns"] == d["kernel_union_ns"] == n * 500 + 1000


def test_hip_ext_module_launch(kineto_trace):
    events = [launch(ts=1, dur=2, corr=3, name="hipExtModuleLaunchKernel"), kernel("Cijk_gemm", ts=4, dur=2, corr=3)]
    doc = overview(load_trace(kineto_trace(events)))
    (s,) = doc["launch_stats"]
    assert (s["api"], s["gpu_ops"], s["delay_ns"]["p50"]) == ("hipExtModuleLaunchKernel", 1, 3 * US)


def test_cpu_only_document(kineto_trace):
    events = [annotation("ProfilerStep#1", ts=0, dur=100), cpu_op("aten::mm", ts=1, dur=50)]
    doc = overview(load_trace(kineto_trace(events)))
    assert doc["device_activity"] is False
    assert doc["devices"] == [] and doc["windows"] == [] and doc["launch_stats"] == []
    assert doc["links"]["gpu_ops"] == 0


def test_gpu_times_without_window_on_empty_rows(kineto_trace):
    t = load_trace(kineto_trace([cpu_op("aten::mm", ts=1, dur=1)]))
    g = gpu_times(t, np.zeros(0, np.int64))
    assert g == GpuTimes(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def test_zero_duration_op_inside_window_counts(kineto_trace):
    events = [kernel("empty", ts=10, dur=0), kernel("b", ts=12, dur=2), annotation("ProfilerStep#1", ts=5, dur=20)]
    (w,) = windows(load_trace(kineto_trace(events)))
    assert (w.times.kernel_count, w.times.busy_ns, w.times.kernel_sum_ns) == (2, 2 * US, 2 * US)


def test_same_stream_overlap_programmatic_dependent_launch(kineto_trace):
    # PDL: the next kernel starts before the previous one ends on the same stream
    events = [
        kernel("a", ts=0, dur=10, stream=7),
        kernel("b", ts=8, dur=10, stream=7),
        kernel("c", ts=30, dur=2, stream=7),
    ]
    d = overview(load_trace(kineto_trace(events)))["devices"][0]
    assert (d["kernel_sum_ns"], d["kernel_union_ns"], d["busy_ns"]) == (22 * US, 20 * US, 20 * US)
    assert d["idle_gaps"]["count"] == {"host_wait": 0, "kernel_wait": 1, "other": 0}
    assert d["idle_gaps"]["total_ns"]["kernel_wait"] == 12 * US  # 18 -> 30, not 10 -> 30


# -- interval primitives --------------------------------------------------------------------


def test_merge_union_clip_gaps_overlap():
    s, e = np.array([0, 5, 2, 10]), np.array([3, 6, 4, 10])
    ms, me = merge(s, e)
    assert ms.tolist() == [0, 5, 10] and me.tolist() == [4, 6, 10]
    assert union_ns(s, e) == 5
    assert union_ns(np.array([0, 3]), np.array([3, 5])) == 5  # touching
    cs, ce = clip(np.array([0, 8, 20]), np.array([5, 12, 30]), 4, 10)
    assert cs.tolist() == [4, 8, 10] and ce.tolist() == [5, 10, 10]
    gs, ge = gaps(ms, me)
    assert gs.tolist() == [4, 6] and ge.tolist() == [5, 10]
    assert overlap_ns(np.array([2, 5]), np.array([7, 11]), ms, me) == 2 + 1 + 1 + 0
    assert union_ns(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0


def test_gpu_op_kinds_are_what_busy_counts(kineto_trace):
    t = load_trace(kineto_trace(main_events()))
    rows = np.flatnonzero(t.events.of_kind(*GPU_OP_KINDS))
    assert len(rows) == 7  # the gpu_user_annotation is not GPU work


def test_idle_gap_histogram_counts_every_gap(kineto_trace):
    events = [kernel("a", ts=0, dur=1), kernel("b", ts=2_000_001, dur=1)]  # one 2 s gap
    g = overview(load_trace(kineto_trace(events)))["devices"][0]["idle_gaps"]
    assert g["count"]["other"] == 1
    assert sum(g["histogram"]["other"]) == 1 and g["histogram"]["other"][-1] == 1  # the open last bin


def test_repeated_profiler_step_names_keep_both_windows(kineto_trace):
    events = [
        kernel("a", ts=5, dur=1),
        kernel("b", ts=105, dur=1),
        annotation("ProfilerStep#1", ts=0, dur=10),
        annotation("ProfilerStep#1", ts=100, dur=10),
    ]
    ws = windows(load_trace(kineto_trace(events)))
    assert [(w.start_ns, w.times.kernel_count) for w in ws] == [(0, 1), (100 * US, 1)]
