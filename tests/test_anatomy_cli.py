"""``hostgap steps``, ``kernels``, ``trim`` and the anatomy sections of ``analyze``, end to end."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from anatomy_builders import H100, US, Timeline
from conftest import corpus_path, vendored_path
from hostgap import SCHEMA_VERSION
from hostgap.anatomy.markers import find_markers
from hostgap.anatomy.steps import AnalysisOptions, analyze
from hostgap.cli import cli
from hostgap.events import Kind
from hostgap.readers import load_trace


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def four_steps() -> Timeline:
    """Four decode steps 100 µs apart; step i launches kernels named s{i}a and s{i}b (the second
    via a graph in odd steps), with an op and a frame around the launches, and one H2D copy."""
    t = Timeline(props=H100)
    for i in range(4):
        base = 100 * i
        t.annotation(f"ProfilerStep#{i + 1}", base, 60)
        t.frame("model.py(1): forward", base + 1, 40)
        t.op("aten::linear", base + 2, 20)
        t.launch_kernel(base + 4, 2, f"s{i}a", base + 30, 10)
        if i % 2:
            t.graph_launch(base + 10, 3, [(f"s{i}b", base + 41, 5), (f"s{i}b", base + 47, 5)])
        else:
            t.launch_kernel(base + 10, 2, f"s{i}b", base + 41, 5)
        t.copy(base + 25, 2, base + 60, 1, 16)
    return t


@pytest.fixture
def trace4(tmp_path) -> str:
    return four_steps().write(tmp_path, "four.json")


def one_line_error(r, *words):
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("hostgap: error: ")
    for w in words:
        assert w in lines[0]
    assert "Traceback" not in r.output


# -- steps -----------------------------------------------------------------------------------


def test_steps_json(trace4):
    r = run("steps", trace4, "--json", "--launch-floor-us", "4.5")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert [s["index"] for s in doc["steps"]] == [0, 1, 2, 3]
    assert [s["kernel_count"] for s in doc["steps"]] == [2, 3, 2, 3]
    assert [s["graph_launches"] for s in doc["steps"]] == [0, 1, 0, 1]
    assert doc["steps"][0]["wall_ns"] == 100 * US
    assert doc["taxbreak"]["floor_source"] == "cli" and doc["taxbreak"]["launch_floor_ns"] == 4500
    assert doc["verdict"]["verdict"] in (
        "host-bound",
        "balanced",
        "device-bound",
        "dependency-bound",
        "incomplete-capture",
        "unexplained-idle",
    )


def test_steps_csv(trace4):
    r = run("steps", trace4, "--csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 4
    for key in (
        "index",
        "kind",
        "wall_ns",
        "gpu_active_ns",
        "host_exposed_ns",
        "host_wait_ns",
        "host_fraction",
        "kernel_count",
        "queued",
        "partial",
        "tb_hdbi",
        "tb_ft_ns",
        "gen_requests",
    ):
        assert key in rows[0], key
    js = json.loads(run("steps", trace4, "--json").stdout)["steps"]
    assert [int(r["gpu_active_ns"]) for r in rows] == [s["gpu_active_ns"] for s in js]
    # idle causes flattened into columns; the per-device parts stay in the JSON
    assert "devices" not in rows[0] and "idle_causes" not in rows[0]
    for r, s in zip(rows, js):
        assert {k: int(r[f"idle_{k}"]) for k in s["idle_causes"]} == s["idle_causes"]
        assert r["queued_reason"] == (s["queued_reason"] or "")


def test_steps_terminal(trace4):
    r = run("steps", trace4)
    assert r.exit_code == 0, r.output
    assert "ProfilerStep" in r.stdout or "steps of" in r.stdout


@pytest.mark.parametrize("verb", ["steps", "analyze", "kernels"])
def test_tables_carry_no_trailing_spaces(trace4, verb):
    """rich pads each line to the table's width; copied output must not carry those blanks."""
    r = run(verb, trace4)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) > 3
    assert [l for l in lines if l != l.rstrip()] == []


def test_trimmed_lines_keep_colour_codes():
    from hostgap.report.terminal import TrimmedLines

    out = io.StringIO()
    f = TrimmedLines(out)
    f.write("a  \x1b[1mb\x1b[0m   \x1b[0m\nc ")
    assert out.getvalue() == "a  \x1b[1mb\x1b[0m\x1b[0m\n"  # the open line waits for its end
    f.write(" \n")
    f.write("d  ")
    f.flush()
    assert out.getvalue() == "a  \x1b[1mb\x1b[0m\x1b[0m\nc\nd  "


