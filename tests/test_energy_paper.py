"""The energy paper's figures through the decomposition, worked by hand (docs/energy.md)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.model import energy_paper as p


def by_id() -> dict:
    return {r.id: r for r in p.rows()}


def test_implied_step_and_fixed_energy():
    r = by_id()
    assert r["e_step"].value == pytest.approx(4740 / 502)  # 9.4422 J per step of the batch
    assert r["e_step_per_request"].value == pytest.approx(4740 / 502 / 16)
    assert r["E_fixed"].value == pytest.approx(1190 - 10 * 4740 / 502)  # 1095.58 J
    assert r["E_fixed_per_request"].value == pytest.approx((1190 - 47400 / 502) / 16)
    assert r["N_even"].value == pytest.approx((1190 - 47400 / 502) / (4740 / 502))  # 116.0 tokens
    assert {r[k].status for k in ("e_step", "E_fixed", "N_even")} == {"implied"}


def test_windows_and_token_energies_agree_within_their_digits():
    r = by_id()
    assert r["window_from_token_10"].value == pytest.approx(1193.6)  # 7.46 x 16 x 10
    assert r["window_from_token_512"].value == pytest.approx(5898.24)  # 0.72 x 16 x 512
    assert r["window_from_token_10"].status == r["window_from_token_512"].status == "consistent"
    assert "5.8 J" in r["window_from_token_10"].how and "46 J" in r["window_from_token_512"].how
    assert r["e_step_from_tokens"].value == pytest.approx((5898.24 - 1193.6) / 502)
    assert "9.289..9.455" in r["e_step_from_tokens"].how and r["e_step_from_tokens"].status == "consistent"


def test_an_inconsistent_figure_is_said(monkeypatch):
    monkeypatch.setitem(p.WINDOW_J, 10, 1100.0)  # 93.6 J from 7.46 x 160: beyond the rounding
    r = by_id()
    assert r["window_from_token_10"].status == "inconsistent"
    assert r["e_step_from_tokens"].status == "inconsistent"  # (5930 - 1100) / 502 = 9.62 > 9.455
    assert r["window_from_token_512"].status == "consistent"


def test_power_limit_and_roofline():
    r = by_id()
    assert r["step_time_at_limit"].value == pytest.approx(4740 / 502 / 700 * 1e3)  # 13.49 ms
    kv = 2 * 16 * 8 * 64 * 2  # bytes per token: K and V, 16 layers, 8 heads of 64, bf16
    assert p.step_bytes() == pytest.approx(1.236e9 * 2 + 16 * 4096 * kv)
    assert r["step_roofline"].value == pytest.approx(p.step_bytes() / 4.8e12 * 1e3)  # 0.962 ms
    assert r["step_vs_roofline"].value == pytest.approx(r["step_time_at_limit"].value / r["step_roofline"].value)
    flops = 16 * (2 * 1.236e9 * 4096 + 2 * 16 * 4096**2 * 2048)
    assert r["prefill_floor"].value == pytest.approx(flops / 989e12 * 700)  # 127 J


def test_batch_one_window_and_bound():
    r = by_id()
    assert r["window_b1_ctx4k"].value == pytest.approx(87.282)  # 7.46 x 1.17 x 10
    fixed16 = 1190 - 47400 / 502
    assert r["e_step_b1_bound"].value == pytest.approx((87.282 - fixed16 / 16) / 10)
    assert "5.0x" in r["e_step_b1_bound"].how and "1.8x" in r["e_step_b1_bound"].how
    assert p.step_bytes(batch=1) == pytest.approx(1.236e9 * 2 + 4096 * 2 * 16 * 8 * 64 * 2)


def test_what_is_not_reproducible_is_said():
    r = by_id()
    assert r["ctx512_energies"].value is None and r["ctx512_energies"].status == "not reproducible"
    assert r["counter_scope"].status == "not reproducible"


def test_regimes_published_shows_them():
    out = CliRunner().invoke(cli, ["regimes", "--published", "--json"])
    assert out.exit_code == 0, out.output
    rows = {x["id"]: x for x in json.loads(out.output)["energy"]["rows"]}
    assert rows["e_step"]["value"] == pytest.approx(4740 / 502)
    text = CliRunner().invoke(cli, ["regimes", "--published"]).output
    assert "e_step: energy per decode step of the batch\n  9.442 J (implied)" in text
