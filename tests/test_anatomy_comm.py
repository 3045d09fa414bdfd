"""Communication as a kernel class of its own in the single-trace analysis: device timeline,
steps, top kernels, the launch table and TaxBreak (docs/multirank.md). Hand-built timelines
with values worked out by hand, and the real A100 NCCL trace with values computed in the test
from the raw file (exact decimals, plain Python intervals)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from anatomy_builders import US, Timeline
from conftest import corpus_path
from hostgap.anatomy.kernels import kernel_rows
from hostgap.anatomy.overview import overview
from hostgap.anatomy.steps import AnalysisOptions, analyze
from hostgap.cli import cli
from hostgap.readers import load_trace
from test_ranks_real import raw_kineto_steps, union

FLOOR = AnalysisOptions(launch_floor_ns=4500.0)
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclDevComm*, unsigned long, ncclWork*)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
CUSTOM_AR = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::RankSignals)"


def two_steps() -> Timeline:
    """Step 0 (0-200 µs): gemm [20, 80] (stream 7, launched at 10), an NCCL all-reduce
    [60, 120] (stream 8, launched at 20), a copy [130, 140] (launched at 30) and a graph
    (launched at 40) replaying gemm2 [150, 160] and vLLM's custom all-reduce [160, 175].
    Step 1 (200-400): an NCCL send/recv [230, 250] (launched at 210), nothing else.

    Step 0: compute = gemm ∪ copy ∪ gemm2 = 60 + 10 + 10 = 80; communication = 60 + 15 = 75;
    all ops: [20, 120] ∪ [130, 140] ∪ [150, 175] = 100 + 10 + 25 = 135; overlap = 80 + 75 −
    135 = 20 (the all-reduce ran beside the gemm from 60 to 80). Step 1: 0, 20, 0.
    """
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 200)
    t.annotation("ProfilerStep#2", 200, 200)
    t.launch_kernel(10, 5, "gemm", 20, 60)
    t.launch_kernel(20, 5, ALLREDUCE, 60, 60, stream=8)
    t.copy(30, 4, 130, 10, 4096)
    t.graph_launch(40, 5, [("gemm2", 150, 10), (CUSTOM_AR, 160, 15)], stream=9)
    t.launch_kernel(210, 5, SENDRECV, 230, 20, stream=8)
    return t


def test_steps_split_compute_and_communication():
    a = analyze(two_steps().load(), FLOOR).to_dict()
    got = [(s["compute_active_ns"], s["comm_active_ns"], s["comm_overlap_ns"], s["comm_count"]) for s in a["steps"]]
    assert got == [(80 * US, 75 * US, 20 * US, 2), (0, 20 * US, 0, 1)]
    for s in a["steps"]:  # the three parts tile the step's GPU-active time
        assert s["compute_active_ns"] + s["comm_active_ns"] - s["comm_overlap_ns"] == s["gpu_active_ns"]
    assert a["communication"] == {
        "compute_active_ns": 80 * US,
        "comm_active_ns": 95 * US,
        "comm_overlap_ns": 20 * US,
        "comm_count": 3,
        "by_type": {"allreduce": 2, "sendrecv": 1},
    }
    steady = a["summary"]["steady"]  # two steps, both steady: medians of (80, 0), (75, 20), (20, 0)
    assert steady["count"] == 2
    assert (
        steady["compute_active_ns"]["median"],
        steady["comm_active_ns"]["median"],
        steady["comm_overlap_ns"]["median"],
    ) == (40 * US, 47.5 * US, 10 * US)


def test_taxbreak_by_launch_class():
    """Floor 4.5 µs per launch call; TaxBreak counts kernel and graph launches (a copy call is
    not one). compute: the gemm (60 µs); communication: all-reduce and send/recv (60 + 20 = 80 µs); mixed: the
    graph launch (10 + 15 = 25 µs). The classes' host terms add up to the trace's."""
    a = analyze(two_steps().load(), FLOOR).to_dict()
    by = a["taxbreak"]["by_class"]
    assert {c: (v["launches"], v["graph_launches"], v["kt_ns"], v["device_ns"]) for c, v in by.items()} == {
        "compute": (1, 0, 4500, 60 * US),
        "communication": (2, 0, 9000, 80 * US),
        "mixed": (0, 1, 4500, 25 * US),
    }
    tax = a["taxbreak"]
    for key in ("ft_ns", "ct_ns", "kt_ns", "orchestrate_ns"):
        assert sum(v[key] for v in by.values()) == tax[key]
    for v in by.values():
        assert v["orchestrate_ns"] == v["ft_ns"] + v["ct_ns"] + v["kt_ns"]


def test_launch_rows_and_top_kernels_carry_the_class():
    trace = two_steps().load()
    rows = kernel_rows(trace, analyze(trace, FLOOR))
    assert [(r["kernel"], r["class"]) for r in rows] == [
        ("gemm", "compute"),
        (ALLREDUCE, "communication"),
        ("graph replay (2 ops)", "mixed"),
        (SENDRECV, "communication"),
    ]
    (dev,) = overview(trace)["devices"]
    assert {k["name"]: k["class"] for k in dev["top_kernels"]} == {
        "gemm": "compute",
        ALLREDUCE: "communication",
        CUSTOM_AR: "communication",
        SENDRECV: "communication",
        "gemm2": "compute",
    }
    # whole device: compute 80, communication 95, busy [20, 120] ∪ [130, 140] ∪ [150, 175] ∪ [230, 250]
    # = 155, overlap 80 + 95 − 155 = 20
    assert (dev["compute_active_ns"], dev["comm_active_ns"], dev["comm_overlap_ns"], dev["comm_count"]) == (
        80 * US,
        95 * US,
        20 * US,
        3,
    )
    assert dev["busy_ns"] == 155 * US


def test_a_trace_without_communication_has_zero_communication():
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(10, 5, "gemm", 20, 30)
    trace = t.load()
    a = analyze(trace, FLOOR).to_dict()
    (s,) = a["steps"]
    assert (s["compute_active_ns"], s["comm_active_ns"], s["comm_overlap_ns"], s["comm_count"]) == (30 * US, 0, 0, 0)
    assert a["communication"]["by_type"] == {} and a["taxbreak"]["by_class"]["communication"]["launches"] == 0
    assert a["taxbreak"]["by_class"]["compute"]["device_ns"] == 30 * US


def test_steps_cli_shows_the_split(tmp_path):
    path = two_steps().write(tmp_path)
    out = CliRunner().invoke(cli, ["steps", path], terminal_width=200)
    assert out.exit_code == 0, out.output
    # step 0: compute 0.080 ms, comm 0.075, overlap 0.020; step 1: 0.000, 0.020, 0.000
    rows = [line.split("│") for line in out.output.splitlines() if line.startswith("│")]
    head = next(line for line in out.output.splitlines() if "compute" in line and "overlap" in line)
    cols = [c.strip() for c in head.split("┃")]
    i = cols.index("compute")
    step_rows = [[c.strip() for c in r] for r in rows if r[1].strip() in ("0", "1")][:2]
    assert [r[i : i + 3] for r in step_rows] == [["0.080", "0.075", "0.020"], ["0.000", "0.020", "0.000"]]
    assert "communication ops in steps: 3 (allreduce 2, sendrecv 1)" in out.output
    assert "communication 2 launches" in out.output and "mixed 1 launches" in out.output
    doc = json.loads(CliRunner().invoke(cli, ["steps", path, "--json"]).output)
    assert doc["communication"]["comm_count"] == 3


# -- the real A100 NCCL trace ---------------------------------------------------------------

NCCL = "hta/a100_nccl_2rank.json.gz"


@pytest.fixture(scope="module")
def nccl():
    path = str(corpus_path(NCCL, vendored=True))  # without the corpus: ProfilerStep#4 of it
    trace = load_trace(path)
    return path, trace, analyze(trace)


def test_real_nccl_trace_steps_exact(nccl):
    """Per step, compute / communication / overlap from the raw JSON (ops by their launch's
    step, NCCL kernels by name) equal the analysis, to the ns."""
    path, _, a = nccl
    raw = raw_kineto_steps(path)
    doc = a.to_dict()
    assert [s["name"] for s in doc["steps"]] == list(raw)
    for s in doc["steps"]:
        r = raw[s["name"]]
        compute, comm = union(r["compute"]), union(r["comm"])
        assert (s["compute_active_ns"], s["comm_active_ns"], s["comm_count"]) == (compute, comm, len(r["comm"]))
        assert s["comm_overlap_ns"] == compute + comm - union(r["compute"] + r["comm"])
        assert s["comm_count"] > 0 and s["comm_overlap_ns"] > 0


def test_real_nccl_trace_taxbreak_and_launch_rows(nccl):
    """The communication class holds exactly the launches of the NCCL kernels launched in a
    step, and the kernel time they enqueued is those kernels' durations summed."""
    path, trace, a = nccl
    raw = raw_kineto_steps(path)
    comm_ops = [iv for r in raw.values() for iv in r["comm"]]
    by = a.to_dict()["taxbreak"]["by_class"]
    assert by["communication"]["launches"] == len(comm_ops) and by["mixed"]["graph_launches"] == 0
    assert by["communication"]["device_ns"] == sum(e - s for s, e in comm_ops)
    tax = a.to_dict()["taxbreak"]
    assert tax["ct_ns"] > 0  # cuDNN/cuBLAS launches: the classes' sums are checked on every term
    for key in ("ft_ns", "ct_ns", "orchestrate_ns"):
        assert sum(v[key] for v in by.values()) == tax[key]
    assert by["compute"]["launches"] + by["communication"]["launches"] == tax["launches"]
    rows = [r for r in kernel_rows(trace, a) if r["step"] >= 0]
    assert sum(r["class"] == "communication" for r in rows) == len(comm_ops)
    assert all(r["kernel"].startswith("nccl") == (r["class"] == "communication") for r in rows)


