"""The real-trace corpus in ``../shared/traces``: every trace loads with the structure the file
really has (counted independently here with plain ``json``/``sqlite3``), the analyze document
holds its invariants, and the GPU-side ProfilerStep window agrees with the peer tool's numbers.

Each file is parsed once per session. Without the corpus the same checks run on the trimmed
copies in ``tests/data/corpus``; the numbers of whole corpus files are checked only on those.
"""

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import TRACES, VENDORED
from hostgap.anatomy.link import link
from hostgap.anatomy.overview import overview
from hostgap.events import NONE, Kind, Trace
from hostgap.readers import load_trace

FULL = TRACES.is_dir()
BASE = TRACES if FULL else VENDORED
"""The corpus, or without it the trimmed copies (same relative names)."""
KINETO = sorted(str(p.relative_to(BASE)) for p in BASE.glob("*/*.json.gz"))
NSYS = sorted(str(p.relative_to(BASE)) for p in BASE.glob("nsys/*.sqlite"))
PEER = [
    k for k in KINETO if k.startswith("tracelens/") and (BASE / k.replace(".json.gz", ".gpu_timeline.csv")).exists()
]

needs_corpus = pytest.mark.skipif(not FULL, reason=f"shared trace corpus not available ({TRACES} missing)")

# Kineto categories (current and 2021 legacy) by what hostgap makes of them.
CATS = {
    "kernel": {"kernel", "Kernel"},
    "memcpy": {"gpu_memcpy", "Memcpy"},
    "memset": {"gpu_memset", "Memset"},
    "api": {"cuda_runtime", "cuda_driver", "Runtime", "Driver"},
    "cpu_op": {"cpu_op", "Operator", "operator"},
    "python": {"python_function"},
    "annotation": {"user_annotation"},
    "gpu_annotation": {"gpu_user_annotation"},
}
KIND_GROUPS = {
    "kernel": (Kind.KERNEL,),
    "memcpy": (Kind.MEMCPY,),
    "memset": (Kind.MEMSET,),
    "api": (Kind.LAUNCH, Kind.GRAPH_LAUNCH, Kind.RUNTIME),
    "cpu_op": (Kind.CPU_OP,),
    "python": (Kind.PYTHON,),
    "annotation": (Kind.ANNOTATION,),
    "gpu_annotation": (Kind.GPU_ANNOTATION,),
}


@dataclass
class Expected:
    """What plain ``json`` says about a Kineto file."""

    counts: dict[str, int]
    flows: int
    devices: set[int]
    rank: int | None
    world_size: int | None
    unlinked_gpu_ops: int
    graph_launches: int
    max_replay: int  # most GPU ops sharing one graph launch's correlation id
    total_events: int


def count_json(path) -> Expected:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"]
    timed = [
        e
        for e in events
        if e.get("ph") == "X"
        and isinstance(e.get("ts"), (int, float))
        and isinstance(e.get("dur"), (int, float))
        and e["dur"] >= 0
    ]
    cat_of = {c: group for group, cats in CATS.items() for c in cats}
    counts = Counter(cat_of.get(e.get("cat")) for e in timed)
    gpu = [e for e in timed if cat_of.get(e.get("cat")) in ("kernel", "memcpy", "memset")]
    devices = {e.get("args", {}).get("device", e.get("pid")) for e in gpu}
    api = [e for e in timed if cat_of.get(e.get("cat")) == "api"]
    api_corr = {e["args"]["correlation"] for e in api if "correlation" in e.get("args", {})}
    unlinked = sum(1 for e in gpu if e.get("args", {}).get("correlation") not in api_corr)
    graph = [e for e in api if "GraphLaunch" in e["name"]]
    per_corr = Counter(e["args"].get("correlation") for e in gpu)
    info = doc.get("distributedInfo") or {}
    return Expected(
        counts={g: counts.get(g, 0) for g in CATS},
        flows=sum(1 for e in events if e.get("ph") in ("s", "f", "t")),
        devices=devices,
        rank=info.get("rank"),
        world_size=info.get("world_size"),
        unlinked_gpu_ops=unlinked,
        graph_launches=len(graph),
        max_replay=max((per_corr[e["args"]["correlation"]] for e in graph), default=0),
        total_events=len(events),
    )


@dataclass
class Loaded:
    trace: Trace
    doc: dict
    expected: Expected | None


