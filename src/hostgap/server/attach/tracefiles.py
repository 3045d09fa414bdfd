"""Finding the trace files a profile wrote, and knowing when they are complete.

A file counts as this profile's when it appeared in the trace directory after the start
request (it was not in the listing taken before) and its name matches the engine's pattern
(a worker rank or the frontend). It is complete when its size stayed the same over two looks
``settle_s`` apart and, for ``.gz``, the whole gzip stream decompresses (its CRC checks): an
engine writing a large trace is seen as incomplete, never half-read.
"""

from __future__ import annotations

import gzip
import os
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from re import Pattern


@dataclass
class Found:
    """This profile's files so far: worker ranks and the frontend (API server)."""

    workers: list[Path] = field(default_factory=list)
    frontend: list[Path] = field(default_factory=list)

    @property
    def all(self) -> list[Path]:
        return [*self.workers, *self.frontend]


def listing(folder: Path) -> set[str]:
    """Names in ``folder`` now (empty when it does not exist)."""
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def visible(folder: str | None) -> bool:
    return bool(folder) and os.path.isdir(str(folder))


def new_files(
    folder: Path, before: set[str], worker: Pattern[str], frontend: Pattern[str] | None, prefix: str | None = None
) -> Found:
    """Files that appeared since ``before`` and match the engine's patterns (and ``prefix``,
    where the engine put it in the name)."""
    out = Found()
    for name in sorted(listing(folder) - before):
        if name.startswith(".") or (prefix and prefix not in name):
            continue
        if frontend is not None and frontend.search(name):
            out.frontend.append(folder / name)
        elif worker.search(name):
            out.workers.append(folder / name)
    return out


def is_complete_gzip(path: Path) -> bool:
    """Whether ``path`` is one whole gzip stream (decompresses to the end, CRC checked)."""
    try:
        with gzip.open(path, "rb") as f:
            while f.read(1 << 20):
                pass
        return True
    except (OSError, EOFError, zlib.error):
        return False


def is_complete(path: Path, sizes: dict[Path, int]) -> bool:
    """Stable since the last look (``sizes`` remembers it) and, for gzip, whole."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    last = sizes.get(path)
    sizes[path] = size
    if last != size or size == 0:
        return False
    return is_complete_gzip(path) if path.name.endswith(".gz") else True


def wait_complete(
    folder: Path,
    before: set[str],
    worker: Pattern[str],
    frontend: Pattern[str] | None,
    prefix: str | None,
    deadline: float,
    *,
    min_workers: int = 1,
    settle_s: float = 0.5,
    want_frontend: bool = False,
    tick=None,
    appear_s: float | None = None,
) -> Found:
    """Wait until at least ``min_workers`` worker files (and a frontend file, when
    ``want_frontend``) exist and every file found is complete, or until ``deadline``
    (``time.monotonic()``); return what is complete then. With ``appear_s``, give up early when
    no worker file has appeared within that many seconds: a frontend file alone does not hold the
    wait (vLLM's API server writes its own at every stop, also when the engine ran no step and
    its Worker writes nothing). ``tick()`` is called each look."""
    sizes: dict[Path, int] = {}
    give_up = None if appear_s is None else time.monotonic() + appear_s
    while True:
        found = new_files(folder, before, worker, frontend, prefix)
        if give_up is not None and not found.workers and time.monotonic() >= give_up:
            return Found([], [p for p in found.frontend if is_complete(p, sizes)])
        done = Found(
            [p for p in found.workers if is_complete(p, sizes)], [p for p in found.frontend if is_complete(p, sizes)]
        )
        enough = len(found.workers) >= min_workers and (found.frontend or not want_frontend)
        if enough and len(done.all) == len(found.all):
            return done
        if time.monotonic() >= deadline:
            return done
        if tick is not None:
            tick()
        time.sleep(settle_s)
