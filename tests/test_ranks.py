"""Trace sets on hand-built traces: rank recognition, the communication split, collective wait,
the straggler and its cause (expected values derived by hand in each test's docstring)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import annotation, kernel, launch
from hostgap.analysis.traceset import analyse
from hostgap.anatomy.collectives import collective_type, is_comm
from hostgap.cli import cli
from hostgap.errors import HostgapError

US = 1000
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"


def rank_events(gemm, coll, *, gemm_launch=10, coll_launch=16, step="ProfilerStep#1", t0=0):
    """One 100 µs step: a gemm and an all-reduce, each (start, dur) in µs, launched by two calls."""
    return [
        annotation(step, ts=t0, dur=100),
        launch(ts=t0 + gemm_launch, dur=5, corr=1),
        kernel("gemm", ts=t0 + gemm[0], dur=gemm[1], corr=1),
        launch(ts=t0 + coll_launch, dur=4, corr=2),
        kernel(NCCL, ts=t0 + coll[0], dur=coll[1], corr=2),
    ]


def two_ranks(kineto_trace, r0=None, r1=None, **top):
    """Rank 0: gemm 20-50, all-reduce 40-80 (overlap 10). Rank 1: gemm 20-70, all-reduce 70-80."""
    a = kineto_trace(r0 or rank_events((20, 30), (40, 40)), distributedInfo={"rank": 0, "world_size": 2}, **top)
    b = kineto_trace(r1 or rank_events((20, 50), (70, 10)), distributedInfo={"rank": 1, "world_size": 2}, **top)
    return a, b


def run(*args):
    return CliRunner().invoke(cli, ["analyze", *args], catch_exceptions=False)


def test_names_classified():
    for name in (
        NCCL,
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        "rcclKernel_Broadcast",
        "void vllm::cross_device_reduce_1stage<half, 2>(...)",
        "gloo:all_reduce",
        "c10d::allreduce_",
        "void sglang::custom_all_reduce<float>",
    ):
        assert is_comm(name), name
    for name in (
        "ampere_sgemm_128x64_tn",
        "void at::native::elementwise_kernel<broadcast>",
        "reduce_kernel<512>",
        "Memcpy HtoD (Pageable -> Device)",
    ):
        assert not is_comm(name), name
    assert [
        collective_type(n)
        for n in (
            NCCL,
            "ncclKernel_ReduceScatter_RING",
            "ncclKernel_AllGather_RING",
            "ncclDevKernel_SendRecv",
            "ncclKernel_Broadcast_RING",
            "nccl_Send",
            "gloo:barrier",
            "ncclKernel_Mystery",
        )
    ] == ["allreduce", "reducescatter", "allgather", "sendrecv", "broadcast", "send", "barrier", "other"]


def test_communication_split_and_straggler(kineto_trace):
    """By hand (µs): rank 0 compute 30 (20-50), comm 40 (40-80), overlap 10, active 60;
    rank 1 compute 50 (20-70), comm 10 (70-80), overlap 0, active 60. The all-reduce's last
    rank arrives at 70: rank 0 waits min(70-40, 40) = 30, rank 1 waits 0. Walls are 100 (the
    marker outlasts the GPU), own time 70 and 100: straggler rank 1, spread 30. Host-caused
    idle is the same on both (same launches, same idle holes), compute excess 50-30 = 20,
    communication excess (10-0) - (40-30) = 0: the cause is compute."""
    doc = analyse(list(two_ranks(kineto_trace)))
    assert doc["kind"] == "trace_set" and [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert [r["rank_source"] for r in doc["ranks"]] == ["metadata"] * 2
    cr = doc["cross_rank"]
    assert cr["world_size"] == 2 and cr["step_match"] == "name" and len(cr["steps"]) == 1
    (s,) = cr["steps"]
    p0, p1 = s["per_rank"]
    assert (p0["compute_active_ns"], p0["comm_active_ns"], p0["comm_overlap_ns"]) == (30 * US, 40 * US, 10 * US)
    assert (p1["compute_active_ns"], p1["comm_active_ns"], p1["comm_overlap_ns"]) == (50 * US, 10 * US, 0)
    assert p0["gpu_active_ns"] == p1["gpu_active_ns"] == 60 * US
    assert (p0["collective_wait_ns"], p1["collective_wait_ns"]) == (30 * US, 0)
    assert (p0["wall_ns"], p1["wall_ns"]) == (100 * US, 100 * US)
    assert (p0["own_ns"], p1["own_ns"]) == (70 * US, 100 * US)
    assert p0["host_wait_ns"] == p1["host_wait_ns"]
    assert s["straggler_rank"] == 1 and s["spread_ns"] == 30 * US and s["collectives_matched"] == 1
    assert s["excess_ns"] == {"host": 0, "compute": 20 * US, "communication": 0} and s["cause"] == "compute"
    comm = doc["ranks"][0]["communication"]
    assert comm == {
        "compute_active_ns": 30 * US,
        "comm_active_ns": 40 * US,
        "comm_overlap_ns": 10 * US,
        "comm_count": 1,
        "by_type": {"allreduce": 1},
    }
    step0 = doc["ranks"][0]["steps"][0]
    assert step0["compute_active_ns"] + step0["comm_active_ns"] - step0["comm_overlap_ns"] == step0["gpu_active_ns"]


def test_late_host_is_the_cause(kineto_trace):
    """Rank 1's host launches its gemm at 40 (not 10): gemm 50-70, all-reduce 70-80. Its idle
    before 50 is host-caused; compute 20 (rank 0: 30, excess -10 µs), communication excess
    (10 - 0) - (40 - 30) = 0; the host excess is rank 1's host wait minus rank 0's, positive."""
    r1 = rank_events((50, 20), (70, 10), gemm_launch=40, coll_launch=46)
    doc = analyse(list(two_ranks(kineto_trace, r1=r1)))
    (s,) = doc["cross_rank"]["steps"]
    p0, p1 = s["per_rank"]
    assert s["straggler_rank"] == 1 and s["cause"] == "host"
    assert s["excess_ns"]["compute"] == -10 * US and s["excess_ns"]["communication"] == 0
    assert s["excess_ns"]["host"] == p1["host_wait_ns"] - p0["host_wait_ns"] > 0


def test_steps_matched_by_name_keep_common_steps(kineto_trace):
    """Rank 0 has steps #1 and #2, rank 1 only #2: one matched step, #2, at index 1 on rank 0."""
    r0 = rank_events((20, 30), (40, 40)) + rank_events((20, 30), (40, 40), step="ProfilerStep#2", t0=200)
    r1 = rank_events((20, 30), (40, 40), step="ProfilerStep#2", t0=200)
    doc = analyse(list(two_ranks(kineto_trace, r0=r0, r1=r1)))
    (s,) = doc["cross_rank"]["steps"]
    assert s["name"] == "ProfilerStep#2" and [p["step"] for p in s["per_rank"]] == [1, 0]
    assert s["spread_ns"] == 0 and s["cause"] is None and s["straggler_rank"] == 0


