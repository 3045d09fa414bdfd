"""The rules that say whether a measured result is a result: range, linearity and profiler
inflation over its differencing numbers (docs/measure.md, "Validity").

Pure functions of the results dict's ``differencing`` part (and a contention dict), no I/O. They
sit low in the layers because the runs database (:mod:`hostgap.store.database`) judges results written
before validity was stored with them; the measuring side (:mod:`hostgap.capture.protocol.validity`) adds
the contention checks and uses the same rules.
"""

from __future__ import annotations

import numpy as np

LINEARITY_R2 = 0.99
"""Linearity check: R² of W(N) and G(N) over the sweep must reach this."""
LINEARITY_RESIDUAL = 0.10
"""Linearity check: no per-N estimate may lie further than this (relative) from the robust line."""
LACK_OF_FIT_ALPHA = 0.01
"""Linearity check, when the re-measurements are over: a sweep that misses the two limits above
still passes when its departure from the line is within what the runs' own spread explains (the
lack-of-fit F test's p-value, ``lack_of_fit_p`` of the fit, at least this, with repeats at
every N) and stays within :data:`NOISY_R2` and :data:`NOISY_RESIDUAL`: a noisy line, whose
noise the intervals carry, not a bent one. While the budget lasts, the limits above decide
whether to measure more (``strict``)."""
NOISY_R2 = 0.95
"""The lowest R² a noisy line may have: below it, no spread of the repeats excuses the bend."""
NOISY_RESIDUAL = 0.20
"""The furthest a per-N estimate of a noisy line may lie from the robust line."""
INFLATION_LIMIT = 3.0
"""Largest accepted profiler inflation (traced / untraced wall - 1)."""


def _beyond(p: float | None) -> str:
    """The lack-of-fit test's word in a linearity reason: said only when it ran."""
    return f"; beyond the repeats' spread, lack-of-fit p {p:.3f}" if p is not None else ""


def noisy_line(fit: dict) -> bool:
    """A fit off the limits only as far as its repeats' spread explains (:data:`LACK_OF_FIT_ALPHA`,
    :data:`NOISY_R2`, :data:`NOISY_RESIDUAL`).

    >>> noisy_line({"r2": 0.97, "max_residual": 0.12, "lack_of_fit_p": 0.3})
    True
    >>> noisy_line({"r2": 0.97, "max_residual": 0.12, "lack_of_fit_p": 0.001})  # a bend
    False
    >>> noisy_line({"r2": 0.97, "max_residual": 0.12})  # no repeats at some N: no test
    False
    """
    p = fit.get("lack_of_fit_p")
    return (
        p is not None
        and p >= LACK_OF_FIT_ALPHA
        and (fit.get("r2") is None or fit["r2"] >= NOISY_R2)
        and fit.get("max_residual", 0) <= NOISY_RESIDUAL
    )


def fit_reason(name: str, fit: dict | None, strict: bool = False) -> str | None:
    """Why the fit dict of series ``name`` (``LinearFit.to_dict()``) fails the linearity check
    (docs/measure.md, Validity); None when it passes. ``strict``: the limits alone, no noisy
    line excused (whether to measure more)."""
    if not fit:
        return None
    p = fit.get("lack_of_fit_p")
    if not strict and noisy_line(fit):
        return None
    if fit.get("r2") is not None and fit["r2"] < LINEARITY_R2:
        return f"{name} not linear in N (R² {fit['r2']:.4f} < {LINEARITY_R2}{_beyond(p)})"
    if fit.get("max_residual", 0) > LINEARITY_RESIDUAL:
        return f"{name}: one N lies {fit['max_residual']:.0%} off the line (limit {LINEARITY_RESIDUAL:.0%}{_beyond(p)})"
    return None


def reasons(d: dict, cont: dict | None = None) -> list[str]:
    """Every reason why the differencing dict ``d`` (results' ``differencing``) is not a
    result; empty when it is valid."""
    out = []
    t, g, h, f = d.get("t_step_ns"), d.get("g_step_ns"), d.get("h_step_ns"), d.get("host_fraction")
    if t is not None and not (np.isfinite(t) and t > 0):
        out.append("wall per step is not positive")
    if f is None or not np.isfinite(f) or not 0 <= f <= 1:
        out.append("host fraction outside [0, 1]" if f is not None else "no host fraction")
    if h is not None and h < 0:
        out.append("negative host-exposed time")
    if g is not None and t is not None and g > t:
        out.append("device-active above wall")
    for name, key in (("wall", "fit_wall"), ("device time", "fit_gpu")):
        r = fit_reason(name, d.get(key))
        if r:
            out.append(r)
    infl = d.get("profiler_inflation")
    if infl is not None and infl > INFLATION_LIMIT:
        out.append(f"profiler inflation {infl:+.0%} above {INFLATION_LIMIT:+.0%}")
    if cont and cont.get("contended"):
        out.append("machine busy: " + "; ".join(cont["flags"]))
    return out


def is_valid(r: dict) -> bool:
    """A run recorded before validity existed counts as valid unless its numbers say otherwise."""
    if "valid" in r:
        return bool(r["valid"])
    return not reasons(r.get("differencing") or {})
