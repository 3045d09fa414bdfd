"""Noise that is not another process: what the machine itself says, and a model of run noise.

**Readings** (:func:`snapshot`, :func:`machine_noise`). Preemption of the decoding thread (wall -
thread CPU time, :mod:`hostgap.capture.protocol.validity`) sees another process on this CPU; it does not
see a virtual machine's host taking the CPU away (the guest's clock runs on, the thread is not
descheduled by this kernel) nor a core slowing down. So around the runs the protocol also reads:

``/proc/stat``
    the ``steal`` column of the ``cpu`` line: time the hypervisor ran something else while this
    guest wanted the CPU. Its share of all CPU time over the runs is the **steal share**; above
    :data:`STEAL_LIMIT` it counts as contention (re-measure, then invalid "machine busy").
``/proc/pressure/cpu``
    the kernel's CPU pressure (PSI, ``some`` total µs): the share of wall time some runnable task
    waited for a CPU; reported, not judged (this process's own other threads count too).
``/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq``
    each core's current frequency, where the kernel exposes it (most virtual machines do not):
    the lowest and highest reading over the runs, and their relative range.
``/sys/devices/system/cpu/cpu*/thermal_throttle/*_throttle_count``
    thermal throttling events during the runs (bare-metal Intel only).

Each reading is ``None`` where the kernel does not expose it, and the checks say so.

**Noise model** (:class:`NoiseModel`, :func:`fit_noise`). Relative deviations of run totals in
run order, ``e_i = rho e_{i-1} + s u_i`` with ``u_i`` Student t of ``dof`` degrees of freedom
(unit variance; ``dof`` = inf: normal): heavy tails and runs of slow repeats (AR(1)). Fitted to a
machine's own untraced repeats by ``bench/noise_fit.py``; the coverage simulation draws from it.

The reading functions take the file text or a root folder, so tests feed them fixtures.
"""

from __future__ import annotations

import glob
import math
import os
from dataclasses import asdict, dataclass

import numpy as np

STEAL_LIMIT = 0.05
"""Largest accepted share of CPU time stolen by the hypervisor over the runs."""
FREQ_RANGE_NOTE = 0.10
"""A relative frequency range (max - min) / max above this is named in the checks."""

_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def parse_stat(text: str) -> dict[str, int] | None:
    """The aggregate ``cpu`` line of ``/proc/stat`` as jiffies per field (guest time is inside
    user and nice already, so it is not added again); None when there is no such line.

    >>> parse_stat("cpu  10 0 5 80 1 0 0 4 0 0\\ncpu0 1 2 3 4\\n")["steal"]
    4
    """
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            vals = [int(x) for x in parts[1 : 1 + len(_STAT_FIELDS)]]
            vals += [0] * (len(_STAT_FIELDS) - len(vals))
            return dict(zip(_STAT_FIELDS, vals))
    return None


def parse_psi(text: str) -> int | None:
    """``total`` (µs) of the ``some`` line of ``/proc/pressure/cpu``; None when absent.

    >>> parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=12345\\n")
    12345
    """
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "some":
            for p in parts[1:]:
                if p.startswith("total="):
                    return int(p[len("total=") :])
    return None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _ints(paths: list[str]) -> list[int]:
    out = []
    for p in sorted(paths):
        t = _read(p)
        if t is not None and t.strip().lstrip("-").isdigit():
            out.append(int(t.strip()))
    return out


def snapshot(root: str = "/", clock=None) -> dict:
    """One reading of the machine (``root``: where ``proc`` and ``sys`` are; tests pass a
    fixture folder). Cheap: a few small files."""
    import time

    stat = _read(os.path.join(root, "proc/stat"))
    psi = _read(os.path.join(root, "proc/pressure/cpu"))
    cpu = os.path.join(root, "sys/devices/system/cpu")
    freq = _ints(glob.glob(os.path.join(cpu, "cpu[0-9]*/cpufreq/scaling_cur_freq")))
    throttle = glob.glob(os.path.join(cpu, "cpu[0-9]*/thermal_throttle/*_throttle_count"))
    load = _read(os.path.join(root, "proc/loadavg"))
    return {
        "t_ns": (clock or time.monotonic_ns)(),
        "stat": parse_stat(stat) if stat else None,
        "psi_some_us": parse_psi(psi) if psi else None,
        "freq_khz": freq or None,
        "throttle_count": sum(_ints(throttle)) if throttle else None,
        "loadavg_1m": float(load.split()[0]) if load and load.split() else None,
    }


def steal_share(before: dict | None, after: dict | None) -> float | None:
    """Stolen share of all CPU time between two ``/proc/stat`` readings; None without both or
    when no time passed.

    >>> a = dict.fromkeys(_STAT_FIELDS, 0)
    >>> steal_share(a, {**a, "idle": 90, "steal": 10})
    0.1
    """
    if not before or not after:
        return None
    total = sum(after[k] - before[k] for k in _STAT_FIELDS)
    if total <= 0:
        return None
    return max(0.0, (after["steal"] - before["steal"]) / total)


