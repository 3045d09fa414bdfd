"""The graph-mode guard (anatomy/graphs.py): steps whose graph replays the trace does not record
faithfully are flagged, and a host-bound verdict resting on them is withheld."""

from __future__ import annotations

from conftest import annotation, corpus_path, kernel, launch
from hostgap.anatomy.graphs import GRAPH_UNTRUSTED, guard_verdict, step_flags
from hostgap.anatomy.steps import analyze
from hostgap.readers import load_trace


def step(i, *, graphs=1, kernels=10, start=None, wall=100, marker_end=None, gpu_end=None) -> dict:
    start = i * 1000 if start is None else start
    return {
        "index": i,
        "graph_launches": graphs,
        "kernel_count": kernels,
        "start_ns": start,
        "wall_ns": wall,
        "marker_end_ns": start + wall if marker_end is None else marker_end,
        "last_gpu_end_ns": start + wall - 5 if gpu_end is None else gpu_end,
    }


def test_flags_each_symptom():
    steps = [
        step(0),
        step(1, kernels=0),
        step(2, kernels=3),
        step(3, wall=1050, gpu_end=4020),
        step(4, marker_end=4010),
        step(5, graphs=0, kernels=0),
        step(6),
    ]
    assert step_flags(steps) == [
        [],
        ["graph-no-kernels"],
        ["graph-few-kernels"],
        ["gpu-after-next-step"],
        ["annotation-ends-early"],
        [],
        [],
    ]


def test_fewer_kernels_than_graph_launches():
    assert step_flags([step(0, graphs=4, kernels=3)]) == [["graph-few-kernels"]]


def test_steps_without_kernels_stay_out_of_the_median():
    # the median of like steps is taken over steps that recorded kernels: three empty replays
    # must not pull it to zero and hide a step that recorded 10 of 400 kernels
    steps = [step(0, kernels=400), step(1, kernels=400), step(2, kernels=10)] + [step(i, kernels=0) for i in (3, 4, 5)]
    flags = step_flags(steps)
    assert "graph-few-kernels" in flags[2] and flags[0] == flags[1] == []


def test_guard_withholds_host_bound():
    steps = [{**s, "graph_flags": f} for s, f in zip([step(0), step(1, kernels=0)], [[], ["graph-no-kernels"]])]
    v = guard_verdict({"verdict": "host-bound", "raw_verdict": "host-bound", "note": ""}, steps)
    assert v["verdict"] == GRAPH_UNTRUSTED and v["raw_verdict"] == GRAPH_UNTRUSTED
    assert v["graph_flagged_steps"] == [1] and "differencing" in v["note"]
    assert v["note"].startswith("1 of 2 steps flagged (graph-no-kernels): ")
    clean = [{**s, "graph_flags": []} for s in [step(0)]]
    assert guard_verdict({"verdict": "host-bound", "note": ""}, clean)["verdict"] == "host-bound"


def test_graph_launch_without_kernels_gets_no_host_bound_verdict(kineto_trace):
    """Three steps, each one graph launch whose replay the trace did not record: the host
    fraction is 100 %, and without the guard the verdict would be host-bound."""
    events = []
    for i in range(3):
        t = i * 1000.0
        events.append(annotation(f"execute_context_0(0)_generation_4(4)#{i}", ts=t, dur=900))
        events.append(launch(ts=t + 100, dur=20, corr=10 + i, name="cudaGraphLaunch"))
    events.append(kernel("warm", ts=5000, dur=1, corr=99))  # a GPU trace: one kernel outside the steps
    events.append(launch(ts=4990, dur=1, corr=99))
    a = analyze(load_trace(kineto_trace(events))).to_dict()
    steps = a["steps"]
    assert [s["graph_launches"] for s in steps] == [1, 1, 1]
    assert all(s["graph_flags"] == ["graph-no-kernels"] for s in steps)
    assert a["verdict"]["verdict"] != "host-bound" and a["verdict"]["graph_flagged_steps"] == [0, 1, 2]


def test_corpus_full_graph_trace_is_flagged():
    """TraceLens' MI300X vLLM decode in FULL graph mode: one hipGraphLaunch replaying ~421
    kernels; the CPU annotation ends 2.4 ms into a 19 ms step whose GPU work starts at 8.4 ms."""
    a = analyze(load_trace(str(corpus_path("tracelens/mi300x_vllm_decode_fullgraph.json.gz", vendored=True)))).to_dict()
    (s,) = a["steps"]
    assert s["graph_launches"] == 1 and s["kernel_count"] > 400
    assert "annotation-ends-early" in s["graph_flags"]
    v = a["verdict"]
    assert v["verdict"] != "host-bound" and v["raw_verdict"] == GRAPH_UNTRUSTED  # raw was host-bound (43.9 %)
    assert v["graph_flagged_steps"] == [0] and "differencing" in v["note"]
