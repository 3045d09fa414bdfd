"""The model commands' contracts: fit hygiene, default output location, one TP path, guards."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.cli.models import account_cmd, fit_cmd, predict_cmd, regimes_cmd
from hostgap.model.fitting import measured as fitting
from hostgap.model.stepmodel import DEFAULT_HOST
from test_model_stepmodel import _results, _write


def test_every_option_has_help_and_device_means_one_thing_per_command():
    for cmd in (account_cmd, fit_cmd, predict_cmd, regimes_cmd):
        for p in cmd.params:
            if p.param_type_name == "option":
                assert p.help, (cmd.name, p.name)
    r = CliRunner().invoke(cli, ["predict", "--help"])
    assert "--gpu" in r.output and "--device " not in r.output  # --device is a hidden alias there
    assert "host=0.5" in r.output
    r = CliRunner().invoke(cli, ["fit", "--help"])
    assert "MEASURED on" in r.output


def test_predict_gpu_and_device_alias_agree_and_tp_is_one_path():
    a = CliRunner().invoke(cli, ["predict", "llama-3.1-8b", "--gpu", "h200", "--json"])
    b = CliRunner().invoke(cli, ["predict", "llama-3.1-8b", "--device", "h200", "--json"])
    assert a.exit_code == b.exit_code == 0
    assert json.loads(a.stdout)["prediction"] == json.loads(b.stdout)["prediction"]
    tp4 = json.loads(CliRunner().invoke(cli, ["predict", "llama-3.1-8b", "--tp", "4", "--json"]).stdout)
    w = json.loads(CliRunner().invoke(cli, ["predict", "llama-3.1-8b", "--what-if", "tp=4", "--json"]).stdout)
    assert tp4["prediction"]["total_ns"] == w["what_ifs"][0]["scenario"]["total_ns"]
    assert tp4["prediction"]["host_ns"] == w["what_ifs"][0]["scenario"]["host_ns"]


def test_predict_states_its_basis_once():
    """The table prints one ``basis:`` line; no ``note:`` repeating it (nor trailing blanks)."""
    r = CliRunner().invoke(cli, ["predict", "llama-3.1-8b", "--gpu", "h100"])
    assert r.exit_code == 0, r.output
    assert r.output.count("no fitted model: default efficiencies") == 1
    assert "basis: no fitted model" in r.stdout and "note:" not in r.output
    assert [l for l in r.stdout.splitlines() if l != l.rstrip()] == []
    j = CliRunner().invoke(cli, ["predict", "llama-3.1-8b", "--gpu", "h100", "--json"])
    assert "no fitted model" in json.loads(j.stdout)["basis"] and "note: no fitted model" in j.stderr


def test_memory_guard_warns_with_the_numbers():
    r = CliRunner().invoke(cli, ["predict", "llama-3.1-70b", "--gpu", "h100", "--json"])
    assert r.exit_code == 0
    assert "warning: weights 141.1 GB + KV cache 0.7 GB per rank exceed h100-sxm's 80 GB" in r.stderr
    assert json.loads(r.stdout)["memory"]["fits"] is False
    r = CliRunner().invoke(cli, ["predict", "llama-3.1-70b", "--gpu", "h100", "--tp", "2", "--json"])
    assert "warning" not in r.stderr and json.loads(r.stdout)["memory"]["fits"] is True


def test_fit_refuses_a_run_without_k_step_naming_the_key(tmp_path):
    docs = _results(batches=(1, 2, 4), prompts=(128,))
    del docs[1]["differencing"]["k_step"]
    paths = _write(tmp_path, docs)
    r = CliRunner().invoke(cli, ["fit", *paths, "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and "missing differencing.k_step" in r.output and "Traceback" not in r.output
    assert r.output.count("\n") == 1 and not (tmp_path / "m.json").exists()
    cell = fitting.cell_from_results(docs[1])
    assert cell.missing == ["differencing.k_step"] and not cell.usable


def test_fit_table_shows_the_written_model(tmp_path):
    # every number of the printed table is the model file's, in the unit of its header
    paths = _write(tmp_path, _results(batches=(1, 2, 4), prompts=(128, 512)))
    r = CliRunner().invoke(cli, ["fit", *paths, "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 0, r.output
    g = json.loads((tmp_path / "m.json").read_text())["groups"][0]
    header, row = r.output.splitlines()[:2]
    units = "cells dev scale serial ms per-seq us per-kernel us held-out MAPE % max err % host-only MAPE %"
    assert header.split()[3:] == units.split()
    cells = row.split()[-8:]
    h, ho = g["host"], g["heldout"]
    assert cells == [
        str(g["n_cells"]),
        f"{g['device_scale']:.3f}",
        f"{h['serial_ns'] / 1e6:.3f}",
        f"{h['per_seq_ns'] / 1e3:.1f}",
        f"{h['per_kernel_ns'] / 1e3:.2f}",
        f"{ho['mape'] * 100:.1f}",
        f"{ho['max_error'] * 100:.1f}",
        f"{g['heldout_host_only']['mape'] * 100:.1f}",
    ]
    assert float(cells[5]) > 0.1 and float(cells[4]) > 1  # not numbers a wrong unit would round to 0


def test_fit_reads_the_default_database_only_when_given_nothing(tmp_path, monkeypatch):
    from hostgap.store.database import RunsDB

    docs = _results(batches=(1, 2, 4), prompts=(128, 512))
    with RunsDB(tmp_path / "default.sqlite") as d:
        for doc in docs[:4]:
            d.add(doc)
    monkeypatch.setenv("HOSTGAP_DB", str(tmp_path / "default.sqlite"))
    paths = _write(tmp_path, docs[:3])
    out = tmp_path / "m.json"
    assert CliRunner().invoke(cli, ["fit", *paths, "-o", str(out)]).exit_code == 0
    assert json.loads(out.read_text())["groups"][0]["n_cells"] == 3  # the files only
    r = CliRunner().invoke(cli, ["fit", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["groups"][0]["n_cells"] == 4  # the default database


def test_fit_refuses_a_group_of_one_cell(tmp_path):
    paths = _write(tmp_path, _results(batches=(1,), prompts=(128,)))
    r = CliRunner().invoke(cli, ["fit", *paths, "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and "no (device, engine, TP) group has two usable cells" in r.output
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--test-device", "h100"], "--device"),
        (["--test-mlp", "other.csv"], "--test-mlp"),
        (["--test-mlp", "other.csv", "--device", "a100"], "--test-mlp"),
    ],
)
def test_fit_kernel_flags_each_need_vidur_files(tmp_path, flags, named):
    # each of the three alone is refused, not only all of them together
    paths = _write(tmp_path, _results(batches=(1, 2, 4), prompts=(128,)))
    r = CliRunner().invoke(cli, ["fit", *paths, *flags, "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and f"{named}: needs --vidur-mlp files to fit on" in r.output
    assert not (tmp_path / "m.json").exists()


def test_fit_device_alone_needs_kernel_files(tmp_path):
    paths = _write(tmp_path, _results(batches=(1, 2, 4), prompts=(128,)))
    r = CliRunner().invoke(cli, ["fit", *paths, "--device", "a100", "-o", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and "--device: needs --vidur-mlp or --all-reduce files to fit on" in r.output
    assert not (tmp_path / "m.json").exists()


def test_fit_without_output_writes_the_documented_default(tmp_path, monkeypatch):
    monkeypatch.delenv("HOSTGAP_MODEL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    paths = _write(tmp_path, _results(batches=(1, 2, 4), prompts=(128,)))
    r = CliRunner().invoke(cli, ["fit", *paths])
    assert r.exit_code == 0, r.output
    target = tmp_path / "data" / "hostgap" / "model.json"
    assert target.exists() and f"wrote {target}" in r.output and "default location" in r.output
    assert not (tmp_path / "hostgap-model.json").exists()
    monkeypatch.setenv("HOSTGAP_MODEL", str(tmp_path / "elsewhere.json"))
    r = CliRunner().invoke(cli, ["fit", *paths])
    assert (tmp_path / "elsewhere.json").exists()


def test_measured_runs_are_matched_like_with_like_by_tp(tmp_path):
    docs = _results(batches=(2,), prompts=(512,), noise=0.0)
    tp2 = json.loads(json.dumps(docs[0]))
    tp2["run_id"] = "tp2-run"
    tp2["tp"] = 2
    paths = _write(tmp_path, docs + [tp2])
    args = [
        "predict",
        "llama-3.2-1b",
        "--gpu",
        "h100",
        "--engine",
        "hf",
        "--batch",
        "2",
        "--context",
        "544",
        "--json",
        *paths,
    ]
    d = json.loads(CliRunner().invoke(cli, args).stdout)
    assert [m["run_id"] for m in d["measured"]] == [docs[0]["run_id"]]
    d = json.loads(CliRunner().invoke(cli, [*args, "--tp", "2"]).stdout)
    assert [m["run_id"] for m in d["measured"]] == ["tp2-run"]


def test_fit_paper_cells_reproduces_the_defaults_and_prints_every_cell(tmp_path):
    out = tmp_path / "paper.json"
    r = CliRunner().invoke(cli, ["fit", "--paper-cells", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for k in ("serial_ns", "per_kernel_ns", "dispatch_ns", "per_rank_ns", "per_seq_ns"):
        assert d["host"][k] == pytest.approx(getattr(DEFAULT_HOST["vllm"], k), rel=0.01)
    assert {c["cell"] for c in d["cells"]} >= {"8b_b1", "1b_b1", "8b_tp2", "8b_tp4", "8b_b64", "3b_b1"}
    assert "leave-one-out" in r.stderr
    (g,) = fitting.load_model(out).groups
    assert g.device == "h100-sxm" and g.engine == "vllm"


def test_regimes_places_published_and_predicted_cells_on_one_map():
    r = CliRunner().invoke(cli, ["regimes", "--paper-cells", "--predict", "--json"])
    assert r.exit_code == 0, r.output
    cells = {c["run_id"]: c for c in json.loads(r.stdout)["cells"]}
    b1, tp2, b64 = cells["published:8b_b1"], cells["published:8b_tp2"], cells["published:8b_b64"]
    assert b1["host_fraction"] == pytest.approx(5.78 / 12.19)
    assert tp2["host_fraction"] == pytest.approx(0.48 / 15.9) and tp2["tp"] == 2
    assert b64["host_fraction"] == pytest.approx(0.59 / 28.59)
    assert (b1["regime"], b1["predicted_regime"]) == ("host-bound", "host-bound")
    assert (tp2["regime"], tp2["predicted_regime"]) == ("device-bound", "device-bound")
    assert (b64["regime"], b64["predicted_regime"]) == ("device-bound", "device-bound")
    text = CliRunner().invoke(cli, ["regimes", "--paper-cells", "--predict"]).output
    assert "0.47 H | p 0.48 H" in text and "TP-2" in text


def test_regimes_predict_on_measured_runs(tmp_path):
    paths = _write(tmp_path, _results(batches=(1, 16), prompts=(512,), noise=0.0))
    r = CliRunner().invoke(cli, ["regimes", "--predict", "--csv", *paths])
    assert r.exit_code == 0, r.output
    rows = r.output.strip().splitlines()
    assert rows[0].endswith("predicted_host_fraction,predicted_regime") and len(rows) == 3
    assert all(0.0 <= float(x.split(",")[-2]) <= 1.0 for x in rows[1:])


def test_graphs_capture_choice_and_a_bad_one_is_one_line():
    r = CliRunner().invoke(cli, ["predict", "llama-3.2-1b", "--what-if", "graphs:capture=full", "--json"])
    assert r.exit_code == 0, r.output
    w = json.loads(r.stdout)["what_ifs"][0]
    assert w["capture"] == "full" and w["scenario"]["graph_launches"] == 1
    assert w["scenario"]["kernels"] == 7  # LM head + 6 sampling kernels outside the one graph
    r = CliRunner().invoke(cli, ["predict", "llama-3.2-1b", "--engine", "hf", "--what-if", "graphs:capture=piecewise"])
    assert r.exit_code == 2 and "hf has no capture='piecewise'" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