def machine_noise(snaps: list[dict]) -> dict:
    """The readings over a series of snapshots (first: before the runs, last: after; any in
    between add frequency samples): steal share, CPU pressure share, frequency range,
    throttling events and load average, each None where not exposed."""
    if len(snaps) < 2:
        return {
            "steal_share": None,
            "pressure_share": None,
            "freq_khz_min": None,
            "freq_khz_max": None,
            "freq_range": None,
            "throttle_events": None,
            "loadavg_1m": None,
            "seconds": None,
        }
    a, b = snaps[0], snaps[-1]
    wall_us = (b["t_ns"] - a["t_ns"]) / 1e3
    pressure = None
    if a.get("psi_some_us") is not None and b.get("psi_some_us") is not None and wall_us > 0:
        pressure = min(1.0, max(0.0, (b["psi_some_us"] - a["psi_some_us"]) / wall_us))
    freqs = [f for s in snaps for f in (s.get("freq_khz") or [])]
    fmin, fmax = (min(freqs), max(freqs)) if freqs else (None, None)
    throttle = None
    if a.get("throttle_count") is not None and b.get("throttle_count") is not None:
        throttle = max(0, b["throttle_count"] - a["throttle_count"])
    loads = [s["loadavg_1m"] for s in snaps if s.get("loadavg_1m") is not None]
    return {
        "steal_share": steal_share(a.get("stat"), b.get("stat")),
        "pressure_share": pressure,
        "freq_khz_min": fmin,
        "freq_khz_max": fmax,
        "freq_range": (fmax - fmin) / fmax if fmax else None,
        "throttle_events": throttle,
        "loadavg_1m": max(loads) if loads else None,
        "seconds": wall_us / 1e6,
    }


def noise_flags(m: dict | None) -> list[str]:
    """Contention flags from :func:`machine_noise`: steal above :data:`STEAL_LIMIT`.
    (Frequency changes and throttling are reported, and answered by measuring more, not
    judged as contention: they are the machine's own state.)

    >>> noise_flags({"steal_share": 0.08})
    ['CPU steal 8% of CPU time (limit 5%): the hypervisor ran other work']
    >>> noise_flags({"steal_share": 0.01})
    []
    """
    if not m:
        return []
    s = m.get("steal_share")
    if s is not None and s > STEAL_LIMIT:
        return [f"CPU steal {s:.0%} of CPU time (limit {STEAL_LIMIT:.0%}): the hypervisor ran other work"]
    return []


