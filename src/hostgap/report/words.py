"""The report's vocabulary: one set of words per activity (GPU runs, CPU runs), check labels
with their units, and Python frame names made comparable (object addresses stripped).

A CPU-only input has no GPU: its "device-active" time is the CPU-compute analogue (the union of
compute operators, docs/method.md §3), its "kernels" are CPU-compute ops, and it has no kernel
launches, so no TaxBreak split and no host_wait. Every caption, legend and label of a CPU input
is taken from :data:`CPU`, of a GPU input from :data:`GPU`.

>>> normalise_frame("<built-in method add of Tensor object at 0x7d67a1b2c3d0>")
'<built-in method add of Tensor object>'
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Words:
    """Words for one kind of input."""

    active: str  # the device-active quantity
    device: str  # where the work runs
    ops: str  # the units of device work
    ops_short: str  # column headers
    launches: str  # what the host issues
    wait_legend: str | None  # host_wait's legend entry (None: host_wait does not apply)


GPU = Words(
    active="GPU-active",
    device="GPU",
    ops="GPU kernels",
    ops_short="kernels",
    launches="launches",
    wait_legend="of which host_wait (GPU idle, waiting on this step's host work)",
)
CPU = Words(
    active="CPU-compute (device-active analogue)",
    device="CPU",
    ops="CPU-compute ops",
    ops_short="compute ops",
    launches="op calls",
    wait_legend=None,
)


def words(activity: str | None) -> Words:
    return GPU if (activity or "gpu") == "gpu" else CPU


def check_label(name: str, activity: str | None) -> str | None:
    """Readable label, with its unit, of one differencing check (None: not shown for this
    activity, e.g. host↔device copies on a CPU run)."""
    w = words(activity)
    cpu = w is CPU
    labels = {
        "r2_wall": "R² of the wall fit W(N)",
        "r2_gpu": f"R² of the {'CPU-compute' if cpu else 'GPU-active'} fit G(N)",
        "slope_agreement": "two-point vs fitted wall slope (%)",
        "profiler_inflation": "profiler inflation: traced / untraced wall − 1 (%)",
        "sum_minus_union_step_ns": f"{'compute-op' if cpu else 'kernel'} sum − union per step (ms)",
        "h2d_bytes_per_step": None if cpu else "host→device copy bytes per step",
        "d2h_bytes_per_step": None if cpu else "device→host copy bytes per step",
        "kernels_per_output_token": f"{w.ops} per output token",
    }
    return labels.get(name, name.replace("_", " "))


# -- Python frames ---------------------------------------------------------------------------

NO_FRAME = "(no Python frame in trace)"
_ADDRESS = re.compile(r"\s+at 0x[0-9a-fA-F]+")


def normalise_frame(name: str) -> str:
    """A frame name without object addresses: ``<... Tensor object at 0x7d67...>`` names one call
    site whatever object it ran on, so identical call sites merge."""
    return _ADDRESS.sub("", name)


def merge_frames(rows: list[dict]) -> tuple[list[dict], float]:
    """Frame rows (``top_frames`` of the anatomy) with addresses stripped and rows of the same
    normalised name merged (sums of time and launches, shares added), largest first; and the
    share of host time charged to no Python frame, which is left out of the rows."""
    merged: dict[str, dict] = {}
    unframed = 0.0
    for r in rows:
        if r.get("name") == NO_FRAME:
            unframed += float(r.get("share") or 0.0)
            continue
        name = normalise_frame(str(r.get("name")))
        m = merged.get(name)
        if m is None:
            merged[name] = {**r, "name": name}
            continue
        for k in ("host_ns_per_step", "host_ns", "launches", "share"):
            if r.get(k) is not None:
                m[k] = (m.get(k) or 0) + r[k]
    out = sorted(merged.values(), key=lambda r: -(r.get("host_ns_per_step") or 0.0))
    return out, unframed
