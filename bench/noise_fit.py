"""Fit the run-noise model (:class:`hostgap.stats.noise.NoiseModel`) to this machine's own
untraced repeats of the default decode.

Builds the default workload (``hostgap measure`` with no arguments: the tiny preset, HF eager, CPU,
one thread), then runs ``--runs`` untraced generate calls over the default sweep's N in a
shuffled order (as the protocol does), recording each run's wall and thread CPU time and the
machine's readings (load average, CPU steal, pressure) around the whole series. The relative
deviation of each run from its N's median, in run order, is what the model is fitted to
(heavy tails and AR(1)). Writes ``bench/results/noise-model.json`` (parameters, conditions,
provenance and the raw walls) unless ``-o`` says otherwise.

    .venv/bin/python bench/noise_fit.py --runs 300 --label "shared/busy machine"
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def deviations(walls: list[int], ns: list[int]) -> np.ndarray:
    """Relative deviation of each run from the median of its N, in run order."""
    w = np.asarray(walls, dtype=np.float64)
    n = np.asarray(ns)
    med = {k: float(np.median(w[n == k])) for k in set(ns)}
    return np.array([w[i] / med[int(n[i])] - 1 for i in range(len(w))])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300, help="untraced runs (default 300)")
    ap.add_argument("--label", default="", help="conditions in words, e.g. 'quiet machine'")
    ap.add_argument("-o", "--output", default=str(ROOT / "bench/results/noise-model.json"))
    a = ap.parse_args(argv)
    from hostgap.capture.protocol.engine import load_engine
    from hostgap.capture.protocol.orchestrate import MeasureConfig, make_arch, make_workload, resolve
    from hostgap.stats import noise

    cfg = resolve(MeasureConfig())
    assert cfg.sweep is not None  # resolve fills it
    engine = load_engine(cfg.engine)(make_workload(cfg, make_arch(cfg)))
    engine.prepare()
    try:
        for _ in range(3):
            engine.generate(16)
        order = [n for _ in range(a.runs // len(cfg.sweep) + 1) for n in cfg.sweep][: a.runs]
        random.Random(1).shuffle(order)
        snaps = [noise.snapshot()]
        walls, threads = [], []
        t0 = time.time()
        for i, n in enumerate(order):
            walls.append(int(engine.generate(n)))
            threads.append(int(getattr(engine, "last_thread_ns", 0)))
            if i % 50 == 49:
                snaps.append(noise.snapshot())
        snaps.append(noise.snapshot())
        took = time.time() - t0
    finally:
        engine.close()
    doc = fitted(
        walls,
        threads,
        order,
        a.label,
        {
            "label": a.label,
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "workload": "tiny · hf eager · cpu · batch 1 · prompt 128 · float32 · 1 thread (the default)",
            "readings": noise.machine_noise(snaps),
            "seconds": round(took, 1),
        },
    )
    Path(a.output).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("model", "model_wall", "summary", "conditions")}, indent=1))
    return 0


def fitted(walls: list[int], threads: list[int], order: list[int], label: str, conditions: dict) -> dict:
    """The results document: the model fitted to the runs' thread CPU time (``model``: the
    machine's own noise, other processes' preemption taken out) and to their wall
    (``model_wall``: everything the runs saw, contention included), the conditions and the raw
    runs."""
    from hostgap.stats import noise

    dev = deviations(walls, order)
    pre = [bool(w - t > 0.05 * w) for w, t in zip(walls, threads)]
    src = f"bench/noise_fit.py, {len(walls)} untraced runs of the default decode, {label or 'unlabelled'}"
    model = noise.fit_noise(deviations(threads, order), source=src + ", thread CPU time")
    wall = noise.fit_noise(dev, source=src + ", wall")
    return {
        "model": model.to_dict(),
        "model_wall": wall.to_dict(),
        "conditions": {**conditions, "preempted_share": float(np.mean(pre))},
        "summary": {
            "runs": len(walls),
            "wall_robust_sd": wall.sd,
            "wall_rho_lag1": wall.rho,
            "wall_dof": wall.to_dict()["dof"],
            "thread_robust_sd": model.sd,
            "thread_rho_lag1": model.rho,
            "thread_dof": model.to_dict()["dof"],
            "p95_abs_deviation": float(np.percentile(np.abs(dev), 95)),
            "max_deviation": float(np.max(dev)),
            "share_over_20pct_slow": float(np.mean(dev > 0.20)),
        },
        "order": order,
        "wall_ns": walls,
        "thread_ns": threads,
    }


if __name__ == "__main__":
    sys.exit(main())
