"""Speed of the step anatomy: link + step analysis + TaxBreak, per 100k events.

Usage::

    .venv/bin/python bench/anatomy_bench.py                  # the deep-queue A100 trace, 7 repeats
    .venv/bin/python bench/anatomy_bench.py TRACE --repeats 15 --json

Stages (each timed separately, min / median / p90 over repeats, wall and thread CPU time):

- ``link``      launch -> GPU op, launch -> op -> Python frame (:func:`hostgap.anatomy.link.link`)
- ``taxbreak``  the per-launch TaxBreak table alone (:func:`hostgap.anatomy.taxbreak.kernel_taxes`)
- ``analyze``   the whole per-step anatomy given the links: segmentation, per-step times,
                host_wait, TaxBreak, summary, verdict, rankings (:func:`hostgap.anatomy.steps.analyze`)
- ``total``     link + analyze, what ``hostgap steps`` costs after loading

Loading is timed once for reference (the loader has its own benchmark). Numbers jitter
1.5-2x on shared machines: compare medians of runs made side by side.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from hostgap import __version__
from hostgap.anatomy import taxbreak as tb
from hostgap.anatomy.link import link
from hostgap.anatomy.steps import AnalysisOptions, analyze
from hostgap.readers import load_trace

DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "hta" / "a100_deep_queue_rank0.json.gz"


def timed(fn, repeats: int) -> dict:
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        fn()
        wall.append(time.perf_counter_ns() - w0)
        cpu.append(time.thread_time_ns() - c0)
    w, c = np.array(wall, dtype=float), np.array(cpu, dtype=float)
    return {
        "wall_ms": {
            "min": w.min() / 1e6,
            "median": float(np.median(w)) / 1e6,
            "p90": float(np.percentile(w, 90)) / 1e6,
        },
        "cpu_ms": {"min": c.min() / 1e6, "median": float(np.median(c)) / 1e6},
    }


def taxbreak_only(trace, links):
    """The inputs analyze() hands to kernel_taxes, rebuilt the same way (timed apart from it)."""
    from hostgap.anatomy.markers import step_markers
    from hostgap.anatomy.timeline import activity_rows
    from hostgap.anatomy.windows import host_api_steps, marker_windows

    _, op_rows = activity_rows(trace)
    win = marker_windows(trace, step_markers(trace).rows)
    _, step = host_api_steps(trace, win)
    return lambda: tb.kernel_taxes(trace, links, step, win.start_ns, 4600.0, op_rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    if not Path(args.trace).exists():
        print(f"anatomy_bench: {args.trace}: not found (the shared trace corpus is needed)", file=sys.stderr)
        return 2

    t0 = time.perf_counter_ns()
    trace = load_trace(args.trace)
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    n = len(trace.events)
    links = link(trace)
    cfg = AnalysisOptions()
    a = analyze(trace, cfg, links)  # warm-up, and the shape of what is timed

    stages = {"link": lambda: link(trace)}
    try:
        stages["taxbreak"] = taxbreak_only(trace, links)
    except (ImportError, AttributeError, TypeError) as e:  # internals moved: time the rest
        print(f"anatomy_bench: taxbreak stage skipped ({e})", file=sys.stderr)
    stages["analyze"] = lambda: analyze(trace, cfg, links)
    stages["total"] = lambda: analyze(trace, cfg, link(trace))
    results = {name: timed(fn, args.repeats) for name, fn in stages.items()}
    per100k = {name: {k: v * 100_000 / n for k, v in r["wall_ms"].items()} for name, r in results.items()}

    doc = {
        "trace": args.trace,
        "events": n,
        "steps": len(a.steps),
        "launches": len(a.kernels) if a.kernels else 0,
        "load_ms_once": load_ms,
        "repeats": args.repeats,
        "stages": results,
        "wall_ms_per_100k_events": per100k,
        "hostgap": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(
        f"{args.trace}: {n:,} events, {len(a.steps)} steps, {doc['launches']:,} launches (load {load_ms:.0f} ms, once)"
    )
    print(f"{'stage':<10}{'min ms':>10}{'median ms':>12}{'p90 ms':>10}   ms per 100k events (min / median)")
    for name, r in results.items():
        w = r["wall_ms"]
        p = per100k[name]
        print(f"{name:<10}{w['min']:>10.1f}{w['median']:>12.1f}{w['p90']:>10.1f}   {p['min']:.1f} / {p['median']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