_CACHE: dict[str, Loaded] = {}


@pytest.fixture(scope="session")
def corpus():
    """name -> Loaded, each file parsed (by hostgap and by plain json) once per session."""

    def get(name: str) -> Loaded:
        if name not in _CACHE:
            path = BASE / name
            trace = load_trace(str(path))
            doc = overview(trace, link(trace))
            exp = count_json(path) if name.endswith(".json.gz") else None
            _CACHE[name] = Loaded(trace, doc, exp)
        return _CACHE[name]

    return get


def kind_count(trace: Trace, kinds) -> int:
    return int(np.isin(trace.events.kind, np.asarray(kinds, dtype=np.int8)).sum())


@pytest.mark.parametrize("name", KINETO)
def test_kineto_event_counts_match_plain_json(corpus, name):
    got = corpus(name)
    exp, t = got.expected, got.trace
    assert {g: kind_count(t, kinds) for g, kinds in KIND_GROUPS.items()} == exp.counts
    assert t.meta.flows == exp.flows
    assert not [k for k in t.meta.skipped if k.startswith("unknown category")], t.meta.skipped
    # every event is a row, a flow, metadata, or counted as skipped
    meta_events = exp.total_events - len(t.events) - exp.flows - sum(t.meta.skipped.values())
    assert meta_events >= 0


@pytest.mark.parametrize("name", KINETO)
def test_kineto_devices_ranks_links(corpus, name):
    got = corpus(name)
    exp, t, doc = got.expected, got.trace, got.doc
    assert {d["device"] for d in doc["devices"]} == exp.devices
    assert doc["device_activity"] == bool(exp.devices) == t.has_device_activity
    assert (t.meta.rank, t.meta.world_size) == (exp.rank, exp.world_size)
    assert doc["links"]["unlinked_gpu_ops"] == exp.unlinked_gpu_ops
    assert doc["links"]["graph_launches"] == exp.graph_launches
    graph_rows = np.flatnonzero(t.events.kind == Kind.GRAPH_LAUNCH)
    lk = link(t)
    assert int(lk.gpu_ops_of_launch[graph_rows].max(initial=0)) == exp.max_replay
    assert doc["links"]["gpu_ops"] == exp.counts["kernel"] + exp.counts["memcpy"] + exp.counts["memset"]


@pytest.mark.parametrize("name", KINETO + NSYS)
def test_analyze_invariants_on_real_traces(corpus, name):
    doc = corpus(name).doc
    for entry in doc["devices"] + doc["windows"]:
        assert entry["kernel_union_ns"] <= entry["kernel_sum_ns"]
        assert entry["busy_ns"] <= entry["kernel_sum_ns"] + entry["memcpy_ns"] + entry["memset_ns"]
        assert entry["kernel_union_ns"] <= entry["busy_ns"]
        assert entry["idle_ns"] == entry["span_ns"] - entry["busy_ns"] >= 0
    for d in doc["devices"]:
        assert d["span_ns"] == d["end_ns"] - d["start_ns"]
        g = d["idle_gaps"]
        assert all(c >= 0 for c in g["count"].values()) and all(t >= 0 for t in g["total_ns"].values())
        assert sum(g["count"].values()) == sum(sum(h) for h in g["histogram"].values())
    json.dumps(doc)  # plain JSON types only


@needs_corpus
def test_named_structure_from_the_corpus_readme(corpus):
    deep = corpus("hta/a100_deep_queue_rank0.json.gz")
    assert deep.expected.total_events == 108_936
    assert (deep.trace.meta.rank, deep.trace.meta.world_size) == (0, 16)
    assert deep.doc["devices"][0]["name"] == "NVIDIA A100-SXM4-80GB"

    qwen = corpus("tracelens/h100_qwen1.5-0.5b.json.gz")
    assert [(w["name"], w["source"]) for w in qwen.doc["windows"]] == [("ProfilerStep#6", "gpu_user_annotation")]
    assert qwen.doc["links"]["unlinked_gpu_ops"] > 0  # kernels without a runtime partner are kept

    vllm = corpus("tracelens/mi300x_vllm_decode_fullgraph.json.gz")
    assert vllm.doc["links"]["graph_launches"] == 1
    assert vllm.doc["links"]["graph_replayed_ops"] >= 400  # one hipGraphLaunch, ~421 kernels
    (d,) = vllm.doc["devices"]
    assert d["name_source"] == "missing"  # deviceProperties carries empty names

    cpu = corpus("hta/cpu_only.json.gz")
    assert cpu.doc["device_activity"] is False and cpu.doc["devices"] == []

    legacy = corpus("hta/legacy_format.json.gz")
    ext = legacy.trace.events.external_id[legacy.trace.events.kind == Kind.KERNEL]
    assert (ext != NONE).all()  # read from the lowercase "external id"

    mi250 = corpus("hta/mi250_minitoy.json.gz")
    assert mi250.doc["devices"][0]["name"] == "AMD Radeon Graphics"
    assert {s["api"] for s in mi250.doc["launch_stats"]} <= {
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
    }

    triton = corpus("hta/triton_example.json.gz")
    assert [s["api"] for s in triton.doc["launch_stats"]] == ["cuLaunchKernel"]


