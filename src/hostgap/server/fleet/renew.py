"""``watch --prometheus URL --calibrate``: each class's calibration renewed live, one attach at a time.

A class of servers (engine, model, hardware) is calibrated once and read with that calibration on
every instance (:mod:`.classes`). Its traffic moves: a batch the class was never profiled at is an
extrapolation that widens every share's interval, and past the policy's tolerance the estimate no
longer describes the class. With ``--calibrate`` the live fleet view renews it: one
:class:`~hostgap.server.watch.selfcal.SelfCalibration` per class runs the single-server watch's
policy (:mod:`hostgap.server.watch.recalibrate`) over one row per interval — the class's instance
farthest outside the calibrated batches, else its busiest — and when a calibration is due it
attaches to that instance (``http://`` + its ``instance`` label), profiles ``steps`` engine steps
of its traffic on a background thread, stores the run like any attach, and fits the new profile's
decode steps together with the class's earlier ones (the runs given with ``--calibration`` first).
The new calibration is named by its runs (``r1+r2+r3``) and every later row of every instance of
the class carries that name, so which calibration an instance was read with is said per row.

A vLLM class that has no calibration at all is calibrated the same way on its first interval with
decode steps (reason ``start``): one attach per class, never one per server. SGLang classes need
none (their device timer). At most one attach per class runs at a time; a class whose servers
cannot be profiled is said once and left alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from itertools import groupby

from hostgap.server.fleet.classes import ClassCalibration
from hostgap.server.watch.estimate import Calibration, extrapolation, usable_steps
from hostgap.server.watch.recalibrate import Policy, has_decode
from hostgap.server.watch.selfcal import STEP_KEYS, SelfCalibration

ClassKey = tuple[str, str, "str | None"]
MakeCalibration = Callable[[ClassKey, ClassCalibration | None], SelfCalibration]


def instance_url(instance: str, scheme: str = "http") -> str:
    """The server an ``instance`` label names (``host:port``, Prometheus' scrape target).

    >>> instance_url("10.0.0.7:8000"), instance_url("https://a.example:443")
    ('http://10.0.0.7:8000', 'https://a.example:443')
    """
    return instance if "://" in instance else f"{scheme}://{instance}"


def class_key(row: dict, by_hardware: bool = True) -> ClassKey | None:
    """The class of a fleet row's instance, or None when it is not a vLLM instance with a model;
    without ``by_hardware`` (no ``--hardware-label``) a class is its engine and model alone, as
    the view reads it (:func:`hostgap.server.fleet.view.calibration_for`)."""
    if row.get("engine") != "vllm" or not row.get("model"):
        return None
    return ("vllm", str(row["model"]), row.get("hardware") if by_hardware else None)


def representative(rows: Sequence[dict], cal: Calibration | None) -> dict:
    """The row of one class's interval its policy is run on: the instance whose batch lies
    farthest outside ``cal``'s batches (the one a renewal must profile), else the busiest
    (most steps); rows without decode steps only when no row has any."""
    live = [r for r in rows if has_decode(r)] or list(rows)
    if cal is not None:
        far = max(live, key=lambda r: extrapolation(cal, r["seqs_per_step"]) if has_decode(r) else -1.0)
        if has_decode(far) and extrapolation(cal, far["seqs_per_step"]) > 0:
            return far
    return max(live, key=lambda r: r.get("steps") or 0)


class ClassRenewal:
    """The classes' calibrations as the live fleet view renews them (see the module docstring).
    ``make(key, given)``: the :class:`SelfCalibration` of a class (its URL is set per attempt)."""

    def __init__(
        self,
        classes: Sequence[ClassCalibration],
        make: MakeCalibration,
        *,
        on_note: Callable[[str], None] = lambda m: None,
        scheme: str = "http",
        by_hardware: bool = False,
    ):
        self._make = make
        self._note = on_note
        self._scheme = scheme
        self._by_hardware = by_hardware
        self._lock = threading.Lock()
        # without a hardware label the view reads a vLLM instance with the first class of its
        # model (view.calibration_for): the renewal keys classes the same way
        self._given: dict[ClassKey, ClassCalibration] = {}
        for c in classes:
            self._given.setdefault(self._key(c), c)
        self._cals: dict[ClassKey, SelfCalibration] = {}
        self._profiled: dict[ClassKey, str] = {}  # the instance each class's latest attach profiled
        for key, c in self._given.items():
            if c.engine == "vllm":
                self._cals[key] = make(key, c)

    def _key(self, c: ClassCalibration) -> ClassKey:
        return (c.engine, c.model, c.hardware if self._by_hardware else None)

    def classes(self) -> list[ClassCalibration]:
        """Every class's calibration in use now: a given one until renewed, then the renewal."""
        out = []
        with self._lock:
            keys = sorted(set(self._given) | set(self._cals), key=lambda k: tuple(str(x) for x in k))
            for key in keys:
                given = self._given.get(key)
                sc = self._cals.get(key)
                cal = sc.current() if sc is not None else None
                if given is not None and (sc is None or cal is given.calibration):
                    out.append(given)
                elif cal is not None:
                    out.append(ClassCalibration(*key, name="+".join(cal.runs) or cal.source, calibration=cal))
        return out

    def observe(self, rows: Sequence[dict]) -> None:
        """Run each class's policy on its rows of each interval (in time order); mark every row
        of a class's instance being profiled for its calibration (``calibrating``)."""
        keyed = [(r["t_end"], k, r) for r in rows if (k := class_key(r, self._by_hardware)) is not None]
        keyed.sort(key=lambda x: (x[0], tuple(str(v) for v in x[1])))
        for (_, key), group in groupby(keyed, key=lambda x: (x[0], x[1])):
            members = [r for _, _, r in group]
            sc = self._calibration_of(key)
            rep = representative(members, sc.current())
            sc.url = instance_url(str(rep["instance"]), self._scheme)
            before = sc.attempts
            sc.observe(rep)
            if sc.attempts > before:
                self._profiled[key] = rep["instance"]
            busy, profiled = bool(rep["calibrating"]), self._profiled.get(key)
            for r in members:  # the profiler's cost is in the profiled instance's interval only
                r["calibrating"] = busy and r["instance"] == profiled

    def _calibration_of(self, key: ClassKey) -> SelfCalibration:
        with self._lock:
            sc = self._cals.get(key)
            if sc is None:
                sc = self._cals[key] = self._make(key, None)
                self._note(f"class {_name(key)}: no calibration; one attach to one of its servers will take it")
            return sc

    def close(self) -> None:
        """Cancel running attaches (their stop requests are sent) and wait for them."""
        for sc in list(self._cals.values()):
            sc.close()

    def to_dict(self) -> list[dict]:
        """Each class's renewals: the calibration in use, the attempts (each with the server it
        profiled), and whether its servers could not be profiled."""
        in_use = {self._key(c): c.name for c in self.classes()}
        out = []
        for key, sc in sorted(self._cals.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
            d = sc.to_dict()
            out.append(
                {
                    "class": _name(key),
                    "calibration": in_use.get(key),
                    "attempts": d["attempts"],
                    "history": d["history"],
                    "disabled": d["disabled"],
                }
            )
        return out


def class_self_calibration(
    key: ClassKey,
    given: ClassCalibration | None,
    *,
    policy: Policy,
    steps: int,
    output: str,
    db: str | None,
    store: bool,
    trace_dir: str | None,
    on_note: Callable[[str], None],
    attach: Callable | None = None,
) -> SelfCalibration:
    """A class's :class:`SelfCalibration`: starting from its given calibration (if any), with the
    given runs' usable decode steps as the earlier profiles a renewal is fitted with."""
    earlier = []
    if given is not None:
        for name, rows in given.profiles:
            kept = [{k: s.get(k) for k in STEP_KEYS} for s in usable_steps(list(rows))]
            if kept:
                earlier.append((name, kept, None))
    return SelfCalibration(
        "",  # the instance is chosen per attempt (ClassRenewal.observe)
        policy=policy,
        steps=steps,
        output=output,
        db=db,
        store=store,
        trace_dir=trace_dir,
        initial=given.calibration if given is not None else None,
        profiles=earlier,  # a renewal is fitted with the last three of them (SelfCalibration._fit)
        on_note=lambda m: on_note(f"class {_name(key)}: {m}"),
        attach=attach,
    )


def _name(key: ClassKey) -> str:
    return f"{key[0]}/{key[1]}/{key[2] or 'any'}"
