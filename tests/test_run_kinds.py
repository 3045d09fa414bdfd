"""Every kind of run is first-class wherever runs are read: a measured run, an attached run (a
stand-in SGLang server profiled under load) and a watched run (a stand-in metrics server) each
get, in ``report``, ``compare``, ``runs`` and ``show``, the parts that apply to them with their
own basis named, and "not drawn" with the reason for the parts that do not; no placeholder
number, no "None", no matplotlib warning on the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import hostgap
from metrics_standin import MetricsStandIn
from test_report_fixtures import make_run_dir
from test_server_attach import hostgap as run_hostgap
from test_server_attach import standin  # noqa: F401 (the fixture)
from test_server_watch import texts


@pytest.fixture
def kinds(tmp_path, standin):  # noqa: F811
    """A runs database holding one run of each kind: (db, {kind: run_id})."""
    from hostgap.store.database import RunsDB

    db = tmp_path / "runs.sqlite"
    measured = make_run_dir(tmp_path / "runs")
    doc = json.loads((measured / "results.json").read_text())
    with RunsDB(db) as rdb:
        rdb.add(doc)
    s = standin("sglang")
    r = run_hostgap("attach", s.url, "--steps", "6", "--skip", "1", "--load", "2", "--json", "-o", "runs", tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    attached = json.loads(r.stdout)["run_id"]
    with MetricsStandIn(texts(4)) as srv:
        w = hostgap.watch(srv.url, interval=0.15, max_intervals=2, db=str(db), output=str(tmp_path / "runs"))
        with w:
            rows = list(w)
    assert len(rows) == 2 and w.run_id
    return db, {"measured": doc["run_id"], "attached": attached, "watched": w.run_id}


def cli(*args: str, db, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOSTGAP_DB": str(db), "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "hostgap", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=240
    )


def test_report_gives_each_kind_its_sections(kinds, tmp_path):
    db, ids = kinds
    out = tmp_path / "r.html"
    r = cli("report", ids["measured"], ids["attached"], ids["watched"], "-o", str(out), "--json", db=db, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Warning" not in r.stderr and "No artists" not in r.stderr
    data = json.loads(r.stdout)
    by = {d["run_kind"]: d for d in data["inputs"]}
    assert set(by) == {"measured", "attached"}  # the watched run has its own section
    assert by["measured"]["key"]["basis"] == "differencing"
    att = by["attached"]
    assert att["key"]["basis"] == "steps" and att["key"]["run_kind"] == "attached"
    assert all(att["key"]["values"][k] is not None for k in ("wall_ns", "gpu_active_ns", "host_exposed_ns"))
    assert not any("timings.json" in n for n in att["notes"])  # nothing missing: it has no sweep
    page = out.read_text()
    assert "an attached run is one traced window of the server" in page
    assert "N1 = None" not in page
    assert "median over" in page and "of the attached trace" in page
    assert f"id='watch-" in page  # noqa: F541
    assert "<td>attached</td>" in page and "<td>measured</td>" in page


def test_compare_names_the_basis_of_each_kind(kinds, tmp_path):
    db, ids = kinds
    r = cli("compare", ids["measured"], ids["attached"], "--json", db=db, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["basis"] == "steps"  # one side has no differencing
    r = cli("compare", ids["measured"], ids["attached"], "--basis", "differencing", db=db, cwd=tmp_path)
    assert r.returncode == 2
    assert "(this is an attached run, no differencing)" in r.stderr and "Traceback" not in r.stderr


def test_runs_and_show_print_every_kind(kinds, tmp_path):
    db, ids = kinds
    r = cli("runs", db=db, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "None" not in r.stdout
    for rid in ids.values():
        assert rid in r.stdout
    shown = {k: cli("show", rid, db=db, cwd=tmp_path) for k, rid in ids.items()}
    assert all(s.returncode == 0 for s in shown.values()), {k: s.stderr for k, s in shown.items()}
    assert "per decode step" in shown["measured"].stdout
    assert "steps recorded: 6" in shown["attached"].stdout
    assert f"watch {ids['watched']} of" in shown["watched"].stdout
    for rid in ids.values():  # the library reads the same runs
        run = hostgap.run(rid, db=str(db))
        assert run.run_id == rid and run.to_json() == cli("show", rid, "--json", db=db, cwd=tmp_path).stdout.rstrip()
    assert {hostgap.run(rid, db=str(db)).run_kind for rid in ids.values()} == {"measured", "attached", "watched"}
