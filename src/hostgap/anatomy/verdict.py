"""The verdict: host-bound, balanced or device-bound. One set of thresholds for every command.

The boundary variable is the measured **host fraction** (host_exposed / wall), not a
millisecond threshold (METHOD.md §6): the same 0.6 ms residual is negligible at a 28 ms step
and dominant at a 2 ms one.

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
When a step is ``queued`` (the host ran ahead, so wall - GPU-active is not host time), the
verdict uses host_wait / wall instead and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

HOST_BOUND_MIN = 0.25
DEVICE_BOUND_MAX = 0.10

HOST_BOUND = "host-bound"
BALANCED = "balanced"
DEVICE_BOUND = "device-bound"


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
    basis: str  # "host_fraction" or "host_wait_fraction" (queued steps)
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
            classify(host_wait_share), "host_wait_fraction", host_fraction, host_wait_share, hdbi,
            "host ran ahead of the GPU (queued steps): classified by host_wait / wall",
        )
    return Verdict(classify(host_fraction), "host_fraction", host_fraction, host_wait_share, hdbi)
