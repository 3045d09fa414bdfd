"""A running server's Prometheus metrics: scrape, parse, difference two scrapes.

- :func:`scrape` reads ``URL/metrics`` with a bound on the whole read (connect, headers and
  body together), parses the exposition format with ``prometheus_client``'s parser and returns
  a typed :class:`Scrape` (counters, gauges, histograms, each keyed by series labels).
- :func:`delta` differences two scrapes of one server: counters and histograms per series,
  a counter reset (a restarted server: a counter went back, or ``process_start_time_seconds``
  moved) flagged rather than shown as a negative rate, and series that appeared or disappeared
  between the scrapes (a new ``tp_rank``) listed and left out of the difference.
- :func:`step_stats` turns a :class:`Delta` into the engine's step telemetry over the interval:
  decode steps per second, tokens and sequences per step, the step period, the prefill/decode
  token mix. vLLM: ``vllm:iteration_tokens_total`` (a histogram: one observation per engine
  step, its value the step's tokens) and ``vllm:inter_token_latency_seconds`` (the gap between a
  request's consecutive outputs, timed in EngineCore: the step period while it decodes). SGLang:
  ``sglang:inter_token_latency_seconds``, ``sglang:realtime_tokens_total{mode}`` and
  ``sglang:cuda_graph_passes_total{mode}`` (one per decode forward pass).

Example (two scrapes 5 s apart, 500 engine steps carrying 4,000 tokens, mean ITL 8 ms)::

    a = scrape("http://127.0.0.1:8000", timeout_s=5)
    ...
    s = step_stats(delta(a, scrape("http://127.0.0.1:8000", timeout_s=5)))
    s.steps_per_s, s.tokens_per_step, s.step_period_s   # 100.0, 8.0, 0.008
"""

from __future__ import annotations

import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from hostgap.errors import HostgapError

Labels = tuple[tuple[str, str], ...]
"""A series' labels, sorted by name (``le`` and ``quantile`` removed for histograms)."""
Series = dict[Labels, float]

MAX_BYTES = 64 * 1024 * 1024
"""Largest /metrics body read (a server with many label sets writes a few MB)."""
PROCESS_START = "process_start_time_seconds"
VLLM_HINT = "vLLM exports /metrics unless started with --disable-log-stats"
SGLANG_HINT = "SGLang exports /metrics only when started with --enable-metrics"


class MetricsUnavailable(HostgapError):
    """The server answers but exports no usable metrics (404, not Prometheus text)."""


class ScrapeFailed(HostgapError):
    """A scrape that did not complete: refused, timed out, cut off. Transient for a watch."""


