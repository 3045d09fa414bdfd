"""Is a measurement a result? Contention, range and consistency checks, and the agreement of the
two estimates of the split.

A measurement is **valid** only when every check below passes; otherwise it carries the reasons
and is shown as ``invalid: <reason>`` instead of a verdict (``hostgap measure`` then exits with
:data:`EXIT_INVALID`). The rules (docs/measure.md, "Validity"):

range
    host fraction in [0, 1]; host-exposed >= 0; device-active (or its CPU analogue) <= wall.
linearity
    W(N) and G(N) over the sweep: R² >= 0.99 and no per-N estimate further than 10 % from the
    robust line, relative to the line's value at N2
    (:func:`hostgap.capture.differencing.linear_enough`).
profiler inflation
    traced / untraced wall - 1 <= :data:`INFLATION_LIMIT`.
contention (:func:`contention`)
    the share of runs preempted for more than 5 % of their wall <= :data:`PREEMPTED_LIMIT` in
    the untraced and in the traced runs (CPU, in-thread engine: wall - thread time; an engine in
    other processes, vLLM: the CPU time other processes used during the run, untraced runs);
    the median relative spread of the untraced repeats (IQR / median per N) <= :data:`SPREAD_LIMIT`.

The **agreement** check (:func:`agreement`) compares the differencing host fraction with the
per-step anatomy's (median over steady decode steps of the traced N2 run); a difference above
:data:`AGREEMENT_TOLERANCE` is reported in words, with which estimate to trust.

Pure functions over the results dict pieces; no I/O.
"""

from __future__ import annotations

import numpy as np

from hostgap.capture.differencing import LINEARITY_R2, LINEARITY_RESIDUAL

EXIT_INVALID = 3
"""``hostgap measure``'s exit status when a measurement is invalid (2 means bad input)."""
INFLATION_LIMIT = 3.0
"""Largest accepted profiler inflation (traced / untraced wall - 1)."""
PREEMPTED_LIMIT = 0.5
"""Largest accepted share of preempted runs (wall - thread CPU time > 5 % of wall)."""
SPREAD_LIMIT = 0.25
"""Largest accepted median relative spread (IQR / median) of the untraced repeats per N."""
AGREEMENT_TOLERANCE = 0.10
"""Largest accepted |differencing - anatomy| host fraction."""
DISTURBED = 0.05
"""A run is preempted when it spent more than this share of its wall off the CPU."""


def disturbed(wall_ns, thread_ns) -> np.ndarray | bool:
    """Whether runs spent more than :data:`DISTURBED` of their wall preempted (thread time 0:
    unknown, never disturbed).

    >>> bool(disturbed(100, 99)), bool(disturbed(100, 80)), bool(disturbed(100, 0))
    (False, True, False)
    """
    w = np.asarray(wall_ns, dtype=np.float64)
    t = np.asarray(thread_ns, dtype=np.float64)
    out = (t > 0) & ((w - t) > DISTURBED * w)
    return bool(out) if out.ndim == 0 else out


def preempted_share(walls: dict, threads: dict) -> float | None:
    """Share of runs (all N) that were preempted; None without thread times for every run."""
    w = [x for n in walls for x in walls[n]]
    t = [x for n in walls for x in (threads.get(n) or [])]
    if not w or len(w) != len(t) or not all(t):
        return None
    return float(np.mean(disturbed(w, t)))


def repeat_spread(walls: dict) -> float | None:
    """Median over N (with >= 3 repeats) of IQR / median of the repeats; None if no such N."""
    vals = []
    for v in walls.values():
        if len(v) >= 3:
            q1, med, q3 = np.percentile(np.asarray(v, dtype=np.float64), [25, 50, 75])
            if med > 0:
                vals.append((q3 - q1) / med)
    return float(np.median(vals)) if vals else None


def busy_share(walls: dict, other_cpu: dict | None) -> float | None:
    """Share of runs (all N) during which other processes used more than :data:`DISTURBED` of
    the run's wall in CPU time: the preemption check of an engine that runs in other processes,
    whose thread time says nothing; None without a figure for every run.

    >>> busy_share({1: [100, 100]}, {1: [2, 30]})
    0.5
    """
    if not other_cpu:
        return None
    w = [x for n in walls for x in walls[n]]
    o = [x for n in walls for x in (other_cpu.get(n) or [])]
    if not w or len(w) != len(o) or any(x is None for x in o):
        return None
    return float(np.mean(np.asarray(o, dtype=np.float64) > DISTURBED * np.asarray(w, dtype=np.float64)))


def contention(untraced: tuple[dict, dict], traced: tuple[dict, dict] | None = None,
               other: dict | None = None) -> dict:
    """Contention flags of one measurement: ``untraced``/``traced`` are (walls, thread times)
    per N; ``other``: per N, the CPU time other processes used during each untraced run (an
    engine in other processes), used when thread times are not. ``contended`` is True when any
    flag is raised; ``flags`` names them; ``preempted_basis`` says how runs were judged
    (``"thread"``, ``"other-cpu"`` or None)."""
    pu = preempted_share(*untraced)
    basis = "thread" if pu is not None else None
    if pu is None:
        pu = busy_share(untraced[0], other)
        basis = "other-cpu" if pu is not None else None
    pt = preempted_share(*traced) if traced else None
    spread = repeat_spread(untraced[0])
    flags = []
    if pu is not None and pu > PREEMPTED_LIMIT:
        what = "preempted" if basis == "thread" else "beside other work over 5 % of their wall"
        flags.append(f"{pu:.0%} of untraced runs {what} (limit {PREEMPTED_LIMIT:.0%})")
    if pt is not None and pt > PREEMPTED_LIMIT:
        flags.append(f"{pt:.0%} of traced runs preempted (limit {PREEMPTED_LIMIT:.0%})")
    if spread is not None and spread > SPREAD_LIMIT:
        flags.append(f"repeat spread {spread:.0%} (IQR/median; limit {SPREAD_LIMIT:.0%})")
    return {"contended": bool(flags), "flags": flags, "preempted_share": pu, "preempted_basis": basis,
            "traced_preempted_share": pt, "repeat_spread": spread}


def _fit_reason(name: str, fit: dict | None) -> str | None:
    if not fit:
        return None
    if fit.get("r2") is not None and fit["r2"] < LINEARITY_R2:
        return f"{name} not linear in N (R² {fit['r2']:.4f} < {LINEARITY_R2})"
    if fit.get("max_residual", 0) > LINEARITY_RESIDUAL:
        return (f"{name}: one N lies {fit['max_residual']:.0%} off the line "
                f"(limit {LINEARITY_RESIDUAL:.0%})")
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


def agreement(diff_fraction: float | None, anatomy_fraction: float | None) -> dict | None:
    """The two estimates of the host fraction side by side; None without the anatomy's."""
    if anatomy_fraction is None or diff_fraction is None:
        return None
    delta = float(anatomy_fraction - diff_fraction)
    ok = abs(delta) <= AGREEMENT_TOLERANCE
    note = ("the differencing split and the per-step anatomy agree" if ok else
            f"the per-step anatomy differs by {delta:+.2f} (tolerance {AGREEMENT_TOLERANCE:.2f}): "
            "trust the differencing split, which rests on every run of the N sweep and repeats; "
            "the anatomy is one traced run at N2, where profiler cost and any disturbance of "
            "that single run stay in")
    return {"differencing": float(diff_fraction), "anatomy": float(anatomy_fraction),
            "difference": delta, "tolerance": AGREEMENT_TOLERANCE, "agree": ok,
            "trust": "differencing", "note": note}
