"""Validity, contention, agreement and the one-basis CPU split, on constructed inputs whose
answers are worked out by hand."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner

from hostgap.capture.protocol import validity as v
from hostgap.stats.differencing import (
    Series,
    Slope,
    complement,
    difference,
    linear_enough,
    linear_fit,
    mover_difference,
    mover_product,
    mover_ratio,
    theil_sen,
)

NS = [1, 13, 23, 41, 72, 128]


def _good() -> dict:
    return {
        "t_step_ns": 1e6,
        "g_step_ns": 4e5,
        "h_step_ns": 6e5,
        "host_fraction": 0.6,
        "fit_wall": {"r2": 0.9999, "max_residual": 0.01},
        "fit_gpu": {"r2": 0.999, "max_residual": 0.02},
        "profiler_inflation": 0.5,
    }


def test_linear_fit_constant_input_has_r2_one():
    f = linear_fit([1, 2, 3, 4], [7.0, 7.0, 7.0, 7.0])
    assert f.r2 == 1.0 and f.slope == 0.0 and f.max_residual == 0.0


def test_one_outlier_at_n2_fails_the_linearity_check():
    y = [5e6 + 0.8e6 * n for n in NS]
    clean = linear_fit(NS, y)
    assert linear_enough(clean) and clean.max_residual < 1e-9
    y[-1] *= 1.20
    bad = linear_fit(NS, y)
    assert bad.r2 > 0.98  # R² alone would let it pass
    # the robust line goes through the other five points: N2 sits 20 % above it
    assert bad.max_residual == pytest.approx(0.20, rel=1e-6)
    assert not linear_enough(bad)
    assert not linear_enough(linear_fit(NS, [n**3 for n in NS]))
    # +20 % on the shortest run (5.8 ms of a line reaching 107.4 ms) is 1.1 % of the line's
    # value at N2: ordinary jitter of a short run, not a bent line
    y = [5e6 + 0.8e6 * n for n in NS]
    y[0] *= 1.20
    short = linear_fit(NS, y)
    assert short.max_residual == pytest.approx(0.2 * 5.8e6 / 107.4e6, rel=1e-6) and linear_enough(short)
    assert linear_enough(None)


def test_theil_sen_exact_line_and_interval():
    s = theil_sen({n: [10 + 3 * n] * 3 for n in NS})
    assert (s.value, s.lo, s.hi) == (3.0, 3.0, 3.0)
    assert theil_sen({5: [1, 2]}) is None
    # slopes between {0: [0], 1: [1], 2: [4]} are 1, 2, 3: median 2, interval within [1, 3]
    s = theil_sen({0: [0.0], 1: [1.0], 2: [4.0]})
    assert s.value == 2.0 and 1.0 <= s.lo <= 2.0 <= s.hi <= 3.0


def test_mover_combinations_by_hand():
    a, b = Slope(10.0, 7.0, 14.0), Slope(4.0, 3.0, 6.0)
    d = mover_difference(a, b)
    assert d.value == 6.0
    assert d.lo == pytest.approx(6 - math.hypot(3, 2)) and d.hi == pytest.approx(6 + math.hypot(4, 1))
    p = mover_product(a, b)
    assert p.value == 40.0
    assert p.lo == pytest.approx(40 * math.exp(-math.hypot(math.log(10 / 7), math.log(4 / 3))))
    assert p.hi == pytest.approx(40 * math.exp(math.hypot(math.log(1.4), math.log(1.5))))
    r = mover_ratio(b, a)
    assert r.value == pytest.approx(0.4)
    assert r.lo == pytest.approx(0.4 * math.exp(-math.hypot(math.log(4 / 3), math.log(14 / 10))))
    assert mover_product(Slope(1, -1, 2), b) is None and mover_ratio(b, Slope(1, 0, 2)) is None
    c = complement(Slope(0.3, 0.2, 0.45))
    assert (c.value, c.lo, c.hi) == pytest.approx((0.7, 0.55, 0.8))


def _cpu_series(t, inflation, share, base=5e6):
    tt = t * (1 + inflation)
    return Series(
        wall_ns={n: [base + t * n] * 5 for n in NS},
        traced_wall_ns={n: [base * 2 + tt * n] * 2 for n in NS},
        busy_ns={n: [base + share * tt * n] * 2 for n in NS},
        kernel_sum_ns={n: [share * tt * n] for n in NS},
        kernel_union_ns={n: [share * tt * n] for n in NS},
        kernel_count={n: [100 * n] for n in NS},
    )


def test_cpu_split_applies_the_traced_share_to_the_untraced_wall():
    # 0.77 ms untraced step, profiler +209 %: traced compute slope 1.855 ms/step exceeds the
    # untraced wall, but its share of the traced step (0.6) is what the untraced step gets
    s = _cpu_series(0.77e6, 2.09, 1.855e6 / (0.77e6 * 3.09))
    d = difference(s, 1, 128, activity="cpu-compute")
    assert d.traced_g_step_ns == pytest.approx(1.855e6)
    share = 1.855 / (0.77 * 3.09)
    assert d.compute_share == pytest.approx(share)
    assert d.g_step_ns == pytest.approx(0.77e6 * share)
    assert d.h_step_ns == pytest.approx(0.77e6 * (1 - share))
    assert d.host_fraction == pytest.approx(1 - share)
    assert d.basis == "traced-share x untraced-wall"
    assert d.ci["compute_share"] == pytest.approx([share, share])
    # the old mixed basis (traced compute over untraced wall) would have given -141 %
    assert 1 - d.traced_g_step_ns / d.t_step_ns == pytest.approx(1 - 1.855 / 0.77)


def test_gpu_split_uses_the_traced_device_time():
    s = _cpu_series(1e6, 0.05, 0.3)
    d = difference(s, 1, 128, activity="gpu")
    assert d.g_step_ns == pytest.approx(0.3 * 1.05e6) and d.compute_share is None
    assert d.h_step_ns == pytest.approx(1e6 - 0.315e6)


def test_reasons_one_per_broken_rule():
    assert v.reasons(_good()) == []
    cases = {
        "host fraction outside [0, 1]": {"host_fraction": -1.41},
        "negative host-exposed time": {"h_step_ns": -1.0},
        "device-active above wall": {"g_step_ns": 2e6},
        "wall not linear in N (R² 0.9800 < 0.99)": {"fit_wall": {"r2": 0.98, "max_residual": 0.0}},
        "device time: one N lies 20% off the line (limit 10%)": {"fit_gpu": {"r2": 0.995, "max_residual": 0.2}},
        "profiler inflation +400% above +300%": {"profiler_inflation": 4.0},
        "wall per step is not positive": {"t_step_ns": 0.0, "g_step_ns": 0.0, "h_step_ns": 0.0},
    }
    for want, change in cases.items():
        assert want in v.reasons({**_good(), **change}), want
    busy = {"contended": True, "flags": ["90% of untraced runs preempted (limit 50%)"]}
    assert v.reasons(_good(), busy) == ["machine busy: 90% of untraced runs preempted (limit 50%)"]
    assert v.reasons(_good(), {"contended": False, "flags": []}) == []


def test_contention_flags():
    walls = {1: [100, 100, 100, 100], 8: [800, 800, 800, 800]}
    quiet = {1: [99, 99, 99, 99], 8: [790, 790, 790, 790]}
    c = v.contention((walls, quiet))
    assert not c["contended"] and c["preempted_share"] == 0 and c["repeat_spread"] == 0
    # 3 of 8 runs preempted: under the 50 % limit
    some = {1: [80, 99, 99, 99], 8: [700, 700, 790, 790]}
    assert v.contention((walls, some))["preempted_share"] == pytest.approx(3 / 8)
    assert not v.contention((walls, some))["contended"]
    most = {1: [80, 80, 80, 99], 8: [700, 700, 790, 790]}
    c = v.contention((walls, most), (walls, quiet))
    assert c["contended"] and c["preempted_share"] == pytest.approx(5 / 8)
    assert c["flags"] == ["62% of untraced runs preempted (limit 50%)"]
    assert v.contention((walls, quiet), (walls, most))["flags"][0].endswith("of traced runs preempted (limit 50%)")
    # spread: IQR / median per N; 100, 100, 130, 130 -> quartiles 100 and 130 (linear
    # interpolation at positions 0.75 and 2.25), IQR 30 / median 115
    spread = {1: [100, 100, 130, 130], 8: [800, 800, 1040, 1040]}
    c = v.contention((spread, {}))
    assert c["repeat_spread"] == pytest.approx(30 / 115) and c["contended"]
    assert not v.contention(({1: [100, 101, 102, 103, 104]}, {}))["contended"]
    assert c["preempted_share"] is None  # no thread times: not judged


def test_contention_of_an_engine_in_other_processes():
    """No thread times (vLLM: the decode runs in other processes): a run counts as disturbed
    when other processes used more than 5 % of its wall in CPU time; 5 of 8 here (6 > 5 is
    over, 5 is not)."""
    walls = {1: [100, 100, 100, 100], 8: [800, 800, 800, 800]}
    other = {1: [6, 6, 6, 5], 8: [41, 41, 0, 40]}
    c = v.contention((walls, {}), other=other)
    assert c["preempted_basis"] == "other-cpu" and c["preempted_share"] == pytest.approx(5 / 8)
    assert c["flags"] == ["62% of untraced runs beside other work over 5 % of their wall (limit 50%)"]
    assert v.contention((walls, {}), other={1: [0] * 4, 8: [0] * 4})["contended"] is False
    # a missing figure for any run: not judged; thread times, where present, come first
    assert v.contention((walls, {}), other={1: [0] * 4, 8: [0, 0, None, 0]})["preempted_share"] is None
    quiet = {1: [99] * 4, 8: [790] * 4}
    assert v.contention((walls, quiet), other=other)["preempted_basis"] == "thread"


def test_agreement_tolerance_and_advice():
    a = v.agreement(0.60, 0.65)
    assert a["agree"] and a["difference"] == pytest.approx(0.05)
    b = v.agreement(0.135, 0.458)
    assert not b["agree"] and b["trust"] == "differencing" and "+0.32" in b["note"]
    assert v.agreement(0.5, None) is None
    assert v.agreement(0.5, 0.6 + 1e-12)["agree"] is False or abs(0.1) <= v.AGREEMENT_TOLERANCE


def _result(run_id: str, valid: bool, **diff) -> dict:
    d = {
        **_good(),
        "activity": "cpu-compute",
        "k_step": 160.0,
        "ci": {},
        "contended": not valid,
        "contention_flags": [] if valid else ["80% of untraced runs preempted (limit 50%)"],
        **diff,
    }
    why = [] if valid else v.reasons(d, {"contended": True, "flags": d["contention_flags"]})
    return {
        "run_id": run_id,
        "created": "2026-12-01T00:00:00Z",
        "preset": "tiny",
        "engine": "hf",
        "mode": "eager",
        "device": "cpu",
        "device_name": "cpu",
        "batch": 1,
        "prompt_len": 128,
        "dtype": "float32",
        "n1": 1,
        "n2": 128,
        "threads": 1,
        "sweep": NS,
        "hdbi": None,
        "valid": valid,
        "invalid_reasons": why,
        "verdict": {"verdict": "host-bound", "basis": "host_fraction"}
        if valid
        else {"verdict": "invalid", "basis": "validity", "reasons": why},
        "differencing": d,
    }


def test_summary_of_an_invalid_run_shows_no_verdict_and_no_impossible_value():
    from hostgap.report.run_rows import step_rows

    r = _result("bad", False, host_fraction=-1.41, h_step_ns=-1.085e6, g_step_ns=1.855e6, t_step_ns=0.77e6)
    rows = {label: (value, basis) for label, value, basis in step_rows(r)}
    assert rows["verdict"] == ("invalid", "host fraction outside [0, 1]")
    assert rows["host fraction"][0] == "out of range" and rows["host-exposed"][0] == "out of range"
    assert "-141" not in json.dumps(rows)
    ok = {label: value for label, value, _ in step_rows(_result("good", True))}
    assert ok["verdict"] == "host-bound" and ok["host fraction"] == "60.0 %"


def test_store_keeps_validity_and_migrates_version_1(tmp_path):
    from hostgap.store.database import RunsDB

    path = tmp_path / "runs.sqlite"
    con = sqlite3.connect(path)  # a version-1 database as the previous release wrote it
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    cols = (
        "run_id TEXT PRIMARY KEY, created TEXT NOT NULL, cell_key TEXT, preset TEXT, engine TEXT, "
        "device TEXT, device_name TEXT, mode TEXT, batch INTEGER, prompt_len INTEGER, dtype TEXT, "
        "n1 INTEGER, n2 INTEGER, threads INTEGER, t_step_ns REAL, g_step_ns REAL, h_step_ns REAL, "
        "host_fraction REAL, hdbi REAL, verdict TEXT, activity TEXT, run_dir TEXT, results TEXT NOT NULL"
    )
    con.execute(f"CREATE TABLE runs ({cols})")
    old_bad = {"run_id": "old-bad", "differencing": {**_good(), "host_fraction": -1.41, "h_step_ns": -1e6}}
    old_ok = {"run_id": "old-ok", "differencing": _good()}
    for r in (old_bad, old_ok):
        con.execute(
            "INSERT INTO runs (run_id, created, results) VALUES (?, '2026-11-30', ?)", (r["run_id"], json.dumps(r))
        )
    con.commit()
    con.close()
    with RunsDB(path) as db:
        assert db.schema_version == 2
        rows = {r["run_id"]: r for r in db.rows()}
        assert rows["old-ok"]["valid"] == 1 and rows["old-ok"]["invalid_reasons"] is None
        assert rows["old-bad"]["valid"] == 0
        assert "host fraction outside [0, 1]" in rows["old-bad"]["invalid_reasons"]
        db.add(_result("new-bad", False))
        new = db.rows(run_id="new-bad")[0]
        assert new["valid"] == 0 and new["contended"] == 1 and new["invalid_reasons"].startswith("machine busy")


def test_runs_table_and_measure_exit_status(tmp_path, monkeypatch):
    from hostgap.cli import cli
    from hostgap.store.database import RunsDB

    db = tmp_path / "runs.sqlite"
    with RunsDB(db) as d:
        d.add(_result("good-1", True))
        d.add(_result("bad-1", False))
    out = CliRunner().invoke(cli, ["runs", "--db", str(db)])
    assert out.exit_code == 0
    assert "invalid" in out.output and "busy" in out.output
    rows = {r["run_id"]: r for r in json.loads(CliRunner().invoke(cli, ["runs", "--db", str(db), "--json"]).output)}
    assert rows["bad-1"]["valid"] == 0 and rows["bad-1"]["contended"] == 1
    assert rows["good-1"]["valid"] == 1 and rows["good-1"]["contended"] == 0
    from hostgap.report.run_view import verdict_cell as _verdict_cell

    assert _verdict_cell(rows["bad-1"]).startswith("invalid: machine busy")
    assert _verdict_cell(rows["good-1"]) == "host-bound"
    # measure: an invalid result exits with EXIT_INVALID (3), never 2 (bad input)
    import hostgap.capture.protocol.orchestrate as protocol

    for valid, code in ((False, v.EXIT_INVALID), (True, 0)):
        monkeypatch.setattr(protocol, "measure", lambda cfg, valid=valid, **kw: _result(f"m-{valid}", valid))
        r = CliRunner().invoke(cli, ["measure", "--device", "cpu", "--no-db", "--json", "-q"])
        assert r.exit_code == code, r.output
        assert json.loads(r.output)["valid"] is valid
    assert v.EXIT_INVALID not in (0, 1, 2)


def test_exact_quiet_measurement_is_valid():
    s = _cpu_series(1e6, 0.5, 0.4)
    d = difference(s, 1, 128, activity="cpu-compute").to_dict()
    assert v.reasons(d) == [] and np.isclose(d["host_fraction"], 0.6)


def test_regimes_leave_out_invalid_runs_and_mark_busy_cells(tmp_path):
    from hostgap.cli import cli

    arch = {"name": "tiny"}
    docs = [
        dict(_result("ok-b1", True), arch=arch, batch=1),
        dict(_result("busy-b2", True), arch=arch, batch=2),
        dict(_result("bad-b4", False, host_fraction=-1.4), arch=arch, batch=4),
    ]
    docs[1]["differencing"]["contended"] = True
    files = []
    for d in docs:
        p = tmp_path / f"{d['run_id']}.json"
        p.write_text(json.dumps(d))
        files.append(str(p))
    out = CliRunner().invoke(cli, ["regimes", "--json", *files])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    cells = {c["run_id"]: c for c in doc["cells"]}
    assert set(cells) == {"ok-b1", "busy-b2"}  # the invalid run is no regime point
    assert cells["busy-b2"]["contended"] and not cells["ok-b1"]["contended"]
    assert doc["invalid"] == [{"run_id": "bad-b4", "reasons": docs[2]["invalid_reasons"]}]
    assert "host fraction outside [0, 1]" in doc["invalid"][0]["reasons"]
    text = CliRunner().invoke(cli, ["regimes", *files]).output
    assert "0.60 H!" in text and "left out, invalid measurement bad-b4" in text


def test_report_verdict_card_of_an_invalid_run():
    from hostgap.capture.protocol.results import judge
    from hostgap.report.html import key_numbers
    from hostgap.report.inputs import Input, anatomy_from_results

    d = {**_good(), "host_fraction": -1.41, "h_step_ns": -1.0, "activity": "cpu-compute"}
    j = judge(d, {"contended": False, "flags": []}, None, "cpu-compute", None)
    assert not j["valid"] and j["verdict"]["verdict"] == "invalid" and j["agreement"] is None
    r = {**_result("bad", False), "verdict": j["verdict"], "invalid_reasons": j["invalid_reasons"]}
    k = key_numbers(
        Input(source="bad", kind="run", label="bad", trace_path=None, results=r, anatomy=anatomy_from_results(r))
    )
    assert k["verdict"] == "invalid" and "host fraction outside [0, 1]" in k["verdict_note"]
    ok = judge(
        _good(),
        {"contended": False, "flags": []},
        None,
        "cpu-compute",
        {"summary": {"steady": {"host_fraction": {"median": 0.75}}}},
    )
    assert ok["valid"] and ok["verdict"]["verdict"] == "host-bound"
    assert ok["agreement"]["difference"] == pytest.approx(0.15) and not ok["agreement"]["agree"]
