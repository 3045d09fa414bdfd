"""The results' energy block from raw timings (domains, their sum, no counter) and its words."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hostgap.capture.protocol.energy_run import energy_results, raw_energy
from hostgap.energy.counters import Domain, Meter
from hostgap.report.energy_view import energy_html, energy_lines, energy_rows

NS = [1, 4, 7, 10]
CFG = SimpleNamespace(n1=1, n2=10, batch=2, estimator="theil-sen")
DIFF = SimpleNamespace(t_step_ns=1e8, ci={"t_step_ns": [0.9e8, 1.1e8]})


def raw(per_domain: dict, in_total: list[str], sources: dict) -> dict:
    reps = 5
    return {
        "untraced_wall_ns": {str(n): [int((1 + 0.1 * n) * 1e9)] * reps for n in NS},
        "untraced_rounds": {str(n): list(range(reps)) for n in NS},
        "untraced_seq": {str(n): [i * len(NS) + k for i in range(reps)] for k, n in enumerate(NS)},
        "energy_meter": {
            "available": True,
            "reason": None,
            "left_out": ["gpu1: NVML total energy not supported (Not Supported)"],
            "domains": {d: {"source": sources[d], "unit": "uj", "max_range": None} for d in per_domain},
            "in_total": in_total,
            "events": {"package-0": {"wrap": 2}},
        },
        "untraced_energy_uj": {
            d: {str(n): [int((f + n * s) * 1e6)] * reps for n in NS} for d, (f, s) in per_domain.items()
        },
    }


def test_domains_and_their_sum():
    r = raw(
        {"package-0": (2.0, 0.5), "gpu0": (10.0, 3.0), "psys": (50.0, 9.0)},
        ["package-0", "gpu0"],
        {"package-0": "powercap", "gpu0": "nvml", "psys": "powercap"},
    )
    e = energy_results(r, CFG, DIFF)
    assert e["available"] and e["source"] == "nvml+powercap" and e["of"] == ["package-0", "gpu0"]
    assert e["step_j"] == pytest.approx(3.5) and e["fixed_j"] == pytest.approx(12.0)  # psys not added
    assert e["request_j"] == pytest.approx((12 + 35) / 2) and e["token_j"] == pytest.approx(47 / 20)
    assert e["step_power_w"] == pytest.approx(35.0)  # 3.5 J over 0.1 s
    assert e["domains"]["gpu0"]["step_j"] == pytest.approx(3.0) and e["domains"]["gpu0"]["source"] == "nvml"
    assert e["domains"]["psys"]["step_j"] == pytest.approx(9.0)
    assert e["counter_events"] == {"package-0": {"wrap": 2}}
    assert e["left_out"] == ["gpu1: NVML total energy not supported (Not Supported)"]
    assert (e["at_tokens"], e["batch"]) == (10, 2)


def test_one_domain_is_the_headline_and_a_missing_run_leaves_the_sum():
    r = raw(
        {"package-0": (2.0, 0.5), "package-0:dram": (1.0, 0.25)},
        ["package-0", "package-0:dram"],
        {"package-0": "powercap", "package-0:dram": "powercap"},
    )
    r["untraced_energy_uj"]["package-0:dram"]["4"][0] = None
    e = energy_results(r, CFG, DIFF)
    assert e["source"] == "powercap" and e["step_j"] == pytest.approx(0.75)
    assert e["runs_left_out"] == 1 and e["domains"]["package-0"]["runs_left_out"] == 0
    single = raw({"gpu0": (10.0, 3.0)}, ["gpu0"], {"gpu0": "nvml"})
    e = energy_results(single, CFG, DIFF)
    assert e["of"] == ["gpu0"] and e["source"] == "nvml" and e["step_j"] == pytest.approx(3.0)


def test_no_counter_no_number():
    assert energy_results({"untraced_wall_ns": {}}, CFG, DIFF) == {
        "available": False,
        "reason": "no energy counter was read",
    }
    m = Meter((), "no energy counter: no powercap at /x; NVML not asked for")
    e = energy_results({**raw_energy(m, {}), "untraced_wall_ns": {}}, CFG, DIFF)
    assert e == {"available": False, "reason": "no energy counter: no powercap at /x; NVML not asked for"}
    assert energy_lines(e) == ["energy: not measured (no energy counter: no powercap at /x; NVML not asked for)"]
    assert energy_rows(e) == [] and energy_lines(None) == [] and energy_html(None) == ""
    assert "not measured" in energy_html(e) and "J" not in energy_html(e).replace("NVML", "")


def test_raw_energy_aligns_with_the_runs():
    d = Domain("package-0", "powercap", "uj", 1000, lambda: 1)
    m = Meter((d,))
    out = raw_energy(m, {1: [{"package-0": 5}, {"package-0": None}], 4: [{"package-0": 9}]})
    assert out["untraced_energy_uj"] == {"package-0": {"1": [5, None], "4": [9]}}
    assert out["energy_meter"]["domains"] == {"package-0": {"source": "powercap", "unit": "uj", "max_range": 1000}}


def test_the_words():
    r = raw({"package-0": (2.0, 0.5)}, ["package-0"], {"package-0": "powercap"})
    e = energy_results(r, CFG, DIFF)
    lines = energy_lines(e)
    assert lines[0] == "energy (powercap: package-0; request and token at N=10, batch 2; 95 % intervals):"
    assert lines[1] == "  energy per decode step: 0.5 J [0.5, 0.5]"
    assert (
        "  energy per request: 3.5 J [3.5, 3.5]" in lines and "  energy per output token: 0.35 J [0.35, 0.35]" in lines
    )
    assert lines[-1].startswith("  counters: package-0: wrap ×2")
    html = energy_html(e)
    assert "<td>energy per decode step</td><td>0.5 J</td><td>[0.5, 0.5]</td>" in html and "wrap ×2" in html
    e["fixed_j"] = None
    assert not any(label.startswith("fixed") for label, _v, _i in energy_rows(e))


def test_runs_rows_carry_the_energy_columns():
    from hostgap.store.database import RunsDB

    db = RunsDB(":memory:")
    e = {"available": True, "source": "nvml", "step_j": 9.44, "fixed_j": 1096.0, "request_j": 370.0}
    e |= {"token_j": 0.72, "power_w": 410.0}
    db.add({"run_id": "a", "created": "2026-12-07T01:00:00Z", "batch": 16, "prompt_len": 4096, "n2": 512, "energy": e})
    db.add({"run_id": "b", "created": "2026-12-07T00:00:00Z", "energy": {"available": False, "reason": "none"}})
    a, b = db.rows()
    assert (a["batch"], a["prompt_len"], a["n2"]) == (16, 4096, 512)
    assert [a[k] for k in ("energy_step_j", "energy_fixed_j", "energy_request_j", "energy_token_j")] == [
        9.44,
        1096.0,
        370.0,
        0.72,
    ]
    assert a["energy_power_w"] == 410.0 and a["energy_source"] == "nvml"
    assert all(b[k] is None for k in b if k.startswith("energy_"))


def test_no_run_read_no_number():
    r = raw({"package-0": (2.0, 0.5)}, ["package-0"], {"package-0": "powercap"})
    r["untraced_energy_uj"]["package-0"] = {n: [None] * len(v) for n, v in r["untraced_energy_uj"]["package-0"].items()}
    e = energy_results(r, CFG, DIFF)
    assert e["available"] is False and e["reason"] == "too few runs with an energy reading at two token counts"
    assert set(e) == {"available", "reason", "domains"} and e["domains"]["package-0"]["available"] is False
    assert energy_lines(e) == ["energy: not measured (too few runs with an energy reading at two token counts)"]


def test_step_power_needs_the_walls_interval():
    r = raw({"package-0": (2.0, 0.5)}, ["package-0"], {"package-0": "powercap"})
    e = energy_results(r, CFG, SimpleNamespace(t_step_ns=1e8, ci={"t_step_ns": None}))
    assert e["step_j"] == pytest.approx(0.5) and e["step_power_w"] is None


def test_nvml_only_for_a_cuda_workload(tmp_path, monkeypatch):
    import sys

    from hostgap.capture.protocol.energy_run import meter_for

    monkeypatch.setenv("HOSTGAP_POWERCAP_ROOT", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert meter_for(SimpleNamespace(device="cpu")).reason.endswith("NVML not asked for")
    assert meter_for(SimpleNamespace(device="cuda")).reason.endswith(
        "NVML not installed (pip install 'hostgap[energy]')"
    )
