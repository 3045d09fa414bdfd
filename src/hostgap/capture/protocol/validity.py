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
    (:func:`hostgap.stats.differencing.linear_enough`).
profiler inflation
    traced / untraced wall - 1 <= :data:`INFLATION_LIMIT`.
contention (:func:`contention`)
    the share of runs preempted for more than 5 % of their wall <= :data:`PREEMPTED_LIMIT` in
    the untraced and in the traced runs (CPU, in-thread engine: wall - thread time; an engine in
    other processes, vLLM: the CPU time other processes used during the run, untraced runs);
    the median relative spread of the untraced repeats (IQR / median per N) <= :data:`SPREAD_LIMIT`;
    CPU steal over the runs <= :data:`hostgap.stats.noise.STEAL_LIMIT` (``/proc/stat``).

The **agreement** check (:func:`agreement`) compares the differencing host fraction with the
per-step anatomy's (median over steady decode steps of the traced N2 run); a difference above
:data:`AGREEMENT_TOLERANCE` is reported in words, with which estimate to trust.

Pure functions over the results dict pieces; no I/O. The range, linearity and inflation rules
(:func:`reasons`) live in :mod:`hostgap.checks`, where the runs database reads them too.
"""

from __future__ import annotations

import numpy as np

from hostgap.capture.protocol.engine import ONE_THREAD
from hostgap.checks import INFLATION_LIMIT, reasons
from hostgap.errors import EXIT_INVALID  # measure's exit status when a measurement is invalid

__all__ = [
    "AGREEMENT_TOLERANCE",
    "DISTURBED",
    "EXIT_INVALID",
    "INFLATION_LIMIT",
    "PREEMPTED_LIMIT",
    "SPREAD_LIMIT",
    "agreement",
    "busy_share",
    "contention",
    "contention_of",
    "disturbed",
    "in_thread",
    "preempted_share",
    "reasons",
    "repeat_spread",
]

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


def contention(untraced: tuple[dict, dict], traced: tuple[dict, dict] | None = None, other: dict | None = None) -> dict:
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
    return {
        "contended": bool(flags),
        "flags": flags,
        "preempted_share": pu,
        "preempted_basis": basis,
        "traced_preempted_share": pt,
        "repeat_spread": spread,
    }


def agreement(diff_fraction: float | None, anatomy_fraction: float | None) -> dict | None:
    """The two estimates of the host fraction side by side; None without the anatomy's."""
    if anatomy_fraction is None or diff_fraction is None:
        return None
    delta = float(anatomy_fraction - diff_fraction)
    ok = abs(delta) <= AGREEMENT_TOLERANCE
    note = (
        "the differencing split and the per-step anatomy agree"
        if ok
        else f"the per-step anatomy differs by {delta:+.2f} (tolerance {AGREEMENT_TOLERANCE:.2f}): "
        "trust the differencing split, which rests on every run of the N sweep and repeats; "
        "the anatomy is one traced run at N2, where profiler cost and any disturbance of "
        "that single run stay in"
    )
    return {
        "differencing": float(diff_fraction),
        "anatomy": float(anatomy_fraction),
        "difference": delta,
        "tolerance": AGREEMENT_TOLERANCE,
        "agree": ok,
        "trust": "differencing",
        "note": note,
    }


def in_thread(cfg) -> bool:
    """The whole decode runs on one thread of this process whose CPU time the engine reports
    (CPU, an engine of :data:`~hostgap.capture.protocol.engine.ONE_THREAD`, one intra-op thread):
    only then does that CPU time stand for the run's undisturbed wall time. ``cfg``: a
    :class:`~hostgap.capture.protocol.orchestrate.MeasureConfig`."""
    return cfg.device == "cpu" and cfg.engine in ONE_THREAD and cfg.threads == 1


def contention_of(cfg, raw: dict) -> dict:
    """Contention flags of one attempt (:func:`contention`) from its ``timings.json`` content;
    thread times count only where the decode runs on the measuring thread (:func:`in_thread`);
    elsewhere (an engine in other processes, vLLM) the CPU time other processes used during each
    untraced run, when the engine reports it, stands in for preemption."""
    from hostgap.stats.noise import noise_flags

    walls = {n: v for n, v in raw["untraced_wall_ns"].items()}
    if not in_thread(cfg):
        c = contention((walls, {}), other=raw.get("untraced_other_cpu_ns"))
    else:
        tr = raw.get("traced", {})
        traced = (
            {n: [s["wall_ns"] for s in v] for n, v in tr.items()},
            {n: [s.get("thread_ns", 0) for s in v] for n, v in tr.items()},
        )
        c = contention((walls, raw.get("untraced_thread_ns", {})), traced)
    steal = noise_flags(raw.get("machine"))  # a hypervisor taking the CPU is contention too
    return {**c, "flags": c["flags"] + steal, "contended": c["contended"] or bool(steal)}
