"""``hostgap watch``: scrape a server's metrics every interval and estimate, per interval, its
decode telemetry and host-exposed share (:mod:`hostgap.server.watch.estimate`), without a profiler.

:func:`watch` is the loop: one scrape per ``interval_s`` (each bounded by ``timeout_s``), the
difference with the last good scrape, one :func:`interval_row` per interval handed to
``on_row``, a one-line ``on_note`` for what changed (a failed scrape, the server back, a counter
reset, a new label set) and a :func:`summary` at the end (``duration_s`` elapsed, ``stop`` set,
or Ctrl-C in the caller). A scrape that fails mid-watch leaves a row with ``status``
``"no-scrape"`` and the last good scrape as the baseline; the interval that spans a server
restart is marked ``"reset"`` and shows no rates.

Row fields (JSON; times in seconds, shares in [0, 1], None where the metrics cannot say):
``t_start``/``t_end`` (Unix time), ``t_rel_s`` (from the first scrape), ``interval_s``,
``status``, ``steps``, ``steps_per_s``, ``tokens_per_step``, ``seqs_per_step``,
``step_period_s`` (+ ``_p90_s``), ``busy_share``, ``prefill_tokens``, ``decode_tokens``,
``prefill_share``, ``running``, ``waiting``, ``host_share`` with ``host_share_low``/``_high``
and ``host_share_basis``, ``gpu_s_per_step``, ``host_s_per_step``, ``model_period_s``,
``host_breakdown``, ``energy_j``, ``gpu_power_w``, ``energy_j_per_token``,
``energy_j_per_request``, ``energy_gpus`` (:mod:`hostgap.server.watch.dcgm`), ``notes``.
"""

from __future__ import annotations

import operator
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from hostgap.errors import HostgapError
from hostgap.server.metrics import (
    SGLANG_HINT,
    VLLM_HINT,
    Delta,
    MetricsUnavailable,
    Scrape,
    ScrapeFailed,
    delta,
    scrape,
    step_stats,
)
from hostgap.server.watch import estimate as est
from hostgap.server.watch.anomaly import KEYS as ANOMALY_KEYS
from hostgap.server.watch.anomaly import Band, judge
from hostgap.server.watch.dcgm import energy_fields
from hostgap.server.watch.window import Window

