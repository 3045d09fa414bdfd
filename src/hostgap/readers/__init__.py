"""Files in, :class:`hostgap.events.Trace` out. The format is detected from content.

>>> from hostgap.readers import load_trace
>>> trace = load_trace("run/trace.json.gz")      # Kineto JSON (.json or gzip)
>>> trace = load_trace("profile.sqlite")          # Nsight Systems SQLite export
"""

from __future__ import annotations

import os
from collections.abc import Callable

from hostgap.errors import HostgapError
from hostgap.events import Trace

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_MAGICS = (b"NSYS", b"QDST")


def sniff(path: str) -> str:
    """Return "kineto" or "nsys" from the file's first bytes; HostgapError otherwise."""
    if not os.path.exists(path):
        raise HostgapError(path, "no such file")
    if os.path.isdir(path):
        raise HostgapError(path, "is a directory, not a trace file")
    with open(path, "rb") as f:
        head = f.read(64)
    if not head:
        raise HostgapError(path, "empty file")
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC):
        return "kineto"
    if path.endswith(".nsys-rep") or head.startswith(NSYS_REP_MAGICS):
        raise HostgapError(
            path,
            "is an Nsight Systems report; export it first: "
            f"nsys export --type sqlite --output {_stem(path)}.sqlite {path}",
        )
    stripped = head.removeprefix(b"\xef\xbb\xbf").lstrip()  # a UTF-8 BOM may precede JSON
    if stripped[:1] in (b"{", b"["):
        return "kineto"
    raise HostgapError(path, "not a trace: expected Kineto JSON (.json/.json.gz) or an Nsight Systems SQLite export")


JOBS_ENV = "HOSTGAP_JOBS"


def default_jobs() -> int:
    """Threads a load may use: ``$HOSTGAP_JOBS`` when set, else the cores this process may run
    on (``os.sched_getaffinity``; ``os.cpu_count()`` where that does not exist)."""
    v = os.environ.get(JOBS_ENV, "").strip()
    if v:
        if not v.isascii() or not v.isdigit() or int(v) < 1:
            raise HostgapError(JOBS_ENV, f"{v!r} is not a positive number of workers")
        return int(v)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def load_trace(
    path: str, *, jobs: int | None = None, progress: Callable[[int, int | None], None] | None = None
) -> Trace:
    """Load one trace file (format from content). Raises HostgapError for whole-file problems;
    event-level problems are skipped and counted in ``trace.meta.skipped``.

    ``jobs``: threads that decode a Kineto file's text (None: :func:`default_jobs`; 1: the
    calling thread only); the trace is the same whatever the number. ``progress``, when given,
    is called now and then on the calling thread as ``progress(bytes_done, bytes_total)``: bytes
    of the file read (compressed bytes for gzip) and the file's size."""
    path = os.fspath(path)
    fmt = sniff(path)
    if jobs is None:
        jobs = default_jobs()
    elif jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    if fmt == "nsys":
        from hostgap.readers.nsys import load_nsys

        trace = load_nsys(path)
        if progress is not None:
            size = os.path.getsize(path)
            progress(size, size)
        return trace
    from hostgap.readers.kineto import load_kineto

    return load_kineto(path, jobs=jobs, progress=progress)


def _stem(path: str) -> str:
    base = path[: -len(".nsys-rep")] if path.endswith(".nsys-rep") else path
    return base
