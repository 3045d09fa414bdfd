"""When ``watch --calibrate`` takes a calibration profile: a pure policy over the interval rows.

A calibration is due (:meth:`Trigger.observe` returns the reason) when an interval has decode
steps to profile and one of these holds:

- ``start``: there is no calibration yet;
- ``batch``: the decode batch (``seqs_per_step``) lies outside the calibrated batches by more
  than :attr:`Policy.batch_tolerance` (the extrapolation would widen the estimate's interval by
  that much, :func:`hostgap.server.watch.estimate.extrapolation`), for ``persist`` intervals in
  a row;
- ``prefill``: the prefill share lies farther than :attr:`Policy.prefill_tolerance` from the
  range the calibrations were taken at, for ``persist`` intervals in a row;
- ``age``: the calibration is older than :attr:`Policy.max_age_s`;
- ``restart``: the server restarted (an interval marked ``reset``) since the calibration.

Never while one runs, never sooner than :attr:`Policy.min_gap_s` after the last one began, and
after a failed one not before a back-off of ``retry_s`` doubling per failure (at most
``max_age_s``). A server without profile routes turns the policy off (:meth:`Trigger.disable`).

>>> t = Trigger(Policy(min_gap_s=0, persist=1))
>>> t.observe({"status": "ok", "steps": 100, "seqs_per_step": 4.0, "prefill_share": 0.0}, None, 0.0)
'start'
"""

from __future__ import annotations

from dataclasses import dataclass

from hostgap.server.watch.estimate import Calibration, extrapolation

START, BATCH, PREFILL, AGE, RESTART = "start", "batch", "prefill", "age", "restart"
FRESH = (START, AGE, RESTART)
"""Reasons whose calibration starts afresh; the others add the new profile to the earlier ones."""


@dataclass(frozen=True)
class Policy:
    """What makes a calibration due, and how often one may run (seconds)."""

    max_age_s: float = 3600.0
    min_gap_s: float = 60.0
    batch_tolerance: float = 0.25
    prefill_tolerance: float = 0.15
    persist: int = 2
    retry_s: float = 60.0

    def backoff_s(self, failures: int) -> float:
        """The wait after ``failures`` failed calibrations in a row (0 after none).

        >>> [Policy(retry_s=10, max_age_s=50).backoff_s(n) for n in range(5)]
        [0.0, 10.0, 20.0, 40.0, 50.0]
        """
        if failures <= 0:
            return 0.0
        return min(self.retry_s * 2.0 ** (failures - 1), self.max_age_s)


def has_decode(row: dict) -> bool:
    """An interval whose traffic a profile could calibrate on: counted, with decode steps."""
    return row.get("status") == "ok" and bool(row.get("steps")) and (row.get("seqs_per_step") or 0) > 0


def out_of_range(policy: Policy, cal: Calibration, row: dict) -> str | None:
    """``batch`` or ``prefill`` when the interval's traffic lies outside what ``cal`` covers."""
    batch = row.get("seqs_per_step")
    if batch is not None and batch > 0 and extrapolation(cal, batch) > policy.batch_tolerance:
        return BATCH
    share, span = row.get("prefill_share"), cal.prefill_range
    if share is not None and span is not None:
        lo, hi = span
        if share < lo - policy.prefill_tolerance or share > hi + policy.prefill_tolerance:
            return PREFILL
    return None


class Trigger:
    """The policy's state over one watch: fed each interval row, says when a calibration is due."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.enabled = True
        self.running = False
        self.failures = 0
        self.last_start: float | None = None
        self.last_end: float | None = None
        self.taken_at: float | None = None
        self.outside = 0
        self.restarted = False
        self.pending: str | None = None

    def disable(self) -> None:
        self.enabled = False
        self.pending = None

    def observe(self, row: dict, cal: Calibration | None, now: float) -> str | None:
        """The reason a calibration should start now, or None. Updates :attr:`pending` (the
        reason one is wanted, whether or not it may start yet: the ``stale`` gauge)."""
        if not self.enabled:
            return None
        if row.get("status") == "reset" and cal is not None:
            self.restarted = True
        self.pending = self._wanted(row, cal, now)
        if self.pending is None or self.running or not has_decode(row):
            return None
        if self.last_start is not None and now - self.last_start < self.policy.min_gap_s and cal is not None:
            return None
        if self.failures and self.last_end is not None and now - self.last_end < self.policy.backoff_s(self.failures):
            return None
        return self.pending

    def _wanted(self, row: dict, cal: Calibration | None, now: float) -> str | None:
        if cal is None:
            return START
        if self.restarted:
            return RESTART
        if self.taken_at is not None and now - self.taken_at >= self.policy.max_age_s:
            return AGE
        if not has_decode(row):
            return self.pending if self.pending in (BATCH, PREFILL) else None
        why = out_of_range(self.policy, cal, row)
        self.outside = self.outside + 1 if why else 0
        return why if why and self.outside >= self.policy.persist else None

    def started(self, now: float) -> None:
        self.running = True
        self.last_start = now

    def finished(self, now: float, ok: bool) -> None:
        """A calibration ended: ``ok`` with a new calibration in use, else failed (back-off)."""
        self.running = False
        self.last_end = now
        if ok:
            self.failures = 0
            self.taken_at = now
            self.outside = 0
            self.restarted = False
            self.pending = None
        else:
            self.failures += 1

    def stale(self, cal: Calibration | None) -> bool:
        """Whether the estimate lacks a calibration that fits (for the gauge and the alert)."""
        return cal is None or self.pending is not None
