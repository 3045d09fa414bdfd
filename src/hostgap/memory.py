"""Giving the C allocator's free memory back to the operating system between analysis stages.

On a large trace the linker and the overview free hundreds of MB of temporaries; glibc keeps
much of that in its heap, where the next stage's arrays do not always fit, so the step
anatomy's peak stacks on top of it. ``malloc_trim(0)`` returns it: on a 0.51 GB trace the peak
of ``analyze`` fell from 410 to 373 MB (bench/results/ingest-compiled-decoder.md).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the allocator's free memory to the system; False where that is not possible."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def meminfo(key: str) -> int | None:
    """One field of Linux's ``/proc/meminfo`` in bytes (``MemTotal``, ``MemAvailable``, ...), or
    None where it is not known."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(key.encode() + b":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_bytes() -> int | None:
    """Memory the system can give without swapping (Linux's ``MemAvailable``), or None where it
    is not known."""
    return meminfo("MemAvailable")
