"""A function computed in a forked child (hostgap.parallel.beside): the same value or error as in
the caller, the fallback on every failure, and no child left behind."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest

from hostgap.parallel import beside as B
from hostgap.parallel.beside import Beside, can_fork

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are forked on Linux only")


pytestmark = pytest.mark.usefixtures("one_thread")  # (conftest: forking needs no other thread)


def alive(pid: int) -> bool:
    """Whether ``pid`` is still a child of this process (running, or exited and not reaped)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


@linux
def test_the_child_neither_flushes_the_callers_buffers_nor_runs_its_exit_code(tmp_path):
    """os._exit: output the caller buffered before the fork is written once, by the caller, and the
    caller goes on after the fork (first in this file: a fork whose two sides were swapped would end
    the test process itself, without a failure, in the tests below)."""
    out = tmp_path / "out.txt"
    code = f"""
import atexit, sys
sys.path.insert(0, {str(os.path.dirname(B.__file__))!r} + "/../..")
from hostgap.parallel.beside import Beside
f = open({str(out)!r}, "w", buffering=1 << 16)
f.write("buffered once\\n")
atexit.register(lambda: f.write("exit code once\\n"))
b = Beside(lambda: 7)
assert b.forked and b.result() == 7
"""
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)
    assert out.read_text() == "buffered once\nexit code once\n"


@linux
def test_the_childs_value_comes_back_whole_arrays_included():
    parent = os.getpid()
    big = np.arange(3_000_000, dtype=np.int64)  # 24 MB: many times the pipe's buffer

    def work():
        return {"pid": os.getpid(), "sum": int(big.sum()), "twice": big * 2, "empty": np.zeros(0, np.int32), "f": 0.1}

    b = Beside(work)
    assert b.forked
    got = b.result()
    assert got["pid"] != parent  # computed in the child
    assert got["sum"] == int(big.sum())
    np.testing.assert_array_equal(got["twice"], big * 2)
    assert got["twice"].dtype == np.int64 and got["twice"].flags.writeable
    assert got["empty"].dtype == np.int32 and got["empty"].shape == (0,)
    assert got["f"] == 0.1
    assert b.result() is got  # computed once
    assert not alive(b._pid)  # reaped


@linux
def test_a_child_that_fails_is_replaced_by_the_caller():
    parent = os.getpid()

    def work():
        if os.getpid() != parent:
            raise RuntimeError("only in the child")
        return "computed in the caller"

    b = Beside(work)
    assert b.forked
    assert b.result() == "computed in the caller"


@linux
def test_the_callers_own_error_is_raised_as_a_call_would():
    def work():
        raise ValueError("bad input")

    b = Beside(work)
    with pytest.raises(ValueError, match="bad input"):
        b.result()


@linux
def test_a_killed_child_is_replaced_by_the_caller():
    parent = os.getpid()

    def work():
        if os.getpid() != parent:
            time.sleep(60)
        return 42

    b = Beside(work)
    os.kill(b._pid, 9)
    assert b.result() == 42


@linux
def test_a_short_or_broken_result_is_not_trusted(monkeypatch):
    parent = os.getpid()
    real_send = B._send

    def half_send(fd, value):  # the child dies half-way through sending
        os.write(fd, B._HEAD.pack(1000, 0))
        os.write(fd, b"x" * 10)
        os.close(fd)

    monkeypatch.setattr(B, "_send", half_send)
    b = Beside(lambda: "the caller's" if os.getpid() == parent else "the child's")
    assert b.result() == "the caller's"

    def garbage(fd, value):  # whole, but not a pickle
        os.write(fd, B._HEAD.pack(4, 0) + b"junk")
        os.close(fd)

    monkeypatch.setattr(B, "_send", garbage)
    b = Beside(lambda: "the caller's" if os.getpid() == parent else "the child's")
    assert b.result() == "the caller's"
    monkeypatch.setattr(B, "_send", real_send)
    b = Beside(lambda: "the caller's" if os.getpid() == parent else "the child's")
    assert b.result() == "the child's"


def test_without_fork_it_runs_in_the_caller_when_asked():
    calls = []
    b = Beside(lambda: calls.append(os.getpid()) or len(calls), fork=False)
    assert not b.forked and calls == []
    assert b.result() == 1 and b.result() == 1
    assert calls == [os.getpid()]


@linux
def test_no_fork_while_another_thread_runs():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not can_fork()
        b = Beside(os.getpid)
        assert not b.forked
        assert b.result() == os.getpid()
    finally:
        stop.set()
        t.join()
    assert can_fork()


@linux
def test_close_and_collection_leave_no_child():
    parent = os.getpid()

    def slow():
        if os.getpid() != parent:
            time.sleep(60)
        return 1

    b = Beside(slow)
    pid = b._pid
    assert alive(pid)
    b.close()
    assert not alive(pid)
    b.close()  # twice: nothing left to do

    b = Beside(slow)
    pid = b._pid
    del b
    import gc

    gc.collect()
    assert not alive(pid)


@linux
def test_an_interrupted_wait_takes_the_child_with_it(monkeypatch):
    parent = os.getpid()
    b = Beside(lambda: time.sleep(60) if os.getpid() != parent else 0)
    pid = b._pid

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(B, "_receive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        b.result()
    assert not alive(pid)


@linux
@pytest.mark.parametrize("ending", ["return", "raise", "sigint"])
def test_a_process_that_ends_takes_its_child_along(tmp_path, ending):
    """A child whose value was never asked for is killed when the process that forked it ends:
    normally, on an uncaught error, or on Ctrl-C (SIGINT to the process alone)."""
    import signal
    import subprocess

    pidfile = tmp_path / "child.pid"
    code = f"""
import os, sys, time
sys.path.insert(0, {str(os.path.dirname(B.__file__))!r} + "/../..")
from hostgap.parallel.beside import Beside
parent = os.getpid()
b = Beside(lambda: time.sleep(120) if os.getpid() != parent else 0)
open({str(pidfile)!r}, "w").write(str(b._pid))
if {ending!r} == "raise":
    raise RuntimeError("an error the command did not expect")
if {ending!r} == "sigint":
    time.sleep(120)
"""
    p = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    child = int(pidfile.read_text())
    if ending == "sigint":
        p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    # (an uncaught KeyboardInterrupt ends Python by the signal itself, after its exit handlers)
    assert p.returncode == {"return": 0, "raise": 1, "sigint": -signal.SIGINT}[ending]
    gone = time.monotonic() + 10
    while time.monotonic() < gone:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        pytest.fail(f"child {child} outlived the process that forked it")
