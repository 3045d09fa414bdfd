"""Files in, :class:`hostgap.events.Trace` out. The format is detected from content.

>>> from hostgap.readers import load_trace
>>> trace = load_trace("run/trace.json.gz")      # Kineto JSON (.json or gzip)
>>> trace = load_trace("profile.sqlite")          # Nsight Systems SQLite export
"""

from __future__ import annotations

import os

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


def load_trace(path: str) -> Trace:
    """Load one trace file (format from content). Raises HostgapError for whole-file problems;
    event-level problems are skipped and counted in ``trace.meta.skipped``."""
    path = os.fspath(path)
    fmt = sniff(path)
    if fmt == "nsys":
        from hostgap.readers.nsys import load_nsys

        return load_nsys(path)
    from hostgap.readers.kineto import load_kineto

    return load_kineto(path)


def _stem(path: str) -> str:
    base = path[: -len(".nsys-rep")] if path.endswith(".nsys-rep") else path
    return base
