"""A stand-in for ``protocol.measure`` run on Ray workers (shipped by value): it writes a run
directory and its results, and kills its own worker process the first time it meets the cell
whose batch is ``KILL_BATCH`` (a flag file under ``cfg.out`` remembers that it did)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

KILL_BATCH = 2


def fake_measure(cfg) -> dict:
    from hostgap.capture.protocol.orchestrate import cell_key

    run = Path(cfg.run_dir)
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    flag = Path(cfg.out) / "killed-once"
    if cfg.batch == KILL_BATCH and not flag.exists():
        flag.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-cell, its run unfinished
    time.sleep(0.2)
    result = {
        "run_id": run.name,
        "cell_key": cell_key(cfg),
        "preset": cfg.preset,
        "engine": cfg.engine,
        "device": cfg.device,
        "mode": cfg.mode,
        "batch": cfg.batch,
        "prompt_len": cfg.prompt_len,
        "dtype": cfg.dtype,
        "n1": cfg.n1,
        "n2": cfg.n2,
        "threads": cfg.threads,
        "valid": True,
        "invalid_reasons": [],
        "run_dir": str(run),
        "worker_pid": os.getpid(),
    }
    (run / "results.json").write_text(json.dumps(result))
    return result


def always_dies(cfg) -> dict:
    Path(cfg.run_dir).mkdir(parents=True)
    os.kill(os.getpid(), signal.SIGKILL)
