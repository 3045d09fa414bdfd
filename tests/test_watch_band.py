"""The anomaly band fitted on a server's fault-free watched intervals (docs/watch.md,
"Anomalies"): the fit, the band's top and the verdict by hand, and where the band comes from."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from tests.test_watch_anomaly import CAL, stats

from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.server.watch.anomaly import BAND_MIN_INTERVALS, BAND_QUANTILE, Band, fit_band, judge
from hostgap.server.watch.calibration import load_band


def rows(n: int = 40, a: float = 0.1, b: float = 0.2, c: float = 0.5, noise=None) -> list[dict]:
    """Watch rows whose ln(period / expected) = a + b ln(batch) + c prefill share + noise."""
    out = []
    for i in range(n):
        batch, share = 1.0 + i % 8, (i % 5) / 10
        e = 0.0 if noise is None else noise[i]
        expected = 0.01 * batch
        out.append(
            {
                "status": "ok",
                "seqs_per_step": batch,
                "prefill_share": share,
                "expected_period_s": expected,
                "step_period_s": expected * math.exp(a + b * math.log(batch) + c * share + e),
            }
        )
    return out


def test_the_fit_recovers_the_line_and_takes_the_residuals_quantile():
    noise = np.linspace(-0.05, 0.05, 40)
    np.random.default_rng(3).shuffle(noise)
    band = fit_band(rows(noise=noise), "w1")
    x = np.column_stack([np.ones(40), np.log([1.0 + i % 8 for i in range(40)]), [(i % 5) / 10 for i in range(40)]])
    coef = np.linalg.lstsq(x, 0.1 + x[:, 1] * 0.2 + x[:, 2] * 0.5 + noise, rcond=None)[0]
    assert (band.intercept, band.batch_coef, band.prefill_coef) == pytest.approx(tuple(coef))
    resid = 0.1 + x[:, 1] * 0.2 + x[:, 2] * 0.5 + noise - x @ coef
    assert band.margin == pytest.approx(np.quantile(resid, BAND_QUANTILE))
    assert band.intervals == 40 and band.source == "w1" and band.batches == (1.0, 8.0)
    exact = fit_band(rows(), "w")
    assert (exact.intercept, exact.batch_coef, exact.prefill_coef) == pytest.approx((0.1, 0.2, 0.5))
    assert exact.margin == pytest.approx(0.0, abs=1e-12)


def test_the_bands_top_by_hand():
    band = Band(0.1, 0.2, 0.5, 0.05, 30, "w", (1.0, 8.0))
    # expected 10 ms at batch 4, prefill share 0.2: 10 ms x exp(0.1 + 0.2 ln 4 + 0.1 + 0.05)
    assert band.high(0.010, 4.0, 0.2) == pytest.approx(0.010 * math.exp(0.25 + 0.2 * math.log(4)))
    assert Band.from_dict(json.loads(json.dumps(band.to_dict()))) == band


def test_the_verdict_with_a_band():
    band = Band(0.0, 0.0, 0.0, math.log(1.2), 30, "w9", (1.0, 8.0))
    # batch 4, no prefill: expected 9.765625 ms (test_watch_anomaly), band top x 1.2 = 11.71875 ms
    ok = judge(stats(4, 0.0117), CAL, band)
    assert ok["anomaly"] is False and ok["expected_period_high_s"] == pytest.approx(0.01171875)
    assert ok["anomaly_basis"] == "band fitted on 30 fault-free intervals of w9"
    bad = judge(stats(4, 0.0118), CAL, band)
    assert bad["anomaly"] is True and "11.7 ms" in bad["anomaly_reason"]
    # the fixed tolerance would have let 0.0118 pass (its top: 14.6 ms); without a band, it says so
    plain = judge(stats(4, 0.0118), CAL)
    assert plain["anomaly"] is False and plain["anomaly_basis"].startswith("fixed tolerance")
    beyond = judge(stats(16, 0.030), CAL, band)
    assert "outside its batches 1.0-8.0" in beyond["anomaly_basis"]
    assert judge(stats(4, 0.02, steps=0), CAL, band)["anomaly"] is None


def test_the_band_needs_enough_good_rows():
    few = rows(BAND_MIN_INTERVALS - 1)
    with pytest.raises(HostgapError, match=f"{BAND_MIN_INTERVALS - 1} watched interval"):
        fit_band(few + [{"status": "idle"}, {"status": "ok", "step_period_s": None}], "w")
    assert fit_band(rows(BAND_MIN_INTERVALS), "w").intervals == BAND_MIN_INTERVALS
    # one batch and no prefill: those columns get no coefficient, the intercept takes the level
    flat = [dict(r, seqs_per_step=4.0, prefill_share=0.0, step_period_s=r["expected_period_s"] * 1.3) for r in rows()]
    band = fit_band(flat, "w")
    assert band.batch_coef == 0.0 and band.prefill_coef == 0.0
    assert band.intercept == pytest.approx(math.log(1.3))


def test_load_band_reads_a_stored_watch_and_refuses_the_rest(tmp_path):
    stored = {"run_id": "w-1", "kind": "watch", "watch": {"intervals": rows()}}
    d = tmp_path / "w-1"
    d.mkdir()
    (d / "results.json").write_text(json.dumps(stored))
    assert load_band(str(d)).source == "w-1"
    printed = tmp_path / "watch.json"
    printed.write_text(json.dumps({"url": "http://127.0.0.1:1/metrics", "intervals": rows()}))
    assert load_band(str(printed)).intervals == 40
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"run_id": "m", "differencing": {}}))
    with pytest.raises(HostgapError, match="no watched intervals"):
        load_band(str(other))
    with pytest.raises(HostgapError, match="without results.json"):
        load_band(str(tmp_path))
    with pytest.raises(HostgapError, match="not a file, a run directory or a run id"):
        load_band("no-such-run", str(tmp_path / "db.sqlite"))


def test_watch_band_from_bad_input_is_one_line_and_exit_2(tmp_path):
    r = CliRunner().invoke(cli, ["watch", "http://127.0.0.1:9", "--band-from", str(tmp_path / "nope.json")])
    assert r.exit_code == 2 and "nope.json" in r.stderr and "Traceback" not in r.output
    fleet = CliRunner().invoke(cli, ["watch", "--prometheus", "http://127.0.0.1:9", "--band-from", "x"])
    assert fleet.exit_code == 2


def kv_rows(n: int = 40, kv_coef: float = 0.8) -> list[dict]:
    """rows() with a KV cache share per row, ln(period / expected) growing kv_coef per unit of it."""
    out = rows(n)
    for i, r in enumerate(out):
        kv = (i % 7) / 10
        r["kv_cache_usage"] = kv
        r["step_period_s"] *= math.exp(kv_coef * kv)
    return out


def test_the_fit_takes_the_context_the_kv_cache_carries():
    band = fit_band(kv_rows(), "w")
    assert (band.intercept, band.batch_coef, band.prefill_coef, band.kv_coef) == pytest.approx((0.1, 0.2, 0.5, 0.8))
    assert band.margin == pytest.approx(0.0, abs=1e-12)
    assert band.kv_mean == pytest.approx(np.mean([(i % 7) / 10 for i in range(40)]))
    # rows without the KV share: none fitted, as before
    plain = fit_band(rows(), "w")
    assert plain.kv_coef == 0.0 and plain.kv_mean == 0.0
    # one row without it is read at the others' mean: the line still fits the rest
    some = kv_rows()
    some[0].pop("kv_cache_usage")
    part = fit_band(some, "w")
    assert part.kv_mean == pytest.approx(np.mean([(i % 7) / 10 for i in range(1, 40)]))
    assert part.kv_coef == pytest.approx(0.8, abs=0.05)


def test_the_bands_top_with_the_kv_share():
    band = Band(0.1, 0.2, 0.5, 0.05, 30, "w", (1.0, 8.0), kv_coef=0.8, kv_mean=0.3)
    base = 0.010 * math.exp(0.25 + 0.2 * math.log(4))
    assert band.high(0.010, 4.0, 0.2, 0.5) == pytest.approx(base * math.exp(0.8 * 0.5))
    assert band.high(0.010, 4.0, 0.2) == pytest.approx(base * math.exp(0.8 * 0.3))  # unknown: the mean
    assert Band.from_dict(json.loads(json.dumps(band.to_dict()))) == band
    old = {k: v for k, v in band.to_dict().items() if k not in ("kv_coef", "kv_mean")}
    assert Band.from_dict(old).kv_coef == 0.0  # a band stored before the KV term
    # the verdict reads the interval's KV share: 0.5 allows exp(0.8 x 0.5) more than 0
    s = stats(4, 0.0150)
    at_half = judge(dataclasses.replace(s, kv_cache_usage=0.5), CAL, band)
    at_zero = judge(dataclasses.replace(s, kv_cache_usage=0.0), CAL, band)
    assert at_half["expected_period_high_s"] == pytest.approx(at_zero["expected_period_high_s"] * math.exp(0.4))
    assert at_zero["anomaly"] is True and at_half["anomaly"] is False
