"""A step's energy shared by its requests' latency shares, pinned by hand (docs/energy.md)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.model.attribution import energy_shares, explain_energy


def test_latency_shares_by_hand():
    r = energy_shares([1e6, 3e6], [1e6, 1e6], 6.0)  # shares 2 ms and 4 ms of a 6 ms step
    assert r["energy_j"].tolist() == [2.0, 4.0]
    assert r["device_j"].tolist() == [1.0, 3.0] and r["host_j"].tolist() == [1.0, 1.0]
    assert r["basis"] == "latency shares (device and host parts at one power)"


def test_parts_weighted_by_their_power():
    # weights 300 x 1 + 100 x 1 = 400 and 300 x 3 + 100 x 1 = 1000 (of 1400)
    r = energy_shares([1e6, 3e6], [1e6, 1e6], 7.0, device_w=300.0, host_w=100.0)
    assert r["energy_j"] == pytest.approx([2.0, 5.0])
    assert r["device_j"] == pytest.approx([1.5, 4.5]) and r["host_j"] == pytest.approx([0.5, 0.5])
    assert r["basis"] == "latency shares, device parts at 300 W and host parts at 100 W"
    same = energy_shares([1e6, 3e6], [1e6, 1e6], 7.0, device_w=50.0, host_w=50.0)  # one power: latency shares
    assert same["energy_j"] == pytest.approx([7 * 2 / 6, 7 * 4 / 6])


def test_shares_add_up_to_the_step():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        d, h, e = rng.random(n) * 1e6, rng.random(n) * 1e6, float(rng.random() * 50)
        r = energy_shares(d, h, e, 250.0, 60.0)
        assert float(np.sum(r["energy_j"])) == pytest.approx(e, rel=1e-12)
        assert r["device_j"] + r["host_j"] == pytest.approx(r["energy_j"], rel=1e-12)
        assert (r["energy_j"] >= 0).all()


def test_unknown_host_parts():
    r = energy_shares([1e6, 3e6], [np.nan, np.nan], 4.0)  # no host fraction: shares by device time
    assert r["energy_j"].tolist() == [1.0, 3.0]
    assert np.isnan(r["device_j"]).all() and np.isnan(r["host_j"]).all()
    with pytest.raises(HostgapError, match="host parts are unknown"):
        energy_shares([1e6], [np.nan], 1.0, 100.0, 50.0)


@pytest.mark.parametrize(
    "args, match",
    [
        (([1e6], [1e6], -1.0), "not an energy"),
        (([1e6], [1e6], float("nan")), "not an energy"),
        (([1e6], [1e6], 1.0, 100.0, None), "needs both"),
        (([1e6], [1e6], 1.0, None, 100.0), "needs both"),
        (([1e6], [1e6], 1.0, 0.0, 100.0), "not a power"),
        (([1e6], [1e6], 1.0, 100.0, float("inf")), "not a power"),
        (([], [], 1.0), "no request"),
        (([0.0], [0.0], 1.0), "no time"),
    ],
)
def test_bad_input_is_one_line(args, match):
    with pytest.raises(HostgapError, match=match):
        energy_shares(*args)


def test_explain_energy_rows():
    sh = SimpleNamespace(device_ns=np.array([1e6, 3e6]), host_ns=np.array([1e6, np.nan]), request=np.array([7, 8]))
    b = explain_energy(sh, 6.0)
    assert b["step_j"] == 6.0 and b["device_w"] is None
    assert b["requests"] == [
        # weights 1 + 1 and 3 (the unknown host part charged nothing): 2/5 and 3/5 of 6 J
        {"request": "7", "energy_j": pytest.approx(2.4), "device_j": pytest.approx(1.2), "host_j": pytest.approx(1.2)},
        {"request": "8", "energy_j": pytest.approx(3.6), "device_j": None, "host_j": None},
    ]


def test_explain_command(tmp_path):
    steps, model = tmp_path / "s.parquet", tmp_path / "m.json"
    run = CliRunner()
    assert run.invoke(cli, ["attribute", "synth", str(steps), "-q"]).exit_code == 0
    assert run.invoke(cli, ["attribute", "fit", str(steps), "-o", str(model), "-q"]).exit_code == 0
    base = ["attribute", "explain", str(model), str(steps), "--step", "7", "--step-energy", "9.44"]
    out = run.invoke(cli, [*base, "--device-power", "400", "--host-power", "150", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    e = doc["energy"]
    assert sum(r["energy_j"] for r in e["requests"]) == pytest.approx(9.44, rel=1e-12)
    w = [400 * r["device_ns"] + 150 * r["host_ns"] for r in doc["requests_shares"]]
    for row, wi in zip(doc["requests_shares"], w):
        assert row["energy_j"] == pytest.approx(9.44 * wi / sum(w))
    text = run.invoke(cli, base).output
    assert "step energy 9.44 J shared by latency shares (device and host parts at one power)" in text
    bad = run.invoke(cli, ["attribute", "explain", str(model), str(steps), "--step", "7", "--host-power", "5"])
    assert bad.exit_code == 2 and "give it with --step-energy" in bad.output
