"""``hostgap analyze`` end to end: JSON/CSV/terminal output, options, and one-line errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from conftest import annotation, cpu_op, gpu_annotation, kernel, launch, memcpy
from hostgap import SCHEMA_VERSION
from hostgap.cli import cli
from test_load_kineto import bad_files

US = 1000


def run(*args):
    return CliRunner().invoke(cli, ["analyze", *args], catch_exceptions=False)


def micro(kineto_trace, **top):
    events = [
        launch(ts=1, dur=2, corr=1),
        kernel("gemm", ts=5, dur=10, corr=1),
        launch(ts=40, dur=2, corr=2),
        kernel("gemm", ts=50, dur=10, corr=2),
        memcpy(ts=61, dur=1, nbytes=64, corr=3),
        annotation("ProfilerStep#7", ts=0, dur=70),
        gpu_annotation("ProfilerStep#7", ts=4, dur=60),
        {"ph": "X", "cat": "kernel", "name": "neg", "pid": 0, "tid": 7, "ts": 3, "dur": -2},
    ]
    return kineto_trace(events, **top)


def test_json_document(kineto_trace):
    path = micro(kineto_trace, distributedInfo={"rank": 2, "world_size": 4})
    r = run(path, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert (doc["trace"], doc["format"], doc["rank"], doc["world_size"]) == (path, "kineto", 2, 4)
    (d,) = doc["devices"]
    assert (d["span_ns"], d["busy_ns"], d["idle_ns"], d["kernel_sum_ns"], d["kernel_count"]) == (
        57 * US,
        21 * US,
        36 * US,
        20 * US,
        2,
    )
    (w,) = doc["windows"]
    assert (w["name"], w["source"], w["span_ns"], w["busy_ns"]) == (
        "ProfilerStep#7",
        "gpu_user_annotation",
        60 * US,
        21 * US,
    )
    # the kernel launched at 40 started 48 µs after the previous op ended at 15: the launch came
    # after the stream went idle, so host-wait
    assert d["idle_gaps"]["count"]["host_wait"] == 1
    assert doc["skipped"] == {"negative duration": 1}
    assert r.stderr == ""


def test_several_traces_give_an_array(kineto_trace):
    a, b = micro(kineto_trace), micro(kineto_trace)
    r = run(a, b, "--json", "--quiet")
    assert r.exit_code == 0
    docs = json.loads(r.stdout)
    assert isinstance(docs, list) and [d["trace"] for d in docs] == [a, b]


def test_gap_threshold_option(kineto_trace):
    # one 10 µs gap (6 -> 16); both launches came before it, so not host-wait
    path = kineto_trace(
        [
            launch(ts=1, dur=1, corr=1),
            launch(ts=3, dur=1, corr=2),
            kernel("a", ts=5, dur=1, corr=1),
            kernel("b", ts=16, dur=1, corr=2),
        ]
    )
    g30 = json.loads(run(path, "--json").stdout)["devices"][0]["idle_gaps"]
    g5 = json.loads(run(path, "--json", "--gap-threshold-us", "5").stdout)["devices"][0]["idle_gaps"]
    assert g30["threshold_ns"] == 30 * US and g30["count"]["kernel_wait"] == 1
    assert g5["threshold_ns"] == 5 * US and g5["count"]["other"] == 1 and g5["count"]["kernel_wait"] == 0


def test_kernels_without_any_launch(kineto_trace):
    path = kineto_trace([kernel("a", ts=0, dur=1), kernel("b", ts=5, dur=1)])
    r = CliRunner().invoke(cli, ["analyze", path, "--json"])
    assert r.exit_code == 0, repr(r.exception)
    assert json.loads(r.stdout)["links"]["unlinked_gpu_ops"] == 2


def test_csv(kineto_trace):
    path = micro(kineto_trace)
    r = run(path, "--csv")
    assert r.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [x["scope"] for x in rows] == ["device", "window"]
    assert int(rows[0]["busy_ns"]) == 21 * US and int(rows[1]["span_ns"]) == 60 * US


def test_terminal_output(kineto_trace):
    path = micro(kineto_trace, deviceProperties=[{"id": 0, "name": "NVIDIA H200"}])
    r = run(path)
    assert r.exit_code == 0
    for text in ("NVIDIA H200", "ProfilerStep#7", "cudaLaunchKernel", "negative duration"):
        assert text in r.stdout


def test_cpu_only_says_so(kineto_trace):
    path = kineto_trace([cpu_op("aten::mm", ts=0, dur=5)])
    r = run(path)
    assert r.exit_code == 0 and "no device activity" in r.stdout
    doc = json.loads(run(path, "--json").stdout)
    assert doc["device_activity"] is False and doc["devices"] == []


def test_help_has_an_example():
    r = run("--help")
    assert r.exit_code == 0 and "hostgap analyze" in r.stdout and "--json" in r.stdout


CASES = [
    "truncated gzip",
    "invalid json",
    "no traceEvents",
    "json array",
    "empty file",
    "empty gzip",
    "png",
    "plain text",
    "nsys-rep",
    "missing",
    "sqlite without cuda tables",
    "directory",
]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_one_line_exit_2(tmp_path, case):
    path, word = bad_files(tmp_path)[case]
    if case == "directory":  # a directory is a trace set: the bad one holds no traces
        (tmp_path / "empty").mkdir()
        path, word = str(tmp_path / "empty"), "no trace files"
    r = run(path, "--json")
    assert r.exit_code == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"hostgap: error: {path}: ")
    assert word.lower() in lines[0].lower()
    assert "Traceback" not in r.output and r.stdout == ""


def test_bad_second_trace_fails_the_command(tmp_path, kineto_trace):
    good = micro(kineto_trace)
    path, _ = bad_files(tmp_path)["invalid json"]
    r = run(good, path, "--json")
    assert r.exit_code == 2 and path in r.stderr and len(r.stderr.splitlines()) == 1


def test_real_process_no_traceback(tmp_path):
    path, _ = bad_files(tmp_path)["truncated gzip"]
    p = subprocess.run([sys.executable, "-m", "hostgap", "analyze", path], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [p.stderr.strip()] and p.stderr.startswith(f"hostgap: error: {path}: ")
    assert "Traceback" not in p.stderr and p.stdout == ""
