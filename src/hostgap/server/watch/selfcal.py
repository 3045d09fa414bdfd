"""``watch --calibrate``: the watch takes its own calibration profiles of the server's traffic.

A calibration is an attach (:func:`hostgap.server.attach.profile.attach`) without a load of its
own: ``steps`` steps of whatever the server is running, the profiler's cost measured as attach
measures it (``--baseline`` windows of the server's metrics before and after), the run stored
like any attach. Its usable decode steps are fitted into the step model
(:func:`hostgap.server.watch.estimate.fit_calibration`), which every later interval uses and
names (``calibration`` in the row). When one is due is :mod:`hostgap.server.watch.recalibrate`'s
policy: at the start, when the batch or the prefill share leaves the calibrated range (the new
profile's steps are then fitted together with those of the earlier profiles, at most
:data:`MAX_PROFILES`), after ``max_age_s``, after a server restart.

The attach runs on one background thread, so the watch loop keeps its cadence while the server
is profiled; never more than one at a time. :meth:`SelfCalibration.close` cancels a running one
(its stop request is sent, as on any attach fault) and waits for it. A server without profile
routes is said once and never asked again; a failed calibration (no traffic, a profile already
running, a server that died) is retried after a back-off.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from hostgap.errors import HostgapError
from hostgap.server.watch.calibration import steps_of
from hostgap.server.watch.estimate import Calibration, fit_calibration, usable_steps
from hostgap.server.watch.recalibrate import FRESH, Policy, Trigger

MAX_PROFILES = 4
"""Profiles whose steps one calibration fits together (a batch that moved adds a profile)."""
KEEP_RUNS = 24
"""Calibration runs a watch keeps stored; older ones are removed from the runs database and the
run folder (their names stay in the intervals and the summary)."""
HISTORY = 50
"""Calibration attempts listed in the watch's document (the most recent)."""
JOIN_S = 40.0
"""Longest wait for a cancelled calibration to end: the start request's timeout (18 s) and the
stop request's on a fault path (10 s), with room to spare."""
STEP_KEYS = ("kind", "wall_ns", "gpu_active_ns", "gen_requests", "ctx_requests", "batch")


