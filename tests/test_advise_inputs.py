"""The levers from documents (model/levers/baseline.py, ranked.py), the corpus traces and the
``hostgap advise`` command (docs/advise.md)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tests.conftest import corpus_path, vendored_path

import hostgap
from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.model.levers import ranked as L
from hostgap.model.levers.baseline import baseline, from_run, from_trace

MS = 1e6
HOST_SIDE = ("graphs", "async", "cpu", "fusion", "megakernel")


def step(i: int, **kw) -> dict:
    d = {
        "index": i,
        "kind": "decode",
        "start_ns": i * 10 * MS,
        "marker_end_ns": i * 10 * MS + 9 * MS,
        "wall_ns": 10 * MS,
        "gpu_active_ns": 4 * MS,
        "host_wait_ns": 5 * MS,
        "launches": 100,
        "graph_launches": 0,
        "kernel_count": 100,
        "partial": False,
        "gen_requests": 8,
        "taxbreak": {"orchestrate_ns": 3 * MS},
    }
    d.update(kw)
    return d


def trace_doc(n: int = 6, **kw) -> dict:
    return {
        "trace": "t.json",
        "activity": "gpu",
        "marker_family": "vllm",
        "steps": [step(i, **kw) for i in range(n)],
        "summary": {"steady": {"indices": list(range(n))}},
        "verdict": {"verdict": "host-bound", "graph_flagged_steps": []},
        "taxbreak": {"launch_floor_ns": 5e3},
        "devices": [{"name": "NVIDIA H100 80GB HBM3", "name_source": "trace"}],
    }


def by_name(rows) -> dict:
    return {r["lever"]: r for r in rows}


def test_from_trace_reads_each_quantity():
    b = from_trace(trace_doc())
    s = b.steps
    assert len(s) == 6 and s.between[0] == pytest.approx(1 * MS)  # wall 10 - marker 9
    assert (s.wall[0], s.device[0], s.host_wait[0], s.orchestrate[0]) == (10 * MS, 4 * MS, 5 * MS, 3 * MS)
    assert (b.batch, b.batch_known, b.engine, b.launch_floor_ns) == (8.0, True, "vllm", 5e3)
    assert b.device_name == "NVIDIA H100 80GB HBM3" and b.unfaithful == ()
    assert b.source == "this trace (6 steps)" and from_trace(trace_doc(1)).source == "this trace (1 step)"
    # without the steady group: the decode steps that are not partial
    d = trace_doc()
    d["summary"] = {}
    d["steps"][0]["partial"] = True
    assert len(from_trace(d).steps) == 5


def test_from_trace_names_what_it_does_not_know():
    d = trace_doc()
    for s in d["steps"]:
        s.pop("gen_requests")
    d["devices"] = [{"name": "GPU 2 (name not in trace)", "name_source": "missing"}]
    d["verdict"] = {"verdict": "incomplete-capture", "graph_flagged_steps": [0, 1]}
    b = from_trace(d)
    assert (b.batch, b.batch_known, b.device_name) == (1.0, False, None)
    assert b.unfaithful[0] == "graph replays flagged on 2 step(s)" and "incomplete capture" in b.unfaithful[1]
    assert any("1 sequence per step assumed" in n for n in b.notes)
    with pytest.raises(HostgapError, match="no steps"):
        from_trace({"trace": "x", "steps": []})
    with pytest.raises(HostgapError, match="neither"):
        baseline({"run_id": "r"})


def test_levers_of_a_host_bound_eager_trace():
    rows = by_name(L.document(from_trace(trace_doc()))["levers"])
    assert set(rows) == set(L.NAMES)
    g = rows["graphs"]
    # 100 x 30 us - (30 + 100 x ~1 us) cut, within the 4 ms inside wait
    assert g["applicable"] and 7.0 * MS < g["step_ns"] < 7.2 * MS
    assert g["step_ns_ci"] == pytest.approx([g["step_ns"], g["step_ns"]])  # six identical steps
    assert rows["async"]["step_ns"] == pytest.approx(9 * MS)
    assert "100 eager launches per step x 30.0 us" in g["basis"]
    assert rows["batch"]["reason"] == "needs the model's architecture (the device time at a larger batch): --preset"
    assert rows["fp8"]["reason"] == "needs the model's architecture"


def test_levers_withheld_on_an_unfaithful_trace():
    d = trace_doc()
    d["verdict"]["graph_flagged_steps"] = [0]
    rows = by_name(L.document(from_trace(d))["levers"])
    for name in HOST_SIDE:
        assert not rows[name]["applicable"] and "graph replays flagged on 1 step(s)" in rows[name]["reason"]


def test_full_graph_step_gets_no_graphs_lever():
    d = trace_doc(launches=4, graph_launches=1, kernel_count=425)
    g = by_name(L.document(from_trace(d))["levers"])["graphs"]
    assert not g["applicable"] and g["reason"].startswith("already replayed as a FULL graph")
    # a piecewise step (vLLM's default: attention eager) still gets one
    d = trace_doc(launches=60, graph_launches=33, kernel_count=425)
    assert by_name(L.document(from_trace(d))["levers"])["graphs"]["applicable"]


def run_doc(**kw) -> dict:
    d = {
        "run_id": "r1",
        "valid": True,
        "engine": "hf-cb",
        "device": "cpu",
        "preset": "tiny",
        "batch": 1,
        "prompt_len": 128,
        "n2": 128,
        "differencing": {
            "t_step_ns": 3 * MS,
            "g_step_ns": 1 * MS,
            "h_step_ns": 2 * MS,
            "k_step": 192.0,
            "activity": "cpu-compute",
            "ci": {"t_step_ns": [2.5 * MS, 3.5 * MS]},
        },
        "verdict": {"host_wait_share": None},
        "taxbreak": {"applicable": False},
        "engine_facts": {"cb_split": {"between_ns": 0.4 * MS}},
        "anatomy_summary": {"steps": 128},
        "compute_growth": {
            "prefill_ns": 1 * MS + 127 * 20e3,
            "prefill_rows": 128,
            "decode_ns": 1 * MS,
            "decode_rows": 1,
            "row_ns": 20e3,
            "context_slope_ns": 1e3,
            "context": 192.0,
        },
    }
    d.update(kw)
    return d


def test_from_run_and_the_cpu_levers():
    b = from_run(run_doc())
    assert (b.gpu, b.wall_ci, b.preset, b.engine) == (False, (2.5 * MS, 3.5 * MS), "tiny", "hf-cb")
    assert b.steps.between[0] == pytest.approx(0.4 * MS) and b.steps.host_wait[0] == pytest.approx(2 * MS)
    rows = by_name(L.document(b)["levers"])
    assert rows["graphs"]["reason"] == "no device time to overlap: CPU run"
    assert rows["async"]["reason"].startswith("no device time to overlap: CPU run")
    assert rows["async"]["step_ns"] is None
    cpu = rows["cpu"]  # the whole step / 1.4, the interval's ends too
    assert cpu["step_ns"] == pytest.approx(3 * MS / 1.4)
    assert cpu["step_ns_ci"] == pytest.approx([2.5 * MS / 1.4, 3.5 * MS / 1.4])
    assert rows["batch"]["applicable"] and rows["batch"]["target"] == {"batch": 4}
    assert rows["fp8"]["reason"] == "a device-side lever: no device model for a CPU run"
    bad = from_run(run_doc(valid=False, invalid_reasons=["non-linear"]))
    assert bad.unfaithful == ("invalid measurement: non-linear",)
    rows = L.document(bad)["levers"]
    assert len(rows) == 9 and all(not r["applicable"] and r["reason"].startswith("invalid measurement") for r in rows)
    with pytest.raises(HostgapError, match="no measured step"):
        from_run(run_doc(differencing={"t_step_ns": None}))


def test_corpus_full_graph_vllm_trace_has_no_graphs_lever():
    p = corpus_path("tracelens/mi300x_vllm_decode_fullgraph.json.gz", vendored=True)
    r = hostgap.advise(str(p), cache=False)
    g = by_name(r.to_dict()["levers"])["graphs"]
    assert not g["applicable"] and "already replayed as a FULL graph" in g["reason"]
    assert "421 of 425 kernels" in g["reason"]
    assert r.levers.num_rows == len(L.NAMES)


def test_corpus_eager_trace_gets_a_graphs_lever_with_its_launches():
    p = corpus_path("tracelens/h100_bert-small.json.gz", vendored=True)
    rows = by_name(hostgap.advise(str(p), cache=False).to_dict()["levers"])
    g = rows["graphs"]
    assert g["applicable"] and g["gain"] > 0.1 and "60 eager launches per step" in g["basis"]


def test_corpus_device_bound_trace_gets_no_host_lever_beyond_its_host_share():
    p = corpus_path("tracelens/h100_qwen1.5-0.5b.json.gz", vendored=True)
    doc = hostgap.analyze(str(p), cache=False).to_dict()
    assert doc["verdict"]["verdict"] == "device-bound"
    share = doc["verdict"]["host_wait_share"]
    rows = by_name(hostgap.advise(doc).to_dict()["levers"])
    for name in HOST_SIDE:
        if rows[name]["applicable"]:
            assert rows[name]["gain"] <= share + 1e-9 < 0.10


def test_cli_json_csv_and_bad_input(tmp_path):
    p = vendored_path("tracelens/h100_bert-small.json.gz")
    res = CliRunner().invoke(cli, ["advise", str(p), "--json", "--no-cache"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == hostgap.SCHEMA_VERSION
    assert list(doc["levers"][0]) == [
        "lever",
        "applicable",
        "reason",
        "target",
        "step_ns",
        "step_ns_ci",
        "tokens_per_s",
        "gain",
        "regime_after",
        "basis",
        "validated",
    ]
    res = CliRunner().invoke(cli, ["advise", str(p), "--csv", "--no-cache"])
    assert res.exit_code == 0 and res.stdout.splitlines()[0].startswith("input,lever,applicable")
    res = CliRunner().invoke(cli, ["advise", str(p), "--no-cache"])
    assert res.exit_code == 0 and "levers for" in res.stdout and "graphs" in res.stdout
    for args, msg in (
        (["advise", str(tmp_path / "none")], "no such run"),
        (["advise", str(p), "--preset", "nope"], "unknown preset"),
        (["advise", str(p), "--gpu", "nope"], "nope"),
    ):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2 and msg in res.stderr and "Traceback" not in res.output
        assert len(res.stderr.strip().splitlines()) == 1


def test_basis_lines_name_the_input_numbers():
    d = trace_doc()
    d["devices"] = []
    rows = by_name(L.document(from_trace(d))["levers"])
    assert "no graph-launch measurement on a GPU the input does not name" in rows["graphs"]["basis"]
    assert "less its launch floor (5.0 us per launch" in rows["cpu"]["basis"]
    d["taxbreak"] = {}
    assert "less its launch floor (0.0 us per launch" in by_name(L.document(from_trace(d))["levers"])["cpu"]["basis"]
    cpu_run = by_name(L.document(from_run(run_doc()))["levers"])
    # t 3 ms - g 1 ms of framework time between compute ops
    assert "host time between compute ops (framework work per op), median 2.000 ms" in cpu_run["fusion"]["basis"]
    assert cpu_run["fusion"]["applicable"] and cpu_run["fusion"]["step_ns"] == pytest.approx(3 * MS - 0.3 * 2 * MS)


def test_gpu_levers_on_launches_need_their_costs():
    d = trace_doc()
    for s in d["steps"]:
        s["taxbreak"] = None
    rows = by_name(L.document(from_trace(d))["levers"])
    why = "needs the launches' costs: TaxBreak does not apply to this input"
    assert [rows[n]["reason"] for n in ("graphs", "fusion", "megakernel")] == [why, why, why]
    assert rows["cpu"]["applicable"] and rows["async"]["applicable"]


def test_from_run_host_wait_on_a_gpu_and_a_cpu():
    gpu = run_doc(device="cuda", engine="vllm", preset="llama-3.2-1b", device_name="NVIDIA H100 80GB HBM3")
    gpu["differencing"]["activity"] = "gpu"
    gpu["verdict"] = {"host_wait_share": 0.25}
    gpu["taxbreak"] = {"orchestrate_ns": 256 * MS, "launches": 12800, "graph_launches": 0, "launch_floor_ns": 4.7e3}
    b = from_run(gpu)
    # a GPU run: the verdict's host-caused share x the wall; launches and costs per step over 128 steps
    assert b.gpu and b.steps.host_wait[0] == pytest.approx(0.75 * MS)
    assert (b.steps.orchestrate[0], b.steps.launches[0]) == pytest.approx((2 * MS, 100.0))
    assert b.launch_floor_ns == 4.7e3 and b.device_name == "NVIDIA H100 80GB HBM3"
    # a CPU run ignores a share: the differencing host term
    cpu = run_doc()
    cpu["verdict"] = {"host_wait_share": 0.25}
    assert from_run(cpu).steps.host_wait[0] == pytest.approx(2 * MS)
    # without the share on a GPU: the host term, never above the wall
    gpu["verdict"] = {}
    gpu["differencing"]["h_step_ns"] = 5 * MS
    assert from_run(gpu).steps.host_wait[0] == pytest.approx(3 * MS)


def test_attached_run_and_rank_set_baselines():
    bare = trace_doc()
    for s in bare["steps"]:
        s.pop("gen_requests")
    b = baseline({"run_id": "a1", "mode": "attach", "batch": 4, "analysis": bare})
    assert (b.batch, b.batch_known, b.source) == (4.0, True, "attached run a1 (6 steps)")
    assert not any("batch" in n for n in b.notes)
    # the trace's own batch wins over the run's
    assert baseline({"run_id": "a2", "mode": "attach", "batch": 4, "analysis": trace_doc()}).batch == 8.0
    assert baseline({"run_id": "a3", "batch": 0, "analysis": bare}).batch_known is False
    slow = trace_doc(host_wait_ns=6 * MS)
    s = baseline({"kind": "trace_set", "ranks": [{"rank": 0, **trace_doc()}, {"rank": 1, **slow}]})
    assert s.steps.host_wait[0] == 6 * MS and "advised on rank 1" in s.notes[-1]
    with pytest.raises(HostgapError, match="a rank set without steps"):
        baseline({"kind": "trace_set", "ranks": [{"rank": 0, "steps": []}]})


def test_a_run_from_before_validity_is_judged_valid():
    d = run_doc()
    d.pop("valid")
    assert from_run(d).unfaithful == ()


def test_an_attached_runs_json_document_is_advised_on_its_analysis():
    # attach --json carries the steps at the top and the analysis beside them: the analysis wins
    doc = {"run_id": "a1", "mode": "attach", "batch": 8, "steps": [step(0)], "analysis": trace_doc()}
    b = baseline(doc)
    assert len(b.steps) == 6 and b.engine == "vllm" and b.device_name == "NVIDIA H100 80GB HBM3"


def test_from_run_refuses_a_run_without_a_step_and_reads_only_a_pair_interval():
    for bad in ({"t_step_ns": 0.0, "g_step_ns": 1.0}, {"t_step_ns": 3 * MS, "g_step_ns": None}):
        with pytest.raises(HostgapError, match="no measured step"):
            from_run(run_doc(differencing=bad))
    d = run_doc()
    d["differencing"]["ci"]["t_step_ns"] = [1.0, 2.0, 3.0]
    assert from_run(d).wall_ci is None
