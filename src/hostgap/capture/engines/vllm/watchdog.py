"""Watching vLLM's engine processes: a deadline on every wait, death noticed within a poll.

vLLM's offline frontend waits on EngineCore without a deadline (``SyncMPClient.get_output``
blocks on a queue that a dead EngineCore never fills) and swallows Ctrl-C while EngineCore
starts. hostgap therefore watches the engine itself:

- a :class:`Watchdog` thread polls the engine processes (EngineCore, a child of this process,
  and its Worker) every :data:`POLL_S` seconds without reaping them, and holds the deadline of
  the wait in progress (:meth:`Watchdog.waiting`);
- when a process dies or a deadline passes it records an :class:`EngineFailure` and signals the
  main thread (``SIGUSR2``), whose handler stops the wait by raising :class:`Stop` (a
  ``BaseException``, so vLLM's ``except Exception`` clauses cannot swallow it); the guarded
  call turns it into the :class:`EngineFailure` (one line: which process, its exit code or
  signal, the last lines of the engine log; exit status :data:`EXIT_ENGINE_FAILED`);
- while the watch is on, Ctrl-C raises :class:`Stop` as well and becomes ``KeyboardInterrupt``
  (exit status 130) once the engine processes are ended.

The handlers only raise inside a guarded wait (:meth:`Watchdog.waiting`); a failure noticed
between waits is raised when the next one begins.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from hostgap.errors import HostgapError

EXIT_ENGINE_FAILED = 3
"""Exit status of hostgap when the engine died, timed out or failed a call (2: bad input,
130: interrupted)."""
POLL_S = 0.2
"""How often the watchdog looks at the engine processes."""
LOG_TAIL_LINES = 3
WAKE_SIGNAL = signal.SIGUSR2


class EngineFailure(HostgapError):
    """The engine died, missed a deadline or failed a call: one line, exit status 3."""

    exit_status = EXIT_ENGINE_FAILED


class Stop(BaseException):  # noqa: N818 - a control-flow signal, not an error
    """Raised in the main thread to end a wait on the engine (death, deadline or Ctrl-C)."""


@dataclass(frozen=True)
class Death:
    """One engine process that ended: its role, pid and how it ended (words)."""

    process: str
    pid: int
    status: str


# -- process state without reaping --------------------------------------------------------


def describe_status(wait_status: int | None = None, *, code: int | None = None, sig: int | None = None) -> str:
    """Words for how a process ended: a raw ``waitpid`` status, or an exit code / signal.

    >>> describe_status(9), describe_status(1 << 8), describe_status(code=0), describe_status()
    ('killed by SIGKILL', 'exit code 1', 'exit code 0', 'exit status unknown')
    """
    if wait_status is not None:
        if os.WIFSIGNALED(wait_status):
            sig = os.WTERMSIG(wait_status)
        elif os.WIFEXITED(wait_status):
            code = os.WEXITSTATUS(wait_status)
    if sig is not None:
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    if code is not None:
        return f"exit code {code}"
    return "exit status unknown"


def read_proc_stat(pid: int, root: str = "/proc") -> tuple[str, int | None] | None:
    """(state letter, exit status) of ``pid`` from ``/proc/PID/stat``; None when it is gone.

    The exit status (field 52, ``waitpid`` format) is meaningful only for a zombie."""
    try:
        text = Path(f"{root}/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if not fields:
        return None
    exit_status = int(fields[49]) if len(fields) > 49 and fields[49].lstrip("-").isdigit() else None
    return fields[0], exit_status


@dataclass(frozen=True)
class Proc:
    """A process below this one: pid, parent pid and name (argv[0], else comm)."""

    pid: int
    ppid: int
    name: str


def descendants(root: int | None = None, proc_root: str = "/proc") -> list[Proc]:
    """Every live (non-zombie) process below ``root`` (default: this process), from /proc."""
    root = os.getpid() if root is None else root
    table: dict[int, list[Proc]] = {}
    try:
        entries = [d for d in os.listdir(proc_root) if d.isdigit()]
    except OSError:
        return []
    for d in entries:
        try:
            stat = Path(f"{proc_root}/{d}/stat").read_text()
            argv0 = Path(f"{proc_root}/{d}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2 or fields[0] in ("Z", "X"):
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        p = Proc(int(d), int(fields[1]), argv0 or comm)
        table.setdefault(p.ppid, []).append(p)
    out, todo = [], [root]
    while todo:
        for p in table.get(todo.pop(), []):
            out.append(p)
            todo.append(p.pid)
    return sorted(out, key=lambda p: p.pid)


def child_status(pid: int) -> tuple[bool, str | None]:
    """(ended, how) for a child of this process, without reaping it (``waitid`` + WNOWAIT);
    a child already reaped (by vLLM's own monitor) counts as ended, status unknown."""
    try:
        res = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True, None
    except OSError:
        return False, None
    if res is None or res.si_pid == 0:
        return False, None
    if res.si_code == os.CLD_EXITED:
        return True, describe_status(code=res.si_status)
    return True, describe_status(sig=res.si_status)


def process_status(pid: int, is_child: bool, proc_root: str = "/proc") -> tuple[bool, str | None]:
    """(ended, how) for one engine process; ``how`` None when it cannot be known."""
    if is_child:
        ended, how = child_status(pid)
        if ended:
            return True, how
    st = read_proc_stat(pid, proc_root)
    if st is None:
        return True, None
    state, wait_status = st
    if state in ("Z", "X"):
        return True, describe_status(wait_status) if wait_status is not None else None
    return False, None


def log_tail(log_path: Path | None, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` non-empty lines of the engine log, joined with `` | `` (one line)."""
    if log_path is None:
        return ""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    keep = [
        ln.strip() for ln in lines if ln.strip() and not _TABLE.search(ln) and not set(ln.strip()) <= {"^", "~", " "}
    ]
    return " | ".join(s[:160] for s in keep[-n:])


_TABLE = re.compile(
    r"^\s*-{5,}|\d%\s+\S+\s+\d+(\.\d+)?%|Self (CPU|CUDA|XPU) time total|^\s*Name\s+Self|^USDT:"
    r"|^\(MainProcess "
)
"""Lines that say nothing about the engine processes: the torch profiler's summary table the
Worker prints when a trace is written, Kineto's USDT probe lines, and the frontend's own
records (hostgap's process: what matters there reaches the terminal anyway)."""


# -- the watchdog -------------------------------------------------------------------------


class Watchdog:
    """Watches engine processes and the deadline of the current wait; see the module doc.

    ``processes``: pid -> role (``EngineCore``, ``Worker``); ``children``: the pids that are
    this process's children. ``describe``: called with the problem to build the failure line
    (the engine adds its log path). Use as a context manager around the engine's life."""

    def __init__(
        self,
        processes: dict[int, str] | None = None,
        children: set[int] | None = None,
        log_path: Path | None = None,
        poll_s: float = POLL_S,
        proc_root: str = "/proc",
    ):
        self.processes = dict(processes or {})
        self.children = set(children or ())
        self.log_path = log_path
        self.poll_s = poll_s
        self.proc_root = proc_root
        self.failure: EngineFailure | None = None
        self.death: Death | None = None
        self.interrupted = False
        self._deadline: tuple[float, str] | None = None
        self._depth = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # the main thread has run since the interpreter started, so it has an ident
        self._main = cast(int, threading.main_thread().ident)
        self._saved: dict = {}
        self.where = "the engine"  # context for the failure line (set by the owner)
        self.shown_log: Path | None = None  # the log path the failure line names (kept copy)

    # life -------------------------------------------------------------------------------
    def start(self) -> Watchdog:
        if threading.current_thread() is threading.main_thread():
            self._saved = {s: signal.getsignal(s) for s in (signal.SIGINT, WAKE_SIGNAL)}
            signal.signal(WAKE_SIGNAL, self._on_wake)
            signal.signal(signal.SIGINT, self._on_interrupt)
        self._thread = threading.Thread(target=self._loop, name="hostgap-vllm-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.poll_s + 1)
        for s, h in self._saved.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(s, h)
        self._saved = {}

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def watch(self, processes: dict[int, str], children: set[int]) -> None:
        """Add processes to watch (once the engine has said which they are)."""
        with self._lock:
            self.processes.update(processes)
            self.children |= set(children)

    # waits ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def waiting(self, what: str, timeout_s: float | None, convert: bool = True):
        """A wait on the engine: ended by a death, by ``timeout_s`` (None: no deadline) or by
        Ctrl-C. Raises the :class:`EngineFailure`, or ``KeyboardInterrupt`` for Ctrl-C. With
        ``convert``, another exception from the engine becomes one :class:`EngineFailure`
        line (the death behind it when the engine died); hostgap's own errors pass."""
        self.check()
        saved = self._deadline
        self._deadline = (time.monotonic() + timeout_s, what) if timeout_s is not None else None
        self._depth += 1
        try:
            yield
        except Stop:
            self._raise_outcome(what)
        except HostgapError:
            raise
        except Exception as e:
            if not convert:
                raise
            if self.failure is None:
                problem = self.poll()  # the engine may have died a moment before we looked
                if problem is not None:
                    self.fail(problem, wake=False)
            if self.failure is not None:
                raise self.failure from None
            first = str(e).splitlines()[0][:300] if str(e) else ""
            raise EngineFailure(self.where, f"{what} failed: {type(e).__name__}: {first}{self._log_note()}") from None
        finally:
            self._depth -= 1
            self._deadline = saved
        self.check()

    def expect_exit(self) -> None:
        """Stop treating an engine process's exit as a failure (a shutdown is under way)."""
        with self._lock:
            self.processes.clear()
            self.children.clear()

    def check(self) -> None:
        """Raise the failure or interruption already recorded, if any."""
        if self.interrupted:
            raise KeyboardInterrupt
        if self.failure is not None:
            raise self.failure

    def _raise_outcome(self, what: str):
        if self.interrupted:
            raise KeyboardInterrupt from None
        if self.failure is not None:
            raise self.failure from None
        raise EngineFailure(self.where, f"{what} was stopped") from None

    # signals (main thread) ---------------------------------------------------------------
    def _on_wake(self, _signum, _frame) -> None:
        if self._depth > 0 and (self.failure is not None or self.interrupted):
            raise Stop

    def _on_interrupt(self, _signum, _frame) -> None:
        self.interrupted = True
        if self._depth > 0:
            raise Stop
        raise KeyboardInterrupt

    # the thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self.failure is None:
                problem = self.poll()
                if problem is not None:
                    self.fail(problem)
            elif self._depth > 0:
                self.wake()  # again at every poll until the wait ends: one Stop may be swallowed
            if self.interrupted and self._depth > 0:
                self.wake()

    def poll(self) -> str | None:
        """One look: the problem found (a death or a passed deadline), else None."""
        with self._lock:
            procs = dict(self.processes)
            children = set(self.children)
            deadline = self._deadline
        for pid, role in sorted(procs.items(), key=lambda kv: kv[1] != "Worker"):
            ended, how = process_status(pid, pid in children, self.proc_root)
            if ended:
                self.death = Death(role, pid, how or "exit status unknown")
                return f"{role} (pid {pid}) died: {self.death.status}"
        if deadline is not None and time.monotonic() > deadline[0]:
            return f"{deadline[1]}: no answer from the engine within its deadline"
        return None

    def fail(self, problem: str, wake: bool = True) -> None:
        """Record the failure and wake the main thread if it is waiting on the engine."""
        tail = log_tail(self.log_path)
        self.failure = EngineFailure(
            self.where, f"{problem}{'; engine log: ' + tail if tail else ''}{self._log_note()}"
        )
        if wake:
            self.wake()

    def _log_note(self) -> str:
        shown = self.shown_log or self.log_path
        return f" (log: {shown})" if shown else ""

    def wake(self) -> None:
        if self._saved:  # our handler is installed: interrupt a blocked wait in the main thread
            with contextlib.suppress(OSError, ValueError, ProcessLookupError):
                signal.pthread_kill(self._main, WAKE_SIGNAL)


def end_processes(pids: list[int], grace_s: float = 2.0, proc_root: str = "/proc") -> list[int]:
    """SIGTERM the processes, SIGKILL those still running after ``grace_s``; return the pids
    that had to be killed. Bounded: at most ``grace_s`` + 1 s. A process counts as ended once
    it is a zombie (its parent reaps it; a child of this process is left to vLLM's handle)."""
    alive = [p for p in pids if not process_status(p, False, proc_root)[0]]
    _signal_all(alive, signal.SIGTERM)
    left = wait_ended(alive, grace_s, proc_root)
    _signal_all(left, signal.SIGKILL)
    wait_ended(left, 1.0, proc_root)
    return left


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def wait_ended(pids: list[int], timeout_s: float, proc_root: str) -> list[int]:
    """The pids still running after waiting up to ``timeout_s``."""
    end = time.monotonic() + timeout_s
    left = list(pids)
    while left:
        left = [p for p in left if not process_status(p, False, proc_root)[0]]
        if not left or time.monotonic() >= end:
            break
        time.sleep(0.02)
    return left


# -- other work on the machine -----------------------------------------------------------------

TICK_NS = 1e9 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def cpu_ticks(pids: list[int], proc_root: str = "/proc") -> tuple[int, int] | None:
    """(CPU ticks the whole machine spent busy, ticks spent by ``pids`` with all their
    threads), from ``/proc/stat`` and ``/proc/PID/stat``; None where /proc cannot say."""
    try:
        first = Path(f"{proc_root}/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu" or len(first) < 8:
        return None
    v = [int(x) for x in first[1:9]]
    machine = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # user nice system irq softirq steal
    mine = 0
    for pid in pids:
        try:
            text = Path(f"{proc_root}/{pid}/stat").read_text()
        except OSError:
            continue
        f = text[text.rfind(")") + 2 :].split()
        mine += int(f[11]) + int(f[12])  # utime + stime
    return machine, mine


def other_cpu_ns(before: tuple[int, int] | None, after: tuple[int, int] | None) -> int | None:
    """CPU time that processes other than the watched ones used between two samples (ns,
    tick resolution; >= 0), or None without both samples.

    >>> other_cpu_ns((100, 40), (130, 60)) == 10 * TICK_NS
    True
    """
    if before is None or after is None:
        return None
    return int(max(0, (after[0] - before[0]) - (after[1] - before[1])) * TICK_NS)


@contextlib.contextmanager
def sigint_deferred():
    """Ctrl-C waits until the block ends (a bounded cleanup must not be cut short and leave
    processes behind); a Ctrl-C received meanwhile is raised afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got = []

    def defer(*_):
        got.append(1)

    old = signal.signal(signal.SIGINT, defer)
    try:
        yield
    finally:
        # put back what was there, unless the block installed the right handler itself (a
        # watchdog stopping in the block restores the handler from before it started)
        if signal.getsignal(signal.SIGINT) is defer:
            signal.signal(signal.SIGINT, old)
    if got:
        raise KeyboardInterrupt


def exit_now_if_engine_loaded(status: int) -> None:
    """After an engine failure or Ctrl-C, with vLLM loaded in this process: flush stdout and
    stderr and end the process at once. Tearing vLLM and torch down at interpreter exit takes
    ~10 s on two busy cores (measured), and everything hostgap writes is already closed (files
    are written atomically, the engine processes are ended). Without vLLM loaded: returns."""
    import sys

    if "vllm" not in sys.modules:
        return
    with contextlib.suppress(Exception):  # bounded (end_processes): ~2 s at most
        end_leftovers()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def end_leftovers_if_engine_loaded() -> None:
    """On a failed run's way out (any exit status), with vLLM loaded: end what the engine left
    (:func:`end_leftovers`). An engine that died at start-up leaves its spawned Worker and the
    multiprocessing resource tracker running otherwise (measured: both still there 10 s after
    hostgap ended; the Worker holds the tracker's pipe, so the tracker never sees it close)."""
    import sys

    if "vllm" in sys.modules:
        with contextlib.suppress(Exception):
            end_leftovers()


def group_orphans(proc_root: str = "/proc") -> list[int]:
    """Processes of this process group, started after this one, that lost their parent
    (reparented to init): a child an engine process spawned before it died. A pipeline partner (``hostgap ... | tee``) shares the
    group but keeps its parent, the shell, so it is never one of these."""
    me, group = os.getpid(), os.getpgrp()
    born = _start_ticks(me, proc_root)
    out: list[int] = []
    try:
        entries = [d for d in os.listdir(proc_root) if d.isdigit()]
    except OSError:
        return out
    for d in entries:
        try:
            stat = Path(f"{proc_root}/{d}/stat").read_text()
        except OSError:
            continue
        f = stat[stat.rfind(")") + 2 :].split()
        if (
            len(f) > 19
            and f[0] not in ("Z", "X")
            and int(f[1]) == 1
            and int(f[2]) == group
            and int(d) != me
            and (born is None or int(f[19]) >= born)
        ):  # started after hostgap: of this run
            out.append(int(d))
    return out


def _start_ticks(pid: int, proc_root: str = "/proc") -> int | None:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22)."""
    try:
        stat = Path(f"{proc_root}/{pid}/stat").read_text()
        return int(stat[stat.rfind(")") + 2 :].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def end_leftovers(grace_s: float = 1.0, proc_root: str = "/proc") -> list[int]:
    """End what a run would leave behind when hostgap exits early: every live descendant of this
    process (the ``multiprocessing`` resource tracker among them, which ignores SIGTERM and is
    killed after ``grace_s``) and the orphans of its process group (:func:`group_orphans`).
    Returns the pids that needed SIGKILL."""
    pids = {p.pid for p in descendants(None, proc_root)} | set(group_orphans(proc_root))
    pids.discard(os.getpid())
    return end_processes(sorted(pids), grace_s, proc_root) if pids else []
