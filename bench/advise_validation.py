"""The levers against measured runs on this CPU, side by side (docs/advise.md, "On this CPU").

Checks, each a prediction from one measured run against a second run measured after it:

1-2. from a default tiny hf run at batch 1, the ``batch`` lever's predicted step at batch 4 and
     at batch 8 against runs measured at those batches;
3.   from an ``hf-cb`` run, the ``async`` lever (on a CPU: no gain, the step unchanged) against
     the ``hf-cb-async`` run measured beside it.

A check holds when the measured step lies inside the predicted 95 % interval (the lever run at the
ends of the baseline run's own interval). The checks use the runs' differencing numbers whether
or not the measurement was judged valid (a shared, busy machine makes most runs invalid); each
row says whether both runs were valid.

Usage::

    .venv/bin/python bench/advise_validation.py --out bench/results/advise_validation.json
    .venv/bin/python bench/advise_validation.py --from DIR   # reuse measure --json files in DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import hostgap
from hostgap.model.levers import arithmetic as A
from hostgap.model.levers import ranked as L
from hostgap.model.levers.baseline import from_run

BATCHES = (4, 8)


def _one(doc):
    return doc[0] if isinstance(doc, list) else doc


def measure(batch: int, engine: str = "hf", budget: float = 60.0) -> list[dict]:
    r = hostgap.measure("tiny", engine=engine, batch=batch, budget=budget, store=False, output="/tmp/advise-bench")
    d = r.to_dict()
    return d if isinstance(d, list) else [d]


def row(check: str, base: dict, other: dict, lever: A.Lever) -> dict:
    measured = float(other["differencing"]["t_step_ns"])
    ci = lever.step_ns_ci
    return {
        "check": check,
        "baseline_run": base.get("run_id"),
        "measured_run": other.get("run_id"),
        "target": lever.target,
        "predicted_ns": lever.step_ns,
        "predicted_ci_ns": list(ci) if ci else None,
        "measured_ns": measured,
        "measured_ci_ns": other["differencing"].get("ci", {}).get("t_step_ns"),
        "error": None if not lever.step_ns else measured / lever.step_ns - 1,
        "holds": bool(ci and ci[0] <= measured <= ci[1]),
        "both_valid": bool(base.get("valid") and other.get("valid")),
        "reason": lever.reason,
        "basis": lever.basis,
    }


def checks(runs: dict[tuple[str, int], dict], pairs: list[tuple[dict, dict]] | None = None) -> list[dict]:
    """The checks of ``runs`` (by engine and batch); ``pairs``: (hf-cb, hf-cb-async) runs measured
    together (else the runs' own at each batch)."""
    out = []
    if ("hf", 1) in runs:
        b1 = replace(from_run(runs["hf", 1]), unfaithful=())  # judged by the row's both_valid, not withheld
        for tb in sorted(b for e, b in runs if e == "hf" and b > 1):
            lever = A.evaluate(b1, L.batch(b1, tb))
            out.append(row(f"batch lever: tiny hf batch 1 -> {tb}", runs["hf", 1], runs["hf", tb], lever))
    if pairs is None:
        pairs = [
            (runs[e, b], runs["hf-cb-async", b]) for e, b in sorted(runs) if e == "hf-cb" and ("hf-cb-async", b) in runs
        ]
    for sync, asynchronous in pairs:
        b = int(sync["batch"])
        cb = replace(from_run(sync), unfaithful=())
        spec = L.async_(cb)
        same = A.LeverSpec("async", spec.target, spec.reason, spec.validated, lambda s: A.Outcome(s.wall, s.device))
        lever = A.evaluate(cb, same)
        name = f"async lever: hf-cb -> hf-cb-async at batch {b} (CPU: no gain predicted)"
        out.append(row(name, sync, asynchronous, lever))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/advise_validation.json")
    ap.add_argument("--from", dest="src", default=None, help="a folder of measure --json files (hf_b1.json ...)")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--machine", default=None, help="how the machine was while the runs were measured")
    a = ap.parse_args()
    runs: dict[tuple[str, int], dict] = {}
    pairs: list[tuple[dict, dict]] | None = None
    if a.src:
        pairs = []
        for f in sorted(Path(a.src).glob("*.json")):
            docs = json.loads(f.read_text())
            docs = [
                d for d in (docs if isinstance(docs, list) else [docs]) if isinstance(d, dict) and "differencing" in d
            ]
            by = {d["engine"]: d for d in docs}
            if "hf-cb" in by and "hf-cb-async" in by:  # measured together: compared together
                pairs.append((by["hf-cb"], by["hf-cb-async"]))
            for d in docs:
                runs.setdefault((d["engine"], int(d["batch"])), d)
    else:
        for b in (1, *BATCHES):
            runs["hf", b] = measure(b, budget=a.budget)[0]
        for d in measure(1, "hf-cb,hf-cb-async", a.budget):
            runs[d["engine"], 1] = d
    rows = checks(runs, pairs)
    machine = a.machine or "shared 2-core CPU, busy (other work ran)"
    Path(a.out).write_text(json.dumps({"machine": machine, "source": a.src, "checks": rows}, indent=2))
    for r in rows:
        ci = r["predicted_ci_ns"]
        print(
            f"{r['check']}: predicted {r['predicted_ns'] / 1e6:.3f} ms "
            f"[{ci[0] / 1e6:.3f}-{ci[1] / 1e6:.3f}] measured {r['measured_ns'] / 1e6:.3f} ms: "
            f"{'holds' if r['holds'] else 'FAILS'} (both valid: {r['both_valid']})"
            if ci
            else f"{r['check']}: no interval"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
