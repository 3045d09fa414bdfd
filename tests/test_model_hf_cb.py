"""The model of transformers' continuous batching (``--engine hf-cb``): its launch table and graph
capture are transformers' own, its serial part is the loop's work between forward passes (a
default measured on a CPU, or the median ``engine_facts.cb_split.between_ns`` of the hf-cb runs
given to predict), and the overlap what-if hides it behind the GPU step as for vLLM; the
published asynchronous-batching figure placed by hand."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hostgap import api
from hostgap.cli import cli
from hostgap.model import cell as cell_model
from hostgap.model import published
from hostgap.model.accounting import GRAPH_CAPTURE, LAUNCH_TABLES
from hostgap.model.prediction import measured_loop
from hostgap.model.stepmodel import DEFAULT_HOST
from hostgap.model.whatif import registry as scenarios
from hostgap.model.whatif.cpu import busy_threads


def run_doc(run_id: str, between_ns, *, batch=4, engine="hf-cb", preset="tiny") -> dict:
    """The fields of a results document that predict reads for the loop's serial part."""
    return {
        "schema_version": 1,
        "run_id": run_id,
        "valid": True,
        "preset": preset,
        "engine": engine,
        "batch": batch,
        "mode": "eager",
        "tp": 1,
        "dtype": "float32",
        "device": "cpu",
        "prompt_len": 16,
        "n1": 1,
        "n2": 64,
        "engine_facts": {"cb_split": {"between_ns": between_ns, "step_ns": 10e6}},
    }


def setup(batch=4, mode="eager"):
    return scenarios.default_setup("tiny", batch=batch, mode=mode, engine="hf-cb")


def test_the_engine_runs_transformers_modules():
    assert LAUNCH_TABLES["hf-cb"] == LAUNCH_TABLES["hf"]
    assert GRAPH_CAPTURE["hf-cb"] == {"full": ("sample",)}
    assert busy_threads("hf-cb", 1) == 1.0
    # the default serial part through the two measured batches' means: 0.416 ms at 1, 0.684 ms at 4
    h = DEFAULT_HOST["hf-cb"]
    assert h.serial_ns + h.per_seq_ns * 1 == pytest.approx((0.391e6 + 0.441e6) / 2, rel=1e-3)
    assert h.serial_ns + h.per_seq_ns * 4 == pytest.approx((0.646e6 + 0.722e6) / 2, rel=1e-3)
    assert cell_model.predict(setup(batch=4)).serial_ns == pytest.approx(h.serial_ns + 4 * h.per_seq_ns)


def test_the_measured_serial_part_is_the_median_of_matching_runs():
    s = setup(batch=4)
    docs = [
        run_doc("a", 1.0e6),
        run_doc("b", 3.0e6),
        run_doc("c", 2.0e6),
        run_doc("other batch", 9e6, batch=1),
        run_doc("other engine", 9e6, engine="hf"),
        run_doc("other model", 9e6, preset="llama-3.2-1b"),
        run_doc("no split", None),
        run_doc("negative", -1.0),
    ]
    assert measured_loop(docs, s) == (2.0e6, ["a", "b", "c"])
    assert measured_loop(docs[3:], s) is None
    assert measured_loop([], s) is None


def test_predict_uses_the_measured_serial_part_and_overlap_hides_it_by_hand(tmp_path):
    f = tmp_path / "run.json"
    f.write_text(json.dumps([run_doc("r1", 2.5e6), run_doc("r2", 3.5e6)]))
    p = api.predict("tiny", engine="hf-cb", batch=4, mode="graph", what_if=["overlap:out=100"], results=[str(f)])
    step = p.prediction
    d = p.to_dict()
    assert step["serial_host_ns"] == pytest.approx(3.0e6)  # the median of the two runs, per_seq dropped
    assert "serial part 3.000 ms per step" in d["basis"] and "r1, r2" in d["basis"]
    (w,) = d["what_ifs"]
    base, new = w["baseline"], w["scenario"]
    gpu = base["device_ns"] + base["collective_ns"]
    # sync: serial + max(orchestration, GPU); async: max(orchestration + serial, GPU)
    assert base["total_ns"] == pytest.approx(3.0e6 + max(base["orchestration_ns"], gpu))
    assert new["total_ns"] == pytest.approx(max(base["orchestration_ns"] + 3.0e6, gpu))
    assert w["wasted_fraction"] == pytest.approx(0.01)
    assert w["ttft_added_ns"] == pytest.approx(new["total_ns"])
    assert w["hidden_ns"] == pytest.approx(base["total_ns"] - new["total_ns"])
    assert "(3.000 ms: the loop's work between forward passes)" in " ".join(w["assumptions"])
    # without the run: the default serial part
    q = api.predict("tiny", engine="hf-cb", batch=4, mode="graph")
    assert q.prediction["serial_host_ns"] == pytest.approx(0.327e6 + 4 * 0.0893e6)


def test_overlap_on_the_published_run_by_hand():
    row = next(f for f in published.FIGURES if f.id == "hf_cb_async").row()
    # 300.6 s with 24.0 % idle: the rule hides the idle part -> 300.6 x 0.76 = 228.456 s
    assert row["predicted"] == pytest.approx(228.456)
    assert row["error"] == pytest.approx((228.456 - 234.5) / 234.5)
    assert row["status"] == "predicted" and row["host_fraction"] == pytest.approx(0.24)
    idle = next(f for f in published.FIGURES if f.id == "hf_cb_idle").row()
    p = cell_model.predict(published._hf_cb_cell())
    assert idle["predicted"] == pytest.approx(100 * p.host_fraction)
    assert "extrapolated" in idle["note"]


def test_the_command_line_takes_the_engine(tmp_path):
    r = CliRunner().invoke(
        cli, ["predict", "tiny", "--engine", "hf-cb", "--batch", "4", "--what-if", "overlap", "--json"]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["cell"]["engine"] == "hf-cb" and d["what_ifs"][0]["name"] == "overlap"
    r = CliRunner().invoke(cli, ["predict", "tiny", "--engine", "hf", "--what-if", "overlap"])
    assert r.exit_code == 2 and "no overlap scheduler" in r.output
