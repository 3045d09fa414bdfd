"""Energy per interval from DCGM exporter's energy counter, beside the engine's token counters
(docs/energy.md, docs/watch.md).

When the scraped URL (a Prometheus federating both, or one endpoint serving both) exports
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since boot, one counter per GPU, labels
``gpu``, ``UUID``, ``Hostname``, ...), each interval's energy is its increase summed over the
GPUs in both scrapes (a GPU that appears or leaves is left out of that interval, as every
series is by :func:`hostgap.server.metrics.delta`), and:

- ``energy_j``: that energy (J); ``gpu_power_w``: energy / interval (W);
- ``energy_j_per_token``: energy / the generated (decode) tokens of the interval;
- ``energy_j_per_request``: energy / the requests that finished in the interval (the count of
  the engine's ``e2e_request_latency_seconds`` histogram): a request spans intervals, so this is
  the interval's energy per completion, the average per request over a steady stretch.

Nothing is shown (None) over an interval with a counter reset (the row says so), and per token
or per request where the interval had none. Without the counter every field is None. All GPUs
the counter reports are summed: a node whose GPUs serve several engines charges them all here
(``energy_gpus`` says how many were summed).
"""

from __future__ import annotations

from hostgap.server.metrics import Delta

DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
E2E = {"vllm": "vllm:e2e_request_latency_seconds", "sglang": "sglang:e2e_request_latency_seconds"}
FIELDS = ("energy_j", "gpu_power_w", "energy_j_per_token", "energy_j_per_request", "energy_gpus")


def energy_fields(d: Delta, engine: str | None, decode_tokens: float | None) -> dict:
    """The energy fields of one interval row (module doc)."""
    out: dict = dict.fromkeys(FIELDS)
    # prometheus_client's parser names a counter's samples ``<family>_total``; DCGM writes none
    name = next((n for n in (DCGM_ENERGY + "_total", DCGM_ENERGY) if n in d.counters), DCGM_ENERGY)
    mj = d.counter(name)
    if mj is None or d.reset:
        return out
    j = mj / 1000.0
    out["energy_gpus"] = len(d.counters.get(name, {}))
    out["energy_j"] = j
    out["gpu_power_w"] = j / d.interval_s if d.interval_s > 0 else None
    out["energy_j_per_token"] = j / decode_tokens if decode_tokens else None
    done = d.histogram(E2E[engine]) if engine in E2E else None
    out["energy_j_per_request"] = j / done.count if done is not None and done.count > 0 else None
    return out
