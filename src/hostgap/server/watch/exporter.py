"""``watch --serve PORT``: hostgap's per-interval estimate as Prometheus gauges on 127.0.0.1.

Gauges (one series per watched server, labelled with the labels every one of the engine's
step series carries, e.g. vLLM's ``model_name`` and ``engine``, SGLang's ``model_name``, plus
``server`` = ``vllm``/``sglang``):

- ``hostgap_host_exposed_share`` (with ``_low`` and ``_high``, the estimate's interval) and
  ``hostgap_host_exposed_share_basis_info`` (1, with the basis as a label);
- ``hostgap_step_period_seconds``, ``hostgap_steps_per_second``, ``hostgap_sequences_per_step``.

A value the last interval could not give is NaN (Prometheus' "no value"), so a Grafana panel
shows a gap rather than a stale number.
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from hostgap.errors import HostgapError
from hostgap.server.metrics import Scrape

STEP_SERIES = {"vllm": "vllm:inter_token_latency_seconds", "sglang": "sglang:num_running_reqs"}
GAUGES = {
    "hostgap_host_exposed_share": ("host_share", "Estimated host-exposed share of the decode step time."),
    "hostgap_host_exposed_share_low": ("host_share_low", "Low end of the host-exposed share's interval."),
    "hostgap_host_exposed_share_high": ("host_share_high", "High end of the host-exposed share's interval."),
    "hostgap_step_period_seconds": ("step_period_s", "Mean step period (inter-token latency) of the interval."),
    "hostgap_steps_per_second": ("steps_per_s", "Engine decode steps per second in the interval."),
    "hostgap_sequences_per_step": ("seqs_per_step", "Decode sequences per step (the decode batch)."),
}


def engine_labels(s: Scrape) -> dict[str, str]:
    """The labels all of the engine's step series share (``le`` and rank labels excluded)."""
    engine = s.engine or "unknown"
    name = STEP_SERIES.get(engine, "")
    series = list(s.histograms.get(name, {})) or list(s.gauges.get(name, {}))
    common: dict[str, str] | None = None
    for labels in series:
        d = {k: v for k, v in labels if k not in ("tp_rank", "pp_rank", "dp_rank", "moe_ep_rank")}
        common = d if common is None else {k: v for k, v in common.items() if d.get(k) == v}
    out = {k: v for k, v in (common or {}).items() if k != "server"}
    out["server"] = engine
    return out


class Exporter:
    """A 127.0.0.1 HTTP server with hostgap's gauges; :meth:`update` sets them from a row."""

    def __init__(self, port: int, labels: dict[str, str]):
        self.registry = CollectorRegistry()
        self.labels = labels
        names = sorted(labels)
        self.gauges = {name: Gauge(name, doc, names, registry=self.registry) for name, (_, doc) in GAUGES.items()}
        self.basis = Gauge(
            "hostgap_host_exposed_share_basis_info",
            "The basis of the estimate (1).",
            names + ["basis"],
            registry=self.registry,
        )
        self._last_basis: str | None = None
        try:
            self.server: Any
            self.server, self.thread = start_http_server(port, addr="127.0.0.1", registry=self.registry)
        except OSError as exc:
            raise HostgapError("--serve", f"cannot listen on 127.0.0.1:{port} ({exc.strerror or exc})") from None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def update(self, row: dict) -> None:
        for name, (key, _) in GAUGES.items():
            value = row.get(key)
            self.gauges[name].labels(**self.labels).set(math.nan if value is None else float(value))
        basis = str(row.get("host_share_basis"))
        if basis != self._last_basis:
            if self._last_basis is not None:
                self.basis.remove(*[self.labels[k] for k in sorted(self.labels)], self._last_basis)
            self.basis.labels(**self.labels, basis=basis).set(1)
            self._last_basis = basis

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
