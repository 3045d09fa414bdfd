"""Energy counters read around a run, and the difference of two readings.

A counter is a monotone count of energy in its own unit (powercap: µJ; NVML: mJ). Two readings
around a run give its energy, except where the counter went back between them:

- **wrap**: powercap counters are bounded and start again from 0 past ``max_energy_range_uj``.
  A reading that went back is a wrap when the wrapped difference ``after + range - before`` is at
  most half the range: a run shorter than half a wrap period (minutes at hundreds of watts) has
  exactly one explanation then. NVML's 64-bit counter does not wrap.
- **reset**: a reading that went back with no plausible wrap (a driver reloaded, a counter
  without a known range). The run's energy is unknown: None, and the reset is counted.
- **unreadable**: a read that fails (a root-only file, a device gone) gives None for that run.

Everything is said: :class:`Meter` counts wraps, resets and failed reads per domain, and a domain
that cannot be read at all when the meter opens is left out with one line saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

UJ_PER_UNIT = {"uj": 1, "mj": 1000}
"""Microjoules per counter unit."""


def counter_delta(before: int | None, after: int | None, max_range: int | None) -> tuple[int | None, str]:
    """The count between two readings and what happened: ``(delta, "")``, ``(delta, "wrap")``,
    ``(None, "reset")`` or ``(None, "unreadable")`` (module doc).

    >>> counter_delta(100, 250, 1000)
    (150, '')
    >>> counter_delta(900, 100, 1000)  # wrapped: 100 to the top, 100 after it
    (200, 'wrap')
    >>> counter_delta(900, 800, 1000)  # back by 100: a wrap would mean 900, more than half the range
    (None, 'reset')
    >>> counter_delta(900, 100, None)  # no range: a counter that goes back was reset
    (None, 'reset')
    >>> counter_delta(None, 100, 1000)
    (None, 'unreadable')
    """
    if before is None or after is None:
        return None, "unreadable"
    if after >= before:
        return after - before, ""
    if max_range is not None and max_range > 0:
        wrapped = after + max_range - before
        if 0 <= wrapped <= max_range // 2:
            return wrapped, "wrap"
    return None, "reset"


@dataclass(frozen=True)
class Domain:
    """One counter: ``name`` (``package-0``, ``package-0:dram``, ``gpu0``), ``source``
    (``powercap``, ``nvml``), ``unit`` (``uj``, ``mj``), ``max_range`` (in counter units, where
    it wraps; None: it does not) and ``read`` (the raw count; raises ``OSError`` when it cannot
    be read). ``in_total``: whether its energy adds to the others' (a platform zone ``psys``
    covers the packages, so it does not)."""

    name: str
    source: str
    unit: str
    max_range: int | None
    read: Callable[[], int]
    in_total: bool = True


@dataclass
class Meter:
    """The domains that could be read when it opened, and what happened since (``events``:
    per domain, counts of ``wrap``, ``reset`` and ``unreadable``). ``reason``: why there is no
    domain (one line), or why some were left out."""

    domains: tuple[Domain, ...] = ()
    reason: str | None = None
    left_out: tuple[str, ...] = ()
    events: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return bool(self.domains)

    def read(self) -> dict[str, int | None]:
        """One raw reading of every domain (None where the read failed)."""
        out: dict[str, int | None] = {}
        for d in self.domains:
            try:
                out[d.name] = int(d.read())
            except (OSError, ValueError):
                out[d.name] = None
        return out

    def delta_uj(self, before: dict[str, int | None], after: dict[str, int | None]) -> dict[str, int | None]:
        """Each domain's energy between two readings in µJ (None: reset or unreadable, counted
        in ``events``)."""
        out: dict[str, int | None] = {}
        for d in self.domains:
            v, what = counter_delta(before.get(d.name), after.get(d.name), d.max_range)
            if what:
                ev = self.events.setdefault(d.name, {})
                ev[what] = ev.get(what, 0) + 1
            out[d.name] = None if v is None else v * UJ_PER_UNIT[d.unit]
        return out

    def describe(self) -> dict:
        """What the raw timings record about the meter."""
        return {
            "available": self.available,
            "reason": self.reason,
            "left_out": list(self.left_out),
            "domains": {d.name: {"source": d.source, "unit": d.unit, "max_range": d.max_range} for d in self.domains},
            "in_total": [d.name for d in self.domains if d.in_total],
            "events": {k: dict(v) for k, v in self.events.items()},
        }
