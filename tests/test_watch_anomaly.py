"""Anomalies told apart from load (hostgap.server.watch.anomaly), on synthetic intervals worked
by hand. Calibration cal-a: GPU 1/256 + B/1024 s, host 1/512 s, block error 0.25, batches 2..8;
the band's top is expected × (1 + 0.25 + extrapolation + 0.25)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostgap.server.metrics import StepStats
from hostgap.server.watch.anomaly import HOST_TOLERANCE, expected_period, judge
from hostgap.server.watch.estimate import Calibration

CAL = Calibration.from_dict(
    json.loads((Path(__file__).parent / "data" / "fleet" / "cal-a.json").read_text())["calibration"]
)


def stats(batch: float, period: float, prefill_per_step: float = 0.0, steps: float = 1000.0) -> StepStats:
    return StepStats(
        "vllm", 60.0, steps, steps / 60, batch + prefill_per_step, batch, period, None, "mean", 1.0,
        prefill_per_step * steps, batch * steps, None, None, None,
    )  # fmt: skip


def test_the_expected_period_and_its_band_by_hand():
    # batch 4, no prefill: 1/256 + 4/1024 + 1/512 = 0.009765625; top × 1.5
    assert expected_period(CAL, 4, 0) == (0.009765625, 0.0146484375)
    # 4 prefill tokens per step add 4 × 1/1024
    assert expected_period(CAL, 4, 4) == (0.013671875, 0.0205078125)
    # batch 16 (beyond 8): extrapolation 8/16 widens the band to × 2
    assert expected_period(CAL, 16, 0) == (0.021484375, 0.04296875)
    assert HOST_TOLERANCE == 0.25


def test_load_up_is_not_an_anomaly():
    # 1 → 4 → 16 sequences and prefill: each slower period within the band the load allows
    for batch, period, prefill in ((1, 0.0078, 0), (4, 0.0140, 0), (4, 0.0200, 4), (16, 0.0420, 0)):
        row = judge(stats(batch, period, prefill), CAL)
        assert row["anomaly"] is False and row["anomaly_reason"] is None, (batch, period, prefill)


def test_the_same_load_with_slower_steps_is_an_anomaly():
    row = judge(stats(4, 0.0150), CAL)  # above 0.0146484375
    assert row["anomaly"] is True
    assert row["expected_period_s"] == 0.009765625 and row["expected_period_high_s"] == 0.0146484375
    assert "15 ms above the 14.6 ms" in row["anomaly_reason"] and "batch 4.0" in row["anomaly_reason"]
    assert "with 0 prefill tokens per step (expected 9.77 ms)" in row["anomaly_reason"]
    # with prefill the same period is load
    assert judge(stats(4, 0.0150, prefill_per_step=4), CAL)["anomaly"] is False


@pytest.mark.parametrize(
    "s",
    [
        stats(4, 0.02, steps=0),
        StepStats("vllm", 60.0, 10.0, 1.0, None, None, 0.02, None, "m", 1.0, 0, None, None, None, None),
    ],
)
def test_no_model_no_verdict(s):
    assert judge(s, CAL) == dict.fromkeys(
        ("anomaly", "anomaly_reason", "expected_period_s", "expected_period_high_s", "anomaly_basis")
    )
    assert judge(stats(4, 0.02), None)["anomaly"] is None


def test_an_interval_without_a_prefill_count_is_judged_without_prefill():
    # vLLM without vllm:prompt_tokens_total: no prefill allowance, the decode model alone
    s = StepStats("vllm", 60.0, 1000.0, 16.7, 4.0, 4.0, 0.0150, None, "m", 1.0, None, 4000.0, None, None, None)
    row = judge(s, CAL)
    assert row["expected_period_s"] == 0.009765625 and row["anomaly"] is True