def test_named_structure_of_the_vendored_copies():
    """The corpus README's named structure on the trimmed copies in tests/data/corpus (their own
    event count; the rest as in the whole files)."""

    def load(name: str) -> Loaded:
        path = VENDORED / name
        trace = load_trace(str(path))
        return Loaded(trace, overview(trace, link(trace)), count_json(path))

    deep = load("hta/a100_deep_queue_rank0.json.gz")
    assert deep.expected.total_events == 28_395  # steps 3:5 of the 108,936-event file
    assert (deep.trace.meta.rank, deep.trace.meta.world_size) == (0, 16)
    assert deep.doc["devices"][0]["name"] == "NVIDIA A100-SXM4-80GB"

    qwen = load("tracelens/h100_qwen1.5-0.5b.json.gz")
    assert [(w["name"], w["source"]) for w in qwen.doc["windows"]] == [("ProfilerStep#6", "gpu_user_annotation")]
    assert qwen.doc["links"]["unlinked_gpu_ops"] > 0

    vllm = load("tracelens/mi300x_vllm_decode_fullgraph.json.gz")
    assert vllm.doc["links"]["graph_launches"] == 1 and vllm.doc["links"]["graph_replayed_ops"] == 421
    (d,) = vllm.doc["devices"]
    assert d["name_source"] == "missing"

    cpu = load("hta/cpu_only.json.gz")
    assert cpu.doc["device_activity"] is False and cpu.doc["devices"] == []
    legacy = load("hta/legacy_format.json.gz")
    assert (legacy.trace.events.external_id[legacy.trace.events.kind == Kind.KERNEL] != NONE).all()
    assert load("hta/mi250_minitoy.json.gz").doc["devices"][0]["name"] == "AMD Radeon Graphics"
    assert [s["api"] for s in load("hta/triton_example.json.gz").doc["launch_stats"]] == ["cuLaunchKernel"]


def test_timestamps_are_ns_not_truncated(corpus):
    t = corpus("tracelens/h100_qwen1.5-0.5b.json.gz").trace
    k = t.events.kind == Kind.KERNEL
    assert np.any(t.events.start_ns[k] % 1000 != 0) and np.any(t.events.dur_ns[k] % 1000 != 0)


# -- Nsight Systems: loads via load_trace; counts from sqlite3 ------------------------------


@pytest.mark.parametrize("name", NSYS)
def test_nsys_loads_with_counts_from_sqlite(corpus, name):
    t = corpus(name).trace
    con = sqlite3.connect(f"file:{BASE / name}?mode=ro", uri=True)
    try:

        def count(table):
            return con.execute(f"select count(*) from {table}").fetchone()[0]

        assert kind_count(t, (Kind.KERNEL,)) == count("CUPTI_ACTIVITY_KIND_KERNEL")
        assert kind_count(t, (Kind.MEMCPY,)) == count("CUPTI_ACTIVITY_KIND_MEMCPY")
        assert kind_count(t, (Kind.MEMSET,)) == count("CUPTI_ACTIVITY_KIND_MEMSET")
        devices = {r[0] for r in con.execute("select distinct deviceId from CUPTI_ACTIVITY_KIND_KERNEL")}
    finally:
        con.close()
    assert t.meta.format == "nsys"
    assert {d["device"] for d in corpus(name).doc["devices"]} == devices


# -- agreement with the peer tool -----------------------------------------------------------


