"""The runs database: round trip, cell keys, prefixes, schema version, atomic writes."""

from __future__ import annotations

import sqlite3

import pytest

from hostgap.errors import HostgapError
from hostgap.store.database import SCHEMA_VERSION, RunsDB, default_path


def _result(run_id: str, preset="tiny", batch=1, t=4e6, g=0.5e6, created="2026-11-30T10:00:00Z"):
    return {
        "schema_version": 1,
        "run_id": run_id,
        "created": created,
        "preset": preset,
        "engine": "hf",
        "device": "cpu",
        "device_name": "x",
        "mode": "eager",
        "batch": batch,
        "prompt_len": 128,
        "dtype": "float32",
        "n1": 1,
        "n2": 128,
        "threads": 1,
        "cell_key": f"{preset}|b{batch}",
        "differencing": {
            "t_step_ns": t,
            "g_step_ns": g,
            "h_step_ns": t - g,
            "host_fraction": (t - g) / t,
            "activity": "cpu-compute",
            "ci": {"t_step_ns": [t * 0.9, t * 1.1]},
        },
        "verdict": {"verdict": "host-bound"},
        "steps_decode": [{"index": 1, "wall_ns": 123}],
    }


def test_round_trip_file(tmp_path):
    path = tmp_path / "sub" / "runs.sqlite"
    with RunsDB(path) as db:
        db.add(_result("20261130-a", created="2026-11-30T10:00:00Z"))
        db.add(_result("20261130-b", batch=4, created="2026-11-30T11:00:00Z"))
    with RunsDB(path) as db:  # reopened: persisted
        assert db.count() == 2
        assert db.schema_version == SCHEMA_VERSION
        r = db.get("20261130-a")
        assert r == _result("20261130-a", created="2026-11-30T10:00:00Z")
        assert [x["run_id"] for x in db.results()] == ["20261130-a", "20261130-b"]
        rows = db.rows()
        assert [x["run_id"] for x in rows] == ["20261130-b", "20261130-a"]  # newest first
        assert rows[0]["batch"] == 4 and rows[0]["verdict"] == "host-bound"
        assert rows[0]["h_step_ns"] == pytest.approx(3.5e6)
        assert "results" not in rows[0]
        assert [x["run_id"] for x in db.results(batch=4)] == ["20261130-b"]


def test_cells_prefix_and_replace():
    db = RunsDB(":memory:")
    db.add(_result("abc-1"))
    assert db.has_cell("tiny|b1") and not db.has_cell("tiny|b2")
    db.add(_result("abd-2", batch=2))
    assert db.get("abc")["run_id"] == "abc-1"
    with pytest.raises(HostgapError, match="ambiguous"):
        db.get("ab")
    assert db.get("zzz") is None
    assert db.get("a%") is None  # LIKE wildcards are literal
    db.add(_result("abc-1", t=5e6))  # same id replaces
    assert db.count() == 2 and db.get("abc-1")["differencing"]["t_step_ns"] == 5e6
    assert db.delete("abc-1") and db.count() == 1
    with pytest.raises(HostgapError, match="unknown run field"):
        db.rows(colour="red")
    with pytest.raises(HostgapError, match="run_id"):
        db.add({"preset": "tiny"})


def test_failed_write_leaves_no_row(tmp_path):
    path = tmp_path / "runs.sqlite"
    db = RunsDB(path)
    db.add(_result("ok-1"))
    bad = _result("bad-2")
    bad["batch"] = object()  # sqlite cannot bind it: the insert fails inside its transaction
    with pytest.raises(sqlite3.Error):
        db.add(bad)
    db.close()
    with RunsDB(path) as again:
        assert [r["run_id"] for r in again.results()] == ["ok-1"]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_newer_schema_and_bad_files_are_user_errors(tmp_path):
    path = tmp_path / "runs.sqlite"
    RunsDB(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(HostgapError, match="newer"):
        RunsDB(path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(HostgapError, match="not a hostgap runs database"):
        RunsDB(junk)
    with pytest.raises(HostgapError, match="directory"):
        RunsDB(tmp_path)


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.setenv("HOSTGAP_DB", str(tmp_path / "x.sqlite"))
    assert default_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("HOSTGAP_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "hostgap" / "runs.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert str(default_path()).endswith(".local/share/hostgap/runs.sqlite")


# -- creation under concurrency, foreign files ------------------------------------------------


def _create_and_add(args):
    path, i, start = args
    import time as _time

    while _time.time() < start:  # every process opens the new database at the same instant
        pass
    with RunsDB(path) as db:
        db.add(_result(f"run-{i}", batch=i))
    return i


def test_concurrent_creation_records_every_run(tmp_path):
    import multiprocessing as mp
    import time as _time

    ctx = mp.get_context("fork")
    for trial in range(4):
        path = str(tmp_path / f"new{trial}.sqlite")
        start = _time.time() + 0.5
        with ctx.Pool(6) as pool:
            done = pool.map(_create_and_add, [(path, i, start) for i in range(6)])
        assert sorted(done) == list(range(6))
        with RunsDB(path) as db:
            assert sorted(r["run_id"] for r in db.rows()) == [f"run-{i}" for i in range(6)]
            assert db.schema_version == SCHEMA_VERSION


def test_foreign_sqlite_file_is_refused_without_writing(tmp_path):
    import hashlib

    path = tmp_path / "app.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.execute("INSERT INTO users VALUES (1, 'a')")
    con.commit()
    con.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(HostgapError, match="not a hostgap runs database .*users"):
        RunsDB(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    con = sqlite3.connect(path)
    assert {r[0] for r in con.execute("SELECT name FROM sqlite_master")} == {"users"}
    con.close()


def test_foreign_file_via_the_cli_exits_2_and_is_untouched(tmp_path):
    from click.testing import CliRunner

    from hostgap.cli import cli

    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE meta (key TEXT, value TEXT)")  # a name clash is still not ours
    con.commit()
    con.close()
    before = path.read_bytes()
    res = CliRunner().invoke(cli, ["runs", "--db", str(path)])
    assert res.exit_code == 2, res.output
    assert "not a hostgap runs database" in res.output and "Traceback" not in res.output
    assert path.read_bytes() == before


def test_empty_file_becomes_a_database(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    with RunsDB(path) as db:
        db.add(_result("r1"))
        assert db.count() == 1
