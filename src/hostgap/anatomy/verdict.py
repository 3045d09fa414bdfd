"""The verdict: host-bound, balanced or device-bound. One set of thresholds for every command.

The boundary variable is a measured **fraction of the step's wall**, not a millisecond
threshold (METHOD.md §6): the same 0.6 ms residual is negligible at a 28 ms step and dominant
at a 2 ms one. The trace verdict (:func:`step_verdict`) classifies the **host-caused idle share**
(host_wait / wall, docs/method.md §3 "Idle causes"): the part of the step in which the GPU was
idle because no work had been launched. The raw residual (host_exposed / wall) stays in the
verdict as ``host_fraction`` and its own ``raw_verdict``, labelled, but advice never rests on it:
on a FULL-graph or event-waiting step it counts GPU waits the host did not cause.

Thresholds (hostgap's own; the papers define none):

=================  =============================  ===========================================
verdict            host fraction f                reading
=================  =============================  ===========================================
``host-bound``     f >= 0.25                      the GPU waits on the host for a quarter of
                                                  the step or more; host work is the lever
``balanced``       0.10 <= f < 0.25               both matter
``device-bound``   f < 0.10                       host work is hidden behind GPU work
=================  =============================  ===========================================

0.25 is the lower end of the host-bound cells in the differencing paper (25-80 %); 0.10 sits
above its GPU-bound cells (batch 64: 0.59 ms of 28 ms, 2 %; TP-2 8B: 0.48 of 15.9 ms, 3 %).
When the host-caused share is below the host-bound threshold but the GPU is idle for at least
that share of the step for another reason, the verdict names it: ``dependency-bound`` (the GPU
had work and waited on events, streams, copies or collectives) or ``incomplete-capture`` (the
idle lies with work the trace does not contain); when neither, ``unexplained-idle`` if the
unexplained share reaches it. The first of dependency, outside, unexplained that reaches the
threshold names the verdict. A balanced or device-bound verdict with HDBI below 0.5 (TaxBreak:
host orchestration exceeds GPU time) says in its note that the host work is there but hidden
behind GPU work: a faster GPU would expose it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HOST_BOUND_MIN = 0.25
DEVICE_BOUND_MAX = 0.10

HOST_BOUND = "host-bound"
BALANCED = "balanced"
DEVICE_BOUND = "device-bound"
DEPENDENCY_BOUND = "dependency-bound"
INCOMPLETE_CAPTURE = "incomplete-capture"
UNEXPLAINED_IDLE = "unexplained-idle"

OTHER_CAUSES = {
    "dependency": (
        DEPENDENCY_BOUND,
        "GPU waiting on dependencies (events, stream waits, copies, collectives), not on the host",
    ),
    "outside": (INCOMPLETE_CAPTURE, "incomplete capture: the GPU idle lies with work the trace does not contain"),
    "unexplained": (UNEXPLAINED_IDLE, "the GPU held launched work and sat idle without a cause visible in the trace"),
}


def classify(host_fraction: float | None) -> str | None:
    """Verdict for a host fraction in [0, 1]; None when the fraction is unknown."""
    if host_fraction is None or host_fraction != host_fraction:  # None or NaN
        return None
    if host_fraction >= HOST_BOUND_MIN:
        return HOST_BOUND
    if host_fraction >= DEVICE_BOUND_MAX:
        return BALANCED
    return DEVICE_BOUND


@dataclass(frozen=True)
class Verdict:
    """A verdict with the numbers it rests on."""

    verdict: str | None
    basis: str  # "host_cause_fraction" (steps), or "host_fraction" / "host_wait_fraction"
    host_fraction: float | None
    host_wait_share: float | None  # host_wait / wall
    hdbi: float | None
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "basis": self.basis,
            "host_fraction": self.host_fraction,
            "host_wait_share": self.host_wait_share,
            "hdbi": self.hdbi,
            "thresholds": {"host_bound_min": HOST_BOUND_MIN, "device_bound_max": DEVICE_BOUND_MAX},
            "note": self.note,
        }


def verdict(
    host_fraction: float | None,
    host_wait_share: float | None = None,
    hdbi: float | None = None,
    queued: bool = False,
) -> Verdict:
    """Classify; for queued work the host-wait share is the basis (wall - GPU is not host)."""
    if queued and host_wait_share is not None:
        return Verdict(
            classify(host_wait_share),
            "host_wait_fraction",
            host_fraction,
            host_wait_share,
            hdbi,
            "host ran ahead of the GPU (queued steps): classified by host_wait / wall",
        )
    return Verdict(classify(host_fraction), "host_fraction", host_fraction, host_wait_share, hdbi)


def step_verdict(steps: list[dict], warmup: list[int], hdbi: float | None) -> dict:
    """The trace verdict over the steady decode steps (not partial, not warm-up; all non-partial
    steps when there are none). Queued steps are dropped unless most of the pool is queued
    (the host ran ahead), then they are the pool. The basis is the median host-caused idle share.
    """
    exclude = set(warmup)
    pool = [s for s in steps if s["kind"] in ("decode", "unknown") and not s["partial"] and s["index"] not in exclude]
    if not pool:
        pool = [s for s in steps if not s["partial"]] or steps
    if not pool:
        return Verdict(None, "host_cause_fraction", None, None, hdbi).to_dict() | {"steps_used": 0}
    queued = sum(s["queued"] for s in pool) * 2 > len(pool)
    use = pool if queued else ([s for s in pool if not s["queued"]] or pool)
    walls = [s["wall_ns"] for s in use]
    host = _median([s["host_wait_ns"] / w for s, w in zip(use, walls) if w])
    shares = {
        c: _median([s["idle_causes"][f"{c}_ns"] / w for s, w in zip(use, walls) if w])
        for c in ("host", "dependency", "outside", "unexplained")
    }
    raw = _median([s["host_fraction"] for s in use])
    label, note = classify(host), ""
    if label != HOST_BOUND:
        for cause, (name, why) in OTHER_CAUSES.items():
            share = shares[cause]
            if share is not None and share >= HOST_BOUND_MIN:
                label, note = name, why
                break
    if queued:
        note = (
            ("host ran ahead of the GPU (queued steps); " + note)
            if note
            else "host ran ahead of the GPU (queued steps): the GPU rarely waited on the host"
        )
    if label in (BALANCED, DEVICE_BOUND) and hdbi is not None and hdbi < 0.5:
        # TaxBreak evidence: host orchestration exceeds device time, hidden behind GPU work here
        hidden = f"HDBI {hdbi:.2f}: host orchestration exceeds GPU time but is hidden behind it"
        note = f"{note}; {hidden}" if note else hidden
    out = Verdict(label, "host_cause_fraction", raw, host, hdbi, note).to_dict()
    out.update({"raw_verdict": classify(raw), "idle_shares": shares, "steps_used": len(use)})
    return out


def _median(values: list) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None