def test_real_nccl_trace_terminal(nccl):
    path, _, _ = nccl
    out = CliRunner().invoke(cli, ["analyze", path], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "communication per step" in out.output and "by launch class, per step" in out.output
    assert "device 0 busy = compute" in out.output


def test_real_nccl_trace_report_classes_the_top_kernels(nccl, tmp_path):
    path, _, _ = nccl
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", path, "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    table = html[html.index("top kernels (whole trace)") :]
    table = table[: table.index("</table>")]
    # the all-reduce kernel is the top one; the broadcast is not in the top 10
    assert table.count("<td>communication</td>") == 1 and table.count("<td>compute</td>") == 9


def test_launch_classes_per_launch_row_in_any_order(kineto_trace):
    """A: all-reduce + gemm (mixed); B: all-reduce only (communication); D: gemm (compute); a
    cudaMemcpyAsync and its copy (compute). Rows asked in any order, one twice."""
    from conftest import kernel, launch, memcpy, runtime
    from hostgap.anatomy.collectives import CLASSES, launch_classes
    from hostgap.anatomy.link import link

    events = [
        launch(ts=0, dur=1, corr=1, name="cudaGraphLaunch"),
        kernel(ALLREDUCE, ts=10, dur=5, corr=1),
        kernel("gemm", ts=16, dur=5, corr=1),
        launch(ts=2, dur=1, corr=2),
        kernel(ALLREDUCE, ts=22, dur=5, corr=2),
        runtime("cudaMemcpyAsync", ts=4, dur=1, corr=3),
        memcpy(ts=30, dur=1, corr=3),
        launch(ts=6, dur=1, corr=4),
        kernel("gemm", ts=32, dur=5, corr=4),
    ]
    trace = load_trace(kineto_trace(events))
    names = [trace.name_of(i) for i in range(len(trace.events))]
    row = {n: names.index(n) for n in ("cudaGraphLaunch", "cudaMemcpyAsync")}
    launches = [i for i, n in enumerate(names) if n == "cudaLaunchKernel"]
    a, b, d = row["cudaGraphLaunch"], launches[0], launches[1]
    got = launch_classes(trace, link(trace), np.array([b, a, d, a, row["cudaMemcpyAsync"]]))
    assert [CLASSES[i] for i in got] == ["communication", "mixed", "compute", "mixed", "compute"]
    assert launch_classes(trace, link(trace), np.zeros(0, dtype=np.int64)).tolist() == []
