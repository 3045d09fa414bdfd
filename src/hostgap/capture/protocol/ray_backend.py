"""Scale-out on Ray (an optional extra: ``pip install 'hostgap[ray]'``; docs/ray.md).

``hostgap sweep --backend ray`` runs each measurement cell as a Ray task that asks for what the
cell needs (one GPU for a CUDA cell; ``threads`` CPUs for a CPU cell), writes the cell's run
directory on the worker, and returns the results; the driver alone writes the runs database,
one transaction per finished cell, so a cell lands there once or not at all.

A worker that dies mid-cell (killed, out of memory, node lost) makes Ray run the task again, up
to ``retries`` times. Each cell keeps a marker file ``<out>/.hostgap-cell-<hash>`` naming the run
directory of its current attempt: a retry that finds a finished run directory there returns it
instead of measuring again, and one that finds an unfinished one removes it first. The driver
removes the marker once the row is in the database (or the cell is reported failed). Cells
already in the database are skipped, as in the local sweep, so rerunning resumes.

Joining the cluster is :func:`hostgap.parallel.connect`, which ``hostgap analyze --backend ray``
uses too (:func:`hostgap.parallel.map_tasks`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

from hostgap.capture.protocol.orchestrate import cell_key, new_run_id, resolve, validate
from hostgap.capture.protocol.sweep import SweepOutcome, cell_flags
from hostgap.errors import HostgapError
from hostgap.parallel import connect


def resources(cfg) -> dict:
    """What one cell's task asks Ray for: a GPU for CUDA cells, its threads' CPUs otherwise."""
    if str(cfg.device).startswith("cuda"):
        return {"num_gpus": 1, "num_cpus": 1}
    return {"num_cpus": max(1, int(cfg.threads or 1))}


def marker_path(cfg) -> Path:
    return Path(cfg.out) / f".hostgap-cell-{hashlib.sha1(cell_key(cfg).encode()).hexdigest()[:16]}"


def measure_cell(cfg, measure_fn=None) -> dict:
    """Runs on a worker: measure one resolved cell into a new run directory under ``cfg.out``
    (or return the run an earlier, killed attempt finished). ``{"error": ...}`` for a cell
    that failed with a user-facing error (exceptions cross process boundaries poorly)."""
    from hostgap.capture.protocol.orchestrate import measure

    marker = marker_path(cfg)
    marker.parent.mkdir(parents=True, exist_ok=True)
    if marker.is_file():
        earlier = Path(marker.read_text().strip())
        if (earlier / "results.json").is_file():
            return json.loads((earlier / "results.json").read_text())
        shutil.rmtree(earlier, ignore_errors=True)
    run_dir = Path(cfg.out) / new_run_id(cfg)
    marker.write_text(str(run_dir))
    try:
        return (measure_fn or measure)(replace(cfg, run_dir=str(run_dir)))
    except HostgapError as e:
        shutil.rmtree(run_dir, ignore_errors=True)
        return {"error": str(e)}


def _forget(cfg) -> None:
    """Driver side, once a cell is settled: remove its marker and an unfinished run directory."""
    marker = marker_path(cfg)
    if marker.is_file():
        run_dir = Path(marker.read_text().strip())
        if run_dir.is_dir() and not (run_dir / "results.json").is_file():
            shutil.rmtree(run_dir, ignore_errors=True)
        marker.unlink(missing_ok=True)


def run_sweep_ray(
    cells, db, *, address: str | None = None, retries: int = 2, on_cell=None, measure_fn=None
) -> SweepOutcome:
    """:func:`hostgap.capture.protocol.sweep.run_sweep` with the cells as Ray tasks (module docstring).
    ``measure_fn`` replaces :func:`~hostgap.capture.protocol.orchestrate.measure` on the workers."""
    for c in cells:
        validate(c)
    resolved = [resolve(c) for c in cells]
    out = SweepOutcome(total=len(resolved))
    emit = on_cell or (lambda *a: None)
    ray = connect(address)
    task = ray.remote(measure_cell)
    pending, seen = {}, set()
    for i, cfg in enumerate(resolved):
        key = cell_key(cfg)
        if key in seen or db.has_cell(key):
            out.skipped += 1
            emit(i, len(resolved), key, "skip")
            continue
        seen.add(key)
        ref = task.options(max_retries=retries, retry_exceptions=False, **resources(cfg)).remote(cfg, measure_fn)
        pending[ref] = (i, key, cfg)
        emit(i, len(resolved), key, "start")
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i, key, cfg = pending.pop(ref)
                _settle(ray, ref, i, key, cfg, db, out, emit, len(resolved))
    except KeyboardInterrupt:
        for ref, (_, _, cfg) in pending.items():
            ray.cancel(ref, force=True)
            _forget(cfg)
        out.interrupted = True
    return out


def _settle(ray, ref, i, key, cfg, db, out: SweepOutcome, emit, total) -> None:
    """Record one finished task: its row in the database, or the failure."""
    try:
        result = ray.get(ref)
    except ray.exceptions.RayError as e:  # the worker died on every attempt, or the task raised
        result = {"error": f"Ray task failed: {str(e).splitlines()[0]}"}
    if "error" in result:
        out.failed.append({"cell": key, "error": result["error"]})
        emit(i, total, key, f"fail: {result['error']}")
    else:
        db.add(result)
        out.done += 1
        out.run_ids.append(result["run_id"])
        emit(i, total, key, "done" + cell_flags(result))
    _forget(cfg)