def test_steps_help_has_example():
    for verb in ("steps", "kernels", "trim"):
        r = run(verb, "--help")
        assert r.exit_code == 0 and "Example" in r.stdout and f"hostgap {verb}" in r.stdout


# -- kernels ---------------------------------------------------------------------------------


def test_kernels_csv_one_row_per_launch(trace4):
    r = run("kernels", trace4, "--csv", "--launch-floor-us", "4.5")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 4 + 2 + 2  # eager launches + graph launches (one row each, not per replayed kernel)
    graph = [x for x in rows if x["graph"] == "True"]
    assert len(graph) == 2 and all(x["gpu_ops"] == "2" for x in graph)
    first = rows[0]
    for key in (
        "step",
        "kernel",
        "op",
        "frame",
        "t_py_ns",
        "t_dispatch_ns",
        "t_launch_ns",
        "i_lib",
        "dft_ns",
        "dct_ns",
        "dkt_fw_ns",
        "queued",
    ):
        assert key in first, key
    # step 0: op aten::linear [2, 22] in frame [1, 41]; launch [4, 6] -> kernel s0a at 30
    assert (first["step"], first["kernel"], first["op"]) == ("0", "s0a", "aten::linear")
    assert int(first["t_py_ns"]) == 1 * US and int(first["t_dispatch_ns"]) == 2 * US
    assert int(first["t_launch_ns"]) == 26 * US
    assert float(first["dkt_fw_ns"]) == 26 * US - 4500
    second = rows[1]
    assert int(second["t_dispatch_ns"]) == 4 * US and int(second["t_py_ns"]) == 0  # from the previous launch end


