"""``compare A B``: did the change between A and B do what its lever predicted (docs/advise.md)?

The change is recognised from the two inputs: a different batch (the ``batch`` lever at B's
batch), transformers' continuous batching made asynchronous or vLLM's async scheduling turned on
(``async``), eager launches replaced by graph replays (``graphs``), more usable cores for the
same engine (``cpu`` with B's cores). The lever is computed on A
and B's measured step is held against its prediction: inside the 95 % interval, or faster or
slower than predicted (the relative error where there is no interval)."""

from __future__ import annotations

from dataclasses import replace

from hostgap.errors import HostgapError
from hostgap.report.inputs import Input


def _doc(inp: Input) -> dict:
    return inp.results if inp.results is not None else {**(inp.overview or {}), **(inp.anatomy or {})}


def change(a: dict, b: dict, ba, bb) -> tuple[str, int | None] | None:
    """(lever, target batch) the change from A to B stands for; None when not recognised."""
    if bb.batch_known and ba.batch_known and bb.batch != ba.batch:
        return "batch", int(round(bb.batch))
    ea, eb = str(a.get("engine") or ""), str(b.get("engine") or "")
    if (ea, eb) == ("hf-cb", "hf-cb-async"):
        return "async", None
    if (
        ea == eb == "vllm"
        and not (a.get("engine_facts") or {}).get("async_scheduling")
        and (b.get("engine_facts") or {}).get("async_scheduling")
    ):
        return "async", None
    import numpy as np

    if float(np.median(ba.steps.graph_launches)) == 0 and float(np.median(bb.steps.graph_launches)) > 0:
        return "graphs", None
    ca, cb = ba.facts.get("cores"), bb.facts.get("cores")
    if ca and cb and ea == eb and cb["usable"] > ca["usable"]:
        return "cpu", int(cb["usable"])
    return None


def lever_check(a: Input, b: Input) -> dict | None:
    """The check of the change's lever, or None when the change is not one a lever stands for."""
    import numpy as np

    from hostgap.model.levers import arithmetic as A
    from hostgap.model.levers import ranked as L
    from hostgap.model.levers.baseline import baseline

    da, db = _doc(a), _doc(b)
    try:
        ba, bb = baseline(da), baseline(db)
    except HostgapError:
        return None
    what = change(da, db, ba, bb)
    if what is None:
        return None
    name, target = what
    ba = replace(ba, unfaithful=())  # the check says whether both sides were valid
    specs = {s.lever: s for s in L.specs(ba)}
    if name == "batch":
        spec = L.batch(ba, target)
    elif name == "cpu":
        spec = L.cores(ba, target) or specs[name]  # B's cores; none where A's processes had enough
    else:
        spec = specs[name]
    lever = A.evaluate(ba, spec)
    measured = float(np.median(bb.steps.wall))
    predicted, ci = lever.step_ns, lever.step_ns_ci
    if name == "async" and not ba.gpu:  # the lever predicts no change on a CPU
        predicted, ci = float(np.median(ba.steps.wall)), A.today_interval(ba)
    error = None if not predicted else measured / predicted - 1
    if ci:
        inside = bool(ci[0] <= measured <= ci[1])
        words = (
            f"B's step {measured / 1e6:.3f} ms lies inside the {name} lever's predicted interval "
            f"[{ci[0] / 1e6:.3f}, {ci[1] / 1e6:.3f}] ms: the change did what the lever predicted"
            if inside
            else f"B's step {measured / 1e6:.3f} ms is {'faster' if measured < ci[0] else 'slower'} than the {name} "
            f"lever's predicted [{ci[0] / 1e6:.3f}, {ci[1] / 1e6:.3f}] ms"
        )
    elif predicted and error is not None:
        inside = None
        words = (
            f"B's step {measured / 1e6:.3f} ms vs the {name} lever's {predicted / 1e6:.3f} ms "
            f"({100 * error:+.1f} %; no interval)"
        )
    else:
        inside, words = None, f"the {name} lever does not apply to A: {lever.reason}"
    out = {
        "lever": name,
        "target": lever.target,
        "applicable": lever.applicable,
        "reason": lever.reason,
        "predicted_ns": predicted,
        "predicted_ci_ns": list(ci) if ci else None,
        "measured_ns": measured,
        "error": error,
        "as_predicted": inside,
        "words": words,
    }
    return out
