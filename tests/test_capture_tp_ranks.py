"""Tensor-parallel runs in the measurement protocol, with a stand-in engine (no vLLM): every
kept traced run keeps all ranks' traces in ``traces/ranks/<rank-0 trace stem>/``, the others
are removed with their rank-0 trace; ``--tp`` is checked before anything runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hostgap.capture.engines.vllm import VllmOptions  # noqa: F401 (imports vllm.runtime in its order)
from hostgap.capture.engines.vllm.runtime import rank_cores
from hostgap.capture.protocol import engine as engine_mod
from hostgap.capture.protocol.orchestrate import MeasureConfig, cell_key, measure
from hostgap.cli import cli
from test_capture_interleave import LOG, StandA


class StandTP(StandA):
    """Writes a rank-1 trace beside each traced run's rank-0 trace, as the vLLM engine does."""

    name = "stand_tp"

    def __init__(self, workload, **kw):
        super().__init__(workload, **kw)
        self.rank_traces = {}

    def generate_traced(self, n, trace_dir):
        wall, path = super().generate_traced(n, trace_dir)
        if not Path(trace_dir).name.startswith("."):
            ranks = Path(trace_dir) / "ranks" / f"n{n}_{len(LOG)}"
            ranks.mkdir(parents=True)
            for r in (0, 1):
                shutil.copyfile(path, ranks / f"rank{r}.json")
            self.rank_traces[str(path)] = ranks
        return wall, path


@pytest.fixture
def stand_tp(monkeypatch, quiet_machine):
    monkeypatch.setitem(engine_mod.ENGINES, "stand_tp", StandTP)
    monkeypatch.setattr("hostgap.capture.protocol.interleave.time.sleep", lambda s: None)
    LOG.clear()


def test_rank_traces_follow_the_kept_traces(stand_tp, tmp_path):
    """keep_traces "ends", N1 = 1, N2 = 8, one traced repeat: the sweep's traced runs at
    1, 2, 4, 8 (or whatever it holds) leave only trace_n1_r0 and trace_n8_r0, each with both
    ranks."""
    cfg = MeasureConfig(
        engine="stand_tp",
        preset="tiny",
        device="cpu",
        n1=1,
        n2=8,
        repeats=3,
        traced_repeats=1,
        warmup=1,
        retries=0,
        n_boot=200,
        out=str(tmp_path / "runs"),
        keep_traces="ends",
    )
    r = measure(cfg)
    run = Path(r["run_dir"])
    kept = sorted(p.name for p in (run / "traces" / "ranks").iterdir())
    assert kept == ["trace_n1_r0", "trace_n8_r0"]
    for k in kept:
        assert sorted(p.name for p in (run / "traces" / "ranks" / k).iterdir()) == ["rank0.json", "rank1.json"]
        assert (run / "traces" / f"{k}.json").is_file()
    timings = json.loads((run / "timings.json").read_text())
    listed = sorted(t["rank_traces"] for ts in timings["traced"].values() for t in ts if t.get("rank_traces"))
    assert listed == ["traces/ranks/trace_n1_r0", "traces/ranks/trace_n8_r0"]
    assert not (run / "traces" / ".warmup").exists()


def test_tp_needs_the_vllm_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTGAP_DB", str(tmp_path / "runs.sqlite"))  # a regression would measure
    out = CliRunner().invoke(cli, ["measure", "-p", "tiny", "--device", "cpu", "--tp", "2", "-o", str(tmp_path)])
    assert out.exit_code == 2
    assert "--tp: tensor parallel runs on the vllm engine only, not hf" in out.output
    out = CliRunner().invoke(cli, ["measure", "-p", "tiny", "--device", "cpu", "--tp", "0", "-o", str(tmp_path)])
    assert out.exit_code == 2 and "--tp: must be >= 1, got 0" in out.output


def test_cell_key_tells_tensor_parallel_cells_apart():
    one = MeasureConfig(engine="vllm", preset="tiny", device="cpu", n1=1, n2=8)
    two = MeasureConfig(engine="vllm", preset="tiny", device="cpu", n1=1, n2=8, tp=2)
    assert cell_key(two) == cell_key(one) + "|tp2" and "tp" not in cell_key(one)


def test_rank_cores_deals_the_cores_out(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3, 5})
    assert rank_cores(2) == "0,2,5|1,3"
    assert rank_cores(1) == "0,1,2,3,5"
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {4})
    assert rank_cores(2) == "4|4"
