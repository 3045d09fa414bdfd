"""The vLLM watchdog without vLLM: process states, deadlines, deaths, Ctrl-C, bounded ends.

Real child processes stand in for EngineCore and its Worker; a blocked ``queue.get`` stands in
for vLLM's wait on a dead engine's output queue. Every blocking call in these tests has its own
long timeout, so a watchdog that fails to act makes the test fail instead of hanging it.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from hostgap.capture.engines.vllm import watchdog as vw
from hostgap.errors import HostgapError

SLEEP = shutil.which("sleep") or "/bin/sleep"


def _zombie(p: subprocess.Popen, timeout: float = 30.0) -> None:
    """Wait until ``p`` has ended but is not reaped (state Z)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = vw.read_proc_stat(p.pid)
        if st and st[0] == "Z":
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {p.pid} did not end")


def _later(seconds: float, fn) -> threading.Timer:
    t = threading.Timer(seconds, fn)
    t.daemon = True
    t.start()
    return t


@pytest.fixture
def child():
    procs = []

    def start(*argv: str) -> subprocess.Popen:
        p = subprocess.Popen(list(argv) if argv else [SLEEP, "600"])
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


# -- process states -----------------------------------------------------------------------


def test_describe_status_of_raw_wait_statuses():
    assert vw.describe_status(signal.SIGKILL) == "killed by SIGKILL"
    assert vw.describe_status(signal.SIGTERM) == "killed by SIGTERM"
    assert vw.describe_status(3 << 8) == "exit code 3"
    assert vw.describe_status(code=0) == "exit code 0"
    assert vw.describe_status(sig=200) == "killed by signal 200"
    assert vw.describe_status() == "exit status unknown"


def test_killed_child_is_seen_without_being_reaped(child):
    p = child()
    assert vw.process_status(p.pid, is_child=True) == (False, None)
    assert vw.process_status(p.pid, is_child=False) == (False, None)
    p.kill()
    _zombie(p)
    assert vw.process_status(p.pid, is_child=True) == (True, "killed by SIGKILL")
    # the same answer from /proc alone (how a grandchild, the Worker, is read)
    assert vw.process_status(p.pid, is_child=False) == (True, "killed by SIGKILL")
    assert p.wait(timeout=10) == -signal.SIGKILL  # still ours to reap: nothing was stolen


def test_exit_code_of_a_child(child):
    p = child(sys.executable, "-c", "import sys; sys.exit(7)")
    _zombie(p)
    assert vw.process_status(p.pid, is_child=True) == (True, "exit code 7")
    assert vw.process_status(p.pid, is_child=False) == (True, "exit code 7")
    assert p.wait(timeout=10) == 7


def test_a_process_gone_from_proc_has_unknown_status(tmp_path):
    assert vw.read_proc_stat(123, root=str(tmp_path)) is None
    assert vw.process_status(123, is_child=False, proc_root=str(tmp_path)) == (True, None)
    (tmp_path / "124").mkdir()
    # comm with spaces and parentheses; state R; 49 more fields
    (tmp_path / "124" / "stat").write_text("124 (VLLM::Worker (x)) R " + " ".join(["0"] * 49) + "\n")
    assert vw.read_proc_stat(124, root=str(tmp_path)) == ("R", 0)
    assert vw.process_status(124, is_child=False, proc_root=str(tmp_path)) == (False, None)


