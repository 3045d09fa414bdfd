"""Where the launch floor T_floor comes from (METHOD.md §5).

In order: ``--launch-floor-us``; a result file written by ``hostgap floor`` (its ``mean_ns``);
a per-GPU default from the TaxBreak paper (null-kernel mean: H100 4.707 µs, H200 4.503 µs);
else a generic fallback of 4.6 µs (the mean of those two), labelled as such. The output
always says which source was used (``floor_source``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hostgap.errors import HostgapError

PAPER_FLOORS_NS = {
    "H200": 4503.0,
    "H100": 4707.0,
}
GENERIC_FLOOR_NS = 4600.0


@dataclass(frozen=True)
class LaunchFloor:
    ns: float
    source: str  # "cli", "file:<path>", "default:H100 (TaxBreak paper)", "generic fallback"


def launch_floor(device_names: list[str], floor_us: float | None = None, floor_file: str | None = None) -> LaunchFloor:
    """Resolve T_floor for a trace whose GPUs are called ``device_names``."""
    if floor_us is not None:
        if not floor_us > 0:
            raise HostgapError("--launch-floor-us", f"must be positive, got {floor_us}")
        return LaunchFloor(float(floor_us) * 1000.0, "cli")
    if floor_file:
        return LaunchFloor(_read_floor_file(floor_file), f"file:{floor_file}")
    for name in device_names:
        for key in PAPER_FLOORS_NS:  # H200 before H100: "H100" is not in "H200" names
            if key in name.upper():
                return LaunchFloor(PAPER_FLOORS_NS[key], f"default:{key} (TaxBreak paper null-kernel mean)")
    return LaunchFloor(GENERIC_FLOOR_NS, "generic fallback (no measured floor for this GPU; run `hostgap floor`)")


def _read_floor_file(path: str) -> float:
    try:
        with open(path, "rb") as f:
            doc = json.load(f)
    except OSError as e:
        raise HostgapError(path, f"cannot read floor file ({e.strerror})") from None
    except ValueError:
        raise HostgapError(path, "floor file is not JSON") from None
    if not isinstance(doc, dict) or doc.get("kind") != "launch_floor":
        raise HostgapError(path, "not a launch-floor result (written by `hostgap floor`)")
    value = doc.get("mean_ns")
    if not isinstance(value, (int, float)) or not value > 0:
        raise HostgapError(path, "floor file has no positive mean_ns")
    if doc.get("device") == "cpu":
        raise HostgapError(path, "floor file holds a CPU dispatch floor, not a GPU launch floor")
    return float(value)
