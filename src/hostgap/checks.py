"""The rules that say whether a measured result is a result: range, linearity and profiler
inflation over its differencing numbers (docs/measure.md, "Validity").

Pure functions of the results dict's ``differencing`` part (and a contention dict), no I/O. They
sit low in the layers because the runs database (:mod:`hostgap.store`) judges results written
before validity was stored with them; the measuring side (:mod:`hostgap.capture.validity`) adds
the contention checks and uses the same rules.
"""

from __future__ import annotations

import numpy as np

LINEARITY_R2 = 0.99
"""Linearity check: R² of W(N) and G(N) over the sweep must reach this."""
LINEARITY_RESIDUAL = 0.10
"""Linearity check: no per-N estimate may lie further than this (relative) from the robust line."""
INFLATION_LIMIT = 3.0
"""Largest accepted profiler inflation (traced / untraced wall - 1)."""


def _fit_reason(name: str, fit: dict | None) -> str | None:
    if not fit:
        return None
    if fit.get("r2") is not None and fit["r2"] < LINEARITY_R2:
        return f"{name} not linear in N (R² {fit['r2']:.4f} < {LINEARITY_R2})"
    if fit.get("max_residual", 0) > LINEARITY_RESIDUAL:
        return f"{name}: one N lies {fit['max_residual']:.0%} off the line (limit {LINEARITY_RESIDUAL:.0%})"
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
        r = _fit_reason(name, d.get(key))
        if r:
            out.append(r)
    infl = d.get("profiler_inflation")
    if infl is not None and infl > INFLATION_LIMIT:
        out.append(f"profiler inflation {infl:+.0%} above {INFLATION_LIMIT:+.0%}")
    if cont and cont.get("contended"):
        out.append("machine busy: " + "; ".join(cont["flags"]))
    return out