@dataclass(frozen=True)
class Histogram:
    """One histogram (or summary) series: cumulative bucket counts by upper bound, count, sum."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def mean(self) -> float | None:
        """Mean observation, or None with no observations."""
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """Quantile by linear interpolation inside the bucket (Prometheus' histogram_quantile);
        None with no observations or no finite bucket."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(bound):  # above the highest finite bound: that bound, if any
                    return lower_bound if lower_bound > 0 or lower_count > 0 else None
                width = cumulative - lower_count
                frac = (rank - lower_count) / width if width > 0 else 1.0
                return lower_bound + (bound - lower_bound) * frac
            lower_bound, lower_count = bound, cumulative
        return lower_bound


@dataclass(frozen=True)
class Scrape:
    """One read of a server's /metrics: when (wall clock and monotonic), how long it took, and
    its series by kind. Counter names are the sample names (``..._total``); histogram and gauge
    names are the family names."""

    url: str
    t_wall_s: float
    t_mono_s: float
    elapsed_s: float
    counters: dict[str, Series]
    gauges: dict[str, Series]
    histograms: dict[str, dict[Labels, Histogram]]

    @property
    def engine(self) -> str | None:
        """``"vllm"`` or ``"sglang"`` from the metric names' prefix, None for neither."""
        return detect_engine(self.names())

    def names(self) -> set[str]:
        return set(self.counters) | set(self.gauges) | set(self.histograms)

    def gauge(self, name: str, agg: str = "sum", **match: str) -> float | None:
        """A gauge over its matching series: ``sum``, ``mean`` or ``max``; NaN values are left
        out; None when no series has a number."""
        return _aggregate(_matching(self.gauges.get(name, {}), match).values(), agg)

    def counter(self, name: str, **match: str) -> float | None:
        """A counter's total over its matching series (None when the server has none)."""
        return _aggregate(_matching(self.counters.get(name, {}), match).values(), "sum")


@dataclass(frozen=True)
class Delta:
    """Two scrapes of one server differenced: what happened between them.

    ``reset`` is true when a counter or histogram went back or the process start time moved
    (the server restarted): rates over such an interval are not shown. Series present in one
    scrape only are named in ``appeared``/``disappeared`` and take no part in the sums."""

    a: Scrape
    b: Scrape
    counters: dict[str, Series]
    histograms: dict[str, dict[Labels, Histogram]]
    reset: bool
    reset_series: tuple[str, ...]
    appeared: tuple[str, ...]
    disappeared: tuple[str, ...]
    start_stepped_back_s: float | None = None
    """Seconds ``process_start_time_seconds`` went back by (the server's clock stepped), else None."""

    @property
    def interval_s(self) -> float:
        return self.b.t_mono_s - self.a.t_mono_s

    def counter(self, name: str, **match: str) -> float | None:
        """A counter's increase over its matching series; None when no series of that name
        was in both scrapes."""
        return _aggregate(_matching(self.counters.get(name, {}), match).values(), "sum")

    def counter_by(self, name: str, label: str, **match: str) -> dict[str, float]:
        """A counter's increase summed per value of one label (e.g. ``category``)."""
        out: dict[str, float] = {}
        for labels, value in _matching(self.counters.get(name, {}), match).items():
            key = dict(labels).get(label)
            if key is not None:
                out[key] = out.get(key, 0.0) + value
        return out

    def histogram(self, name: str, **match: str) -> Histogram | None:
        """A histogram's increase summed over its matching series (buckets added bound by
        bound); None when no series of that name was in both scrapes."""
        series = list(_matching(self.histograms.get(name, {}), match).values())
        return _sum_histograms(series) if series else None

    def labels_of(self, name: str) -> list[dict[str, str]]:
        """The label sets of a counter or histogram present in both scrapes."""
        series = self.counters.get(name) or self.histograms.get(name) or {}
        return [dict(labels) for labels in series]


@dataclass(frozen=True)
class StepStats:
    """An engine's step telemetry over one interval (None where the metrics cannot say).

    ``steps_per_s`` counts engine steps (vLLM) or decode forward passes (SGLang) per second of
    the interval; ``step_period_s`` is the mean inter-token latency (the step period while a
    request decodes); ``busy_share`` = steps × step period / interval, the share of the interval
    the engine was stepping (clipped to 1). ``seqs_per_step`` = decode tokens / steps: the
    decode batch (no speculative decoding). ``prefill_share`` = prefill tokens / all tokens."""

    engine: str
    interval_s: float
    steps: float | None
    steps_per_s: float | None
    tokens_per_step: float | None
    seqs_per_step: float | None
    step_period_s: float | None
    step_period_p90_s: float | None
    step_period_basis: str
    busy_share: float | None
    prefill_tokens: float | None
    decode_tokens: float | None
    prefill_share: float | None
    running: float | None
    waiting: float | None
    notes: tuple[str, ...] = field(default=())
    kv_cache_usage: float | None = None
    """vLLM: the KV cache's used share (``vllm:kv_cache_usage_perc``, a fraction), the mean of the
    interval's two ends (and of data-parallel engines): how much context the batch carries."""


# --------------------------------------------------------------------------- scraping


def metrics_url(url: str) -> str:
    """The /metrics address of a server given as ``http://host:port`` (an OpenAI ``/v1`` base
    or the /metrics address itself are accepted too). Bad URLs raise HostgapError."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HostgapError(url, "not a server URL (expected http://HOST:PORT)")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as exc:
        raise HostgapError(url, f"bad port ({exc})") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        if path.endswith("/v1"):
            path = path[: -len("/v1")]
        path = f"{path}/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def scrape(url: str, timeout_s: float = 5.0) -> Scrape:
    """Read and parse ``url``'s metrics: connecting and each read of the response's status and
    headers wait at most ``timeout_s`` seconds, and the body is read by ``timeout_s`` after the
    request began (so a server slow to answer can hold one scrape longer than ``timeout_s``).

    Raises :class:`ScrapeFailed` when the read does not complete (refused, timed out, cut off,
    a 5xx) and :class:`MetricsUnavailable` when the server answers without Prometheus metrics
    (404 and other 4xx, a body that is not the exposition format)."""
    target = metrics_url(url)
    t_wall, t0 = time.time(), time.monotonic()
    body = _fetch(target, timeout_s)
    elapsed = time.monotonic() - t0
    try:
        text = body.decode("utf-8")
        counters, gauges, histograms = parse(text)
    except (UnicodeDecodeError, ValueError, TypeError, IndexError) as exc:
        raise MetricsUnavailable(target, f"not Prometheus text ({exc})") from None
    if text.strip() and not (counters or gauges or histograms):
        raise MetricsUnavailable(target, "not Prometheus text (no series)")
    return Scrape(target, t_wall, t0 + elapsed / 2, elapsed, counters, gauges, histograms)


def _fetch(target: str, timeout_s: float) -> bytes:
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(target, headers={"Accept": "text/plain"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            chunks: list[bytes] = []
            size = 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ScrapeFailed(target, f"timed out after {timeout_s:g} s (reading)")
                _set_read_timeout(response, left)
                chunk = response.read(65536)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > MAX_BYTES:
                    raise MetricsUnavailable(target, f"more than {MAX_BYTES} bytes of metrics")
                chunks.append(chunk)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise MetricsUnavailable(
                target, f"404 Not Found: no metrics endpoint ({SGLANG_HINT}; {VLLM_HINT})"
            ) from None
        if exc.code >= 500:
            raise ScrapeFailed(target, f"HTTP {exc.code} {exc.reason}") from None
        raise MetricsUnavailable(target, f"HTTP {exc.code} {exc.reason}") from None
    except TimeoutError:
        raise ScrapeFailed(target, f"timed out after {timeout_s:g} s") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError | socket.timeout):
            raise ScrapeFailed(target, f"timed out after {timeout_s:g} s") from None
        raise ScrapeFailed(target, f"cannot connect ({reason})") from None
    except (ConnectionError, OSError) as exc:
        raise ScrapeFailed(target, f"connection lost ({exc})") from None


def _set_read_timeout(response: object, seconds: float) -> None:
    """Bound the next socket read by what is left of the scrape's deadline."""
    fp = getattr(response, "fp", None)
    raw = getattr(fp, "raw", None)
    sock = getattr(raw, "_sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


def parse(text: str) -> tuple[dict[str, Series], dict[str, Series], dict[str, dict[Labels, Histogram]]]:
    """Counters, gauges and histograms of an exposition-format text (``prometheus_client``'s
    parser). Untyped series count as gauges; summaries as histograms without buckets;
    ``_created`` samples are dropped."""
    counters: dict[str, Series] = {}
    gauges: dict[str, Series] = {}
    parts: dict[str, dict[Labels, dict[str, object]]] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            for s in family.samples:
                if not s.name.endswith("_created"):
                    counters.setdefault(s.name, {})[_labels(s.labels)] = float(s.value)
        elif family.type in ("histogram", "summary", "gaugehistogram"):
            _collect_histogram(family.name, family.samples, parts.setdefault(family.name, {}))
        elif family.type in ("gauge", "unknown", "untyped") and not family.name.endswith("_created"):
            for s in family.samples:
                gauges.setdefault(s.name, {})[_labels(s.labels)] = float(s.value)
    histograms = {name: {labels: _histogram(p) for labels, p in series.items()} for name, series in parts.items()}
    return counters, gauges, histograms


def _collect_histogram(name: str, samples: Iterable, into: dict[Labels, dict[str, object]]) -> None:
    for s in samples:
        suffix = s.name[len(name) :]
        labels = {k: v for k, v in s.labels.items() if k not in ("le", "quantile")}
        entry = into.setdefault(_labels(labels), {"buckets": []})
        if suffix == "_bucket" and "le" in s.labels:
            buckets = entry["buckets"]
            assert isinstance(buckets, list)
            buckets.append((float(s.labels["le"]), float(s.value)))
        elif suffix in ("_count", "_gcount"):
            entry["count"] = float(s.value)
        elif suffix in ("_sum", "_gsum"):
            entry["sum"] = float(s.value)


def _histogram(p: Mapping[str, object]) -> Histogram:
    buckets = sorted(p.get("buckets", []))  # type: ignore[call-overload]
    count = p.get("count")
    if count is None:
        count = buckets[-1][1] if buckets else 0.0
    total = p.get("sum", math.nan)
    return Histogram(tuple(buckets), float(count), float(total))  # type: ignore[arg-type]


def _labels(labels: Mapping[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


def detect_engine(names: Iterable[str]) -> str | None:
    """``"vllm"`` when any metric name starts ``vllm:``, ``"sglang"`` for ``sglang:``."""
    prefixes = {name.split(":", 1)[0] for name in names if ":" in name}
    for engine in ("vllm", "sglang"):
        if engine in prefixes:
            return engine
    return None


# --------------------------------------------------------------------------- differencing


def delta(a: Scrape, b: Scrape) -> Delta:
    """``b`` minus ``a`` (``a`` the earlier scrape of the same server)."""
    if b.t_mono_s <= a.t_mono_s:
        raise ValueError("delta(a, b): b must be the later scrape")
    reset_series: list[str] = []
    appeared: list[str] = []
    disappeared: list[str] = []
    counters: dict[str, Series] = {}
    for name in set(a.counters) | set(b.counters):
        sa, sb = a.counters.get(name, {}), b.counters.get(name, {})
        _membership(name, sa, sb, appeared, disappeared)
        out: Series = {}
        for labels in sa.keys() & sb.keys():
            d = sb[labels] - sa[labels]
            if d < 0:
                reset_series.append(_series_name(name, labels))
            out[labels] = d
        counters[name] = out
    histograms: dict[str, dict[Labels, Histogram]] = {}
    for name in set(a.histograms) | set(b.histograms):
        ha, hb = a.histograms.get(name, {}), b.histograms.get(name, {})
        _membership(name, ha, hb, appeared, disappeared)
        hout: dict[Labels, Histogram] = {}
        for labels in ha.keys() & hb.keys():
            d_hist = _histogram_delta(ha[labels], hb[labels])
            if d_hist is None:
                reset_series.append(_series_name(name, labels))
            else:
                hout[labels] = d_hist
        histograms[name] = hout
    started = (a.gauge(PROCESS_START, "max"), b.gauge(PROCESS_START, "max"))
    moved = started[1] - started[0] if started[0] is not None and started[1] is not None else 0.0
    # a restart moves the start time forward; one that moves back is the server's clock stepping
    # (its start time is derived from the wall clock), with every counter still counting
    if moved > 0:
        reset_series.append(PROCESS_START)
    return Delta(
        a,
        b,
        counters,
        histograms,
        bool(reset_series),
        tuple(sorted(set(reset_series))),
        tuple(sorted(appeared)),
        tuple(sorted(disappeared)),
        start_stepped_back_s=-moved if moved < 0 else None,
    )


def _membership(
    name: str, sa: Mapping[Labels, object], sb: Mapping[Labels, object], appeared: list[str], disappeared: list[str]
) -> None:
    appeared.extend(_series_name(name, labels) for labels in sb.keys() - sa.keys())
    disappeared.extend(_series_name(name, labels) for labels in sa.keys() - sb.keys())


def _histogram_delta(a: Histogram, b: Histogram) -> Histogram | None:
    """b − a bucket by bucket; None when anything went back (a reset)."""
    if b.count < a.count or (b.sum < a.sum and not math.isnan(a.sum)):
        return None
    before = dict(a.buckets)
    buckets = []
    for bound, cumulative in b.buckets:
        d = cumulative - before.get(bound, 0.0)
        if d < 0:
            return None
        buckets.append((bound, d))
    return Histogram(tuple(buckets), b.count - a.count, b.sum - a.sum)


def _sum_histograms(series: list[Histogram]) -> Histogram:
    bounds: dict[float, float] = {}
    for h in series:
        for bound, cumulative in h.buckets:
            bounds[bound] = bounds.get(bound, 0.0) + cumulative
    return Histogram(tuple(sorted(bounds.items())), sum(h.count for h in series), sum(h.sum for h in series))


def _series_name(name: str, labels: Labels) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{{{inner}}}" if inner else name


def _matching(series: Mapping[Labels, object], match: Mapping[str, str]) -> dict:
    if not match:
        return dict(series)
    return {k: v for k, v in series.items() if all(dict(k).get(m) == want for m, want in match.items())}


def _aggregate(values: Iterable[float], agg: str) -> float | None:
    numbers = [v for v in values if not math.isnan(v)]
    if not numbers:
        return None
    if agg == "sum":
        return math.fsum(numbers)
    if agg == "mean":
        return math.fsum(numbers) / len(numbers)
    if agg == "max":
        return max(numbers)
    raise ValueError(f"unknown aggregation {agg!r}")


# --------------------------------------------------------------------------- step telemetry


def step_stats(d: Delta) -> StepStats:
    """The step telemetry of the interval ``d`` covers, for the engine its metrics name.

    On a reset interval every rate is None (the counters restarted inside it) and a note says
    so; an engine hostgap does not know gives a StepStats with only notes."""
    engine = d.b.engine or d.a.engine or "unknown"
    notes: list[str] = []
    if d.reset:
        notes.append("counters went back (server restarted?): no rates for this interval")
    if d.appeared:
        notes.append(f"new series: {', '.join(d.appeared[:3])}{' …' if len(d.appeared) > 3 else ''}")
    if d.disappeared:
        notes.append(f"series gone: {', '.join(d.disappeared[:3])}{' …' if len(d.disappeared) > 3 else ''}")
    if d.start_stepped_back_s:
        notes.append(
            f"the server's process start time went back {d.start_stepped_back_s:.0f} s with every counter "
            "still counting: its clock stepped (counted as usual)"
        )
    if engine == "vllm":
        fields = _vllm_fields(d)
    elif engine == "sglang":
        fields = _sglang_fields(d)
    else:
        notes.append("no vllm: or sglang: metrics on this server")
        fields = _empty_fields()
    if d.reset:
        fields.update({k: None for k in ("steps", "prefill_tokens", "decode_tokens")})
        fields.update(step_period_s=None, step_period_p90_s=None)
    return _derive(engine, d.interval_s, fields, tuple(notes))


def _vllm_fields(d: Delta) -> dict:
    steps_h = d.histogram("vllm:iteration_tokens_total")
    itl = d.histogram("vllm:inter_token_latency_seconds")
    return {
        "steps": steps_h.count if steps_h else None,
        "tokens": steps_h.sum if steps_h else None,
        "itl": itl,
        "basis": "mean of vllm:inter_token_latency_seconds",
        "prefill_tokens": d.counter("vllm:prompt_tokens_total"),
        "decode_tokens": d.counter("vllm:generation_tokens_total"),
        "running": d.b.gauge("vllm:num_requests_running"),
        "waiting": d.b.gauge("vllm:num_requests_waiting"),
        "kv_usage": _mean_of_ends(d, "vllm:kv_cache_usage_perc"),
    }


def _mean_of_ends(d: Delta, name: str) -> float | None:
    ends = [v for v in (d.a.gauge(name, "mean"), d.b.gauge(name, "mean")) if v is not None and math.isfinite(v)]
    return sum(ends) / len(ends) if ends else None


def _sglang_fields(d: Delta) -> dict:
    # scheduler series repeat on every tensor-parallel rank (one batch): count one rank
    rank = _first_rank(d)
    match = {"tp_rank": rank} if rank is not None else {}
    realtime = d.counter_by("sglang:realtime_tokens_total", "mode", **match)
    decode = realtime.get("decode")
    prefill = realtime.get("prefill_compute")
    if decode is None:
        decode = d.counter("sglang:generation_tokens_total")
    if prefill is None:
        prefill = d.counter("sglang:prompt_tokens_total")
    passes = d.counter("sglang:cuda_graph_passes_total", **match)
    tokens = None if passes is None or decode is None else decode + (prefill or 0.0)
    return {
        "steps": passes,
        "tokens": tokens,
        "itl": d.histogram("sglang:inter_token_latency_seconds"),
        "basis": "mean of sglang:inter_token_latency_seconds",
        "prefill_tokens": prefill,
        "decode_tokens": decode,
        "running": d.b.gauge("sglang:num_running_reqs", "sum", **match),
        "waiting": d.b.gauge("sglang:num_queue_reqs", "sum", **match),
    }


def _first_rank(d: Delta) -> str | None:
    for name in (
        "sglang:cuda_graph_passes_total",
        "sglang:realtime_tokens_total",
        "sglang:scheduler_stage_seconds_total",
    ):
        ranks = sorted({labels["tp_rank"] for labels in d.labels_of(name) if "tp_rank" in labels})
        if ranks:
            return ranks[0]
    return None


def _empty_fields() -> dict:
    return {
        "steps": None,
        "tokens": None,
        "itl": None,
        "basis": "none",
        "prefill_tokens": None,
        "decode_tokens": None,
        "running": None,
        "waiting": None,
    }


def _derive(engine: str, interval_s: float, f: dict, notes: tuple[str, ...]) -> StepStats:
    steps, tokens, itl = _finite(f["steps"]), _finite(f["tokens"]), f["itl"]
    period = _finite(itl.mean()) if itl is not None else None
    p90 = _finite(itl.quantile(0.9)) if itl is not None else None
    busy = None
    if steps and period is not None and interval_s > 0:
        busy = min(1.0, steps * period / interval_s)
    prefill, decode = _finite(f["prefill_tokens"]), _finite(f["decode_tokens"])
    mix = None
    if prefill is not None and decode is not None and prefill + decode > 0:
        mix = prefill / (prefill + decode)
    return StepStats(
        engine=engine,
        interval_s=interval_s,
        steps=steps,
        steps_per_s=steps / interval_s if steps is not None and interval_s > 0 else None,
        tokens_per_step=tokens / steps if steps and tokens is not None else None,
        seqs_per_step=decode / steps if steps and decode is not None else None,
        step_period_s=period,
        step_period_p90_s=p90,
        step_period_basis=f["basis"],
        busy_share=busy,
        prefill_tokens=prefill,
        decode_tokens=decode,
        prefill_share=mix,
        running=f["running"],
        waiting=f["waiting"],
        notes=notes,
        kv_cache_usage=None if f.get("kv_usage") is None else min(1.0, max(0.0, f["kv_usage"])),
    )


def _finite(x: float | None) -> float | None:
    """``x`` when it is a finite number that is not negative, else None: a server's NaN (an
    unset sum) or a value that went back is no rate."""
    return x if x is not None and math.isfinite(x) and x >= 0 else None
