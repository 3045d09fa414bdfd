"""The torch profiler as the measuring protocol and its engines use it: the activities of a
device, a trace written to a file (gzip when asked), and Kineto's meaningless stderr lines
dropped."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path


def _kineto_noise(line: str) -> bool:
    """A Kineto line that says nothing about the measurement.

    >>> _kineto_noise("USDT: profiler_start"), _kineto_noise("ERROR: x gpuGetDeviceCount failed with code 35")
    (True, True)
    >>> _kineto_noise("Traceback (most recent call last):")
    False
    """
    return line.startswith("USDT:") or "gpuGetDeviceCount failed" in line


@contextlib.contextmanager
def without_usdt_lines():
    """Drop the lines Kineto prints on file descriptor 2 that mean nothing to the user (no
    setting silences them): ``USDT: ... profiler_start/stop`` and, on a machine without a GPU,
    ``ERROR: ... gpuGetDeviceCount failed with code 35``. Everything else written to stderr
    meanwhile is passed on after."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (embedded, closed): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            kept = "".join(l for l in text.splitlines(keepends=True) if not _kineto_noise(l))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def profiler_activities(torch, device: str) -> list:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def trace_profiler(torch, device: str, **options):
    """The profiler the engines trace their N2 run with: CPU (and CUDA) activities, without
    shapes, stacks or memory (each adds host time to the steps it records); ``options`` are
    passed on (``experimental_config``)."""
    return torch.profiler.profile(
        activities=profiler_activities(torch, device),
        record_shapes=False,
        with_stack=False,
        profile_memory=False,
        **options,
    )


def export_trace(prof, path: Path) -> Path:
    """Write the profiler's Chrome trace to ``path`` (gzip when it ends in .gz)."""
    path = Path(path)
    if str(path).endswith(".gz"):
        raw = path.with_suffix("")  # .json
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.unlink(raw)
    else:
        prof.export_chrome_trace(str(path))
    return path
