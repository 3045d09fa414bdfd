"""An engine that fails, hangs or dies ends ``hostgap measure`` cleanly (no vLLM needed).

A stand-in ``vllm`` package (written to a temporary folder and put first on ``PYTHONPATH``)
starts an ``VLLM::EngineCore`` process with a ``VLLM::Worker`` child, the way vLLM's V1 engine
does, and behaves as vLLM does when things go wrong: its start-up swallows KeyboardInterrupt;
its step blocks on a queue that a dead engine never fills. The real engine is killed the same
way in ``test_vllm_integration.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

FAKE_VLLM = textwrap.dedent('''
    """A stand-in for vLLM's offline engine (hostgap's failure tests)."""
    import os, queue, subprocess, sys, time
    from pathlib import Path

    __version__ = "0.0+fake"
    MODE = os.environ.get("FAKE_VLLM_MODE", "ok")
    MARK = os.environ.get("FAKE_VLLM_MARK")


    def _mark(what):
        if MARK:
            with open(MARK, "a") as f:
                f.write(what + "\\n")


    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw


    class _Core:
        def call_utility(self, *args):
            return None

        def shutdown(self, timeout=None):
            for p in LLM.procs:
                p.terminate()


    class _Engine:
        def __init__(self):
            self.engine_core = _Core()
            self.pending = []
            self.outputs = queue.Queue()

        def add_request(self, rid, prompt, params):
            self.pending.append(rid)

        def has_unfinished_requests(self):
            return bool(self.pending)

        def step(self):
            _mark("step")
            return [self.outputs.get()]  # like SyncMPClient.get_output: no deadline


    class LLM:
        procs = []

        def __init__(self, **kw):
            print("INFO fake engine starting", file=sys.stderr, flush=True)
            # EngineCore (our child) with its Worker (a grandchild), named as vLLM names them
            core = subprocess.Popen(
                ["VLLM::EngineCore", "-c", "(exec -a VLLM::Worker sleep 600) & wait"],
                executable="/bin/bash")
            LLM.procs.append(core)
            time.sleep(0.5)
            if MODE == "fail-start":
                print("ValueError: the fake engine refuses this model", file=sys.stderr, flush=True)
                raise RuntimeError("Engine core initialization failed. See root cause above.")
            if MODE == "hang-start":
                _mark("starting")
                while True:  # vLLM swallows KeyboardInterrupt while EngineCore starts
                    try:
                        time.sleep(0.05)
                    except KeyboardInterrupt:
                        pass
            self.llm_engine = _Engine()
            _mark("up")

        def start_profile(self):
            pass

        def stop_profile(self):
            pass

        def collective_rpc(self, method):
            return [None]
''')

FAKE_PLATFORMS = "class _P:\n    device_type = 'cpu'\n\ncurrent_platform = _P()\n"


@pytest.fixture
def fake_vllm(tmp_path):
    pkg = tmp_path / "fake" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_VLLM)
    (pkg / "platforms.py").write_text(FAKE_PLATFORMS)
    return tmp_path / "fake"


def _start(fake: Path, tmp_path: Path, mode: str) -> tuple[subprocess.Popen, Path, Path]:
    mark, out = tmp_path / "mark.txt", tmp_path / "runs"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]),
        FAKE_VLLM_MODE=mode,
        FAKE_VLLM_MARK=str(mark),
        PYTHONUNBUFFERED="1",
    )
    args = [
        sys.executable,
        "-m",
        "hostgap",
        "measure",
        "-p",
        "tiny",
        "--engine",
        "vllm",
        "--device",
        "cpu",
        "--n2",
        "4",
        "-r",
        "1",
        "--traced-repeats",
        "1",
        "--warmup",
        "1",
        "--no-db",
        "-q",
        "--out",
        str(out),
    ]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env), mark, out


def _wait_mark(p: subprocess.Popen, mark: Path, what: str, timeout: float = 240) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if mark.exists() and what in mark.read_text().split():
            return
        if p.poll() is not None:
            raise AssertionError(p.communicate())
        time.sleep(0.05)
    p.kill()
    raise AssertionError(f"the fake engine never reached {what!r}")


def _procs() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, argv[0], state) of every process (from /proc; no psutil needed)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            argv0 = (d / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        out[int(d.name)] = (int(fields[1]), argv0, fields[0])
    return out


def _engine_procs(pid: int) -> dict[str, int]:
    """The stand-in engine processes below ``pid``: argv[0] -> pid."""
    procs = _procs()
    below, found = {pid}, {}
    for _ in range(4):
        for p, (ppid, argv0, _state) in procs.items():
            if ppid in below and p not in below:
                below.add(p)
                if argv0.startswith("VLLM::"):
                    found[argv0] = p
    return found


def _finish(p: subprocess.Popen, bound_s: float = 60) -> tuple[str, str, float]:
    """Wait for hostgap to end; (stdout, stderr, seconds it took). A hang fails the test."""
    t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"hostgap did not end within {bound_s} s: {err[-2000:]}") from None
    return out, err, time.monotonic() - t0


def _none_left(mark: Path) -> None:
    """No stand-in engine process of this test is still running anywhere on the machine."""
    left = []
    for p, (_ppid, argv0, state) in _procs().items():
        if argv0.startswith("VLLM::") and state not in ("Z", "X"):
            try:
                env = Path(f"/proc/{p}/environ").read_bytes()
            except OSError:
                continue
            if f"FAKE_VLLM_MARK={mark}".encode() in env.split(b"\0"):
                left.append(p)
    assert left == [], f"engine processes left running: {left}"


def _failed_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.name.endswith(".failed")]
    assert len(dirs) == 1, list(out.iterdir())
    assert not [d for d in out.iterdir() if not d.name.endswith(".failed")]  # no half-written run
    return dirs[0]


@pytest.mark.slow
def test_failed_start_leaves_its_log_where_the_message_says(fake_vllm, tmp_path):
    p, mark, out = _start(fake_vllm, tmp_path, "fail-start")
    _out, err, _took = _finish(p, 240)
    assert p.returncode == 2, err
    line = [ln for ln in err.splitlines() if ln.startswith("hostgap: error:")]
    assert len(line) == 1 and "Traceback" not in err, err
    assert "vLLM could not start the engine: ValueError: the fake engine refuses this model" in line[0]
    log = Path(line[0].rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file() and log.parent == _failed_dir(out)
    assert "INFO fake engine starting" in log.read_text()
    facts = json.loads((log.parent / "engine.json").read_text())
    assert facts["preset"] == "tiny" and facts["options"]["dtype"]
    assert (log.parent / "model-config.json").is_file()
    _none_left(mark)


@pytest.mark.slow
def test_ctrl_c_during_start_up_exits_130(fake_vllm, tmp_path):
    p, mark, out = _start(fake_vllm, tmp_path, "hang-start")
    _wait_mark(p, mark, "starting")
    procs = _engine_procs(p.pid)
    assert set(procs) == {"VLLM::EngineCore", "VLLM::Worker"}
    p.send_signal(signal.SIGINT)
    _out, err, took = _finish(p, 60)
    assert p.returncode == 130, err
    assert "hostgap: interrupted" in err and "Traceback" not in err
    _none_left(mark)
    assert (_failed_dir(out) / "engine.log").is_file()


@pytest.mark.slow
def test_engine_death_mid_run_ends_hostgap(fake_vllm, tmp_path, victim="VLLM::EngineCore"):
    p, mark, out = _start(fake_vllm, tmp_path, "ok")
    _wait_mark(p, mark, "step")  # hostgap now waits on the engine's output queue
    procs = _engine_procs(p.pid)
    os.kill(procs[victim], signal.SIGKILL)
    _out, err, took = _finish(p, 60)
    assert p.returncode == 3, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("hostgap: error: vLLM engine (tiny): "), err
    role = victim.split("::")[1]
    assert f"{role} (pid {procs[victim]}) died" in lines[0]
    assert "died: killed by SIGKILL" in lines[0]  # EngineCore is our child: its signal is known
    log = Path(lines[0].rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file() and log.parent == _failed_dir(out)
    assert "died" in json.loads((log.parent / "engine.json").read_text())["problem"]
    _none_left(mark)
