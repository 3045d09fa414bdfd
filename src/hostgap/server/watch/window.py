"""The window of a watch, summed up as it goes: memory and the stored run stay bounded however
long the watch runs.

:class:`Window` takes each interval row once (:meth:`Window.add`) and keeps

- running sums for the window's summary (:meth:`Window.summary`: counts by status, step-weighted
  means of the per-step numbers and of the host share, its min and max, the ``--fail-if``
  results) — the same numbers whether the watch lasted a minute or a month;
- the last :data:`RECENT_ROWS` rows in full (``intervals`` of the stored run and of
  ``watch --json``; ``--jsonl`` has every row);
- the whole watch at a coarser grain, in at most :data:`MAX_BUCKETS` buckets of consecutive
  intervals (:data:`BUCKET_INTERVALS` each to begin with; when there are more, neighbours are
  merged in pairs, so each bucket covers twice as many intervals): per bucket its span, the
  intervals by status, the steps, the step-weighted means of the host share (with its interval),
  the batch and the step period, and the host share's min and max.

Retention, worked out: at ``--interval 5`` the stored run holds the last hour interval by
interval, and the whole watch in 500 buckets of a minute each for its first 8.3 hours, of two
minutes for 16.7 hours, and so on (a bucket of 2^k minutes after 8.3 × 2^k hours).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

OK, RESET, NO_SCRAPE, IDLE = "ok", "reset", "no-scrape", "idle"
STATUSES = (OK, IDLE, RESET, NO_SCRAPE)
RECENT_ROWS = 720
MAX_BUCKETS = 500
BUCKET_INTERVALS = 12
WEIGHTED = (
    "tokens_per_step",
    "seqs_per_step",
    "step_period_s",
    "host_share",
    "host_share_low",
    "host_share_high",
    "busy_share",
    "prefill_share",
    "gpu_s_per_step",
    "host_s_per_step",
)
BUCKET_KEYS = ("host_share", "host_share_low", "host_share_high", "seqs_per_step", "step_period_s")


class Sums:
    """Step-weighted running sums of the per-step numbers over intervals with steps."""

    def __init__(self, keys: Sequence[str]):
        self.keys = tuple(keys)
        self.total = {k: 0.0 for k in self.keys}
        self.weight = {k: 0.0 for k in self.keys}
        self.steps = 0.0
        self.span_s = 0.0  # seconds of intervals that were read (ok or idle)
        self.share_min: float | None = None
        self.share_max: float | None = None
        self.shares = 0
        self.bases: set[str] = set()

    def add(self, row: dict) -> None:
        status = row.get("status")
        if status in (OK, IDLE):
            self.span_s += row.get("interval_s") or 0.0
        steps = row.get("steps")
        if status not in (OK, IDLE) or not steps:
            return
        self.steps += steps
        for k in self.keys:
            v = row.get(k)
            if v is not None:
                self.total[k] += v * steps
                self.weight[k] += steps
        share = row.get("host_share")
        if share is not None:
            self.shares += 1
            self.share_min = share if self.share_min is None else min(self.share_min, share)
            self.share_max = share if self.share_max is None else max(self.share_max, share)
            self.bases.add(row.get("host_share_basis") or "none")

    def mean(self, key: str) -> float | None:
        w = self.weight.get(key, 0.0)
        return self.total[key] / w if w > 0 else None

    def merge(self, other: Sums) -> None:
        for k in self.keys:
            self.total[k] += other.total[k]
            self.weight[k] += other.weight[k]
        self.steps += other.steps
        self.span_s += other.span_s
        self.shares += other.shares
        for v in (other.share_min, other.share_max):
            if v is not None:
                self.share_min = v if self.share_min is None else min(self.share_min, v)
                self.share_max = v if self.share_max is None else max(self.share_max, v)
        self.bases |= other.bases


class Bucket:
    """Consecutive intervals summed up (see the module docstring)."""

    def __init__(self, row: dict):
        self.t_start = row.get("t_start")
        self.t_rel_s = row.get("t_rel_s") or 0.0
        self.t_end = row.get("t_end")
        self.duration_s = 0.0
        self.intervals = 0
        self.by_status = dict.fromkeys(STATUSES, 0)
        self.sums = Sums(BUCKET_KEYS)

    def add(self, row: dict) -> None:
        self.t_end = row.get("t_end")
        self.duration_s += row.get("interval_s") or 0.0
        self.intervals += 1
        status = row.get("status")
        if status in self.by_status:
            self.by_status[status] += 1
        self.sums.add(row)

    def merge(self, later: Bucket) -> None:
        self.t_end = later.t_end
        self.duration_s += later.duration_s
        self.intervals += later.intervals
        for k, v in later.by_status.items():
            self.by_status[k] += v
        self.sums.merge(later.sums)

    def to_dict(self) -> dict:
        s = self.sums
        return {
            "t_start": self.t_start,
            "t_end": self.t_end,
            "t_rel_s": self.t_rel_s,
            "duration_s": self.duration_s,
            "intervals": self.intervals,
            "by_status": dict(self.by_status),
            "steps": s.steps,
            "steps_per_s": s.steps / s.span_s if s.span_s > 0 else None,
            **{k: s.mean(k) for k in BUCKET_KEYS},
            "host_share_min": s.share_min,
            "host_share_max": s.share_max,
        }


class Window:
    """A watch's intervals summed up as they come (see the module docstring)."""

    def __init__(
        self,
        conditions: Iterable = (),
        recent: int = RECENT_ROWS,
        max_buckets: int = MAX_BUCKETS,
        bucket_intervals: int = BUCKET_INTERVALS,
    ):
        self.conditions = list(conditions)
        self.recent: deque[dict] = deque(maxlen=recent)
        self.max_buckets = max_buckets
        self.bucket_intervals = bucket_intervals
        self.buckets: list[Bucket] = []
        self.count = 0
        self.duration_s = 0.0
        self.by_status = dict.fromkeys(STATUSES, 0)
        self.sums = Sums(WEIGHTED)
        self.breakdown: dict[str, float] = {}
        self.breakdown_steps = 0.0
        self.levers: dict[str, list[float]] = {}  # top lever -> [intervals, sum of gains]

    def add(self, row: dict) -> None:
        self.count += 1
        self.duration_s += row.get("interval_s") or 0.0
        status = row.get("status")
        if status in self.by_status:
            self.by_status[status] += 1
        self.sums.add(row)
        steps = row.get("steps")
        if row.get("host_breakdown") and steps and status in (OK, IDLE):
            for k, v in row["host_breakdown"].items():
                self.breakdown[k] = self.breakdown.get(k, 0.0) + v * steps
            self.breakdown_steps += steps
        top = row.get("top_lever")
        if isinstance(top, dict) and top.get("lever"):
            got = self.levers.setdefault(str(top["lever"]), [0, 0.0])
            got[0] += 1
            got[1] += float(top.get("gain") or 0.0)
        self.recent.append(row)
        self._bucket(row)

    def _bucket(self, row: dict) -> None:
        if not self.buckets or self.buckets[-1].intervals >= self.bucket_intervals:
            self.buckets.append(Bucket(row))
        self.buckets[-1].add(row)
        if len(self.buckets) > self.max_buckets:
            merged = []
            for i in range(0, len(self.buckets), 2):
                b = self.buckets[i]
                if i + 1 < len(self.buckets):
                    b.merge(self.buckets[i + 1])
                merged.append(b)
            self.buckets = merged
            self.bucket_intervals *= 2

    @property
    def rows(self) -> list[dict]:
        """The rows kept in full (the last :data:`RECENT_ROWS`)."""
        return list(self.recent)

    @property
    def dropped(self) -> int:
        return self.count - len(self.recent)

    def summary(self) -> dict:
        """The window's numbers (``watch --json``'s ``summary``)."""
        s = self.sums
        bases = sorted(s.bases)
        out: dict = {
            "intervals": self.count,
            "by_status": dict(self.by_status),
            "duration_s": self.duration_s,
            "steps": s.steps,
            "steps_per_s": s.steps / s.span_s if s.span_s > 0 else None,
            "host_share_basis": bases[0] if len(bases) == 1 else ("+".join(bases) if bases else "none"),
            "host_share_intervals": s.shares,
            "host_share_min": s.share_min,
            "host_share_max": s.share_max,
        }
        for key in WEIGHTED:
            out[key] = s.mean(key)
        total = self.breakdown_steps
        out["host_breakdown"] = {k: v / total for k, v in sorted(self.breakdown.items())} if total > 0 else {}
        out["top_lever"] = self.top_lever()
        out["fail_if"] = [
            {
                "condition": c.text,
                "metric": c.metric,
                "value": _number(out, c.metric),
                "holds": c.holds(_number(out, c.metric)),
            }
            for c in self.conditions
        ]
        return out

    def top_lever(self) -> dict | None:
        """The lever most intervals named first (docs/advise.md), with how many and its mean
        predicted gain over them; None where no interval named one."""
        if not self.levers:
            return None
        name, (n, total) = max(self.levers.items(), key=lambda kv: (kv[1][0], kv[0]))
        return {"lever": name, "intervals": int(n), "gain_mean": total / n}

    def retained(self) -> dict:
        """What a stored watch keeps: the recent rows, the buckets, and how much was dropped."""
        return {
            "intervals": self.rows,
            "intervals_total": self.count,
            "intervals_dropped": self.dropped,
            "bucket_intervals": self.bucket_intervals,
            "buckets": [b.to_dict() for b in self.buckets],
        }


def _number(summary_doc: dict, metric: str) -> float | None:
    value = summary_doc.get(metric)
    return value if isinstance(value, int | float) else None