def peer_numbers(csv_path) -> dict[str, float]:
    with open(csv_path, newline="") as f:
        return {r["type"]: float(r["time ms"]) for r in csv.DictReader(f)}


@pytest.mark.parametrize("name", PEER)
def test_gpu_timeline_agrees_with_peer(corpus, name):
    peer = peer_numbers(BASE / name.replace(".json.gz", ".gpu_timeline.csv"))
    windows = [
        w
        for w in corpus(name).doc["windows"]
        if w["source"] == "gpu_user_annotation" and w["name"].startswith("ProfilerStep#")
    ]
    assert len(windows) == 1, windows
    (w,) = windows
    for ours, theirs in (("busy_ns", "busy_time"), ("idle_ns", "idle_time"), ("span_ns", "total_time")):
        assert w[ours] / 1e6 == pytest.approx(peer[theirs], rel=1e-3), (ours, w[ours], peer[theirs])


def test_corpus_lists_are_not_empty():
    assert KINETO and PEER and (NSYS or not FULL), "expected the corpus to hold Kineto, nsys and peer-number files"


@pytest.mark.parametrize("name", KINETO + NSYS)
def test_idle_causes_tile_every_step_of_every_real_trace(corpus, name):
    """docs/method.md §3: per step and per device, busy + the four idle causes = wall exactly;
    busy is the union of the device's GPU ops inside the wall (computed here independently);
    host_wait is the host cause and never exceeds the idle time; never host-bound on a small
    host cause."""
    from hostgap.anatomy.steps import analyze
    from hostgap.anatomy.verdict import HOST_BOUND_MIN

    t = corpus(name).trace
    a = analyze(t)
    ev = t.events
    gpu = np.flatnonzero(ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
    for s in a.steps:
        lo, hi = s["start_ns"], s["start_ns"] + s["wall_ns"]
        for part in [s] + s["devices"]:
            assert part["busy_ns"] + sum(part["idle_causes"].values()) == s["wall_ns"]
            assert min(part["idle_causes"].values()) >= 0
            assert part["host_wait_ns"] == part["idle_causes"]["host_ns"] <= part["idle_ns"]
        for d in s["devices"]:
            if d["device"] is None:
                continue
            rows = gpu[ev.device[gpu] == d["device"]]
            st = np.clip(ev.start_ns[rows], lo, hi)
            en = np.clip(ev.end_ns[rows], lo, hi)
            order = np.argsort(st)
            busy, reach = 0, lo
            for x, y in zip(st[order], en[order]):
                if y > reach:
                    busy += y - max(x, reach)
                    reach = y
            assert d["busy_ns"] == busy
    v = a.verdict
    if v["verdict"] == "host-bound":
        assert v["host_wait_share"] >= HOST_BOUND_MIN


@needs_corpus
def test_two_gpu_nsys_host_wait_within_host_exposed(corpus):
    """On both 2 × H100 exports, every step's host_wait (union basis) <= host_exposed."""
    from hostgap.anatomy.steps import analyze

    for name in ("nsys/h100_2gpu_1s.sqlite", "nsys/h100_2gpu_mfu_before.sqlite"):
        a = analyze(corpus(name).trace)
        assert a.steps and all(s["host_wait_ns"] <= s["host_exposed_ns"] for s in a.steps)
        assert all(len(s["devices"]) == 2 for s in a.steps)


def test_full_graph_vllm_step_idle_is_not_host_caused(corpus):
    """The FULL-graph vLLM step: its host thread is done ~2.5 ms in, the replay starts ~8.4 ms
    in, behind work the capture does not hold: the idle is outside the capture, not host."""
    from hostgap.anatomy.steps import analyze

    a = analyze(corpus("tracelens/mi300x_vllm_decode_fullgraph.json.gz").trace)
    (s,) = a.steps
    assert s["host_exposed_ns"] > 8_000_000  # the raw residual, ~8.4 ms
    assert s["host_wait_ns"] < 0.01 * s["wall_ns"]
    assert s["idle_causes"]["outside_ns"] > 8_000_000
    # the raw residual reads host-bound; the graph-mode guard withholds that (anatomy/graphs.py)
    assert a.verdict["verdict"] == "incomplete-capture" and a.verdict["raw_verdict"] == "graph-untrusted"
    assert s["graph_flags"] == ["annotation-ends-early"]
