"""Runs found again: run directories stored absolute, older relative rows resolved against the
current and the database's folder, a run whose files are gone reported on stderr, and the
database location printed by ``hostgap runs``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from hostgap.cli import cli
from test_report_fixtures import make_run_dir


def test_a_run_found_from_another_folder(tmp_path, monkeypatch):
    """A run measured in one folder (its run_dir stored relative, as older databases hold it)
    is found by id from another folder; a run whose folder is gone is reported on stderr."""
    from hostgap.store.database import RunsDB

    home = tmp_path / "project"
    home.mkdir()
    run = make_run_dir(home / "runs")
    res = json.loads((run / "results.json").read_text())
    db_path = tmp_path / "runs.sqlite"
    monkeypatch.chdir(home)
    with RunsDB(db_path) as db:
        db.add({**res, "run_dir": str(run.relative_to(home))})  # written from the project folder
        stored = db._conn.execute("SELECT run_dir FROM runs").fetchone()[0]
    assert stored == str(run)  # made absolute when written
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = elsewhere / "r.html"
    r = CliRunner().invoke(cli, ["report", res["run_id"], "--db", str(db_path), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "not found" not in r.stderr
    # an old row: relative path, measured in a folder this one is not
    with RunsDB(db_path) as db:
        db._conn.execute("UPDATE runs SET results = ?", (json.dumps({**res, "run_dir": "runs/" + run.name}),))
        db._conn.commit()
    r = CliRunner().invoke(cli, ["report", res["run_id"], "--db", str(db_path), "-o", str(out)])
    assert r.exit_code == 0
    assert f"note: {res['run_id']}: run directory 'runs/{run.name}'" in r.stderr
    assert "not found from" in r.stderr
    # ... resolved when the report runs from the folder it was measured in
    monkeypatch.chdir(home)
    r = CliRunner().invoke(cli, ["report", res["run_id"], "--db", str(db_path), "-o", str(out)])
    assert r.exit_code == 0 and "not found" not in r.stderr


def test_runs_prints_the_database_location(tmp_path):
    # a process of its own: the progress console writes on a duplicate of descriptor 2, made
    # once per process, which no in-process capture sees reliably
    db_path = tmp_path / "somewhere" / "runs.sqlite"
    r = subprocess.run(
        [sys.executable, "-m", "hostgap", "runs", "--db", str(db_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []  # stdout stays clean JSON
    assert f"runs database: {db_path} (0 runs)" in r.stderr.replace("\n", "")


def test_a_relative_run_dir_is_resolved_against_the_database_folder(tmp_path, monkeypatch):
    """A project-local database ($HOSTGAP_DB=project/runs.sqlite) with an old relative row finds
    project/runs/<id> from any folder; an absolute path that is gone resolves to nothing."""
    from hostgap.store.database import RunsDB, resolve_run_dir

    project = tmp_path / "project"
    run = make_run_dir(project / "runs")
    res = json.loads((run / "results.json").read_text())
    db_path = project / "runs.sqlite"
    with RunsDB(db_path) as db:
        db.add({**res, "run_dir": str(run)})
        db._conn.execute("UPDATE runs SET results = ?", (json.dumps({**res, "run_dir": f"runs/{run.name}"}),))
        db._conn.commit()
    monkeypatch.chdir(tmp_path)  # neither the project folder nor the run's parent
    assert resolve_run_dir(f"runs/{run.name}", db_path) == run.resolve()
    assert resolve_run_dir(f"runs/{run.name}", None) is None
    assert resolve_run_dir(str(tmp_path / "gone"), db_path) is None
    assert resolve_run_dir(None, db_path) is None
    with RunsDB(db_path) as db:
        assert db.get(res["run_id"])["run_dir"] == str(run.resolve())
        assert db.results()[0]["run_dir"] == str(run.resolve())
