"""Step model: the host term is recovered from noisy synthetic runs; fit/predict/regimes end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import hostgap
from hostgap.cli import cli
from hostgap.model.accounting import account, decode_cell
from hostgap.model.arch import get_preset
from hostgap.model.devices import find_device
from hostgap.model.fitting import measured as fitting
from hostgap.model.roofline import default_model, device_time
from hostgap.model.stepmodel import DEFAULT_HOST, HostModel, fit_host, leave_one_out

TRUE = HostModel(serial_ns=1.5e6, per_seq_ns=40e3, per_kernel_ns=11e3, launch_floor_ns=4.5e3, graph_launch_ns=30e3)
SCALE = 1.2


def _results(
    preset="llama-3.2-1b",
    batches=(1, 2, 4, 8, 16, 32),
    prompts=(128, 512, 2048),
    noise=0.02,
    seed=0,
    engine="hf",
    mode="eager",
    device_name="NVIDIA H100 80GB HBM3",
):
    """Results JSON documents (the measure contract) generated from a known step model."""
    rng = np.random.default_rng(seed)
    arch, dev = get_preset(preset), find_device(device_name)
    docs = []
    for b in batches:
        for p in prompts:
            n1, n2 = 1, 64
            ctx = round(p + (n1 + n2 - 1) / 2)
            acc = account(arch, decode_cell(b, ctx, engine=engine))
            g = SCALE * device_time(acc, dev, default_model(dev.name)).total_ns
            k = acc.launches
            orch = TRUE.graph_launch_ns if mode == "graph" else TRUE.per_kernel_ns * k
            t = (TRUE.serial_ns + TRUE.per_seq_ns * b + max(orch, g)) * (1 + noise * rng.standard_normal())
            docs.append(
                {
                    "schema_version": 1,
                    "run_id": f"{preset}-b{b}-p{p}-{mode}",
                    "preset": preset,
                    "arch": arch.to_dict(),
                    "device": "cuda",
                    "device_name": device_name,
                    "mode": mode,
                    "engine": engine,
                    "batch": b,
                    "prompt_len": p,
                    "dtype": "bfloat16",
                    "n1": n1,
                    "n2": n2,
                    "threads": 1,
                    "differencing": {
                        "t_step_ns": t,
                        "g_step_ns": g,
                        "h_step_ns": t - g,
                        "k_step": k,
                        "host_fraction": (t - g) / t,
                    },
                    "verdict": {"host_fraction": (t - g) / t},
                }
            )
    return docs


def test_fit_host_recovers_known_coefficients_from_noisy_data():
    # two models: kernel counts must vary for the per-kernel cost to be identifiable
    docs = _results(noise=0.02) + _results("llama-3.2-3b", noise=0.02, seed=1)
    cells = [fitting.cell_from_results(d) for d in docs]
    s = fitting._samples(cells)
    m = fit_host(s, DEFAULT_HOST["hf"])
    assert m.per_kernel_ns == pytest.approx(TRUE.per_kernel_ns, rel=0.1)
    assert m.serial_ns == pytest.approx(TRUE.serial_ns, rel=0.35)
    assert m.per_seq_ns == pytest.approx(TRUE.per_seq_ns, rel=0.35)
    assert leave_one_out(s, DEFAULT_HOST["hf"]).mape < 0.04


def test_fit_end_to_end_recovers_device_scale_and_writes_provenance(tmp_path):
    docs = _results(noise=0.01)
    model = fitting.fit(docs)
    (g,) = model.groups
    assert g.device == "h100-sxm" and g.engine == "hf" and g.n_cells == len(docs)
    assert g.device_scale == pytest.approx(SCALE, rel=0.01)
    assert g.heldout.mape < 0.03 and g.heldout.n == len(docs)
    out = tmp_path / "m.json"
    fitting.write_model(model, out)
    d = json.loads(out.read_text())
    assert d["schema_version"] == hostgap.SCHEMA_VERSION
    prov = d["provenance"]
    assert prov["data_sha256"] == fitting.data_hash(docs) and len(prov["data_sha256"]) == 64
    assert "h100-sxm" in prov["devices"] and prov["versions"]["hostgap"] == hostgap.__version__
    back = fitting.load_model(out)
    assert back.groups[0].host == g.host and back.groups[0].device_scale == g.device_scale


def test_missing_keys_are_unknown_not_guessed():
    docs = _results(batches=(1, 2), prompts=(128,))
    del docs[0]["differencing"]
    model = fitting.fit(docs + _results(batches=(4,), prompts=(128,)))
    assert any("missing" in s for s in model.skipped)
    assert model.groups[0].n_cells == 2


def _write(tmp_path, docs):
    paths = []
    for i, d in enumerate(docs):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps(d))
        paths.append(str(p))
    return paths


def test_cli_fit_then_predict_with_measured_beside(tmp_path):
    paths = _write(tmp_path, _results(noise=0.01))
    out = tmp_path / "model.json"
    r = CliRunner().invoke(cli, ["fit", "--results", *paths[:1], *paths[1:], "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "held-out MAPE" in r.output and out.exists()
    r = CliRunner().invoke(
        cli,
        [
            "predict",
            "llama-3.2-1b",
            "--device",
            "NVIDIA H100 80GB HBM3",
            "--engine",
            "hf",
            "--batch",
            "4",
            "--context",
            str(512 + 32),
            "--model",
            str(out),
            "--json",
            "--results",
            *paths,
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    p = d["prediction"]
    assert p["total_ns"] == pytest.approx(p["device_ns"] + p["collective_ns"] + p["host_ns"])
    assert d["measured"] and abs(d["measured"][0]["error_total"]) < 0.05
    assert "fitted model" in d["basis"]


def test_cli_predict_without_model_says_it_uses_defaults():
    r = CliRunner().invoke(
        cli, ["predict", "llama-3.1-8b", "--what-if", "graphs", "--what-if", "spec:gamma=3,alpha=0.6"]
    )
    assert r.exit_code == 0, r.output
    assert "default efficiencies" in r.output and "assumes:" in r.output


def test_cli_errors_are_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for args in (
        ["fit", "--results", str(bad)],
        ["predict", "nosuch"],
        ["predict", "tiny", "--what-if", "warp"],
        ["predict", "tiny", "--model", str(bad)],
        ["regimes", "--results", str(tmp_path / "absent.json")],
    ):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2, (args, r.output)
        assert "hostgap: error:" in r.output and "Traceback" not in r.output
    existing = tmp_path / "keep.json"
    existing.write_text("{}")
    r = CliRunner().invoke(cli, ["fit", "--results", str(bad), "-o", str(existing)])
    assert r.exit_code == 2 and existing.read_text() == "{}"  # nothing already written is lost


def test_regime_map_and_boundary(tmp_path):
    docs = _results(batches=(1, 4, 16, 64), prompts=(512,), noise=0.0)
    # place the cells by construction: host fraction falling with batch
    for d, hf in zip(docs, (0.6, 0.4, 0.2, 0.05)):
        d["differencing"]["host_fraction"] = hf
    cells = fitting.regime_cells(docs)
    assert [c.regime for c in cells] == ["host-bound", "host-bound", "balanced", "device-bound"]
    (b,) = [x for x in fitting.boundaries(cells) if x.axis == "batch"]
    # between batch 4 (0.4) and 16 (0.2): log2 interpolation -> 2^(2 + 0.15/0.2 * 2) = 2^3.5
    assert b.crossing == pytest.approx(2**3.5)
    r = CliRunner().invoke(cli, ["regimes", *_write(tmp_path, docs)])
    assert r.exit_code == 0, r.output
    assert "0.60 H" in r.output and "0.05 D" in r.output and "batch ~ 11.3" in r.output


def test_cli_account_prints_totals_and_json():
    r = CliRunner().invoke(cli, ["account", "llama-3.1-8b", "--json"])
    assert r.exit_code == 0
    d = json.loads(r.output)
    assert d["totals"]["weight_bytes"] == 2 * (8_030_261_248 - 128256 * 4096 + 4096)
    r = CliRunner().invoke(cli, ["account", "olmoe-1b-7b", "--batch", "8", "--tp", "2"])
    assert r.exit_code == 0 and "experts" in r.output and "total" in r.output


def test_fit_and_regimes_from_the_runs_database(tmp_path):
    store = pytest.importorskip("hostgap.store.database")
    db_path = tmp_path / "runs.sqlite"
    db = store.RunsDB(db_path)
    for d in _results(batches=(1, 4, 16), prompts=(512,)):
        db.add(d)
    out = tmp_path / "m.json"
    r = CliRunner().invoke(cli, ["fit", "--db", str(db_path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert fitting.load_model(out).groups[0].n_cells == 3
    r = CliRunner().invoke(cli, ["regimes", "--db", str(db_path), "--json"])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)["cells"]) == 3
    r = CliRunner().invoke(cli, ["regimes", "--db", str(tmp_path / "absent.sqlite")])
    assert r.exit_code == 2 and "no runs database" in r.output


def test_graphs_what_if_is_shown_beside_a_measured_graph_run(tmp_path):
    eager = _results(batches=(2,), prompts=(512,), noise=0.0)
    graph = _results(batches=(2,), prompts=(512,), noise=0.0, mode="graph")
    paths = _write(tmp_path, eager + graph)
    r = CliRunner().invoke(
        cli,
        [
            "predict",
            "llama-3.2-1b",
            "--device",
            "h100",
            "--engine",
            "hf",
            "--batch",
            "2",
            "--context",
            "544",
            "--what-if",
            "graphs",
            "--json",
            *paths,
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)  # the "no fitted model" note goes to stderr
    assert len(d["measured"]) == 1 and d["measured"][0]["run_id"].endswith("eager")
    (w,) = d["what_ifs"]
    assert len(w["measured"]) == 1 and w["measured"][0]["run_id"].endswith("graph")


def test_measured_taxbreak_orchestration_fixes_the_per_kernel_cost():
    docs = _results(noise=0.02)  # one model: per-kernel cost alone is not identifiable
    steps = 8
    for d in docs:
        k = d["differencing"]["k_step"]
        d["taxbreak"] = {
            "orchestrate_ns": TRUE.per_kernel_ns * k * steps,
            "kernels_per_step": k,
            "launch_floor_ns": 4_600.0,
            "hdbi": 0.3,
        }
        d["steps_decode"] = [{"kind": "decode"}] * steps  # a list of steps, as `measure` writes
    (g,) = fitting.fit(docs).groups
    assert g.host.per_kernel_ns == pytest.approx(TRUE.per_kernel_ns)
    assert g.host.launch_floor_ns == 4_600.0
    assert g.host.serial_ns == pytest.approx(TRUE.serial_ns, rel=0.25)
    assert "measured (TaxBreak)" in g.host.source
