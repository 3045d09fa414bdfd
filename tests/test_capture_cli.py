"""measure/presets/floor/runs/show on the command line: presets, bad input, no-torch paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.model.arch import PRESETS
from hostgap.store.database import RunsDB

PUBLISHED = {"llama-3.2-1b": 1_235_814_400, "llama-3.1-8b": 8_030_261_248, "llama-3.2-3b": 3_212_749_824}


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_presets_json_gives_published_counts():
    r = run("presets", "--json")
    assert r.exit_code == 0
    rows = {x["name"]: x for x in json.loads(r.output)}
    assert set(rows) == set(PRESETS)
    for name, count in PUBLISHED.items():
        assert rows[name]["params"] == count
        assert rows[name]["weight_bytes"] == 2 * count  # bf16
    assert rows["olmoe-1b-7b"]["active_params"] < rows["olmoe-1b-7b"]["params"]
    table = run("presets")
    assert table.exit_code == 0 and "1,235,814,400" in table.output


@pytest.mark.parametrize(
    "args,needle",
    [
        (["-p", "no-such-model"], "unknown preset"),
        (["--n1", "8", "--n2", "8"], "N1 < N2"),
        (["--n1", "0"], "must be >= 1"),
        (["-p", "tiny", "--mode", "graph", "--device", "cpu"], "CUDA"),
        (["--device", "cuda"], "no CUDA device"),
        (["-p", "qwen2.5-32b", "--device", "cpu", "--dtype", "bfloat16"], "cannot fit in memory"),
        (["--out", "/proc/hostgap-cannot-write-here"], "not writable"),
        (["-p", "tiny", "--sweep", "1,x"], "comma-separated integers"),
        (["--engine", "nope"], "unknown engine"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    r = CliRunner().invoke(
        cli, ["measure", "--db", str(tmp_path / "db.sqlite"), "--out", str(tmp_path / "runs"), *args]
    )
    assert r.exit_code == 2, r.output
    lines = [l for l in r.output.splitlines() if l.strip() and "USDT" not in l]
    assert len(lines) == 1 and lines[0].startswith("hostgap: error: ")
    assert needle in lines[0]
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # nothing half-written left behind


def test_out_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    r = CliRunner().invoke(cli, ["measure", "--out", str(f), "--db", str(tmp_path / "d.sqlite")])
    assert r.exit_code == 2 and "is a file, not a directory" in r.output
    assert f.read_text() == "x"


def test_runs_and_show_from_db(tmp_path):
    db = tmp_path / "runs.sqlite"
    result = {
        "schema_version": 1,
        "run_id": "20261130-000000-tiny-x",
        "preset": "tiny",
        "engine": "hf",
        "device": "cpu",
        "device_name": "cpu",
        "mode": "eager",
        "batch": 1,
        "prompt_len": 128,
        "dtype": "float32",
        "n1": 1,
        "n2": 128,
        "threads": 1,
        "repeats": 5,
        "sweep": [1, 128],
        "hdbi": None,
        "verdict": {"verdict": "host-bound", "basis": "host_fraction"},
        "differencing": {
            "t_step_ns": 4e6,
            "g_step_ns": 5e5,
            "h_step_ns": 3.5e6,
            "k_step": 119.0,
            "host_fraction": 0.875,
            "activity": "cpu-compute",
            "ci": {},
            "r2_wall": 0.999,
            "r2_gpu": 0.998,
            "slope_agreement": 0.01,
            "profiler_inflation": 0.2,
            "copies_per_step": 0.0,
            "note": "",
        },
    }
    with RunsDB(db) as d:
        d.add(result)
    r = run("runs", "--db", str(db), "--json")
    assert r.exit_code == 0 and json.loads(r.output)[0]["run_id"] == result["run_id"]
    r = run("runs", "--db", str(db), "--csv")
    assert r.output.splitlines()[0].startswith("run_id,")
    r = run("show", "20261130-000000", "--db", str(db))
    assert r.exit_code == 0
    assert "host-bound" in r.output and "3.500 ms" in r.output and "CPU compute" in r.output
    r = run("show", "20261130-000000", "--db", str(db), "--json")
    assert json.loads(r.output)["differencing"]["k_step"] == 119.0
    r = CliRunner().invoke(cli, ["show", "nope", "--db", str(db)])
    assert r.exit_code == 2 and "no such run" in r.output


def test_show_gpu_run_has_hdbi_and_taxbreak(tmp_path):
    """The table of a CUDA run shows HDBI, copies and the TaxBreak split (a stored result)."""
    from hostgap.report.run_rows import check_rows, step_rows

    r = {
        "run_id": "gpu-1",
        "preset": "llama-3.1-8b",
        "engine": "hf",
        "mode": "eager",
        "device": "cuda",
        "device_name": "NVIDIA H200",
        "batch": 1,
        "prompt_len": 2048,
        "dtype": "bfloat16",
        "n1": 1,
        "n2": 64,
        "threads": 1,
        "sweep": [1, 6, 11, 20, 36, 64],
        "hdbi": 0.31,
        "verdict": {"verdict": "host-bound", "basis": "host_fraction"},
        "taxbreak": {"applicable": True, "ft_ns": 64 * 9e6, "ct_ns": 64 * 1e6, "kt_ns": 64 * 7.6e6},
        "anatomy_summary": {"steady": {"count": 61, "host_fraction": {"median": 0.45}, "wall_ns": {"median": 21e6}}},
        "differencing": {
            "t_step_ns": 21e6,
            "g_step_ns": 11e6,
            "h_step_ns": 10e6,
            "k_step": 1700.0,
            "host_fraction": 10 / 21,
            "activity": "gpu",
            "ci": {},
            "r2_wall": 0.9999,
            "r2_gpu": 0.9998,
            "slope_agreement": 0.004,
            "profiler_inflation": 0.03,
            "copies_per_step": 2.0,
            "h2d_bytes_per_step": 8,
            "d2h_bytes_per_step": 8,
            "sum_minus_union_step_ns": 20000,
        },
    }
    rows = {label: value for label, value, _ in step_rows(r) + check_rows(r)}
    assert rows["GPU-active"] == "11.000 ms" and rows["HDBI"] == "0.310"
    assert rows["TaxBreak host work / step"] == "FT 9.000 ms · CT 1.000 ms · KT 7.600 ms"
    assert rows["host fraction, traced anatomy"] == "45.0 %"  # a host fraction, and says so
    basis = {label: b for label, _, b in step_rows(r)}["host fraction, traced anatomy"]
    assert basis.startswith("host-exposed / wall, median of 61 steady traced steps") and "21.000 ms" in basis
    assert rows["copies per step"].startswith("2.00 (H2D 8 B, D2H 8 B)")
    with RunsDB(tmp_path / "db.sqlite") as d:
        d.add(r)
    out = run("show", "gpu-1", "--db", str(tmp_path / "db.sqlite")).output
    assert "NVIDIA H200" in out and "GPU-active" in out and "CPU compute" not in out
    assert [l for l in out.splitlines() if l != l.rstrip()] == []  # no padding to the table width


NO_TORCH = """
import sys
sys.modules['torch'] = None
sys.modules['transformers'] = None
from hostgap.cli import main
sys.argv = ['hostgap'] + sys.argv[1:]
main()
"""


def _no_torch(*args, tmp_path):
    env = dict(os.environ, HOSTGAP_DB=str(tmp_path / "db.sqlite"))
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )


def test_listing_commands_work_without_torch(tmp_path):
    for args in (["presets"], ["runs"], ["runs", "--json"]):
        p = _no_torch(*args, tmp_path=tmp_path)
        assert p.returncode == 0, p.stderr
    p = _no_torch("measure", tmp_path=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("hostgap: error: torch: ")
    assert "install the capture extra" in p.stderr


def test_floor_on_cpu(tmp_path):
    out = tmp_path / "f" / "floor.json"
    r = run("floor", "--device", "cpu", "--samples", "60", "--out", str(out), "--json")
    assert r.exit_code == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "launch_floor" and doc["device"] == "cpu" and doc["samples"] == 60
    assert 0 <= doc["p50_ns"] <= doc["p95_ns"] and doc["mean_ns"] > 0
    assert {"schema_version", "device_name", "method", "created"} <= set(doc)
    bad = CliRunner().invoke(cli, ["floor", "--device", "cpu", "--samples", "10"])
    assert bad.exit_code == 2 and "at least 50" in bad.output