def test_steps_matched_by_position_when_names_differ(kineto_trace):
    r0 = rank_events((20, 30), (40, 40), step="ProfilerStep#1")
    r1 = rank_events((20, 30), (40, 40), step="ProfilerStep#7")
    doc = analyse(list(two_ranks(kineto_trace, r0=r0, r1=r1)))
    assert doc["cross_rank"]["step_match"] == "index" and len(doc["cross_rank"]["steps"]) == 1


def test_rank_from_file_name_with_note(tmp_path, kineto_trace):
    from conftest import write_kineto

    d = tmp_path / "run"
    d.mkdir()
    write_kineto(d / "worker_rank-1.json", rank_events((20, 50), (70, 10)))
    write_kineto(d / "worker_rank-0.json", rank_events((20, 30), (40, 40)))
    doc = analyse([str(d)])
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["ranks"][0]["trace"].endswith("worker_rank-0.json")
    assert all(r["rank_source"] == "file name" for r in doc["ranks"])
    assert any("file names" in n for n in doc["notes"])
    assert doc["cross_rank"]["world_size"] == 2


def test_directory_without_ranks_uses_file_order(tmp_path):
    from conftest import write_kineto

    d = tmp_path / "run"
    d.mkdir()
    write_kineto(d / "b.json", rank_events((20, 50), (70, 10)))
    write_kineto(d / "a.json", rank_events((20, 30), (40, 40)))
    doc = analyse([str(d)])
    assert [r["trace"].rsplit("/", 1)[1] for r in doc["ranks"]] == ["a.json", "b.json"]
    assert any("order of the files" in n for n in doc["notes"])


def test_unrelated_files_stay_separate(kineto_trace):
    a = kineto_trace(rank_events((20, 30), (40, 40)))
    b = kineto_trace(rank_events((20, 30), (40, 40)))
    docs = analyse([a, b])
    assert isinstance(docs, list) and [d["trace"] for d in docs] == [a, b]
    assert all("_rank" not in d for d in docs)


@pytest.mark.parametrize(
    "case,words",
    [
        ("world", "different world sizes"),
        ("duplicate", "rank 0 is also claimed"),
        ("apart", "clocks far apart"),
        ("outside", "rank 2 outside world size 2"),
    ],
)
def test_sets_that_do_not_belong_together_are_refused(kineto_trace, case, words):
    r0 = rank_events((20, 30), (40, 40))
    if case == "apart":  # rank 1's trace starts 10 s after rank 0's ends
        r1 = rank_events((20, 30), (40, 40), t0=10_000_000)
    else:
        r1 = rank_events((20, 30), (40, 40))
    info = {
        "world": {"rank": 1, "world_size": 4},
        "duplicate": {"rank": 0, "world_size": 2},
        "apart": {"rank": 1, "world_size": 2},
        "outside": {"rank": 2, "world_size": 2},
    }[case]
    a = kineto_trace(r0, distributedInfo={"rank": 0, "world_size": 2})
    b = kineto_trace(r1, distributedInfo=info)
    with pytest.raises(HostgapError, match=words):
        analyse([a, b])
    r = run(a, b, "--json")
    assert r.exit_code == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("hostgap: error: ") and words in r.stderr


def test_bad_file_in_a_set_is_one_line(kineto_trace, tmp_path):
    a, _ = two_ranks(kineto_trace)
    bad = tmp_path / "rank1.json"
    bad.write_text("{not json")
    r = run(a, str(bad), "--jobs", "2")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and str(bad) in r.stderr
    assert "Traceback" not in r.output


def test_parallel_equals_serial(kineto_trace):
    paths = list(two_ranks(kineto_trace))
    serial = analyse(paths, jobs=1)
    parallel = analyse(paths, jobs=2)
    assert json.dumps(serial, sort_keys=True) == json.dumps(parallel, sort_keys=True)


def test_cli_json_contract_and_tables(kineto_trace):
    a, b = two_ranks(kineto_trace)
    doc = json.loads(run(a, b, "--json").stdout)
    assert set(doc) >= {"schema_version", "kind", "notes", "ranks", "cross_rank"}
    r0 = doc["ranks"][0]
    assert {
        "rank",
        "trace",
        "rank_source",
        "process",
        "steps",
        "devices",
        "summary",
        "taxbreak",
        "communication",
    } <= set(r0)
    assert set(doc["cross_rank"]) >= {"world_size", "steps", "ranks_present", "step_match", "summary"}
    s = doc["cross_rank"]["steps"][0]
    assert {"index", "straggler_rank", "cause", "spread_ns", "per_rank"} <= set(s)
    assert {"rank", "wall_ns", "gpu_active_ns", "host_wait_ns", "collective_wait_ns"} <= set(s["per_rank"][0])
    text = run(a, b).stdout
    assert "steps across ranks" in text and "1*" in text and "compute" in text and "straggler steps by rank" in text
    rows = run(a, b, "--csv").stdout.splitlines()
    assert rows[0].startswith("step_index,step_name,rank") and len(rows) == 3


def test_single_trace_gains_communication_keys(kineto_trace):
    a, _ = two_ranks(kineto_trace)
    doc = json.loads(run(a, "--json").stdout)
    assert doc["communication"]["comm_active_ns"] == 40 * US
    assert doc["steps"][0]["comm_overlap_ns"] == 10 * US
    assert np.isclose(doc["steps"][0]["gpu_active_ns"], 60 * US)


def test_backend_options_are_checked(kineto_trace, monkeypatch):
    a, b = two_ranks(kineto_trace)
    r = run(a, b, "--address", "127.0.0.1:6379")
    assert r.exit_code == 2 and "--address needs --backend ray" in r.output
    r = CliRunner().invoke(cli, ["sweep", "-p", "tiny", "--address", "127.0.0.1:6379"])
    assert r.exit_code == 2 and "--address needs --backend ray" in r.output
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # as where Ray is not installed
    r = run(a, b, "--backend", "ray")
    assert r.exit_code == 2 and r.stderr.splitlines() == [
        "hostgap: error: --backend ray: Ray is not installed; install it with: pip install 'hostgap[ray]'"
    ]
