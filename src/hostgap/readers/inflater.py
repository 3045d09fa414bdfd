"""Which library inflates a gzip trace: ISA-L's (the ``isal`` package) where it is installed,
else the standard library's zlib.

Both take the same calls (``decompressobj(wbits=...)``, ``decompress(data, max_length)``,
``unconsumed_tail``, ``unused_data``, ``eof``) and give the same bytes; ISA-L's inflater takes
about a third of zlib's CPU on a Kineto trace (bench/results/ingest-inflate.md). ``isal`` is a
dependency with wheels for Linux (x86-64, aarch64, glibc and musl), macOS and Windows; where it
cannot be imported the stdlib inflates, with one note per process on stderr the first time a
gzip file is read. ``HOSTGAP_STDLIB_ZLIB=1`` chooses the stdlib on purpose (same note).
"""

from __future__ import annotations

import os
import sys
import zlib
from types import ModuleType

STDLIB_ENV = "HOSTGAP_STDLIB_ZLIB"
"""Set (not empty, not ``0``) to inflate with the standard library's zlib."""

_noted: set[str] = set()


def _isal() -> tuple[ModuleType | None, str]:
    """ISA-L's zlib-compatible module, or None and why not."""
    if os.environ.get(STDLIB_ENV, "") not in ("", "0"):
        return None, f"{STDLIB_ENV} is set"
    try:
        from isal import isal_zlib
    except ImportError:
        return None, "the isal package (ISA-L) is not installed"
    return isal_zlib, ""


def backend(note: bool = True) -> tuple[ModuleType, tuple[type[Exception], ...]]:
    """The module whose ``decompressobj`` inflates, and the exceptions it raises for a corrupt
    stream (beside ``EOFError`` for a truncated one). ``note``: print the fallback's note (once
    per process and reason) when the stdlib is chosen."""
    mod, why = _isal()
    if mod is not None:
        return mod, (mod.error, zlib.error)
    if note and why not in _noted:
        _noted.add(why)
        print(f"hostgap: note: {why}; gzip traces are inflated by the stdlib zlib (same text, slower)", file=sys.stderr)
    return zlib, (zlib.error,)


def name() -> str:
    """``"isal"`` or ``"zlib"``: which library :func:`backend` gives now (no note)."""
    return "isal" if _isal()[0] is not None else "zlib"
