"""``watch --serve [HOST:]PORT``: hostgap's per-interval estimate as Prometheus gauges.

Every series carries the labels that say what it describes, so one Prometheus can scrape several
watches: the labels every one of the engine's step series carries (vLLM: ``model_name`` and
``engine``, its engine index; SGLang: ``model_name``, ``engine_type``), ``engine_kind``
(``vllm``/``sglang``) and ``server`` (the watched server's ``HOST:PORT``).

Gauges (the names are the contract the dashboard and alert rules in ``deploy/`` use; a test
checks them):

- ``hostgap_host_exposed_share`` (with ``_low`` and ``_high``, the estimate's interval) and
  ``hostgap_host_exposed_share_basis_info`` (1, with the basis as a label);
- ``hostgap_step_period_seconds``, ``hostgap_steps_per_second``, ``hostgap_sequences_per_step``,
  ``hostgap_tokens_per_step``, ``hostgap_prefill_share``, ``hostgap_busy_share``;
- ``hostgap_energy_joules_per_token``, ``hostgap_energy_joules_per_request``,
  ``hostgap_gpu_power_watts`` (where the scrape has DCGM's energy counter, docs/energy.md);
- ``hostgap_step_anomaly`` (1 when the step period lies above the calibrated model's band at the
  interval's batch and prefill, 0 when within it: :mod:`hostgap.server.watch.anomaly`) and
  ``hostgap_expected_step_period_seconds``;
- ``hostgap_server_up`` (1 when the last scrape of the server succeeded),
  ``hostgap_last_interval_timestamp_seconds`` (Unix time the last interval ended);
- ``hostgap_calibration_age_seconds`` (since the calibration in use was taken; NaN without one),
  ``hostgap_calibration_stale`` (1 while the estimate needs a calibration that is missing, too
  old, or out of the range the traffic is in);
- ``hostgap_intervals_total{status}`` (a counter of intervals by status).

A value the last interval could not give is NaN (Prometheus' "no value"), so a Grafana panel
shows a gap rather than a stale number. The exposition is rendered once per interval by the
watch loop and handed to the :class:`~hostgap.server.watch.listener.Listener`, which serves it.
"""

from __future__ import annotations

import math
import urllib.parse

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from hostgap.server.metrics import Scrape
from hostgap.server.watch.listener import Address, Listener

STEP_SERIES = {"vllm": "vllm:inter_token_latency_seconds", "sglang": "sglang:num_running_reqs"}
RANK_LABELS = ("tp_rank", "pp_rank", "dp_rank", "moe_ep_rank")
OWN_LABELS = ("engine_kind", "server")
GAUGES = {
    "hostgap_host_exposed_share": ("host_share", "Estimated host-exposed share of the decode step time."),
    "hostgap_host_exposed_share_low": ("host_share_low", "Low end of the host-exposed share's interval."),
    "hostgap_host_exposed_share_high": ("host_share_high", "High end of the host-exposed share's interval."),
    "hostgap_step_period_seconds": ("step_period_s", "Mean step period (inter-token latency) of the interval."),
    "hostgap_steps_per_second": ("steps_per_s", "Engine decode steps per second in the interval."),
    "hostgap_sequences_per_step": ("seqs_per_step", "Decode sequences per step (the decode batch)."),
    "hostgap_tokens_per_step": ("tokens_per_step", "Tokens per engine step (prefill and decode)."),
    "hostgap_prefill_share": ("prefill_share", "Prefill tokens over all tokens in the interval."),
    "hostgap_busy_share": ("busy_share", "Share of the interval the engine was stepping."),
    "hostgap_energy_joules_per_token": ("energy_j_per_token", "GPU energy (DCGM) per generated token."),
    "hostgap_energy_joules_per_request": ("energy_j_per_request", "GPU energy (DCGM) per finished request."),
    "hostgap_gpu_power_watts": ("gpu_power_w", "GPU power (DCGM energy over the interval), all GPUs summed."),
    "hostgap_step_anomaly": ("anomaly", "1 when the step period is above the calibrated model's band at the load."),
    "hostgap_expected_step_period_seconds": ("expected_period_s", "The step period the model expects at the load."),
}
STATE_GAUGES = {
    "hostgap_server_up": "1 when the last scrape of the watched server succeeded, else 0.",
    "hostgap_last_interval_timestamp_seconds": "Unix time the last interval ended.",
    "hostgap_calibration_age_seconds": "Seconds since the calibration in use was taken (NaN: none).",
    "hostgap_calibration_stale": "1 while the estimate needs a calibration that is missing, old or out of range.",
}
BASIS_INFO = "hostgap_host_exposed_share_basis_info"
INTERVALS = "hostgap_intervals"
EXPORTED = (*GAUGES, *STATE_GAUGES, BASIS_INFO, INTERVALS + "_total")
"""Every metric name a scrape of the exporter can show (counters with their ``_total``)."""


