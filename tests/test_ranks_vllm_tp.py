"""A real two-rank vLLM decode trace set: the tiny preset on CPU, tensor parallel 2
(``hostgap measure --engine vllm --tp 2``, then ``hostgap trim --steps 1:4`` on each rank's
trace of the N2 run; tests/data/vllm_tp2_tiny_cpu/). On CPU vLLM's all-reduce and all-gather run
as ``_C::shm_allreduce`` / ``_C::shm_all_gather`` operators over shared memory (gloo process
groups). Expected values are computed here from the raw JSON (exact decimals, plain Python)."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

from click.testing import CliRunner

from hostgap.analysis.traceset import analyse
from hostgap.cli import cli
from test_ranks_real import ns, union, waits

FIXTURE = Path(__file__).parent / "data" / "vllm_tp2_tiny_cpu"
SHM = {"_C::shm_allreduce": "allreduce", "_C::shm_all_gather": "allgather"}


def raw_rank(path: Path) -> tuple[int, list[dict]]:
    """(rank, per step: its communication ops as (type, start, end) in ns on the Unix clock).
    A CPU op belongs to the step whose window (marker start to the next marker's start; the
    last: to its end) holds its start."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    base = int(doc["baseTimeNanoseconds"])
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    marks = sorted(
        (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
        for e in ev
        if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")
    )
    steps = [[] for _ in marks]
    for e in ev:
        if e["name"] not in SHM:
            continue
        t = ns(e["ts"])
        for i, (s, end) in enumerate(marks):
            hi = marks[i + 1][0] if i + 1 < len(marks) else end + 1
            if s <= t < hi:
                steps[i].append((SHM[e["name"]], base + t, base + t + ns(e["dur"])))
    return doc["distributedInfo"]["rank"], steps


def test_two_rank_vllm_set():
    doc = analyse([str(FIXTURE)], jobs=1)
    raw = dict(raw_rank(p) for p in sorted(FIXTURE.glob("rank*.json.gz")))
    assert doc["kind"] == "trace_set" and doc["notes"] == []
    assert [(r["rank"], r["rank_source"]) for r in doc["ranks"]] == [(0, "metadata"), (1, "metadata")]
    cr = doc["cross_rank"]
    assert cr["world_size"] == 2 and cr["step_match"] == "name" and len(cr["steps"]) == 3
    for r in doc["ranks"]:
        ops = [op for step in raw[r["rank"]] for op in step]
        assert r["activity"] == "cpu-compute"
        assert (
            r["communication"]["by_type"]
            == {t: sum(op[0] == t for op in ops) for t in ("allreduce", "allgather")}
            == {"allreduce": 27, "allgather": 3}
        )
        for s, mine in zip(r["steps"], raw[r["rank"]]):
            assert s["comm_active_ns"] == union([(a, b) for _, a, b in mine]) and s["comm_count"] == len(mine) == 10
            # one thread: compute and communication never overlap
            assert s["comm_overlap_ns"] == 0 and s["compute_active_ns"] + s["comm_active_ns"] == s["gpu_active_ns"]
    for k, s in enumerate(cr["steps"]):
        per_type = [{t: sorted((a, b - a) for tt, a, b in raw[r][k] if tt == t) for t in SHM.values()} for r in (0, 1)]
        wait = [0, 0]
        for t in SHM.values():
            for r, w in enumerate(waits([per_type[0][t], per_type[1][t]])):
                wait[r] += w
        assert [p["collective_wait_ns"] for p in s["per_rank"]] == wait
        own = [p["wall_ns"] - p["collective_wait_ns"] for p in s["per_rank"]]
        assert s["straggler_rank"] == own.index(max(own)) and s["spread_ns"] == max(own) - min(own)
        assert s["cause"] in ("host", "compute", "communication")


def test_two_rank_vllm_set_on_the_terminal():
    out = CliRunner().invoke(cli, ["analyze", str(FIXTURE)], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert (
        "ranks (2 of world size 2" in out.output
        and "communication ops in steps: 30 (allreduce 27, allgather 3)" in out.output
    )