# -- the noise model ----------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseModel:
    """Relative run noise in run order: AR(1) with coefficient ``rho`` over Student-t
    innovations of ``dof`` degrees of freedom (inf: normal). ``sd`` is the robust scale of the
    deviation (1.4826 x its median absolute deviation, the standard deviation for normal noise);
    a run's total is multiplied by ``1 + e``."""

    sd: float
    rho: float = 0.0
    dof: float = math.inf
    source: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["dof"] = None if math.isinf(self.dof) else self.dof
        return d

    @classmethod
    def from_dict(cls, d: dict) -> NoiseModel:
        return cls(
            sd=float(d["sd"]),
            rho=float(d.get("rho", 0.0)),
            dof=math.inf if d.get("dof") is None else float(d["dof"]),
            source=str(d.get("source", "")),
        )

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` deviations in run order (stationary from the first one)."""
        if math.isinf(self.dof):
            u = rng.standard_normal(size)
        else:
            u = rng.standard_t(self.dof, size) / _t_mad(self.dof)
        innov = self.sd * math.sqrt(1 - self.rho**2)
        e = np.empty(size)
        prev = self.sd * u[0]  # stationary start
        e[0] = prev
        for i in range(1, size):
            prev = self.rho * prev + innov * u[i]
            e[i] = prev
        return np.maximum(e, -0.9)  # a run never takes less than a tenth of its time


@dataclass(frozen=True)
class SlowPeriods:
    """One-sided interference for simulations: a machine that runs ``base`` noise and now and then
    slows down for a while (a neighbour on the memory bus or in the same cache, a frequency dip),
    without steal time or preemption to show it. In run order, a two-state Markov chain is in a
    slow period for a share ``share`` of the runs, each period lasting ``mean_runs`` runs on
    average (geometric); every run of a period is slower by the same factor, drawn per period
    uniformly from [``lo``, ``hi``]. A run's total is multiplied by ``(1 + base)(1 + slow)``."""

    base: NoiseModel
    share: float = 0.25
    mean_runs: float = 8.0
    lo: float = 0.10
    hi: float = 0.30

    def slow(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Each run's slowdown (0 outside the slow periods), in run order."""
        leave = 1.0 / self.mean_runs
        enter = self.share * leave / (1.0 - self.share)  # stationary share of slow runs
        out = np.zeros(size)
        slow = bool(rng.random() < self.share)
        factor = rng.uniform(self.lo, self.hi)
        for i in range(size):
            if i and rng.random() < (leave if slow else enter):
                slow = not slow
                factor = rng.uniform(self.lo, self.hi) if slow else factor
            out[i] = factor if slow else 0.0
        return out

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` relative deviations in run order (as :meth:`NoiseModel.draw`)."""
        e = self.base.draw(rng, size)
        return (1 + e) * (1 + self.slow(rng, size)) - 1


def _t_mad(dof: float) -> float:
    """1.4826 x the median absolute value of a standard Student t: dividing by it gives the t
    a robust scale of 1, as a standard normal has."""
    from scipy.stats import t

    return float(1.4826 * t.ppf(0.75, dof))


def _robust_sd(x: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def fit_noise(deviations: list[np.ndarray] | np.ndarray, source: str = "") -> NoiseModel:
    """Fit :class:`NoiseModel` to relative deviations in run order (one array per contiguous
    sequence of runs). ``sd``: the robust scale of the deviations; ``rho``: lag-1
    autocorrelation pooled over the sequences, on deviations clipped at 4 robust scales (one
    wild run does not make a correlation); ``dof``: maximum likelihood Student t fit of the
    AR(1) innovations (scipy), normal when above 50."""
    from scipy.stats import t

    raw = deviations if isinstance(deviations, list) else [deviations]
    seqs = [np.asarray(d, dtype=np.float64) for d in raw]
    seqs = [d - np.median(d) for d in seqs if len(d) >= 3]
    if not seqs:
        raise ValueError("fit_noise needs at least one sequence of 3 or more deviations")
    sd = _robust_sd(np.concatenate(seqs))
    if sd <= 0:
        return NoiseModel(sd=0.0, source=source)
    clipped = [np.clip(d, -4 * sd, 4 * sd) for d in seqs]
    num = sum(float(np.sum(d[1:] * d[:-1])) for d in clipped)
    den = sum(float(np.sum(d**2)) for d in clipped)
    rho = float(np.clip(num / den, 0.0, 0.95)) if den > 0 else 0.0
    innov = np.concatenate([d[1:] - rho * d[:-1] for d in seqs])
    dof, _loc, _scale = t.fit(innov, floc=0)
    dof = float(dof)
    return NoiseModel(sd=sd, rho=rho, dof=math.inf if dof > 50 else round(dof, 2), source=source)


# -- the checks' rows ---------------------------------------------------------------------


def check_rows(machine: dict | None, conv: dict | None) -> list[tuple[str, str, str]]:
    """(label, value, basis) rows for the summary's checks: the machine's readings (each says
    "not exposed" where the kernel gives nothing) and the re-measurement rounds.

    >>> check_rows({"steal_share": 0.0, "pressure_share": None, "freq_khz_min": None,
    ...             "throttle_events": None}, None)[0]
    ('CPU steal', '0.0 %', '/proc/stat steal / all CPU time during the runs (limit 5 %)')
    """
    rows: list[tuple[str, str, str]] = []
    if machine:
        s = machine.get("steal_share")
        rows.append(
            (
                "CPU steal",
                "not exposed" if s is None else f"{s * 100:.1f} %",
                f"/proc/stat steal / all CPU time during the runs (limit {STEAL_LIMIT * 100:.0f} %)",
            )
        )
        p = machine.get("pressure_share")
        if p is not None:
            rows.append(
                ("CPU pressure", f"{p * 100:.0f} %", "/proc/pressure/cpu: share of the time a task waited for a CPU")
            )
        fmin, fmax = machine.get("freq_khz_min"), machine.get("freq_khz_max")
        rows.append(
            (
                "CPU frequency",
                "not exposed" if fmin is None or fmax is None else f"{fmin / 1e3:.0f}-{fmax / 1e3:.0f} MHz",
                "cpufreq, lowest-highest reading during the runs"
                + (" (changed during the runs)" if (machine.get("freq_range") or 0) > FREQ_RANGE_NOTE else ""),
            )
        )
        th = machine.get("throttle_events")
        if th is not None:
            rows.append(("thermal throttling", f"{th} event(s)", "thermal_throttle counters during the runs"))
    if conv:
        n = conv.get("rounds") or []
        u = sum(1 for r in n if r.get("untraced"))
        t = sum(1 for r in n if r.get("traced"))
        why = {
            "checks pass": "until the checks passed",
            "budget": "until the budget ran out",
            "rounds": "until the round limit",
            "contended": "(machine busy: measured again instead)",
        }.get(conv.get("stopped", ""), conv.get("stopped", ""))
        rows.append(
            (
                "measured more",
                f"{u} + {t} round(s)" if n else "no",
                f"untraced + traced rounds {why}; {conv.get('elapsed_s', 0):.0f} s of a "
                f"{conv.get('budget_s', 0):.0f} s budget",
            )
        )
    return rows
