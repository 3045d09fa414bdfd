"""Linux powercap (RAPL) zones: CPU packages and DRAM, in µJ, wrapping at ``max_energy_range_uj``.

The zones live under ``/sys/class/powercap`` (``$HOSTGAP_POWERCAP_ROOT`` for tests): a top zone
``intel-rapl:N`` per package (``name``: ``package-N``; AMD's driver uses the same names), with
subzones ``intel-rapl:N:M`` (``core``, ``uncore``: inside the package's own count, so left out;
``dram``: outside it, kept as ``package-N:dram``). A platform zone (``psys``) covers the packages
and is kept, but not added to a total. The ``intel-rapl-mmio`` zones repeat the packages' counters
and are not read. Many kernels make ``energy_uj`` readable by root only: such a zone is left out
and said.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hostgap.energy.counters import Domain

DEFAULT_ROOT = "/sys/class/powercap"
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
_INSIDE_PACKAGE = ("core", "uncore")  # counted in their package's energy already


def _read_int(path: Path) -> int:
    """The integer in a sysfs file (raises OSError when unreadable, ValueError when not an integer)."""
    return int(path.read_text().strip())


def _reader(path: Path):
    # looked up at each call, so a test can stand a clock-driven counter in for the file
    return lambda: _read_int(path)


def root_of(root: str | None = None) -> Path:
    return Path(root or os.environ.get("HOSTGAP_POWERCAP_ROOT") or DEFAULT_ROOT)


def domains(root: str | None = None) -> tuple[list[Domain], list[str]]:
    """The readable RAPL domains under ``root`` and one line for each zone left out (or for the
    whole root when it has none)."""
    base = root_of(root)
    if not base.is_dir():
        return [], [f"no powercap at {base}"]
    zones = sorted((p for p in base.iterdir() if _ZONE.match(p.name)), key=lambda p: _key(p.name))
    if not zones:
        return [], [f"no RAPL zone under {base}"]
    names: dict[str, str] = {}
    out: list[Domain] = []
    left: list[str] = []
    for z in zones:
        m = _ZONE.match(z.name)
        assert m is not None  # filtered above
        try:
            name = (z / "name").read_text().strip()
        except OSError as e:
            left.append(f"{z}: its name cannot be read ({e.strerror or e})")
            continue
        top = m.group(2) is None
        if top:
            names[m.group(1)] = name
        elif name in _INSIDE_PACKAGE:
            continue
        else:
            name = f"{names.get(m.group(1), 'zone-' + m.group(1))}:{name}"
        try:
            rng: int | None = _read_int(z / "max_energy_range_uj")
        except (OSError, ValueError):
            rng = None  # a counter without a known range: going back is a reset
        try:
            _read_int(z / "energy_uj")
        except PermissionError:
            left.append(f"{z / 'energy_uj'} is readable by root only (permission denied): {name} left out")
            continue
        except (OSError, ValueError) as e:
            left.append(f"{z / 'energy_uj'} cannot be read ({e}): {name} left out")
            continue
        out.append(Domain(name, "powercap", "uj", rng, _reader(z / "energy_uj"), in_total=name != "psys"))
    if not out and not left:
        left.append(f"no RAPL zone under {base}")
    return out, left


def _key(name: str) -> tuple[int, int]:
    m = _ZONE.match(name)
    assert m is not None
    return int(m.group(1)), int(m.group(2) or -1)
