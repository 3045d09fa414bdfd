"""``hostgap compare``: signs of the differences, the --fail-if grammar, exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.report.compare import Condition, delta, evaluate, parse_conditions
from test_report_fixtures import decode_events, make_run_dir, write_trace


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    a = write_trace(d / "fast.json", decode_events(n_steps=6, spacing_us=20))
    b = write_trace(d / "slow.json", decode_events(n_steps=6, spacing_us=40))  # more host time per step
    return a, b


def invoke(*args):
    return CliRunner().invoke(cli, ["compare", *args, "-q"])


def test_differences_have_signs(pair):
    a, b = pair
    r = invoke(a, b, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["basis"] == "steps"
    m = {row["metric"]: row for row in doc["metrics"]}
    steps_a = json.loads(CliRunner().invoke(cli, ["steps", a, "--json"]).stdout)
    steady = set(steps_a["summary"]["steady"]["indices"])
    wall_a = float(np.median([s["wall_ns"] for s in steps_a["steps"] if s["index"] in steady]))
    assert m["wall_ns"]["a"] == pytest.approx(wall_a)
    assert m["wall_ns"]["delta"] > 0 and m["host_exposed_ns"]["delta"] > 0
    assert m["host_fraction"]["delta"] > 0
    assert m["gpu_active_ns"]["delta"] == 0 and m["kernel_count"]["delta"] == 0
    assert m["wall_ns"]["relative"] == pytest.approx(m["wall_ns"]["delta"] / m["wall_ns"]["a"])
    # reversed order flips every sign
    back = {row["metric"]: row for row in json.loads(invoke(b, a, "--json").stdout)["metrics"]}
    for k, row in m.items():
        if row["delta"] is not None:
            assert back[k]["delta"] == pytest.approx(-row["delta"]), k


def test_fail_if_exits_1_and_says_which(pair):
    a, b = pair
    r = invoke(a, b, "--fail-if", "host_fraction>+5%,kernel_count>0")
    assert r.exit_code == 1
    assert "host_fraction>+5%: HOLDS" in r.stderr
    assert "kernel_count>0: ok" in r.stderr
    assert "failing: host_fraction>+5%" in r.stderr
    ok = invoke(a, b, "--fail-if", "host_fraction<-5%, wall_ns>+1s")
    assert ok.exit_code == 0, ok.output
    same = invoke(a, a, "--fail-if", "wall_ns>+0%", "--json")
    assert same.exit_code == 0
    assert json.loads(same.stdout)["failed"] is False


def test_fail_if_json_records_each_condition(pair):
    a, b = pair
    r = invoke(a, b, "--json", "--fail-if", "wall_ns>=+10us,hdbi<-0.5")
    doc = json.loads(r.stdout)
    assert [c["condition"] for c in doc["fail_if"]] == ["wall_ns>=+10us", "hdbi<-0.5"]
    wall = next(x for x in doc["metrics"] if x["metric"] == "wall_ns")
    assert doc["fail_if"][0]["holds"] == (wall["delta"] >= 10_000)
    assert r.exit_code == (1 if doc["failed"] else 0)


@pytest.mark.parametrize(
    "expr, metric, op, threshold, relative",
    [
        ("host_fraction>+5%", "host_fraction", ">", 0.05, True),
        ("wall_ns > +2%", "wall_ns", ">", 0.02, True),
        ("hdbi<-0.05", "hdbi", "<", -0.05, False),
        ("host_fraction>=2pp", "host_fraction", ">=", 0.02, False),
        ("host_exposed_ns>0.1ms", "host_exposed_ns", ">", 100_000.0, False),
        ("kernel_count<=-10", "kernel_count", "<=", -10.0, False),
        ("wall_ns>+.5us", "wall_ns", ">", 500.0, False),
    ],
)
def test_grammar(expr, metric, op, threshold, relative):
    (c,) = parse_conditions(expr)
    assert (c.metric, c.op, c.relative) == (metric, op, relative)
    assert c.threshold == pytest.approx(threshold)


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "wall>1",
        "wall_ns=>1",
        "wall_ns>1%%",
        "host_fraction>1ms",
        "kernel_count>2pp",
        "__import__('os')>1",
        "wall_ns>1;rm",
        "wall_ns > x",
    ],
)
def test_grammar_rejects(expr):
    with pytest.raises(HostgapError):
        parse_conditions(expr)


def test_bad_fail_if_exits_2(pair):
    a, b = pair
    r = invoke(a, b, "--fail-if", "nonsense")
    assert r.exit_code == 2 and "--fail-if" in r.output


def test_relative_from_zero():
    assert delta(0.0, 0.0) == (0.0, 0.0)
    assert delta(0.0, 5.0) == (5.0, None)
    row = {"metric": "launches", "a": 0.0, "b": 5.0, "delta": 5.0, "relative": None}
    c = Condition("launches>+10%", "launches", ">", 0.1, True)
    assert evaluate(c, {"launches": row}, None, None)["holds"] is True


def test_missing_metric_is_an_error_not_a_pass(tmp_path, pair):
    a, _ = pair
    cpu = write_trace(
        tmp_path / "cpu.json",
        [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 1,
                "tid": 1,
                "ts": i * 100,
                "dur": 90,
                "args": {},
            }
            for i in range(4)
        ]
        + [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": i * 100 + 10,
                "dur": 30,
                "args": {},
            }
            for i in range(4)
        ],
    )
    r = invoke(a, cpu, "--fail-if", "hdbi<-0.05")
    assert r.exit_code == 2
    assert "hdbi is not available" in r.output


def test_two_runs_use_differencing(tmp_path):
    a = make_run_dir(tmp_path / "a", host_ms=3.0)
    b = make_run_dir(tmp_path / "b", host_ms=1.0)
    r = invoke(str(a), str(b), "--json", "--fail-if", "host_exposed_ns<-1ms")
    doc = json.loads(r.stdout)
    assert doc["basis"] == "differencing"
    m = {row["metric"]: row for row in doc["metrics"]}
    ra = json.loads((a / "results.json").read_text())["differencing"]
    assert m["wall_ns"]["a"] == pytest.approx(ra["t_step_ns"])
    assert m["host_exposed_ns"]["delta"] == pytest.approx(-2e6, rel=0.01)
    assert r.exit_code == 1
    steps = invoke(str(a), str(b), "--json", "--basis", "steps")
    assert json.loads(steps.stdout)["basis"] == "steps"


def test_terminal_and_csv(pair):
    a, b = pair
    r = invoke(a, b)
    assert r.exit_code == 0
    assert "B − A" in r.stdout and "host_fraction" in r.stdout
    c = invoke(a, b, "--csv")
    lines = c.stdout.strip().splitlines()
    assert lines[0] == "basis,a_label,b_label,metric,unit,a,b,delta,relative"
    assert any(ln.split(",")[3] == "wall_ns" for ln in lines[1:])


def test_two_runs_get_the_interval_of_the_change(tmp_path):
    """B − A of two measured runs carries the MOVER interval of both runs' own intervals, and
    says whether the change lies within their noise."""
    a = make_run_dir(tmp_path / "a", host_ms=3.0)
    b = make_run_dir(tmp_path / "b", host_ms=1.0)
    same = make_run_dir(tmp_path / "c", host_ms=3.0)
    doc = json.loads(invoke(str(a), str(b), "--json").stdout)
    m = {row["metric"]: row for row in doc["metrics"]}
    da = json.loads((a / "results.json").read_text())["differencing"]
    db = json.loads((b / "results.json").read_text())["differencing"]
    (alo, ahi), (blo, bhi) = da["ci"]["h_step_ns"], db["ci"]["h_step_ns"]
    d = db["h_step_ns"] - da["h_step_ns"]
    lo = d - np.hypot(db["h_step_ns"] - blo, ahi - da["h_step_ns"])
    hi = d + np.hypot(bhi - db["h_step_ns"], da["h_step_ns"] - alo)
    assert m["host_exposed_ns"]["interval"] == pytest.approx([lo, hi])
    assert m["host_exposed_ns"]["within_noise"] is False and hi < 0
    assert "interval" not in m["kernel_count"]
    doc = json.loads(invoke(str(a), str(same), "--json").stdout)
    m = {row["metric"]: row for row in doc["metrics"]}
    assert m["wall_ns"]["delta"] == 0 and m["wall_ns"]["within_noise"] is True
    text = invoke(str(a), str(b)).stdout
    assert "95 % CI of B − A" in text and "beyond noise" in text


def test_fail_if_outside_noise_ignores_a_change_within_the_noise(tmp_path):
    a = make_run_dir(tmp_path / "a", host_ms=3.0)
    same = make_run_dir(tmp_path / "same", host_ms=3.0)
    b = make_run_dir(tmp_path / "b", host_ms=1.0)
    assert invoke(str(a), str(same), "--fail-if", "wall_ns>=0ms").exit_code == 1  # 0 >= 0: holds
    r = invoke(str(a), str(same), "--fail-if", "wall_ns>=0ms", "--outside-noise")
    assert r.exit_code == 0 and "within noise" in r.stderr
    r = invoke(str(a), str(b), "--fail-if", "host_exposed_ns<-1ms", "--outside-noise")
    assert r.exit_code == 1 and "beyond noise" in r.stderr
    r = invoke(str(a), str(b), "--outside-noise")
    assert r.exit_code == 2 and "--outside-noise" in r.output