def test_log_tail_is_one_line_of_the_last_lines(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("a\n\nb\n  ^^^^^^\nRuntimeError: c\n")
    assert vw.log_tail(log, 2) == "b | RuntimeError: c"
    assert vw.log_tail(tmp_path / "missing.log") == ""
    assert vw.log_tail(None) == ""


# -- the watchdog ---------------------------------------------------------------------------


def test_dead_engine_core_ends_a_blocked_wait(child, tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("INFO starting\nERROR engine core exited unexpectedly\n")
    core = child()
    q: queue.Queue = queue.Queue()
    with vw.Watchdog({core.pid: "EngineCore"}, {core.pid}, log_path=log, poll_s=0.05) as w:
        w.where = "vLLM engine (tiny)"
        _later(0.3, core.kill)
        with pytest.raises(vw.EngineFailure) as e:
            with w.waiting("generate", None):
                q.get(timeout=120)  # vLLM's get_output on a dead engine: never answered
    msg = str(e.value)
    assert msg.startswith("vLLM engine (tiny): EngineCore (pid %d) died: killed by SIGKILL" % core.pid)
    assert "engine log: INFO starting | ERROR engine core exited unexpectedly" in msg
    assert msg.endswith(f"(log: {log})")
    assert e.value.exit_status == vw.EXIT_ENGINE_FAILED == 3
    assert isinstance(e.value, HostgapError)
    assert w.death == vw.Death("EngineCore", core.pid, "killed by SIGKILL")


def test_worker_death_is_reported_first(child):
    core, worker = child(), child()
    worker.kill()
    _zombie(worker)
    core.kill()
    _zombie(core)
    w = vw.Watchdog({core.pid: "EngineCore", worker.pid: "Worker"}, {core.pid, worker.pid})
    assert w.poll() == f"Worker (pid {worker.pid}) died: killed by SIGKILL"


def test_deadline_ends_a_wait():
    w = vw.Watchdog(poll_s=0.05)
    with w, pytest.raises(vw.EngineFailure, match="stop the profiler: no answer from the engine within its deadline"):
        with w.waiting("stop the profiler", 0.2):
            queue.Queue().get(timeout=120)


def test_nested_wait_restores_the_outer_deadline():
    w = vw.Watchdog()
    with w.waiting("outer", 1000.0):
        outer = w._deadline
        with w.waiting("inner", None):
            assert w._deadline is None
        assert w._deadline == outer
    assert w._deadline is None and w._depth == 0


def test_failure_found_between_waits_is_raised_at_the_next_one():
    w = vw.Watchdog()
    w.fail("EngineCore (pid 1) died: exit code 1", wake=False)
    with pytest.raises(vw.EngineFailure, match="exit code 1"):
        with w.waiting("add a request", 10):
            raise AssertionError("the wait must not start")


def test_engine_exceptions_become_one_line(child, tmp_path):
    w = vw.Watchdog(log_path=tmp_path / "engine.log")
    w.where = "vLLM engine (tiny)"
    with pytest.raises(vw.EngineFailure) as e:
        with w.waiting("stop the profiler", 10):
            raise RuntimeError("call failed\nTraceback (most recent call last): ...")
    assert str(e.value) == (
        f"vLLM engine (tiny): stop the profiler failed: RuntimeError: call failed (log: {tmp_path / 'engine.log'})"
    )
    with pytest.raises(HostgapError, match="mine"):  # hostgap's own errors pass unchanged
        with w.waiting("x", 10):
            raise HostgapError("vllm", "mine")
    with pytest.raises(ValueError):  # convert=False: the caller words it
        with w.waiting("engine start-up", 10, convert=False):
            raise ValueError("bad option")
    # an exception that comes from a dead engine is reported as the death behind it
    core = child()
    core.kill()
    _zombie(core)
    w2 = vw.Watchdog({core.pid: "EngineCore"}, {core.pid})
    with pytest.raises(vw.EngineFailure, match=f"EngineCore \\(pid {core.pid}\\) died: killed by SIGKILL"):
        with w2.waiting("stop the profiler", 10):
            raise RuntimeError("Engine core is dead")


def test_expected_exit_is_not_a_failure(child):
    core = child()
    w = vw.Watchdog({core.pid: "EngineCore"}, {core.pid})
    w.expect_exit()
    core.kill()
    _zombie(core)
    assert w.poll() is None


def test_ctrl_c_ends_a_wait_even_when_the_engine_swallows_it():
    """vLLM catches KeyboardInterrupt while it waits for EngineCore to start: the watchdog's
    Stop is not a KeyboardInterrupt, and it is raised again at every poll."""
    swallowed = []
    w = vw.Watchdog(poll_s=0.05)
    with w:
        _later(0.2, lambda: os.kill(os.getpid(), signal.SIGINT))
        with pytest.raises(KeyboardInterrupt):
            with w.waiting("engine start-up", None, convert=False):
                end = time.monotonic() + 120
                while time.monotonic() < end:
                    try:
                        time.sleep(0.01)
                    except BaseException as e:  # noqa: BLE001 - the worst case: swallow anything once
                        if swallowed:
                            raise
                        swallowed.append(type(e).__name__)
    assert swallowed == ["Stop"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_ctrl_c_outside_a_wait_is_a_plain_interrupt():
    w = vw.Watchdog()
    with w:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        assert w.interrupted
        with pytest.raises(KeyboardInterrupt):  # the next wait does not start
            with w.waiting("generate", 10):
                raise AssertionError("the wait must not start")


# -- bounded ends ------------------------------------------------------------------------------


def test_end_processes_kills_what_ignores_sigterm(child):
    stubborn = child(
        sys.executable,
        "-c",
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(600)",
    )
    polite = child()
    time.sleep(0.5)  # let the stubborn one install its handler
    killed = vw.end_processes([stubborn.pid, polite.pid], grace_s=0.5)
    assert killed == [stubborn.pid]
    assert stubborn.wait(timeout=30) == -signal.SIGKILL
    assert polite.wait(timeout=30) == -signal.SIGTERM


def test_ctrl_c_during_cleanup_waits_for_it():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with vw.sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append(1)
    assert done == [1]
    with vw.sigint_deferred():
        pass  # no Ctrl-C: nothing raised


# -- other work on the machine ------------------------------------------------------------------


def test_cpu_ticks_from_proc(tmp_path):
    (tmp_path / "stat").write_text("cpu  10 1 5 100 7 2 3 4 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n")
    (tmp_path / "42").mkdir()
    # fields after the name: state, ppid, ... utime (14th field) = 6, stime (15th) = 4
    (tmp_path / "42" / "stat").write_text("42 (VLLM::Worker) S 1 " + " ".join(["0"] * 9) + " 6 4 99 99\n")
    # busy = user + nice + system + irq + softirq + steal (idle and iowait left out)
    assert vw.cpu_ticks([42, 43], proc_root=str(tmp_path)) == (10 + 1 + 5 + 2 + 3 + 4, 6 + 4)
    assert vw.cpu_ticks([42], proc_root=str(tmp_path / "none")) is None


def test_other_cpu_is_never_negative():
    assert vw.other_cpu_ns((100, 40), (110, 60)) == 0  # tick sampling: the engine's share can lead
    assert vw.other_cpu_ns(None, (1, 1)) is None and vw.other_cpu_ns((1, 1), None) is None
    assert vw.other_cpu_ns((0, 0), (3, 1)) == int(2 * vw.TICK_NS)


def test_cpu_ticks_of_this_machine_grow_with_work():
    a = vw.cpu_ticks([os.getpid()])
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    b = vw.cpu_ticks([os.getpid()])
    assert b[0] >= a[0] and b[1] > a[1]


def test_a_watchdog_stopped_during_cleanup_leaves_the_original_handler():
    before = signal.getsignal(signal.SIGINT)
    w = vw.Watchdog().start()
    assert signal.getsignal(signal.SIGINT) == w._on_interrupt
    with vw.sigint_deferred():
        w.stop()  # as close() does: the watchdog's own handler must not come back afterwards
    assert signal.getsignal(signal.SIGINT) is before


def test_log_tail_skips_the_profiler_table(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(
        "(EngineCore pid=5) ERROR [core.py:1] RuntimeError: worker died\n"
        "-------------------------------------------------------  ------------  ------------\n"
        "                                                   Name    Self CPU %      Self CPU\n"
        "aten::unsqueeze         0.00%       5.200us         0.00%       6.111us       3.056us             2\n"
        "USDT:2026-12-01 20:50:44 5771:5771 SyncActivityProfilerHandler.cpp:59] profiler_stop\n"
        "Self CPU time total: 135.063ms\n"
    )
    assert vw.log_tail(log, 3) == "(EngineCore pid=5) ERROR [core.py:1] RuntimeError: worker died"


def test_log_tail_leaves_out_the_frontends_records(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(
        "(EngineCore pid=5) INFO [core.py:1] ready\n"
        "(MainProcess pid=4) WARNING [base.py:380] ValueError: Tokenizer not available\n"
    )
    assert vw.log_tail(log) == "(EngineCore pid=5) INFO [core.py:1] ready"


def test_exit_now_only_with_vllm_loaded(monkeypatch):
    calls = []
    monkeypatch.setattr(vw.os, "_exit", lambda status: calls.append(status))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    vw.exit_now_if_engine_loaded(3)
    assert calls == []
    monkeypatch.setitem(sys.modules, "vllm", object())
    vw.exit_now_if_engine_loaded(130)
    assert calls == [130]


def test_a_failure_outside_a_wait_does_not_interrupt_other_work():
    """The wake-up signal stops only a wait on the engine: between waits (hostgap analysing a
    trace, say) the failure waits for the next wait to begin."""
    with vw.Watchdog() as w:
        w.fail("EngineCore (pid 1) died: exit code 1")  # signals the main thread now
        time.sleep(0.2)  # no Stop may land here
        with pytest.raises(vw.EngineFailure):
            with w.waiting("generate", 10):
                pass


def test_descendants_from_proc(tmp_path):
    def proc(pid, ppid, comm, state="S", argv=b""):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} " + " ".join(["0"] * 48) + "\n")
        (d / "cmdline").write_bytes(argv)

    proc(10, 1, "python")
    proc(11, 10, "VLLM::EngineCor", argv=b"VLLM::EngineCore\0-c\0")
    proc(12, 11, "VLLM::Worker")  # no cmdline (a kernel-style process): the name is comm
    proc(13, 11, "gone", state="Z")
    proc(14, 1, "other")
    (tmp_path / "self").mkdir()
    assert vw.descendants(10, proc_root=str(tmp_path)) == [
        vw.Proc(11, 10, "VLLM::EngineCore"),
        vw.Proc(12, 11, "VLLM::Worker"),
    ]
    assert vw.descendants(14, proc_root=str(tmp_path)) == []
    assert vw.descendants(10, proc_root=str(tmp_path / "missing")) == []


def test_a_short_stat_line_has_no_exit_status(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("7 (old kernel) Z 1 0 0\n")  # no field 52 before Linux 3.5
    assert vw.read_proc_stat(7, root=str(tmp_path)) == ("Z", None)
    assert vw.process_status(7, is_child=False, proc_root=str(tmp_path)) == (True, None)
