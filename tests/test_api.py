"""The Python API (``import hostgap``, docs/api.md): each function's ``to_json()`` is byte for byte
what the matching command prints with ``--json`` (and ``to_csv()`` what it prints with ``--csv``),
its tables are Arrow with the command's rows, its errors are :class:`hostgap.HostgapError` with
the command's one line, and ``import hostgap`` stays light and needs no torch."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import hostgap
from hostgap.cli import cli
from test_examples import decode_trace
from test_report_fixtures import make_run_dir

ROOT = Path(__file__).resolve().parents[1]


def stdout_of(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code in (0, 1), r.output
    return r.stdout


@pytest.fixture
def pair(tmp_path) -> tuple[str, str]:
    return str(decode_trace(tmp_path / "fast.json", 1.0)), str(decode_trace(tmp_path / "slow.json.gz", 40.0))


def test_import_is_light_and_needs_no_torch():
    code = (
        "import sys\n"
        "for m in ('torch', 'transformers', 'vllm'): sys.modules[m] = None\n"
        "import hostgap\n"
        "light = sorted(m.split('.')[0] for m in sys.modules if m in ('numpy', 'rich', 'matplotlib', 'scipy'))\n"
        "print(light, hostgap.__version__)\n"
        "print(hostgap.presets().table.num_rows > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == f"[] {hostgap.__version__}"
    assert out[1] == "True"


def test_public_names_and_private_modules():
    for name in hostgap.__all__:
        assert getattr(hostgap, name) is not None, name
    assert set(hostgap.api.__all__) <= set(hostgap.__all__)
    api_dir = ROOT / "src" / "hostgap" / "api"
    assert all(p.name.startswith("_") for p in api_dir.glob("*.py")), "the API's modules are private by name"
    with pytest.raises(AttributeError):
        hostgap.no_such_thing  # noqa: B018
    assert hostgap.attribution.fit is not None
    import importlib.metadata

    assert importlib.metadata.version("hostgap") == hostgap.__version__


def test_analyze_is_the_command(pair):
    fast, slow = pair
    r = hostgap.analyze(slow)
    assert r.to_json() == stdout_of("analyze", slow, "--json").rstrip("\n")
    assert r.verdict["verdict"] == "host-bound" and 0 < r.host_fraction < 1
    assert r.steps.num_rows == 6 and set(r.steps.column_names) >= {"index", "wall_ns", "host_exposed_ns"}
    assert r.kernels.num_rows == 24 and r.kernels.column_names[:3] == ["step", "launch_api", "graph"]
    by_op = r.taxbreak_by_op.to_pylist()
    assert sum(x["launches"] for x in by_op) == 24
    assert sum(x["dft_ns"] for x in by_op) == sum(r.kernels.column("dft_ns").to_pylist())
    gaps = r.idle_gaps.to_pylist()
    assert gaps and all(g["end_ns"] - g["start_ns"] == g["gap_ns"] > 0 for g in gaps)
    assert {g["class"] for g in gaps} <= {"host_wait", "kernel_wait", "other"}
    buf = io.StringIO()
    r.to_csv(buf)
    assert buf.getvalue() == stdout_of("analyze", slow, "--csv")
    both = hostgap.analyze([fast, slow])
    assert len(both) == 2 and both.to_json() == stdout_of("analyze", fast, slow, "--json").rstrip("\n")
    loaded = hostgap.load(slow)
    assert len(loaded) == loaded.events.num_rows > 0 and loaded.format == "kineto"
    assert set(loaded.events.column("kind").unique().to_pylist()) == {"kernel", "launch", "annotation"}
    assert loaded.analyze().to_dict() == r.to_dict() | {"trace": slow}


def test_steps_and_kernels_are_the_commands(pair):
    _, slow = pair
    s = hostgap.steps(slow)
    assert s.to_json() == stdout_of("steps", slow, "--json").rstrip("\n")
    buf = io.StringIO()
    s.to_csv(buf)
    assert buf.getvalue() == stdout_of("steps", slow, "--csv")
    k = hostgap.kernels(slow, launch_floor_us=4.5)
    assert k.to_json() == stdout_of("kernels", slow, "--launch-floor-us", "4.5", "--json").rstrip("\n")
    assert k.table.column("dkt_ns").to_pylist() == [4500.0] * 24
    assert "launches of" in k.text()


def test_trace_set_is_the_command(traces_or_vendored_dir):
    rank_dir = traces_or_vendored_dir / "hta"  # without the corpus: the trimmed copies (one step each)
    files = [str(rank_dir / "sampled_rank-0.json.gz"), str(rank_dir / "sampled_rank-1.json.gz")]
    r = hostgap.analyze(files, jobs=1)
    assert isinstance(r, hostgap.TraceSetResult)
    assert r.to_json() == stdout_of("analyze", *files, "--json", "--jobs", "1").rstrip("\n")
    assert r.rank_table.num_rows == 2 and r.steps.num_rows == 2 * len(r.cross_rank["steps"])  # per step and rank


def test_errors_are_the_command_line(tmp_path):
    missing = str(tmp_path / "missing.json")
    with pytest.raises(hostgap.HostgapError) as e:
        hostgap.analyze(missing)
    r = CliRunner().invoke(cli, ["analyze", missing])
    assert r.exit_code == 2 and r.stderr.strip() == f"hostgap: error: {e.value}"
    with pytest.raises(hostgap.HostgapError, match="--gap-threshold-us"):
        hostgap.analyze(missing, gap_threshold_us=-1)
    with pytest.raises(hostgap.HostgapError, match="--fail-if"):
        hostgap.compare(missing, missing, fail_if="wall_ns>>2")


def test_runs_run_compare_and_report(tmp_path, pair):
    db = tmp_path / "runs.sqlite"
    run_dir = make_run_dir(tmp_path / "runs")
    doc = json.loads((run_dir / "results.json").read_text())
    from hostgap.store.database import RunsDB

    with RunsDB(db) as rdb:
        rdb.add(doc)
    listed = hostgap.runs(str(db))
    assert listed.total == 1 and listed.table.column("run_id").to_pylist() == [doc["run_id"]]
    assert listed.to_json() == stdout_of("runs", "--db", str(db), "--json").rstrip("\n")
    run = hostgap.run(doc["run_id"], db=str(db))
    assert isinstance(run, hostgap.MeasureResult) and run.run_kind == "measured"
    assert run.to_json() == stdout_of("show", doc["run_id"], "--db", str(db), "--json").rstrip("\n")
    assert run.split["t_step_ns"] == doc["differencing"]["t_step_ns"]
    assert run.sweep.num_rows >= 2 and run.checks
    fast, slow = pair
    c = hostgap.compare(fast, slow, fail_if="host_fraction>+5%")
    assert c.failed and c.held == ["host_fraction>+5%"]
    assert c.to_json() == stdout_of("compare", fast, slow, "--json", "--fail-if", "host_fraction>+5%").rstrip("\n")
    by = {row["metric"]: row for row in c.metrics.to_pylist()}
    assert by["host_fraction"]["b"] > by["host_fraction"]["a"]
    report = hostgap.write_report([run, slow], tmp_path / "r.html", db=str(db))
    assert Path(report.path).read_text().startswith("<!DOCTYPE html>")
    assert [d["run_kind"] for d in report.to_dict()["inputs"]] == ["measured", "trace"]


def test_notebook_views_are_self_contained(pair, tmp_path):
    _, slow = pair
    views = [hostgap.analyze(slow)._repr_html_(), hostgap.compare(slow, slow)._repr_html_()]
    views.append(hostgap.presets()._repr_html_())
    import re

    from hostgap.report.html import active_content

    for v in views:
        assert v.startswith("<div class='hostgap-result'>") and "<script" not in v.lower()
        for svg in re.findall(r"<svg.*?</svg>", v, re.S):
            assert active_content(svg) is None  # nothing runs, nothing is fetched
        assert not re.search(r"(src|href)=['\"](?!#|data:)", v)
    assert "host-bound" in views[0] and "<svg" in views[0]
    assert "body{" not in views[0]  # the report's page style is scoped to the result


def test_two_engines_are_valid_only_with_their_difference():
    """``measure --engine A,B`` exits 3 unless both measurements are valid and their difference
    is a result (docs/measure.md, "Two engines"): a valid pair without an interval is not."""
    from hostgap.api._measure import MeasureResult, MeasureResults

    def pair(valid_a: bool, valid_b: bool, diff_valid: bool) -> MeasureResults:
        diff = {"base": "hf-cb", "other": "hf-cb-async", "valid": diff_valid}
        docs = [
            {"engine": e, "valid": v, "engine_difference": diff}
            for e, v in (("hf-cb", valid_a), ("hf-cb-async", valid_b))
        ]
        return MeasureResults([MeasureResult(d) for d in docs])

    assert pair(True, True, True).valid is True
    assert pair(True, True, False).valid is False  # e.g. "no interval for the wall time of hf-cb"
    assert pair(True, False, False).valid is False and pair(False, True, False).valid is False
    assert pair(True, True, True).difference["other"] == "hf-cb-async"
