"""The fleet view: watch's rows for every instance a Prometheus holds, from ``query_range``.

Each instance (a scrape target: ``job``, ``instance``) is read as watch reads one server, but the
two scrapes an interval differences are Prometheus' own: for every engine counter and histogram
watch reads, ``increase(NAME{MATCH}[S])`` evaluated every S seconds gives each series' increase
over the interval ending there (Prometheus' increase: extrapolated to the interval's edges,
counter resets counted through), and the gauges their value at its end. Those increases make the
same :class:`~hostgap.server.metrics.Delta` a watch builds from two scrapes, so each row is
:func:`hostgap.server.watch.loop.interval_row`'s — the same columns, bases and estimate, computed
by the same code. A vLLM instance is read with its class's calibration (the class of its
``model_name``, and of its hardware label with ``hardware_label``); an instance of a class without
one gets rows without a share, saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from hostgap.anatomy.verdict import HOST_BOUND_MIN
from hostgap.server.fleet.classes import ClassCalibration
from hostgap.server.fleet.promql import Fetch
from hostgap.server.metrics import Delta, Histogram, Labels, Scrape
from hostgap.server.watch.loop import Condition, interval_row
from hostgap.server.watch.window import Window

COUNTERS = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "sglang:forward_execution_seconds_total",
    "sglang:scheduler_stage_seconds_total",
    "sglang:scheduler_idle_seconds_total",
    "sglang:realtime_tokens_total",
    "sglang:cuda_graph_passes_total",
    "sglang:generation_tokens_total",
    "sglang:prompt_tokens_total",
)
HISTOGRAMS = ("vllm:iteration_tokens_total", "vllm:inter_token_latency_seconds", "sglang:inter_token_latency_seconds")
GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:fwd_occupancy",
)
TARGET = ("job", "instance")
WORST = 5

Target = tuple[str, str]


@dataclass(frozen=True)
class Query:
    kind: str  # "counter", "count", "sum", "gauge"
    name: str
    promql: str


def queries(selector: str, step_s: float) -> list[Query]:
    """The queries of one read (``selector``: the label matchers inside ``--match``'s braces)."""
    sel = "{" + selector + "}"
    window = f"[{_duration(step_s)}]"
    out = [Query("counter", n, f"increase({n}{sel}{window})") for n in COUNTERS]
    for n in HISTOGRAMS:
        out.append(Query("count", n, f"increase({n}_count{sel}{window})"))
        out.append(Query("sum", n, f"increase({n}_sum{sel}{window})"))
    out += [Query("gauge", n, f"{n}{sel}") for n in GAUGES]
    return out


def _duration(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


Cell = dict[str, dict[str, dict[Labels, float]]]
"""One instance at one time: kind → metric name → series labels → value."""


def read(fetch: Fetch, selector: str, start: float, end: float, step_s: float) -> dict[Target, dict[float, Cell]]:
    """Every instance's cells at the times start, start + step, ..., end (each value over the
    interval ending there)."""
    out: dict[Target, dict[float, Cell]] = {}
    for q in queries(selector, step_s):
        for series in fetch(q.promql, start, end, step_s):
            labels = series.get("metric") or {}
            target = (str(labels.get("job", "")), str(labels.get("instance", "")))
            rest: Labels = tuple(sorted((k, v) for k, v in labels.items() if k not in (*TARGET, "__name__")))
            cells = out.setdefault(target, {})
            for t, value in series.get("values") or []:
                cell = cells.setdefault(float(t), {})
                cell.setdefault(q.kind, {}).setdefault(q.name, {})[rest] = float(value)
    return out


def delta(url: str, t: float, step_s: float, cell: Cell) -> Delta:
    """The Delta of the interval (t − step, t] from one cell."""
    histograms: dict[str, dict[Labels, Histogram]] = {}
    counts, sums = cell.get("count", {}), cell.get("sum", {})
    for name, by_labels in counts.items():
        for labels, count in by_labels.items():
            total = sums.get(name, {}).get(labels)
            if total is not None:
                histograms.setdefault(name, {})[labels] = Histogram((), count, total)
    counters = cell.get("counter", {})
    gauges = cell.get("gauge", {})
    a = Scrape(url, t - step_s, t - step_s, 0.0, {}, {}, {})
    b = Scrape(url, t, t, 0.0, counters, gauges, histograms)
    return Delta(a, b, counters, histograms, False, (), (), ())


def _class_of(cell: Cell, hardware_label: str | None) -> tuple[str | None, str | None]:
    for by_kind in cell.values():
        for name, by_labels in by_kind.items():
            if not name.startswith("vllm:"):
                continue
            for labels in by_labels:
                d = dict(labels)
                if "model_name" in d:
                    return d["model_name"], d.get(hardware_label) if hardware_label else None
    return None, None


def calibration_for(
    classes: Sequence[ClassCalibration], model: str | None, hardware: str | None, hardware_label: str | None
) -> ClassCalibration | None:
    """The class calibration of a vLLM instance serving ``model`` (on ``hardware``), if any."""
    for c in classes:
        if c.engine == "vllm" and c.model == model and (not hardware_label or c.hardware == hardware):
            return c
    return None


def instance_name(target: Target) -> str:
    job, instance = target
    return f"{instance} ({job})" if job else instance


def rows(
    cells: dict[Target, dict[float, Cell]],
    classes: Sequence[ClassCalibration],
    *,
    url: str,
    step_s: float,
    t_origin: float,
    hardware_label: str | None = None,
) -> list[dict]:
    """One watch row per instance per interval, by time then instance, each naming its instance,
    the class calibration it was read with and whether its batch lies outside that calibration's
    batches (``calibration_out_of_range``: the class wants a new attach at this load)."""
    out = []
    for target, by_time in cells.items():
        for t, cell in by_time.items():
            model, hardware = _class_of(cell, hardware_label)
            cls = calibration_for(classes, model, hardware, hardware_label)
            cal = dataclasses.replace(cls.calibration, source=cls.name) if cls else None
            row = interval_row(delta(url, t, step_s, cell), t_origin, cal, levers=False)
            if cls is None:  # watch's "no calibration" note, said of the class
                row["notes"] = [
                    n
                    if not n.startswith("no calibration")
                    else f"no calibration for class vllm/{model}: "
                    "attach to one of its servers and pass the run with --calibration"
                    for n in row["notes"]
                ]
            batch = row["seqs_per_step"]
            out.append(
                {
                    "instance": target[1],
                    "job": target[0],
                    "model": model,
                    "hardware": hardware,
                    **row,
                    "calibration_out_of_range": None
                    if cls is None or batch is None or not row["steps"]
                    else not min(cls.calibration.batches) <= batch <= max(cls.calibration.batches),
                }
            )
    out.sort(key=lambda r: (r["t_end"], r["job"], r["instance"]))
    return out


class FleetWindow:
    """The fleet's intervals summed up as they come: one watch :class:`Window` per instance
    (bounded: its recent rows and buckets), the calibration each used, how often its batch left
    that calibration's range."""

    def __init__(self, conditions: Sequence[Condition] = (), recent: int = 1):
        self.conditions = list(conditions)
        self.recent = recent
        self.windows: dict[Target, Window] = {}
        self.meta: dict[Target, dict] = {}

    def add(self, row: dict) -> None:
        target = (row["job"], row["instance"])
        if target not in self.windows:
            self.windows[target] = Window(self.conditions, recent=self.recent)
            self.meta[target] = {
                "model": None,
                "engine": None,
                "calibrations": set(),
                "in": 0,
                "out": 0,
                "judged": 0,
                "anomalies": 0,
            }
        self.windows[target].add(row)
        m = self.meta[target]
        m["model"] = row["model"] or m["model"]
        m["engine"] = row["engine"] if row["engine"] != "unknown" else m["engine"]
        if row["calibration"]:
            m["calibrations"].add(row["calibration"])
        if row["calibration_out_of_range"] is not None:
            m["out" if row["calibration_out_of_range"] else "in"] += 1
        if row.get("anomaly") is not None:
            m["judged"] += 1
            m["anomalies"] += int(row["anomaly"])

    def summary(self) -> dict:
        """Each instance's window (watch's summary of its rows), the instances whose window share
        is host-bound (≥ HOST_BOUND_MIN, the verdict's threshold), the worst five by share, the
        calibration each used, and each ``--fail-if`` condition across the fleet (it holds when
        it holds on any instance's window)."""
        instances = []
        for target in sorted(self.windows):
            m = self.meta[target]
            cals = sorted(m["calibrations"])
            read = m["in"] + m["out"]
            instances.append(
                {
                    "instance": target[1],
                    "job": target[0],
                    "engine": m["engine"],
                    "model": m["model"],
                    "calibration": "+".join(cals) if cals else None,
                    "calibration_out_of_range_share": m["out"] / read if read else None,
                    "calibration_out_of_range_intervals": m["out"],
                    "anomaly_intervals": m["anomalies"],
                    "judged_intervals": m["judged"],
                    "summary": self.windows[target].summary(),
                }
            )
        shared = [i for i in instances if i["summary"]["host_share"] is not None]
        worst = sorted(shared, key=lambda i: -i["summary"]["host_share"])[:WORST]
        fail_if = []
        for c in self.conditions:
            holding = [
                instance_name((i["job"], i["instance"]))
                for i in instances
                if any(f["holds"] for f in i["summary"]["fail_if"] if f["condition"] == c.text)
            ]
            fail_if.append({"condition": c.text, "metric": c.metric, "holds": bool(holding), "instances": holding})
        return {
            "instances": len(instances),
            "instances_with_share": len(shared),
            "host_bound_min": HOST_BOUND_MIN,
            "host_bound": [
                instance_name((i["job"], i["instance"])) for i in shared if i["summary"]["host_share"] >= HOST_BOUND_MIN
            ],
            "worst": [
                {
                    "instance": instance_name((i["job"], i["instance"])),
                    "host_share": i["summary"]["host_share"],
                    "host_share_low": i["summary"]["host_share_low"],
                    "host_share_high": i["summary"]["host_share_high"],
                    "calibration": i["calibration"],
                }
                for i in worst
            ],
            "anomalous": [instance_name((i["job"], i["instance"])) for i in instances if i["anomaly_intervals"]],
            "fail_if": fail_if,
            "per_instance": instances,
        }
