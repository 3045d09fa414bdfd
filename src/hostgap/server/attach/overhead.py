"""What profiling costs the server: the step period before, during and after the profile, and
the profiler's inflation, during / mean(before, after) - 1.

- before and after: the server's own metrics (:mod:`hostgap.server.metrics`) over a window of
  ``--baseline`` seconds each side, the mean inter-token latency
  (``vllm:inter_token_latency_seconds`` / ``sglang:inter_token_latency_seconds``: the step period
  while a request decodes); the after-window starts a second after the stop, so the tokens the
  stop held up (the trace being written) are not in it;
- during: the recorded steps themselves, the median time from one decode step's start to the
  next's in the trace (the same quantity: a decoding request gets one token per step). The
  metrics over the profile window would mix in the profiler's start and stop stalls, which cost
  the server once, not per step.

Above :data:`INFLATION_LIMIT` the attached numbers describe a slowed-down server, not the one
in production: the result is flagged (``flags``) and says so.

>>> inflation(0.010, 0.012, 0.010)
0.2
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hostgap.errors import HostgapError
from hostgap.server.metrics import Scrape, delta, scrape, step_stats

INFLATION_LIMIT = 0.25
"""Largest profiler inflation of the step period (+25 %) whose result is not flagged. The torch
profiler adds ~20 % to a tiny CPU decode step without stacks (~45 % with) and < 3 % to a 1B-shaped
step (PLATFORM.md); a larger rise means the trace shows a different server than the one running."""
WINDOWS = ("before", "during", "after")


def inflation(before: float | None, during: float | None, after: float | None) -> float | None:
    """during / mean(before, after) - 1 over the step periods that exist (None without a
    baseline or a during value)."""
    base = [v for v in (before, after) if v]
    if during is None or not base:
        return None
    return round(during / (sum(base) / len(base)) - 1.0, 6)


@dataclass
class Overhead:
    """Scrapes at the window edges; a server without metrics leaves every number None."""

    url: str
    timeout_s: float = 5.0
    marks: dict[str, Scrape | None] = field(default_factory=dict)
    problem: str | None = None

    def mark(self, name: str) -> None:
        """Scrape now and keep it as ``name`` (``before0``, ``before1``, ``after0``, ``after1``)."""
        if self.problem is not None and name.endswith("0") and not self.marks:
            return
        try:
            self.marks[name] = scrape(self.url, self.timeout_s)
        except HostgapError as e:  # no metrics (MetricsUnavailable) or a failed read (ScrapeFailed)
            self.marks[name] = None
            self.problem = self.problem or e.problem

    def window(self, name: str) -> dict:
        a, b = self.marks.get(f"{name}0"), self.marks.get(f"{name}1")
        if a is None or b is None:
            return {"step_period_s": None, "steps": None, "interval_s": None, "basis": "not measured"}
        s = step_stats(delta(a, b))
        return {
            "step_period_s": s.step_period_s,
            "steps": s.steps,
            "interval_s": round(s.interval_s, 3),
            "seqs_per_step": s.seqs_per_step,
            "basis": f"/metrics: {s.step_period_basis}",
            "notes": list(s.notes),
        }

    def result(self, during_s: float | None) -> dict:
        """The three windows and the inflation; ``during_s`` is the traced step period."""
        w = {name: self.window(name) for name in ("before", "after")}
        w["during"] = {"step_period_s": during_s, "basis": "trace: median start-to-start of consecutive decode steps"}
        infl = inflation(*(w[n]["step_period_s"] for n in WINDOWS))
        flagged = infl is not None and infl > INFLATION_LIMIT
        if infl is None:
            text = f"not measured ({self.problem or 'no step period before/after, or no consecutive decode steps'})"
        else:
            ms = {n: w[n]["step_period_s"] * 1e3 if w[n]["step_period_s"] else None for n in WINDOWS}
            shown = ", ".join(f"{n} {v:.3f} ms" if v is not None else f"{n} -" for n, v in ms.items())
            text = f"step period {shown}: profiler inflation {infl * 100:+.1f} %" + (
                f" (above the {INFLATION_LIMIT * 100:.0f} % limit: these steps ran slower than unprofiled ones)"
                if flagged
                else ""
            )
        return {"windows": w, "inflation": infl, "limit": INFLATION_LIMIT, "flagged": flagged, "text": text}


def pause(seconds: float) -> None:
    """A baseline window's wait (the load keeps running meanwhile)."""
    time.sleep(max(0.0, seconds))
