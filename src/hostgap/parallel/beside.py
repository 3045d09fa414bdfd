"""A function computed in a child process forked now, beside the caller; its result read back when
the caller asks for it.

Made for work over large arrays the caller already holds (a trace's columns): the child shares
them copy-on-write, so nothing is copied or pickled on the way in; only the result comes back,
pickled through a pipe (numpy arrays as their raw memory, pickle protocol 5's out-of-band
buffers, read straight into the arrays' new memory).

Where a child cannot be forked safely, the function is computed in the caller when its result is
asked for: off Linux (fork is unsafe where system frameworks keep threads, as on macOS, and
absent on Windows), or while other Python threads run (fork copies only the calling thread; a
lock another thread held would stay held in the child). A child that fails in any way (its
function raises, it is killed, its result does not arrive whole) is likewise replaced by the
function computed in the caller. So the result, or the exception, is the one a call in the
caller would give; only where the time is spent differs.

A child whose result is never asked for is killed and reaped when its :class:`Beside` is closed,
collected, or at the interpreter's exit: none outlives the process that started it.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

_HEAD = struct.Struct("<QQ")
"""Before the pickle: its length and the number of out-of-band buffers; each buffer's length
follows, then the pickle, then the buffers."""
_PIPE_BYTES = 1 << 20
"""The pipe's buffer asked for (Linux's default limit for an unprivileged process): fewer
switches between the writer and the reader for a result of many megabytes."""


def can_fork() -> bool:
    """True where a child may be forked safely now: on Linux, with no other Python thread running."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


class Beside(Generic[T]):
    """``fn()``, computed in a child forked at construction when ``fork`` is true and
    :func:`can_fork`, else in the caller at :meth:`result`; the same value either way."""

    def __init__(self, fn: Callable[[], T], *, fork: bool = True) -> None:
        self._fn = fn
        self._pid: int | None = None
        self._fd = -1
        self._done = False
        self._value: T | None = None
        self._finalizer: weakref.finalize | None = None
        if fork and can_fork():
            self._start()

    @property
    def forked(self) -> bool:
        """Whether a child is computing (or computed) the value."""
        return self._pid is not None

    def _start(self) -> None:
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # no memory or processes left for a child: computed here instead
            os.close(r)
            os.close(w)
            return
        if pid == 0:  # pragma: no cover - the child (its lines run in another process)
            code = 1
            try:
                os.close(r)
                try:
                    value = self._fn()
                except BaseException:  # the caller computes it again and meets the error itself
                    pass
                else:
                    _send(w, value)
                    code = 0
            finally:
                os._exit(code)  # never the caller's exit code: no atexit, no flushing its buffers
        os.close(w)
        self._pid, self._fd = pid, r
        self._finalizer = weakref.finalize(self, _stop, pid, r)

    def result(self) -> T:
        """The value (computed once): the child's, or the function's in this process."""
        if not self._done:
            value = self._collect() if self._pid is not None else _FAILED
            self._value = self._fn() if value is _FAILED else value  # type: ignore[assignment]
            self._done = True
        return self._value  # type: ignore[return-value]

    def _collect(self) -> object:
        assert self._finalizer is not None
        self._finalizer.detach()
        try:
            value = _receive(self._fd)
        except BaseException:
            _stop(self._pid, self._fd)  # interrupted while waiting: the child goes too
            raise
        os.close(self._fd)
        _, status = os.waitpid(self._pid, 0)  # type: ignore[arg-type]
        return value if os.waitstatus_to_exitcode(status) == 0 else _FAILED

    def close(self) -> None:
        """Kill and reap a child whose value was not asked for (nothing to do otherwise)."""
        if self._finalizer is not None:
            self._finalizer()


class _Failed:
    pass


_FAILED = _Failed()


def _send(fd: int, value: object) -> None:  # pragma: no cover - runs in the child
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    _grow_pipe(fd)
    head = _HEAD.pack(len(data), len(raws)) + b"".join(struct.pack("<Q", r.nbytes) for r in raws)
    for part in (head, data, *raws):
        view = memoryview(part).cast("B")
        while view:
            view = view[os.write(fd, view) :]
    os.close(fd)


def _receive(fd: int) -> object:
    """The child's value, or _FAILED when what arrives is short or is not a pickle."""
    try:
        n_data, n_buf = _HEAD.unpack(_read(fd, _HEAD.size))
        sizes = [n for (n,) in struct.iter_unpack("<Q", _read(fd, 8 * n_buf))]
        data = _read(fd, n_data)
        return pickle.loads(data, buffers=[_read(fd, n) for n in sizes])
    except Exception:  # short (EOFError), or not what _send wrote
        return _FAILED


def _read(fd: int, n: int) -> bytearray:
    """Exactly n bytes from the pipe; EOFError when it ends first."""
    out = bytearray(n)
    view, got = memoryview(out), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError(f"{got} of {n} bytes")
        got += k
    return out


def _grow_pipe(fd: int) -> None:  # pragma: no cover - runs in the child
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
    except OSError:
        pass  # a smaller pipe is only slower


def _stop(pid: int | None, fd: int) -> None:
    """Kill and reap the child, close its pipe (each step tolerant of its being done already)."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass
