"""Trace sets on the real multi-rank corpus (../shared/traces): expected values computed in the
test from the raw files (JSON parsed with exact decimals, SQLite queried directly), with plain
Python interval arithmetic, independent of hostgap's loaders and vectorised code. Without the
corpus, the trimmed copies in tests/data/corpus stand in where the checks hold on them."""

from __future__ import annotations

import gzip
import json
import sqlite3
from decimal import Decimal

import pytest

from conftest import corpus_path, vendored_path
from hostgap.analysis.traceset import analyse

SAMPLED = ("hta/sampled_rank-0.json.gz", "hta/sampled_rank-1.json.gz")


def union(intervals) -> int:
    total, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s > reach:
            total += e - s
            reach = e
        elif e > reach:
            total += e - reach
            reach = e
    return total


def ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


def raw_kineto_steps(path) -> dict:
    """Per ProfilerStep name: compute and communication op intervals (ns), each op in the step
    whose CPU window (start to the next step's start; the last: to its end) holds its launch."""
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f, parse_float=Decimal)["traceEvents"] if e.get("ph") == "X"]
    marks = sorted(
        (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e["name"])
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    )
    launch = {
        e["args"]["correlation"]: ns(e["ts"])
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    out = {name: {"compute": [], "comm": []} for _, _, name in marks}
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        at = launch.get(e["args"].get("correlation"))
        if at is None:
            continue
        for i, (s, end, name) in enumerate(marks):
            hi = marks[i + 1][0] if i + 1 < len(marks) else end + 1
            if s <= at < hi:
                start = ns(e["ts"])
                out[name]["comm" if "nccl" in e["name"].lower() else "compute"].append((start, start + ns(e["dur"])))
    return out


def waits(starts_durs_by_rank):
    """k-th collective on every rank; wait = min(max(last start - start, 0), dur), summed."""
    n = min(len(x) for x in starts_durs_by_rank)
    total = [0] * len(starts_durs_by_rank)
    for k in range(n):
        last = max(x[k][0] for x in starts_durs_by_rank)
        for r, x in enumerate(starts_durs_by_rank):
            total[r] += min(max(last - x[k][0], 0), x[k][1])
    return total


def test_sampled_ranks_exact():
    paths = [str(corpus_path(p)) for p in SAMPLED]
    check_sampled_ranks(paths, ["ProfilerStep#551", "ProfilerStep#552"])


def test_sampled_ranks_exact_on_the_vendored_copies():
    """The trimmed copies (ProfilerStep#551 of each rank): the same checks, their one step."""
    check_sampled_ranks([str(vendored_path(p)) for p in SAMPLED], ["ProfilerStep#551"])


def check_sampled_ranks(paths: list[str], steps: list[str]) -> None:
    doc = analyse(paths)
    raw = [raw_kineto_steps(p) for p in paths]
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and doc["cross_rank"]["world_size"] == 128
    assert doc["notes"] == ["2 of 128 ranks present: cross-rank figures cover those ranks only"]
    cr = doc["cross_rank"]
    assert cr["step_match"] == "name" and [s["name"] for s in cr["steps"]] == steps
    for s in cr["steps"]:
        parts = [r[s["name"]] for r in raw]
        for p, part in zip(s["per_rank"], parts):
            comm, compute = union(part["comm"]), union(part["compute"])
            assert p["comm_active_ns"] == comm and p["compute_active_ns"] == compute
            assert p["comm_overlap_ns"] == comm + compute - union(part["comm"] + part["compute"])
            assert p["gpu_active_ns"] == union(part["comm"] + part["compute"])
        colls = [sorted((s0, e0 - s0) for s0, e0 in part["comm"]) for part in parts]
        assert [p["collective_wait_ns"] for p in s["per_rank"]] == waits(colls)
        assert s["collectives_matched"] == min(len(c) for c in colls) == 5
        own = [p["wall_ns"] - p["collective_wait_ns"] for p in s["per_rank"]]
        assert s["straggler_rank"] == own.index(max(own)) and s["spread_ns"] == max(own) - min(own)
    counts = [sum(len(v["comm"]) for v in r.values()) for r in raw]
    assert [r["communication"]["by_type"] for r in doc["ranks"]] == [{"sendrecv": c} for c in counts]


def test_sampled_ranks_as_a_directory_equal_the_file_list(tmp_path):
    paths = [corpus_path(p, vendored=True) for p in SAMPLED]
    d = tmp_path / "ranks"
    d.mkdir()
    for p in paths:
        (d / p.name).symlink_to(p)
    a = analyse([str(d)], jobs=2)
    b = analyse([str(p) for p in paths], jobs=1)
    assert a["cross_rank"] == b["cross_rank"]
    assert [r["steps"] for r in a["ranks"]] == [r["steps"] for r in b["ranks"]]


def test_a100_nccl_single_rank_communication():
    """Rank 0 of 2 alone: one trace, its all-reduce and broadcast kernels classed as
    communication (counts and union from the raw file)."""
    path = corpus_path("hta/a100_nccl_2rank.json.gz", vendored=True)
    doc = analyse([str(path)])
    assert doc["rank"] == 0 and doc["world_size"] == 2
    raw = raw_kineto_steps(path)
    assert [s["name"] for s in doc["steps"]] == list(raw)
    for s in doc["steps"]:
        part = raw[s["name"]]
        assert s["comm_active_ns"] == union(part["comm"]) and s["comm_count"] == len(part["comm"])
        assert s["compute_active_ns"] == union(part["compute"])
    assert set(doc["communication"]["by_type"]) == {"allreduce", "broadcast"}
    assert sum(doc["communication"]["by_type"].values()) == sum(len(p["comm"]) for p in raw.values())


@pytest.mark.parametrize("name", ["nsys/h100_2gpu_mfu_before.sqlite", "nsys/h100_2gpu_1s.sqlite"])
def test_two_gpu_nsys_split_by_process(name):
    """One export, two processes: two ranks, ordered by device; communication = NCCL kernels
    that have a runtime launch partner (same process, same correlation id), from SQLite."""
    path = corpus_path(name, vendored=True)  # 2gpu_1s: its first 50 ms without the corpus
    doc = analyse([str(path)])
    assert doc["kind"] == "trace_set" and [r["rank_source"] for r in doc["ranks"]] == ["process", "process"]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT k.deviceId, k.globalPid >> 24, k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE '%nccl%' AND EXISTS ("
        "SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId "
        "AND r.globalTid >> 24 = k.globalPid >> 24)"
    ).fetchall()
    pids = [
        p for (p,) in con.execute("SELECT DISTINCT globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY deviceId")
    ]
    assert [r["process"] for r in doc["ranks"]] == [p & 0xFFFFFF for p in pids]
    for rank, pid in enumerate(pids):
        mine = [(s, e) for d, p, s, e in rows if p == pid]
        comm = doc["ranks"][rank]["communication"]
        assert comm["comm_count"] == len(mine) and comm["comm_active_ns"] == union(mine)
    (step,) = doc["cross_rank"]["steps"]
    assert step["name"] == "whole trace" and step["straggler_rank"] in (0, 1)
    if rows:
        assert step["collectives_matched"] == min(sum(1 for r in rows if r[1] == p) for p in pids)
