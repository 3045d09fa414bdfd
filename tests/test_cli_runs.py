"""``hostgap runs`` and ``hostgap show`` (:mod:`hostgap.cli.runs`): the table's cells, CSV and JSON,
filters, and finding one run by id, prefix or folder."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.store.database import RunsDB
from test_capture_validity import _result


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "runs.sqlite"
    with RunsDB(path) as d:
        d.add(_result("good-1", True))
        d.add(_result("bad-1", False))
        d.add({**_result("gpu-1", True), "device": "cuda", "preset": "llama-3.2-1b", "run_dir": str(tmp_path / "gone")})
    return path


@pytest.fixture(autouse=True)
def fresh_stderr(monkeypatch):
    """The commands' notes go to a duplicate of descriptor 2 made on first use: a new one per
    test, so capfd sees them."""
    from hostgap.cli import measure_console

    monkeypatch.setattr(measure_console, "_ERR", None)


def _invoke(*args):
    return CliRunner().invoke(cli, list(args))


def _err(capfd) -> str:
    return capfd.readouterr().err


def test_runs_table_cells(db, capfd):
    r = _invoke("runs", "--db", str(db))
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split() for line in r.output.splitlines() if line.split()}
    assert rows["run_id"][-1] == "busy"
    good = rows["good-1"]
    # wall, device, host ms (ns / 1e6, 3 decimals), host % (1 decimal), verdict, busy
    assert good[7:13] == ["1.000", "0.400", "0.600", "60.0", "host-bound", "no"]
    assert good[1:7] == ["tiny", "hf", "eager", "cpu", "1", "128"]
    bad = rows["bad-1"]
    assert bad[11:13] == ["invalid:", "machine"] and bad[-1] == "yes"
    err = _err(capfd)
    assert f"runs database: {db} (3 runs)" in err


def test_runs_prints_a_bracketed_path_as_it_is(tmp_path, capfd):
    # rich would read "[dim]" in a path as a style tag and drop it from the line
    path = tmp_path / "runs[dim]" / "runs.sqlite"
    path.parent.mkdir()
    gone = tmp_path / "moved[dim]"
    with RunsDB(path) as d:
        d.add({**_result("good-1", True), "run_dir": str(gone)})
    assert _invoke("runs", "--db", str(path)).exit_code == 0
    assert f"runs database: {path} (1 run)" in _err(capfd)
    assert _invoke("show", "good-1", "--db", str(path)).exit_code == 0
    assert f"note: run directory {gone} not found (moved or deleted)" in _err(capfd)


def test_runs_filters_limit_csv_and_json(db, capfd):
    j = json.loads(_invoke("runs", "--db", str(db), "--json", "--device", "cuda").output)
    assert [x["run_id"] for x in j] == ["gpu-1"]
    j = json.loads(_invoke("runs", "--db", str(db), "--json", "--preset", "tiny").output)
    assert sorted(x["run_id"] for x in j) == ["bad-1", "good-1"]
    j = json.loads(_invoke("runs", "--db", str(db), "--json", "-n", "1").output)
    assert len(j) == 1
    out = _invoke("runs", "--db", str(db), "--csv").output
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["run_id"] for r in rows} == {"good-1", "bad-1", "gpu-1"}
    assert {r["run_id"]: r["valid"] for r in rows}["bad-1"] == "0"
    # an empty selection: no header, nothing on stdout but the database line
    out = _invoke("runs", "--db", str(db), "--csv", "--preset", "none").output
    assert out == "" and "(3 runs)" in _err(capfd)


def test_runs_database_line_counts_one_run(tmp_path, capfd):
    path = tmp_path / "one.sqlite"
    with RunsDB(path) as d:
        d.add(_result("only", True))
    _invoke("runs", "--db", str(path))
    assert "(1 run)" in _err(capfd)


def test_show_by_id_prefix_folder_and_missing(db, tmp_path, capfd):
    r = _invoke("show", "good", "--db", str(db), "--json")
    assert r.exit_code == 0 and json.loads(r.output)["run_id"] == "good-1"
    r = _invoke("show", "good-1", "--db", str(db))
    assert r.exit_code == 0 and "host-bound" in r.output and "60.0 %" in r.output
    r = _invoke("show", "gpu-1", "--db", str(db), "--json")  # its folder was deleted
    assert r.exit_code == 0 and "gone not found (moved or deleted)" in _err(capfd)
    run_dir = tmp_path / "a-run"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({**_result("from-folder", True), "run_dir": "runs/nowhere"}))
    _err(capfd)
    r = _invoke("show", str(run_dir), "--json")
    assert r.exit_code == 0 and json.loads(r.output)["run_id"] == "from-folder"
    err = _err(capfd)
    assert "runs/nowhere not found from" in err and "stored relative to the folder" in err
    r = _invoke("show", str(run_dir / "results.json"))  # the file itself, shown as a table
    assert r.exit_code == 0 and "host-bound" in r.output
    r = _invoke("show", "nope", "--db", str(db))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"no such run in {db} (and not a run directory)" in r.output + _err(capfd)