def test_kernels_json(trace4):
    r = run("kernels", trace4, "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == 8 and {x["step"] for x in rows} == {0, 1, 2, 3}


# -- analyze gains the step and TaxBreak sections ------------------------------------------


def test_analyze_has_steps_and_taxbreak(trace4):
    r = run("analyze", trace4, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert len(doc["steps"]) == 4
    assert doc["taxbreak"]["applicable"] is True and doc["taxbreak"]["hdbi"] is not None
    assert "verdict" in doc and "summary" in doc and "top_ops" in doc
    text = run("analyze", trace4)
    assert text.exit_code == 0 and "HDBI" in text.stdout


# -- trim ------------------------------------------------------------------------------------


def test_trim_round_trip(trace4, tmp_path):
    out = tmp_path / "small.json.gz"
    r = run("trim", trace4, "--steps", "1:3", "-o", out, "-q")
    assert r.exit_code == 0, r.output
    small = load_trace(str(out))
    _, markers = find_markers(small)
    assert small.names_of(markers) == ["ProfilerStep#2", "ProfilerStep#3"]
    kernels = sorted(set(small.names_of(small.events.kind == Kind.KERNEL)))
    assert kernels == ["s1a", "s1b", "s2a", "s2b"]
    assert int((small.events.kind == Kind.KERNEL).sum()) == 3 + 2  # step 1 replays s1b twice
    cfg = AnalysisOptions(launch_floor_ns=4500.0)
    before = analyze(load_trace(trace4), cfg).steps[1:3]
    after = analyze(small, cfg).steps
    for key in ("kernel_count", "kernel_sum_ns", "gpu_active_ns", "launches", "graph_launches", "h2d_bytes"):
        assert [s[key] for s in after] == [s[key] for s in before], key
    assert after[0]["wall_ns"] == before[0]["wall_ns"]
    assert after[0]["taxbreak"]["ft_ns"] == before[0]["taxbreak"]["ft_ns"]
    # device properties travel: the default floor is still the H100 one
    assert analyze(small).taxbreak["floor_source"].startswith("default:H100")


@pytest.mark.parametrize("source", ["corpus", "vendored"])
def test_trim_real_trace_round_trip(tmp_path, source):
    """Steps 1:3 of the whole file; without it, step 1:2 of its trimmed copy (steps 3:5)."""
    rel = "hta/a100_deep_queue_rank0.json.gz"
    src, steps = (corpus_path(rel), "1:3") if source == "corpus" else (vendored_path(rel), "1:2")
    out = tmp_path / "dq.json.gz"
    r = run("trim", src, "--steps", steps, "-o", out, "-q")
    assert r.exit_code == 0, r.output
    big = analyze(load_trace(str(src))).steps[slice(*map(int, steps.split(":")))]
    small = analyze(load_trace(str(out))).steps
    assert [s["name"] for s in small] == [s["name"] for s in big]
    assert [s["kernel_count"] for s in small] == [s["kernel_count"] for s in big]
    assert [s["kernel_sum_ns"] for s in small] == [s["kernel_sum_ns"] for s in big]
    assert out.stat().st_size < src.stat().st_size


def boundary_steps() -> Timeline:
    """Three steps 100 µs apart on one stream. A kernel with no launch in the trace (work from
    before the capture) runs [0, 20) inside step 0; step 0 launches k0 [5, 7) → [25, 35);
    step 1 launches k1 [104, 106) → [150, 160), 44 µs after its launch, behind the gap
    [35, 150); step 2 launches k2 [204, 206) → [210, 220)."""
    t = Timeline(props=H100)
    t.kernel("before_capture", 0, 20)
    for i, (k_ts, name) in enumerate(((25, "k0"), (150, "k1"), (210, "k2"))):
        t.annotation(f"ProfilerStep#{i + 1}", 100 * i, 60)
        t.launch_kernel(100 * i + 4 + (i == 0), 2, name, k_ts, 10)
    return t


STEP_KEYS = (
    "wall_ns",
    "gpu_active_ns",
    "busy_ns",
    "idle_ns",
    "host_exposed_ns",
    "host_wait_ns",
    "idle_causes",
    "partial",
    "partial_reason",
    "queued",
    "kernel_count",
)


def test_trim_keeps_work_running_in_the_steps_and_the_boundary_gap(tmp_path):
    """Step 0's wall [0, 100) is busy 30 µs: k0 and the unlaunched kernel (dropping it would
    turn 20 µs of busy time into host wait). Step 1's wall [100, 200): host [100, 106) (k1 not
    yet launched), unexplained [106, 150) (launched, not started), busy [150, 160), host
    [160, 200) (k2 launched at 204): host_wait 46 µs; the gap in front of k1 began at 35, so
    cutting it at the trim boundary would make it the device's first gap (outside the capture,
    whole). Steps 0:2 keep step 0 exactly; 1:3 (to the end) keep steps 1 and 2 exactly."""
    src = boundary_steps().write(tmp_path, "b.json")
    before = analyze(load_trace(src)).steps
    assert before[0]["busy_ns"] == 30 * US and before[0]["gpu_active_ns"] == 10 * US
    assert before[1]["host_wait_ns"] == 46 * US
    assert before[1]["idle_causes"] == {
        "host_ns": 46 * US,
        "dependency_ns": 0,
        "outside_ns": 0,
        "unexplained_ns": 44 * US,
    }
    for steps, compare in (("0:2", [0]), ("1:3", [1, 2])):
        out = tmp_path / f"t{steps.replace(':', '_')}.json"
        assert run("trim", src, "--steps", steps, "-o", out, "-q").exit_code == 0
        after = analyze(load_trace(str(out))).steps
        a = int(steps.split(":")[0])
        for i in compare:
            assert {k: after[i - a][k] for k in STEP_KEYS} == {k: before[i][k] for k in STEP_KEYS}, (steps, i)


def test_trim_whole_real_step_keeps_host_wait(tmp_path):
    """tracelens/h100_qwen1.5-0.5b holds one ProfilerStep and 509 kernels launched before the
    capture, some running inside the step: ``--steps 0:1`` keeps the step's numbers (flags
    included) and the host_wait idle gaps of the device line (25 gaps: the gap in front of the
    step's first kernel begins at an earlier kernel that trim keeps)."""
    from hostgap.anatomy.overview import overview

    src = corpus_path("tracelens/h100_qwen1.5-0.5b.json.gz", vendored=True)  # or its copy, trimmed so
    out = tmp_path / "q.json.gz"
    assert run("trim", src, "--steps", "0:1", "-o", out, "-q").exit_code == 0
    big, small = load_trace(str(src)), load_trace(str(out))
    (b,), (s,) = analyze(big).steps, analyze(small).steps
    assert {k: s[k] for k in STEP_KEYS} == {k: b[k] for k in STEP_KEYS}
    assert b["partial_reason"] == "work_launched_before_the_capture"
    gaps = [overview(t)["devices"][0]["idle_gaps"] for t in (big, small)]
    assert gaps[1]["count"]["host_wait"] == gaps[0]["count"]["host_wait"] == 25
    assert gaps[1]["total_ns"]["host_wait"] == gaps[0]["total_ns"]["host_wait"]


@pytest.mark.parametrize("steps", ["abc", "3:1", "7:9", "1:2:3", ""])
def test_trim_bad_steps(trace4, tmp_path, steps):
    out = tmp_path / "x.json.gz"
    r = run("trim", trace4, "--steps", steps, "-o", out)
    one_line_error(r, "--steps")
    assert not out.exists()


def test_trim_keeps_existing_output_on_error(trace4, tmp_path):
    out = tmp_path / "keep.json.gz"
    out.write_bytes(b"precious")
    r = run("trim", trace4, "--steps", "9:12", "-o", out)
    assert r.exit_code == 2 and out.read_bytes() == b"precious"


def test_trim_without_markers(tmp_path):
    t = Timeline()
    t.launch_kernel(1, 1, "k", 3, 1)
    r = run("trim", t.write(tmp_path), "--steps", "0:1", "-o", tmp_path / "o.json")
    one_line_error(r, "no step markers")


def test_steps_and_trim_say_the_same_of_a_trace_without_markers(tmp_path):
    """``steps`` used to say "whole_trace markers" where ``trim`` said "no step markers"."""
    t = Timeline()
    t.launch_kernel(1, 1, "k", 3, 1)
    src = t.write(tmp_path)
    words = "no step markers: the whole trace is one step"
    steps = run("steps", src)
    assert steps.exit_code == 0 and f"steps: 1 ({words})" in steps.stdout
    assert "whole_trace" not in steps.stdout
    one_line_error(run("trim", src, "--steps", "0:1", "-o", tmp_path / "o.json"), words)


def test_trim_into_missing_folder(trace4, tmp_path):
    r = run("trim", trace4, "--steps", "0:1", "-o", tmp_path / "nope" / "o.json")
    one_line_error(r, "folder")


# -- bad options -----------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["steps", "kernels", "analyze"])
def test_bad_step_marker(trace4, verb):
    one_line_error(run(verb, trace4, "--step-marker", "(["), "--step-marker", "regular expression")
    one_line_error(run(verb, trace4, "--step-marker", "^nothing_matches$"), "no annotation matches")


def test_trim_bad_step_marker(trace4, tmp_path):
    one_line_error(
        run("trim", trace4, "--steps", "0:1", "--step-marker", "([", "-o", tmp_path / "o.json"), "--step-marker"
    )


@pytest.mark.parametrize(
    "content, word",
    [
        ("{oops", "not JSON"),
        (json.dumps({"kind": "launch_floor", "device": "cuda"}), "mean_ns"),
        (json.dumps({"kind": "x", "mean_ns": 4000}), "launch-floor"),
    ],
)
@pytest.mark.parametrize("verb", ["steps", "kernels"])
def test_bad_floor_file(trace4, tmp_path, content, word, verb):
    f = tmp_path / "floor.json"
    f.write_text(content)
    one_line_error(run(verb, trace4, "--floor-file", f), str(f), word)


def test_missing_floor_file(trace4, tmp_path):
    one_line_error(run("steps", trace4, "--floor-file", tmp_path / "absent.json"), "absent.json")


def test_good_floor_file(trace4, tmp_path):
    f = tmp_path / "floor.json"
    f.write_text(json.dumps({"kind": "launch_floor", "device": "cuda", "mean_ns": 5000.0}))
    doc = json.loads(run("steps", trace4, "--json", "--floor-file", f).stdout)
    assert doc["taxbreak"]["launch_floor_ns"] == 5000.0 and str(f) in doc["taxbreak"]["floor_source"]


def test_negative_launch_floor(trace4):
    one_line_error(run("steps", trace4, "--launch-floor-us", "-2"), "--launch-floor-us")


def test_cpu_only_trace_steps_json(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.op("aten::mm", 5, 20)
    doc = json.loads(run("steps", t.write(tmp_path), "--json").stdout)
    assert doc["activity"] == "cpu-compute"
    assert doc["taxbreak"]["hdbi"] is None and doc["taxbreak"]["ft_ns"] is None
    assert doc["steps"][0]["taxbreak"] is None
    rows = list(csv.DictReader(io.StringIO(run("kernels", t.write(tmp_path, "c.json"), "--csv").stdout)))
    assert rows == []


def test_zero_launch_floor_is_an_error(trace4):
    one_line_error(run("steps", trace4, "--launch-floor-us", "0"), "--launch-floor-us")
