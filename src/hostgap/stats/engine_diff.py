"""The difference between two engines measured together (``hostgap measure --engine hf,vllm``).

Both engines ran the same workload, their runs interleaved (:mod:`hostgap.capture.protocol.interleave`),
and each has its own per-step wall and host-exposed estimates with intervals and its own
validity (:mod:`hostgap.capture.protocol.validity`). The difference ``other - base`` of each estimate
gets an interval by MOVER (Zou and Donner: each side's interval half-widths added in
quadrature, :func:`hostgap.stats.differencing.mover_difference`), which holds its level for
independent estimates; interleaving makes both engines share any drift of the machine, a
positive correlation that narrows the true spread of the difference, so the interval is then
conservative.

The difference is a result only when both measurements are (valid, each with an interval);
otherwise it is marked invalid with the reasons, and no number is given for it. Its terminal
line is :func:`hostgap.report.run_view.difference_line`.
"""

from __future__ import annotations

from hostgap.checks import is_valid
from hostgap.stats.differencing import Slope, mover_difference

QUANTITIES = (("wall_ns", "t_step_ns", "wall"), ("host_exposed_ns", "h_step_ns", "host-exposed"))
"""(key in the difference, key in ``differencing``, words) of each compared quantity."""


def _slope(r: dict, key: str) -> Slope | None:
    d = r.get("differencing") or {}
    v, ci = d.get(key), (d.get("ci") or {}).get(key)
    if v is None or not ci or ci[0] is None or ci[1] is None:
        return None
    return Slope(float(v), float(ci[0]), float(ci[1]))


def engine_difference(base: dict, other: dict) -> dict:
    """``other - base`` per decode step for wall and host-exposed time, each ``{value, lo, hi}``
    (ns) or None; ``valid`` and ``invalid_reasons`` (each naming its engine)."""
    why = []
    for r in (base, other):
        if not is_valid(r):
            why += [f"{r.get('engine')}: {x}" for x in (r.get("invalid_reasons") or ["checks failed"])]
    parts: dict[str, dict[str, float] | None] = {}
    for key, src, words in QUANTITIES:
        a, b = _slope(base, src), _slope(other, src)
        if a is None or b is None:
            why.append(f"no interval for the {words} of {base.get('engine') if a is None else other.get('engine')}")
            parts[key] = None
            continue
        d = mover_difference(b, a)
        parts[key] = {"value": d.value, "lo": d.lo, "hi": d.hi}
    level = ((base.get("differencing") or {}).get("ci") or {}).get("level", 0.95)
    together = bool((base.get("interleaved") or {}).get("engines"))
    if why:
        parts = dict.fromkeys(parts)  # not a result: no number
    return {
        "base": base.get("engine"),
        "other": other.get("engine"),
        "runs": [base.get("run_id"), other.get("run_id")],
        "valid": not why,
        "invalid_reasons": why,
        **parts,
        "level": level,
        "method": "MOVER difference of the two engines' intervals (conservative under shared drift)",
        "schedule": "interleaved" if together else "one after the other",
    }
