"""`hostgap attribute` end to end on synthetic steps: fit, eval, explain, errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hostgap.cli import cli


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("attr")
    r = CliRunner().invoke(cli, ["attribute", "synth", str(d / "run.parquet"), "--steps", "500", "--seed", "2"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["attribute", "fit", str(d / "run.parquet"), "-o", str(d / "model.json"), "--json"])
    assert r.exit_code == 0, r.output
    return d, json.loads(r.stdout)


def test_fit_scores_held_out_steps(workdir):
    d, out = workdir
    held = out["held_out"]
    assert held["schema_version"] == 1
    groups = {g["class"]: g for g in held["groups"]}
    assert 0 < groups["all"]["n_steps"] < 500
    assert groups["decode"]["improvement_p90"] > 2
    model = json.loads((d / "model.json").read_text())
    assert model["kind"] == "hostgap.attribution_model"
    assert set(model["classes"]) == {"prefill", "decode"}
    assert model["provenance"]["split"]["test_fraction"] == 0.25


def test_eval_skips_training_steps(workdir):
    d, out = workdir
    r = CliRunner().invoke(cli, ["attribute", "eval", str(d / "model.json"), str(d / "run.parquet"), "--json"])
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)
    assert ev["n_steps"] == out["held_out"]["n_steps"]
    assert ev["n_excluded_training_steps"] == 500 - ev["n_steps"]


def test_explain_rows_add_up(workdir):
    d, _ = workdir
    r = CliRunner().invoke(
        cli,
        [
            "attribute",
            "explain",
            str(d / "model.json"),
            str(d / "run.parquet"),
            "--step",
            "3",
            "--json",
            "--split",
            "model",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    rows = doc["requests_shares"]
    assert len(rows) == doc["requests"]
    assert sum(x["share_ns"] for x in rows) == pytest.approx(doc["predicted_ns"], rel=1e-9)
    for x in rows:
        assert x["device_ns"] + x["host_ns"] == pytest.approx(x["share_ns"], rel=1e-9)
        assert x["host_ns"] >= 0 and x["device_ns"] >= 0
    r = CliRunner().invoke(cli, ["attribute", "explain", str(d / "model.json"), str(d / "run.parquet"), "--step", "3"])
    assert r.exit_code == 0 and "alone ms" in r.stdout


def test_explain_without_requests_says_why(workdir, tmp_path):
    d, _ = workdir
    import shutil

    shutil.copy(d / "run.parquet", tmp_path / "agg.parquet")
    r = CliRunner().invoke(
        cli, ["attribute", "explain", str(d / "model.json"), str(tmp_path / "agg.parquet"), "--step", "3"]
    )
    assert r.exit_code == 2
    assert "per-request q and s" in r.stderr and "Traceback" not in r.output


def test_user_errors_exit_2_with_one_line(workdir, tmp_path):
    d, _ = workdir
    bad = tmp_path / "bad.csv"
    bad.write_text("step,q,s,wall_ns\n0,1,10,1000\n1,1,10,1100\n")
    cases = [
        ["attribute", "fit", str(bad), "-o", str(tmp_path / "m.json")],
        ["attribute", "eval", str(tmp_path / "missing.json"), str(bad)],
        ["attribute", "explain", str(d / "model.json"), str(d / "run.parquet"), "--step", "99999"],
    ]
    for args in cases:
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2, (args, r.output)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("hostgap: error: ")
    assert not (tmp_path / "m.json").exists()


def test_fit_one_source_and_eval_the_rest(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hostgap.model.steptable.files import write_steps
    from hostgap.model.synth import synth_steps

    a = tmp_path / "a.parquet"
    b = tmp_path / "b.parquet"
    write_steps(synth_steps(300, seed=1, source="gpu-a").steps, str(a))
    write_steps(synth_steps(200, seed=2, source="gpu-b").steps, str(b))
    both = tmp_path / "both.parquet"
    for suffix in ("", ".requests"):
        t = [pq.read_table(str(tmp_path / f"{x}{suffix}.parquet")) for x in ("a", "b")]
        pq.write_table(pa.concat_tables(t), str(tmp_path / f"both{suffix}.parquet"))
    r = CliRunner().invoke(
        cli, ["attribute", "fit", str(both), "--source", "gpu-a", "-o", str(tmp_path / "m.json"), "--json"]
    )
    assert r.exit_code == 0, r.output
    n_held = json.loads(r.stdout)["held_out"]["n_steps"]
    r = CliRunner().invoke(cli, ["attribute", "eval", str(tmp_path / "m.json"), str(both), "--json"])
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)
    per = {(g["source"], g["class"]): g["n_steps"] for g in ev["groups"]}
    assert per[("gpu-a", "all")] == n_held  # training steps of gpu-a left out
    assert per[("gpu-b", "all")] == 200  # the other source scored in full
    assert ("all", "all") in per


def test_each_command_prints_its_library_call(workdir):
    """The commands are glue: eval and explain print what hostgap.attribution returns."""
    import hostgap
    from hostgap.report.attribution_view import explain_doc, strict_json

    d, out = workdir
    A = hostgap.attribution
    model, steps = A.load_model(str(d / "model.json")), A.load_steps(str(d / "run.parquet"))
    r = CliRunner().invoke(cli, ["attribute", "eval", str(d / "model.json"), str(d / "run.parquet"), "--json"])
    assert r.stdout == strict_json(A.evaluate_held_out(model, steps).to_dict()) + "\n"
    args = [str(d / "model.json"), str(d / "run.parquet"), "--step", "3", "--rescale", "--json"]
    r = CliRunner().invoke(cli, ["attribute", "explain", *args])
    assert r.stdout == strict_json(explain_doc(A.explain(model, steps, 3, rescale=True))) + "\n"
    fitted = A.fit_held_out(steps)
    assert fitted.n_held == out["held_out"]["n_steps"]
    assert A.to_json(fitted.model)["classes"] == json.loads((d / "model.json").read_text())["classes"]


def test_step_and_source_selection_errors_name_the_option(workdir):
    import hostgap
    from hostgap.errors import HostgapError

    d, _ = workdir
    steps = hostgap.attribution.load_steps(str(d / "run.parquet"))
    assert len(hostgap.attribution.select_step(steps, 3)) == 1
    with pytest.raises(HostgapError, match=r"--step.*step 99999 not in .*run\.parquet"):
        hostgap.attribution.select_step(steps, 99999)
    with pytest.raises(HostgapError, match=r"--source.*'nope' not in .*\(sources: synth\)"):
        hostgap.attribution.select_source(steps, "nope")
    with pytest.raises(HostgapError, match=r"must end in \.parquet or \.csv"):
        hostgap.attribution.write_synthetic(str(d / "x.txt"))
