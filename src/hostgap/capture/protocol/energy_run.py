"""A measurement's energy (docs/energy.md): the counters read around every untraced run
(:mod:`hostgap.capture.protocol.interleave`), their raw record in ``timings.json``, and the
results' ``energy`` block, differenced over N as the wall is (:func:`hostgap.stats.joules.decompose`).

The headline numbers (``step_j``, ``fixed_j``, ``request_j``, ``token_j``, ``power_w`` ...) are
those of the sum of the domains that add up (CPU packages, DRAM, GPUs; not a platform zone that
covers the others), or of the one domain there is; ``domains`` holds each device's own. Without
a counter, ``energy`` is ``{"available": false, "reason": ...}`` and no number appears.
"""

from __future__ import annotations

from hostgap.energy.counters import Meter
from hostgap.energy.meter import open_meter
from hostgap.stats.confidence import Slope
from hostgap.stats.joules import decompose

HEADLINE = ("step_j", "fixed_j", "window_j", "request_j", "token_j", "power_w", "step_power_w")


def meter_for(cfg) -> Meter:
    """The counters for a measurement of ``cfg``: powercap always (the host's part of a step),
    NVML's GPUs when the workload runs on one."""
    return open_meter(nvml=getattr(cfg, "device", "cpu") == "cuda")


def raw_energy(meter: Meter, per_n: dict[int, list[dict]]) -> dict:
    """The timings' record: what the meter is and saw, and each domain's energy per run (µJ,
    aligned with ``untraced_wall_ns``; None where the counter reset or could not be read)."""
    return {
        "energy_meter": meter.describe(),
        "untraced_energy_uj": {
            d.name: {str(n): [run.get(d.name) for run in runs] for n, runs in per_n.items()} for d in meter.domains
        },
    }


def _summed(per_domain: dict[str, dict[str, list]], names: list[str]) -> dict[str, list]:
    """Per run, the sum of ``names``' energies (None where any of them is missing)."""
    first = per_domain[names[0]]
    out: dict[str, list] = {}
    for n in first:
        cols = [per_domain[d].get(n, []) for d in names]
        out[n] = [None if any(v is None for v in vals) else sum(vals) for vals in zip(*cols)]
    return out


def energy_results(raw: dict, cfg, diff) -> dict:
    """The results' ``energy`` block (module doc)."""
    meter = raw.get("energy_meter")
    if not meter or not meter.get("available"):
        reason = (meter or {}).get("reason") or "no energy counter was read"
        return {"available": False, "reason": reason}
    per = raw.get("untraced_energy_uj") or {}
    wall = {int(n): v for n, v in raw["untraced_wall_ns"].items()}
    rounds = {int(n): v for n, v in raw.get("untraced_rounds", {}).items()}
    seq = {int(n): v for n, v in raw.get("untraced_seq", {}).items()}
    ci_t = diff.ci.get("t_step_ns")
    t_step = Slope(diff.t_step_ns, ci_t[0], ci_t[1]) if ci_t and diff.t_step_ns > 0 else None

    def one(series: dict[str, list]) -> dict:
        return decompose(
            {int(n): v for n, v in series.items()},
            wall,
            cfg.n1,
            cfg.n2,
            batch=cfg.batch,
            rounds=rounds,
            seq=seq,
            estimator=cfg.estimator,
            t_step=t_step,
        )

    domains = {}
    for name, info in meter["domains"].items():
        domains[name] = {"source": info["source"], **one(per.get(name, {}))}
    summed = [d for d in meter.get("in_total", []) if d in per]
    if len(summed) > 1:
        head = one(_summed(per, summed))
        head["source"] = "+".join(sorted({meter["domains"][d]["source"] for d in summed}))
        head["of"] = summed
    else:
        name = summed[0] if summed else next(iter(domains))
        head = {**domains[name], "of": [name]}
    events = meter.get("events") or {}
    out = {
        "available": bool(head.get("available")),
        "source": head["source"],
        "of": head["of"],
        **{k: head.get(k) for k in HEADLINE},
        "ci": head.get("ci"),
        "at_tokens": cfg.n2,
        "batch": cfg.batch,
        "linear": head.get("linear"),
        "notes": head.get("notes", []),
        "fit": head.get("fit"),
        "runs": head.get("runs"),
        "runs_left_out": head.get("runs_left_out"),
        "counter_events": events,
        "left_out": meter.get("left_out", []),
        "domains": domains,
    }
    if not out["available"]:
        out = {"available": False, "reason": head.get("reason", "no energy result"), "domains": domains}
    return out