SCHEMA_VERSION = 1
OK, RESET, NO_SCRAPE, IDLE = "ok", "reset", "no-scrape", "idle"
CONDITION_METRICS = (
    "host_share",
    "step_period_s",
    "steps_per_s",
    "tokens_per_step",
    "seqs_per_step",
    "busy_share",
    "prefill_share",
)
OPENING_TIMEOUT_S = 15.0
_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_CONDITION = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|>|<)\s*([-+]?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(%|ms|s)?\s*$")


@dataclass(frozen=True)
class Clock:
    """The loop's clocks: intervals are timed on ``monotonic``; ``wall`` (Unix time) only labels
    them. ``wait(stop, s)`` waits ``s`` seconds or until ``stop`` is set (True then). Tests inject
    a clock that advances without sleeping."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        return stop.wait(seconds)


SYSTEM_CLOCK = Clock()
WALL_STEP_S = 2.0
"""A wall-clock move this much larger or smaller than the monotonic one is a clock step."""


@dataclass(frozen=True)
class WatchConfig:
    """One watch: where, how often, for how long, with which calibration."""

    url: str
    interval_s: float = 5.0
    duration_s: float | None = None
    timeout_s: float | None = None
    calibration: est.Calibration | None = None
    max_intervals: int | None = None  # stop after this many rows (the library's callers and tests)
    calibrating: bool = False  # the session calibrates by itself (watch --calibrate)
    band: Band | None = None  # the anomaly band fitted on fault-free intervals (watch --band-from)

    @property
    def scrape_timeout_s(self) -> float:
        """Each scrape's bound: the given timeout, else the interval (at least 5 s, at most 10 s:
        a busy server's /metrics can take seconds to answer; a late scrape skips ticks)."""
        return self.timeout_s if self.timeout_s is not None else min(max(self.interval_s, 5.0), 10.0)

    @property
    def opening_timeout_s(self) -> float:
        """The opening scrape's bound: it decides whether the watch runs at all, so it waits at
        least OPENING_TIMEOUT_S."""
        return max(self.scrape_timeout_s, OPENING_TIMEOUT_S)


@dataclass(frozen=True)
class Condition:
    """``METRIC OP NUMBER[UNIT]`` of ``--fail-if``: holds when the window's value of METRIC
    (its step-weighted mean over the intervals that have it) compares true."""

    text: str
    metric: str
    op: str
    value: float

    def holds(self, x: float | None) -> bool:
        return x is not None and _OPS[self.op](x, self.value)


def parse_conditions(expr: str) -> list[Condition]:
    """Comma-separated conditions; HostgapError (exit 2) naming the bad part."""
    out = []
    for part in expr.split(","):
        m = _CONDITION.match(part)
        if not m:
            raise HostgapError(
                "--fail-if",
                f"cannot parse {part.strip()!r}: expected METRIC OP NUMBER[UNIT], "
                f"e.g. 'host_share>0.3' (OP one of > >= < <=)",
            )
        metric, op, number, unit = m.groups()
        if metric not in CONDITION_METRICS:
            raise HostgapError("--fail-if", f"unknown metric {metric!r}; known: {', '.join(CONDITION_METRICS)}")
        value = float(number)
        if unit == "%":
            value /= 100.0
        elif unit == "ms":
            value /= 1000.0
        if unit in ("ms", "s") and not metric.endswith("_s"):
            raise HostgapError("--fail-if", f"{part.strip()!r}: a time unit needs a *_s metric")
        out.append(Condition(part.strip(), metric, op, value))
    if not out:
        raise HostgapError("--fail-if", "no condition given")
    return out


# --------------------------------------------------------------------------- one interval


def interval_row(
    d: Delta,
    t_origin: float,
    calibration: est.Calibration | None,
    *,
    calibrating: bool = False,
    levers: bool = True,
    band: Band | None = None,
) -> dict:
    """The row of one interval: step telemetry, host-share estimate, notes; ``calibration``
    names the calibration the estimate used (its source), None without one; ``calibrating``:
    the watch takes its own (the note without one says so); ``levers``: name the interval's top
    lever (``top_lever``: docs/advise.md; the fleet view names one per instance instead)."""
    stats = step_stats(d)
    engine = stats.engine
    if engine == "sglang":
        e = est.sglang_device_timer(d, stats)
    elif engine == "vllm" and calibration is None and calibrating:
        e = est.no_estimate("no calibration yet: the watch profiles the server's traffic for one")
    elif engine == "vllm":
        e = est.vllm_model(stats, calibration)
    else:
        e = est.no_estimate("no vllm: or sglang: metrics")
    renamed = stats.steps is None and bool(d.appeared) and not d.reset
    status = RESET if d.reset or renamed else (OK if stats.steps else IDLE)
    notes = list(stats.notes)
    if renamed:
        notes.append(
            "the step series were replaced (a new model name?): nothing to difference; counted from the next interval"
        )
    if e.note:
        notes.append(e.note)
    stepped = (d.b.t_wall_s - d.a.t_wall_s) - d.interval_s
    if abs(stepped) > WALL_STEP_S:
        notes.append(f"the wall clock stepped {stepped:+.0f} s (intervals are timed on the monotonic clock)")
    row = {
        "t_start": d.a.t_wall_s,
        "t_end": d.b.t_wall_s,
        "t_rel_s": d.a.t_mono_s - t_origin,
        "interval_s": d.interval_s,
        "engine": engine,
        "status": status,
        "steps": stats.steps,
        "steps_per_s": stats.steps_per_s,
        "tokens_per_step": stats.tokens_per_step,
        "seqs_per_step": stats.seqs_per_step,
        "step_period_s": stats.step_period_s,
        "step_period_p90_s": stats.step_period_p90_s,
        "step_period_basis": stats.step_period_basis,
        "busy_share": stats.busy_share,
        "prefill_tokens": stats.prefill_tokens,
        "decode_tokens": stats.decode_tokens,
        "prefill_share": stats.prefill_share,
        "running": stats.running,
        "waiting": stats.waiting,
        "kv_cache_usage": stats.kv_cache_usage,
        "host_share": e.host_share,
        "host_share_low": e.low,
        "host_share_high": e.high,
        "host_share_basis": e.basis,
        "gpu_s_per_step": e.gpu_s_per_step,
        "host_s_per_step": e.host_s_per_step,
        "model_period_s": e.model_period_s,
        "host_breakdown": e.breakdown,
        "calibration": calibration.source if calibration is not None and engine == "vllm" else None,
        **energy_fields(d, engine, stats.decode_tokens),  # DCGM's energy counter, where exported
        **judge(stats, calibration if engine == "vllm" else None, band),
        "notes": notes,
    }
    row["top_lever"] = top_lever([row], calibration if engine == "vllm" else None) if levers else None
    return row


def top_lever(rows: list[dict], calibration: est.Calibration | None) -> dict | None:
    """The top lever of watched intervals (model/levers: the step period, batch and estimated
    device time as the input; the calibration's lines give the batch lever), None where they
    carry no host-share estimate."""
    from hostgap.model.levers.baseline import from_watch_rows
    from hostgap.model.levers.ranked import top

    if not any(r.get("host_share") is not None for r in rows):
        return None
    try:
        return top(from_watch_rows(rows, calibration.to_dict() if calibration else None, "watched interval"))
    except HostgapError:
        return None


def failed_row(last: Scrape, now_wall: float, now_mono: float, t_origin: float, why: str, engine: str | None) -> dict:
    """The row of an interval whose closing scrape failed (no numbers)."""
    row = dict.fromkeys(
        (
            "steps",
            "steps_per_s",
            "tokens_per_step",
            "seqs_per_step",
            "step_period_s",
            "step_period_p90_s",
            "busy_share",
            "prefill_tokens",
            "decode_tokens",
            "prefill_share",
            "running",
            "waiting",
            "host_share",
            "host_share_low",
            "host_share_high",
            "gpu_s_per_step",
            "host_s_per_step",
            "model_period_s",
            *ANOMALY_KEYS,
        )
    )
    row.update(
        {
            "t_start": last.t_wall_s,
            "t_end": now_wall,
            "t_rel_s": last.t_mono_s - t_origin,
            "interval_s": now_mono - last.t_mono_s,
            "engine": engine or "unknown",
            "status": NO_SCRAPE,
            "step_period_basis": "none",
            "host_share_basis": est.NONE,
            "host_breakdown": {},
            "calibration": None,
            "notes": [why],
        }
    )
    return row


# --------------------------------------------------------------------------- the loop


Reader = Callable[[str, float], Scrape]
"""Reads a server's metrics: ``(url, timeout_s) -> Scrape`` (:func:`hostgap.server.metrics.scrape`)."""


def first_scrape(config: WatchConfig, read: Reader = scrape) -> Scrape:
    """The opening scrape: a server that cannot be read, or exports neither engine's metrics,
    is a user error (HostgapError, exit 2) naming the flag that enables them."""
    try:
        s = read(config.url, config.opening_timeout_s)
    except ScrapeFailed as exc:
        raise HostgapError(config.url, f"no metrics from the server: {exc.problem}") from None
    except MetricsUnavailable as exc:
        from hostgap.server.attach.detect import TRANSFORMERS_SERVE, is_transformers_serve

        base = exc.source.removesuffix("/metrics")
        raise HostgapError(
            config.url, TRANSFORMERS_SERVE if is_transformers_serve(base, config.opening_timeout_s) else exc.problem
        ) from None
    if s.engine is None:
        raise HostgapError(s.url, f"no vllm: or sglang: metrics ({SGLANG_HINT}; {VLLM_HINT})")
    return s


def opening_notes(s: Scrape, config: WatchConfig) -> list[str]:
    """What the first scrape says about the estimate to come (one line each)."""
    notes = []
    if s.engine == "sglang" and est.FORWARD not in s.counters:
        notes.append(
            "SGLang without the device timer: host_share needs SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 "
            "in the server's environment; showing the telemetry only"
        )
    if s.engine == "sglang" and est.STAGES not in s.counters:
        notes.append("SGLang exports no scheduler stage seconds (sglang < 0.5.20): busy time from idle time")
    if s.engine == "vllm" and config.calibration is None and not config.calibrating:
        notes.append(
            "vLLM exports no GPU time: host_share needs a calibration (--calibrate, or --calibration RUN: "
            "a `hostgap attach URL --load C` run on this server); showing the telemetry only"
        )
    return notes


def watch(
    config: WatchConfig,
    on_row: Callable[[dict], None],
    on_note: Callable[[str], None],
    stop: threading.Event | None = None,
    first: Scrape | None = None,
) -> list[dict]:
    """Run the loop until ``duration_s`` (or ``stop``); returns the rows."""
    rows = []
    for row in intervals(config, on_note, stop, first):
        rows.append(row)
        on_row(row)
    return rows


def intervals(
    config: WatchConfig,
    on_note: Callable[[str], None],
    stop: threading.Event | None = None,
    first: Scrape | None = None,
    *,
    read: Reader = scrape,
    clock: Clock = SYSTEM_CLOCK,
    calibration: Callable[[], est.Calibration | None] | None = None,
) -> Iterator[dict]:
    """The loop as a generator: one row per interval until ``duration_s``, ``max_intervals`` or
    ``stop``. ``calibration`` gives the calibration in use at each interval (default: the
    config's); ``read`` and ``clock`` are injected by tests (a stand-in server, a clock that
    does not sleep)."""
    stop = stop or threading.Event()
    base = first or first_scrape(config, read)
    current = calibration or (lambda: config.calibration)
    for note in opening_notes(base, config):
        on_note(note)
    engine = base.engine
    t_origin = base.t_mono_s
    count = 0
    failing = False
    tick = 1
    while not stop.is_set():
        if config.max_intervals is not None and count >= config.max_intervals:
            break
        due = t_origin + tick * config.interval_s
        if config.duration_s is not None and due > t_origin + config.duration_s + 1e-9:
            break
        if clock.wait(stop, max(0.0, due - clock.monotonic())):
            break
        tick += 1
        try:
            now = read(config.url, config.scrape_timeout_s)
        except (ScrapeFailed, MetricsUnavailable) as exc:
            if not failing:
                on_note(f"scrape failed: {exc.problem}; retrying every {config.interval_s:g} s")
            failing = True
            row = failed_row(base, clock.wall(), clock.monotonic(), t_origin, exc.problem, engine)
            count += 1
            yield row
            continue
        if failing:
            on_note("server answering again")
            failing = False
        if now.t_mono_s <= base.t_mono_s:
            continue
        d = delta(base, now)
        if d.reset:
            on_note("counters went back: the server restarted; this interval shows no rates")
        if d.appeared:
            on_note(
                f"new series ({len(d.appeared)}): {', '.join(d.appeared[:2])}"
                f"{' …' if len(d.appeared) > 2 else ''}; counted from the next interval"
            )
        row = interval_row(d, t_origin, current(), calibrating=config.calibrating, band=config.band)
        count += 1
        yield row
        base = now
        engine = now.engine or engine
        # a tick that fell far behind (a slow scrape, a stopped process) restarts the schedule
        behind = int((clock.monotonic() - t_origin) / config.interval_s) + 1
        tick = max(tick, behind)


# --------------------------------------------------------------------------- the window


def summary(rows: Sequence[dict], conditions: Sequence[Condition] = ()) -> dict:
    """The window's numbers: counts of intervals by status, step-weighted means of the per-step
    quantities, the host share's mean/min/max and basis, and each ``--fail-if`` condition
    (:class:`hostgap.server.watch.window.Window`, which a session keeps as it goes)."""
    window = Window(conditions, recent=1)
    for row in rows:
        window.add(row)
    return window.summary()


def window_value(summary_doc: dict, metric: str) -> float | None:
    value = summary_doc.get(metric)
    return value if isinstance(value, int | float) else None