class SelfCalibration:
    """The calibrations of one watch (see the module docstring). ``profiles``: earlier profiles
    (run id, its decode steps, the prefill share it was taken at) that a profile at a new load is
    fitted together with (the fleet view seeds a class's given runs). ``attach`` and ``clock`` are
    injected by tests."""

    def __init__(
        self,
        url: str,
        *,
        policy: Policy | None = None,
        steps: int = 32,
        skip: int = 4,
        idle_s: float = 20.0,
        wait_s: float = 120.0,
        baseline_s: float = 3.0,
        output: str = "runs",
        db: str | None = None,
        store: bool = True,
        trace_dir: str | None = None,
        initial: Calibration | None = None,
        profiles: Sequence[tuple[str, list[dict], float | None]] = (),
        on_note: Callable[[str], None] = lambda m: None,
        attach: Callable | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url = url
        self.trigger = Trigger(policy or Policy())
        self.steps, self.skip = steps, skip
        self.idle_s, self.wait_s, self.baseline_s = idle_s, wait_s, baseline_s
        self.output, self.db, self.store = output, db, store
        self.trace_dir = trace_dir
        self.on_note = on_note
        self.clock = clock
        self._attach = attach
        self._lock = threading.Lock()
        self._current = initial
        self._profiles: deque[tuple[str, list[dict], float | None]] = deque(profiles, maxlen=MAX_PROFILES)
        self._runs: deque[str] = deque()
        self.history: deque[dict] = deque(maxlen=HISTORY)
        self.attempts = 0
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._busy_in_interval = False
        if initial is not None:
            self.trigger.taken_at = clock()

    # -- what the loop reads -----------------------------------------------------------------
    def current(self) -> Calibration | None:
        with self._lock:
            return self._current

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def age_s(self) -> float | None:
        taken = self.trigger.taken_at
        return None if taken is None or self.current() is None else max(0.0, self.clock() - taken)

    @property
    def stale(self) -> bool:
        return self.trigger.stale(self.current())

    def observe(self, row: dict) -> None:
        """Mark the row (``calibrating``: a profile ran during the interval) and start a
        calibration when one is due."""
        row["calibrating"] = self._busy_in_interval or self.running
        self._busy_in_interval = self.running
        with self._lock:
            reason = self.trigger.observe(row, self._current, self.clock())
        if reason is not None:
            self._start(reason, row.get("prefill_share"))

    # -- one calibration ---------------------------------------------------------------------
    def _start(self, reason: str, prefill_share: float | None) -> None:
        self.attempts += 1
        self.trigger.started(self.clock())
        self._busy_in_interval = True
        self.on_note(f"calibration ({reason}): profiling {self.steps} steps of the server's traffic")
        self._thread = threading.Thread(
            target=self._run, args=(reason, prefill_share, self.url), name="hostgap-calibrate", daemon=True
        )
        self._thread.start()

    def _run(self, reason: str, prefill_share: float | None, url: str) -> None:
        t0 = self.clock()
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record: dict = {"reason": reason, "started": started, "server": url, "run_id": None, "ok": False}
        try:
            result = self._profile(url)
            record["run_id"] = result.get("run_id")
            record["inflation"] = (result.get("profiling") or {}).get("inflation")
            cal = self._fit(reason, result, prefill_share)
        except HostgapError as exc:
            self._failed(record, exc)
        except Exception as exc:  # a calibration must never end the watch
            self._failed(record, HostgapError(url, f"{type(exc).__name__}: {exc}"))
        else:
            with self._lock:
                self._current = cal
                self.trigger.finished(self.clock(), ok=True)
            record.update(ok=True, steps=cal.steps, batches=list(cal.batches), block_rel_err=cal.block_rel_err)
            self.on_note(describe(cal, record))
            self._keep(record["run_id"])
        record["took_s"] = round(self.clock() - t0, 3)
        self.history.append(record)

    def _profile(self, url: str) -> dict:
        from hostgap.server.attach.config import AttachConfig
        from hostgap.server.attach.profile import attach as attach_server

        attach = self._attach or attach_server
        folder = self.output if self.store else tempfile.mkdtemp(prefix="hostgap-calibration-")
        try:
            cfg = AttachConfig(
                url,
                steps=self.steps,
                skip=self.skip,
                wait_s=self.wait_s,
                idle_s=self.idle_s,
                output=folder,
                db=self.db,
                store=self.store,
                baseline_s=self.baseline_s,
                trace_dir=self.trace_dir,
            )
            return attach(cfg, lambda m: self.on_note(f"calibration: {m}"), self._cancel)
        finally:
            if not self.store:
                shutil.rmtree(folder, ignore_errors=True)

    def _fit(self, reason: str, result: dict, prefill_share: float | None) -> Calibration:
        steps = [{k: s.get(k) for k in STEP_KEYS} for s in usable_steps(steps_of(result) or [])]
        run_id = str(result.get("run_id"))
        earlier = [] if reason in FRESH else list(self._profiles)
        profiles = [*earlier, (run_id, steps, prefill_share)][-MAX_PROFILES:]
        shares = [p for _, _, p in profiles if p is not None]
        try:
            cal = fit_calibration(
                [s for _, rows, _ in profiles for s in rows],
                ", ".join(r for r, _, _ in profiles),
                (result.get("step_medians") or {}).get("activity"),
                prefill_range=(min(shares), max(shares)) if shares else None,
                runs=[r for r, _, _ in profiles],
            )
        except ValueError as exc:
            raise HostgapError(run_id, f"cannot calibrate on this profile: {exc}") from None
        if reason in FRESH:
            self._profiles.clear()
        self._profiles.append((run_id, steps, prefill_share))
        return cal

    def _failed(self, record: dict, exc: HostgapError) -> None:
        from hostgap.server.attach.client import BUSY, CANCELLED, EXIT_BAD_INPUT, NOT_VISIBLE, AttachError

        reason = getattr(exc, "reason", "")
        record["problem"] = exc.problem
        with self._lock:
            self.trigger.finished(self.clock(), ok=False)
        if reason == CANCELLED:
            return
        never = reason == NOT_VISIBLE or (
            isinstance(exc, AttachError) and exc.exit_status == EXIT_BAD_INPUT and reason != BUSY
        )
        if never:
            self.trigger.disable()
            self.on_note(f"cannot calibrate: {exc.problem}; showing the telemetry only")
            return
        wait = self.trigger.policy.backoff_s(self.trigger.failures)
        self.on_note(f"calibration failed: {exc.problem}; trying again in {wait:.0f} s at the earliest")

    def _keep(self, run_id: str | None) -> None:
        """Retention: remove this watch's calibration runs beyond the last :data:`KEEP_RUNS`."""
        if not self.store or not run_id:
            return
        self._runs.append(run_id)
        while len(self._runs) > KEEP_RUNS:
            old = self._runs.popleft()
            with contextlib.suppress(HostgapError, OSError):
                remove_run(old, self.output, self.db)

    def close(self) -> None:
        """Cancel a running calibration (its stop request is sent) and wait for it."""
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=JOIN_S)

    def to_dict(self) -> dict:
        cal = self.current()
        return {
            "attempts": self.attempts,
            "current": cal.to_dict() if cal else None,
            "history": list(self.history),
            "disabled": not self.trigger.enabled,
        }


def describe(cal: Calibration, record: dict) -> str:
    """The note a new calibration gets: what it fitted and what profiling cost the server."""
    infl = record.get("inflation") or {}
    cost = infl.get("text") or "profiler cost not measured"
    return (
        f"calibration {cal.source}: {cal.steps} decode steps at batch {list(cal.batches)}, GPU time per step "
        f"{cal.gpu_intercept_s * 1e3:.3g} ms + {cal.gpu_slope_s * 1e3:.3g} ms x batch, held-out error "
        f"{cal.block_rel_err:.1%}; {cost}"
    )


def remove_run(run_id: str, output: str, db: str | None) -> None:
    """Remove a stored run: its runs-database row and its run folder under ``output``."""
    from hostgap.store.database import RunsDB

    with RunsDB(db) as runs:
        runs.delete(run_id)
    folder = Path(output) / run_id
    if folder.is_dir():
        shutil.rmtree(folder, ignore_errors=True)
