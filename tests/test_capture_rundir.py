"""Run directories, manifest facts, sweep grids: the bookkeeping around a measurement."""

from __future__ import annotations

import json
import os
import stat

import pytest

from hostgap.capture.protocol.orchestrate import MeasureConfig, cell_key, plan
from hostgap.capture.protocol.sweep import Eta, cells_from_file, grid
from hostgap.errors import HostgapError
from hostgap.store import manifest
from hostgap.store.rundir import RunDir, check_writable, read_json, write_json


def test_atomic_json_and_permissions(tmp_path):
    p = write_json(tmp_path / "a" / "x.json", {"v": 1, "path": tmp_path})
    assert read_json(p) == {"v": 1, "path": str(tmp_path)}
    mode = stat.S_IMODE(os.stat(p).st_mode)
    assert mode & 0o044  # readable by others (not mkstemp's 0600)
    with pytest.raises(TypeError):
        write_json(p, {"bad": object()})
    assert read_json(p)["v"] == 1  # the failed write left the old file intact
    assert [f.name for f in p.parent.iterdir()] == ["x.json"]  # and no temporary behind
    with pytest.raises(HostgapError, match="not valid JSON"):
        (tmp_path / "bad.json").write_text("{")
        read_json(tmp_path / "bad.json")


def test_run_dir_lifecycle(tmp_path):
    run = RunDir.create(tmp_path / "r1")
    assert (run.path / "traces").is_dir()
    with pytest.raises(HostgapError, match="not empty"):
        RunDir.create(tmp_path / "r1") if (run.path / "x").write_text("1") else None
    assert run.remove_if_incomplete() and not run.path.exists()
    done = RunDir.create(tmp_path / "r2")
    done.write_json("results.json", {})
    assert not done.remove_if_incomplete() and done.path.exists()
    src = tmp_path / "r2" / "traces" / "t_123.json.gz"
    src.write_bytes(b"x")
    assert done.rename_trace(src, "trace_n4_r0").name == "trace_n4_r0.json.gz"
    assert done.rel(done.path / "traces" / "trace_n4_r0.json.gz") == "traces/trace_n4_r0.json.gz"


def test_check_writable(tmp_path):
    check_writable(tmp_path / "new" / "deeper")
    assert (tmp_path / "new" / "deeper").is_dir()
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(HostgapError, match="not a directory"):
        check_writable(f)
    with pytest.raises(HostgapError, match="lies under a file"):
        check_writable(f / "below")
    with pytest.raises(HostgapError, match="not writable"):
        check_writable("/proc/hostgap-test")


def test_manifest_facts():
    m = manifest.manifest(["measure", "-p", "tiny"])
    assert m["schema_version"] == 1 and m["command"][1:] == ["measure", "-p", "tiny"]
    assert m["cpu"]["logical_cores"] >= 1 and m["cpu"]["model"]
    assert m["packages"]["numpy"] and m["python"]
    json.dumps(m)  # serialisable as is
    assert isinstance(m["gpus"], list)


def test_grid_cells_and_keys(tmp_path):
    base = MeasureConfig(device="cpu", n2=16)
    cells = grid(base, ("tiny", "tiny-moe"), (1, 4), (64,), ("eager", "static"))
    assert len(cells) == 8
    keys = {cell_key(c) for c in cells}
    assert len(keys) == 8  # every cell distinct
    assert cell_key(base) == cell_key(MeasureConfig(device="cpu", n2=16, repeats=9))  # how long, not what
    f = tmp_path / "cells.json"
    f.write_text(json.dumps([{"preset": "tiny", "batch": 2, "sweep": [1, 4, 16]}]))
    (c,) = cells_from_file(base, str(f))
    assert c.batch == 2 and c.sweep == (1, 4, 16) and c.n2 == 16
    f.write_text(json.dumps([{"preset": "tiny", "colour": "red"}]))
    with pytest.raises(HostgapError, match="unknown field"):
        cells_from_file(base, str(f))
    f.write_text(json.dumps({"preset": "tiny"}))
    with pytest.raises(HostgapError, match="list of objects"):
        cells_from_file(base, str(f))
    with pytest.raises(HostgapError, match="no such cells file"):
        cells_from_file(base, str(tmp_path / "none.json"))


def test_plan_counts_tokens():
    cfg = MeasureConfig(device="cpu", n1=1, n2=8, sweep=(1, 4, 8), repeats=3, traced_repeats=2, warmup=2)
    p = plan(cfg)
    assert sorted(p["untraced"]) == sorted([1, 4, 8] * 3)
    assert p["traced"] == [(1, 0), (1, 1), (4, 0), (8, 0), (8, 1)]
    assert p["tokens"] == 2 * 8 + 2 + 3 * 13 + (1 + 1 + 4 + 8 + 8)
    eta = Eta()
    assert eta.left_s(3) is None
    eta.tick()
    assert eta.left_s(3) >= 0


# -- interrupted runs and file modes ----------------------------------------------------------


def test_run_killed_by_sigkill_is_removed_by_the_next_run(tmp_path, capsys):
    import signal
    import subprocess
    import sys

    victim = tmp_path / "20261201-victim"
    code = (
        "import sys, time; from pathlib import Path; from hostgap.store.rundir import RunDir; "
        "r = RunDir.create(Path(sys.argv[1])); (r.path / 'traces' / 'big.json').write_bytes(b'x' * 100000); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(victim)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = RunDir.create(tmp_path / "20261201-done")
    done.write_json("results.json", {"ok": True})
    assert not (done.path / ".incomplete").exists()  # complete: never removed later
    RunDir.create(tmp_path / "20261201-next")
    assert not victim.exists()
    assert (tmp_path / "20261201-done" / "results.json").exists()
    err = capsys.readouterr().err
    assert "removed 1 incomplete run directory" in err and "20261201-victim" in err


def test_live_or_foreign_runs_are_left_alone(tmp_path):
    import json
    import os
    import socket

    live = tmp_path / "live"
    live.mkdir()
    (live / ".incomplete").write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    other = tmp_path / "other-host"
    other.mkdir()
    (other / ".incomplete").write_text(json.dumps({"pid": 2**22 + 12345, "host": "elsewhere"}))
    legacy = tmp_path / "legacy"  # no marker: written by an older version, not judged
    legacy.mkdir()
    RunDir.create(tmp_path / "new")
    assert live.exists() and other.exists() and legacy.exists()


def test_file_mode_follows_the_umask_without_setting_it(tmp_path, monkeypatch):
    import os
    import stat

    from hostgap.store import rundir

    old = os.umask(0o027)
    try:

        def no_umask(*_):
            raise AssertionError("os.umask called: it changes the mask for every thread")

        monkeypatch.setattr(os, "umask", no_umask)
        assert rundir.file_mode() == 0o640
        p = rundir.write_json(tmp_path / "x.json", {"a": 1})
        assert stat.S_IMODE(p.stat().st_mode) == 0o640
    finally:
        monkeypatch.undo()
        os.umask(old)
