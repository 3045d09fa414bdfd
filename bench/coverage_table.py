"""The coverage table of docs/measure.md: how often each printed 95 % interval covers the truth in
1,000 simulated measurements per case (the draws of tests/test_capture_coverage_noise.py: the
default protocol's shape and run order, one noise sequence through all runs), the median width
of each interval (relative to its true value) and how often a point lay on its interval's edge.

    .venv/bin/python bench/coverage_table.py                 # every case, 20-40 minutes on 2 cores
    .venv/bin/python bench/coverage_table.py --draws 300 --cases slow,ar1-0.8

Prints two Markdown tables (coverage; median widths and points on an edge). The slow-period
cases' truth is the step without interference. The last case is the method's limit: slow
periods so long that a measurement is often slow from its first run to its last, or for most
of it (then nothing in it shows the step without interference).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hostgap.stats.differencing import difference  # noqa: E402
from hostgap.stats.noise import NoiseModel, SlowPeriods  # noqa: E402
from test_capture_coverage_noise import N1, N2, _draw, _models  # noqa: E402

KEYS = ("t_step_ns", "g_step_ns", "h_step_ns", "host_fraction")


def cases() -> dict[str, tuple[object, float]]:
    """name -> (noise model, the traced compute's own noise)."""
    m = _models()
    return {
        "fitted": (m["fitted"], 0.01),
        "ar1-0.6": (m["ar1-0.6"], 0.01),
        "ar1-0.8": (m["ar1-0.8"], 0.01),
        "iid-t3": (m["iid-t3"], 0.01),
        "iid-normal-8%": (NoiseModel(0.08), 0.01),
        "fitted, own 3 %": (m["fitted"], 0.03),
        "slow": (m["slow"], 0.01),
        "slow-ar": (m["slow-ar"], 0.01),
        "slow-fitted": (SlowPeriods(m["fitted"]), 0.01),
        "limit: long slow periods": (SlowPeriods(NoiseModel(0.03), share=0.3, mean_runs=12, lo=0.1, hi=0.2), 0.01),
    }


def row(model, activity: str, seed: int, own: float, draws: int) -> dict:
    """Coverage, median width of each interval (times relative to their value, the host fraction
    in points), and the share of draws with a point on its interval's edge."""
    rng = np.random.default_rng(seed)
    hits = dict.fromkeys(KEYS, 0)
    widths: dict[str, list[float]] = {k: [] for k in KEYS}
    edge = 0
    for i in range(draws):
        s, truth = _draw(rng, model, activity, i, own)
        d = difference(s, N1, N2, activity=activity)
        for k in KEYS:
            ci = d.ci[k]
            hits[k] += ci is not None and ci[0] <= truth[k] <= ci[1]
            if ci is not None:  # times relative to their value, the fraction in points
                widths[k].append((ci[1] - ci[0]) / (0.01 if k == "host_fraction" else truth[k]))
        edge += bool(d.ci.get("edge"))
    out = {k: hits[k] / draws for k in KEYS}
    out.update({f"width_{k}": float(np.median(widths[k])) if widths[k] else None for k in KEYS})
    out["edge"] = edge / draws
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    a = ap.parse_args()
    todo = cases()
    names = a.cases.split(",") if a.cases else list(todo)
    rows = []
    print("| noise | basis | t_step | g_step | h_step | host fraction |")
    print("|---|---|---:|---:|---:|---:|")
    for name in names:
        model, own = todo[name]
        for activity, basis in (("gpu", "GPU"), ("cpu-compute", "CPU")):
            if own != 0.01 and activity == "gpu":
                continue
            r = row(model, activity, 12 if activity != "gpu" else 11, own, a.draws)
            rows.append((name, basis, r))
            print(f"| {name} | {basis} | " + " | ".join(f"{100 * r[k]:.1f}%" for k in KEYS) + " |", flush=True)
    print()
    print("| noise | basis | median width t / g / h (% of the value) | host fraction (points) | point on an edge |")
    print("|---|---|---:|---:|---:|")
    for name, basis, r in rows:
        w = " / ".join(f"{100 * r['width_' + k]:.1f}" for k in KEYS[:3])
        print(f"| {name} | {basis} | {w} | {r['width_host_fraction']:.1f} | {100 * r['edge']:.1f}% |")


if __name__ == "__main__":
    main()
