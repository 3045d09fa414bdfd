"""A co-batched step's energy split into per-request shares (docs/energy.md, docs/attribution.md).

A step's energy E (J: ``measure``'s ``energy.step_j``, or any measured value) is shared by the
requests in proportion to their latency shares: request i's share of the step is ``d_i + h_i``
(its device and host parts, :func:`hostgap.model.attribution.shares.attribute`), so

    E_i = E * (d_i + h_i) / sum_j (d_j + h_j)

Where the power drawn while the step is device-active (``device_w``) and while it is
host-exposed (``host_w``) are both known, each part is weighted by its power:

    E_i = E * (P_d d_i + P_h h_i) / sum_j (P_d d_j + P_h h_j),
    device part E * P_d d_i / W,  host part E * P_h h_i / W   (W the denominator)

Without both powers, each part is charged at one power (the step's average): device part
``E * d_i / T``, host part ``E * h_i / T``. The shares add up to E (to float rounding, a few
parts in 10^16), and each share's device and host parts add up to it.
"""

from __future__ import annotations

import math

import numpy as np

from hostgap.errors import HostgapError


def energy_shares(
    device_ns, host_ns, step_j: float, device_w: float | None = None, host_w: float | None = None
) -> dict:
    """Per-request energy of one step (module doc): ``energy_j``, ``device_j``, ``host_j``
    arrays, the ``basis`` in words. A host part that is unknown (NaN: the step has no host
    fraction) charges the whole share at one power and leaves the parts unknown (NaN)."""
    d = np.asarray(device_ns, dtype=np.float64)
    h = np.asarray(host_ns, dtype=np.float64)
    if not (math.isfinite(step_j) and step_j >= 0):
        raise HostgapError("--step-energy", f"{step_j} is not an energy (J, finite, not negative)")
    if (device_w is None) != (host_w is None):
        raise HostgapError("--device-power", "weighting by power needs both --device-power and --host-power")
    for name, w in (("--device-power", device_w), ("--host-power", host_w)):
        if w is not None and not (math.isfinite(w) and w > 0):
            raise HostgapError(name, f"{w} is not a power (W, finite, above 0)")
    if len(d) == 0:
        raise HostgapError("--step", "the step has no request to share its energy")
    known = ~np.isnan(h)
    if device_w is not None and host_w is not None:
        if not known.all():
            raise HostgapError(
                "--device-power", "the step's host parts are unknown (no host fraction): weighting by power needs them"
            )
        wd, wh = device_w * d, host_w * h
        basis = f"latency shares, device parts at {device_w:g} W and host parts at {host_w:g} W"
    else:
        wd, wh = d, np.where(known, h, 0.0)
        basis = "latency shares (device and host parts at one power)"
    weight = wd + wh
    total = float(weight.sum())
    if not total > 0:
        raise HostgapError("--step", "the step's shares add up to no time: its energy cannot be shared")
    energy = step_j * weight / total
    dev = np.where(known, step_j * wd / total, np.nan)
    host = np.where(known, step_j * wh / total, np.nan)
    return {"energy_j": energy, "device_j": dev, "host_j": host, "basis": basis}


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def explain_energy(shares, step_j: float, device_w: float | None = None, host_w: float | None = None) -> dict:
    """``attribute explain --step-energy``'s ``energy`` block: the step's energy, the basis and
    one row per request (``shares``: the step's :class:`~hostgap.model.attribution.shares.Shares`)."""
    out = energy_shares(shares.device_ns, shares.host_ns, step_j, device_w, host_w)
    return {
        "step_j": float(step_j),
        "device_w": device_w,
        "host_w": host_w,
        "basis": out["basis"],
        "requests": [
            {
                "request": str(shares.request[i]),
                "energy_j": float(out["energy_j"][i]),
                "device_j": _finite(out["device_j"][i]),
                "host_j": _finite(out["host_j"][i]),
            }
            for i in range(len(out["energy_j"]))
        ],
    }