def engine_labels(s: Scrape) -> dict[str, str]:
    """The labels all of the engine's step series share (``le`` and rank labels excluded), plus
    ``engine_kind`` and ``server`` (the watched server's HOST:PORT)."""
    engine = s.engine or "unknown"
    name = STEP_SERIES.get(engine, "")
    series = list(s.histograms.get(name, {})) or list(s.gauges.get(name, {}))
    common: dict[str, str] | None = None
    for labels in series:
        d = {k: v for k, v in labels if k not in RANK_LABELS}
        common = d if common is None else {k: v for k, v in common.items() if d.get(k) == v}
    out = {k: v for k, v in (common or {}).items() if k not in OWN_LABELS}
    out["engine_kind"] = engine
    out["server"] = urllib.parse.urlsplit(s.url).netloc or s.url
    return out


class Exporter:
    """The gauges of one watch, served on ``address`` (an :class:`Address` or a port on
    127.0.0.1); :meth:`update` sets them from a row and renders the text the listener serves."""

    def __init__(self, address: Address | int, labels: dict[str, str]):
        self.registry = CollectorRegistry()
        self.labels = labels
        names = sorted(labels)
        self.gauges = {name: Gauge(name, doc, names, registry=self.registry) for name, (_, doc) in GAUGES.items()}
        self.state = {name: Gauge(name, doc, names, registry=self.registry) for name, doc in STATE_GAUGES.items()}
        self.basis = Gauge(BASIS_INFO, "The basis of the estimate (1).", names + ["basis"], registry=self.registry)
        self.intervals = Counter(INTERVALS, "Intervals watched, by status.", names + ["status"], registry=self.registry)
        self._last_basis: str | None = None
        for g in self.state.values():
            g.labels(**labels).set(math.nan)
        address = address if isinstance(address, Address) else Address("127.0.0.1", address)
        self.address = address
        self.listener = Listener(address)
        self.listener.publish(self.render())

    @property
    def port(self) -> int:
        return self.listener.port

    @property
    def url(self) -> str:
        return self.address.url(self.port)

    def update(self, row: dict, calibration_age_s: float | None = None, stale: bool | None = None) -> None:
        """Set the gauges from an interval row (and the calibration's state) and publish."""
        lab = self.labels
        for name, (key, _) in GAUGES.items():
            value = row.get(key)
            self.gauges[name].labels(**lab).set(math.nan if value is None else float(value))
        self.state["hostgap_server_up"].labels(**lab).set(0.0 if row.get("status") == "no-scrape" else 1.0)
        self.state["hostgap_last_interval_timestamp_seconds"].labels(**lab).set(float(row.get("t_end") or math.nan))
        age = math.nan if calibration_age_s is None else float(calibration_age_s)
        self.state["hostgap_calibration_age_seconds"].labels(**lab).set(age)
        self.state["hostgap_calibration_stale"].labels(**lab).set(math.nan if stale is None else float(stale))
        self.intervals.labels(**lab, status=str(row.get("status"))).inc()
        basis = str(row.get("host_share_basis"))
        if basis != self._last_basis:
            if self._last_basis is not None:
                self.basis.remove(*[lab[k] for k in sorted(lab)], self._last_basis)
            self.basis.labels(**lab, basis=basis).set(1)
            self._last_basis = basis
        self.listener.publish(self.render())

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def close(self) -> None:
        self.listener.close()
