"""Open the meter: every energy counter this machine lets us read (powercap, NVML)."""

from __future__ import annotations

from hostgap.energy import nvml as nv
from hostgap.energy import powercap as pc
from hostgap.energy.counters import Meter


def open_meter(powercap_root: str | None = None, nvml: bool = True) -> Meter:
    """Every energy counter this machine lets us read: powercap zones under ``powercap_root``
    (default ``$HOSTGAP_POWERCAP_ROOT`` or ``/sys/class/powercap``) and NVML's GPUs (when
    ``nvidia-ml-py`` is installed and a driver answers). A meter without domains says why."""
    found, why = pc.domains(powercap_root)
    gpus, gwhy = nv.domains() if nvml else ([], ["NVML not asked for"])
    doms = tuple(found + gpus)
    reasons = why + gwhy
    if not doms:
        return Meter((), "no energy counter: " + "; ".join(reasons), tuple(reasons))
    return Meter(doms, None, tuple(reasons))
