"""hostgap.predict, the front door of ``hostgap predict``: the same document, text and errors as
the command, and the numbers as named attributes and an Arrow table."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import hostgap
from hostgap.cli import cli
from test_model_stepmodel import _results, _write


def _cli(*args: str):
    r = CliRunner().invoke(cli, ["predict", *args])
    assert r.exit_code == 0, r.output
    return r


def test_predict_is_public_and_lazy():
    assert "predict" in hostgap.__all__ and "Prediction" in hostgap.__all__
    assert hostgap.predict is hostgap.api.predict and hostgap.Prediction is hostgap.api.Prediction
    assert "predict" in dir(hostgap)


def test_to_json_print_and_notes_are_the_command_s():
    p = hostgap.predict("llama-3.1-8b", gpu="h100", what_if="graphs")
    j = _cli("llama-3.1-8b", "--gpu", "h100", "--what-if", "graphs", "--json")
    assert p.to_json() + "\n" == j.stdout
    assert "\n".join(p.notes(as_json=True)) + "\n" == j.stderr
    t = _cli("llama-3.1-8b", "--gpu", "h100", "--what-if", "graphs")
    assert p.text() == t.stdout and t.stderr == "" and p.notes() == []
    assert p.to_dict() == json.loads(j.stdout)


def test_attributes_hold_the_numbers():
    p = hostgap.predict("llama-3.1-8b", gpu="h100", what_if=["graphs", "spec:gamma=4,alpha=0.7"])
    s = p.prediction
    assert s["total_ns"] == pytest.approx(s["device_ns"] + s["collective_ns"] + s["collective_wait_ns"] + s["host_ns"])
    assert s["host_fraction"] == pytest.approx(s["host_ns"] / s["total_ns"])
    assert p.device == "h100-sxm" and p.basis.startswith("no fitted model") and p.measured == []
    assert p.memory["fits"] is True and p.memory["device_bytes"] == pytest.approx(80e9, rel=0.1)
    assert [w["name"] for w in p.what_ifs] == ["graphs", "spec"]
    graphs = p.what_ifs[0]
    assert graphs["scenario"]["total_ns"] < graphs["baseline"]["total_ns"] == s["total_ns"]
    t = p.what_if_table
    assert t.num_rows == 2 and t.column("name").to_pylist() == ["graphs", "spec"]
    assert t.column("total_ns").to_pylist() == [w["scenario"]["total_ns"] for w in p.what_ifs]
    assert t.column("baseline_total_ns").to_pylist() == [s["total_ns"]] * 2
    assert t.column("step_change").to_pylist() == [w["step_change"] for w in p.what_ifs]
    assert t.column("gamma").to_pylist() == [None, 4.0] and t.column("measured_runs").to_pylist() == [0, 0]
    assert "llama-3.1-8b on h100-sxm" in repr(p) and "2 what-if(s)" in repr(p)


def test_keywords_are_the_options():
    a = hostgap.predict(
        "llama-3.1-70b", batch=8, context=4096, tp=4, dtype="fp8", engine="hf", mode="graph", gpu="h200"
    )
    b = _cli(
        "llama-3.1-70b", "--batch", "8", "--context", "4096", "--tp", "4", "--dtype", "fp8", "--engine", "hf",
        "--mode", "graph", "--gpu", "h200", "--json",
    )  # fmt: skip
    assert a.to_json() + "\n" == b.stdout
    c = a.to_dict()["cell"]
    assert (c["batch"], c["context"], c["tp"], c["dtype"], c["engine"]) == (8, 4096, 4, "fp8", "hf")
    k = hostgap.predict("llama-3.1-8b", kernels_per_step=500, tp=2, tp_form="additive")
    assert (
        k.to_json() + "\n"
        == _cli("llama-3.1-8b", "--kernels-per-step", "500", "--tp", "2", "--tp-form", "additive", "--json").stdout
    )


def test_measured_runs_and_a_fitted_model_as_the_command(tmp_path):
    paths = _write(tmp_path, _results(batches=(1, 4, 16), prompts=(128, 512), noise=0.01))
    model = tmp_path / "m.json"
    assert CliRunner().invoke(cli, ["fit", *paths, "-o", str(model)]).exit_code == 0
    kw = dict(gpu="NVIDIA H100 80GB HBM3", engine="hf", batch=4, context=544)
    p = hostgap.predict("llama-3.2-1b", model=model, results=[Path(x) for x in paths], what_if="graphs", **kw)
    cmd = ["--device", kw["gpu"], "--engine", "hf", "--batch", "4", "--context", "544", "--what-if", "graphs"]
    r = _cli("llama-3.2-1b", *cmd, "--model", str(model), "--json", *paths)
    assert p.to_json() + "\n" == r.stdout and r.stderr == ""
    assert p.basis.startswith(f"fitted model {model} (NVIDIA H100 80GB HBM3/hf/TP-1, 6 cells")
    assert "; kernels per step " in p.basis and p.basis.endswith(" from 1 measured run(s)")
    (m,) = p.measured
    assert m["run_id"] == "llama-3.2-1b-b4-p512-eager"
    assert m["error_total"] == pytest.approx((p.prediction["total_ns"] - m["t_step_ns"]) / m["t_step_ns"])
    assert abs(m["error_total"]) < 0.05
    assert p.text() == _cli("llama-3.2-1b", *cmd, "--model", str(model), *paths).stdout
    one = hostgap.predict("llama-3.2-1b", results=paths[0], **kw)  # one path as a string
    assert one.measured == [] and "kernels per step" not in one.basis


def test_errors_are_the_command_s(tmp_path):
    for kw, args in (
        ({}, ["nosuch"]),
        ({"what_if": "warp"}, ["tiny", "--what-if", "warp"]),
        ({"gpu": "nosuch"}, ["tiny", "--gpu", "nosuch"]),
        ({"results": str(tmp_path / "absent.json")}, ["tiny", "--results", str(tmp_path / "absent.json")]),
    ):
        r = CliRunner().invoke(cli, ["predict", *args])
        assert r.exit_code == 2
        with pytest.raises(hostgap.HostgapError) as e:
            hostgap.predict(args[0], **kw)
        assert r.stderr == f"hostgap: error: {e.value}\n"
    with pytest.raises(hostgap.HostgapError, match="^nosuch: unknown preset; known presets: llama-3.2-1b"):
        hostgap.predict("nosuch")


def test_memory_warning_and_notebook_view():
    p = hostgap.predict("llama-3.1-70b", gpu="h100", what_if="tp=2")
    assert p.memory["fits"] is False
    (warning,) = p.notes()
    assert warning.startswith("warning: weights 141.1 GB + KV cache 0.7 GB per rank exceed h100-sxm's 80 GB")
    assert p.notes(as_json=True)[0].startswith("note: no fitted model") and p.notes(as_json=True)[1] == warning
    html = p._repr_html_()
    assert "hostgap-result" in html and "no view" not in html
    assert "llama-3.1-70b on h100-sxm: batch 1, KV 2048, TP 1" in html and "<td>what-if tp</td>" in html
    assert f"<td>{p.prediction['total_ns'] / 1e6:.3f}</td>" in html
    assert f"<td>{p.what_ifs[0]['step_change'] * 100:+.1f} %</td>" in html
    buf = io.StringIO()
    p.print(buf)
    assert buf.getvalue().startswith("llama-3.1-70b on h100-sxm: batch 1, KV 2048, TP 1, bfloat16, vllm eager\n")
