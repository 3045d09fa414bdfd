"""A function mapped over items in local worker processes, results in item order."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def map_processes(fn: Callable[..., T], items: Sequence[Any], *extra: Any, jobs: int | None = None) -> list[T]:
    """``[fn(item, *extra) for item in items]``, in ``jobs`` processes (default: one per core,
    never more than there are items); in this process when that is one. ``fn`` and its
    arguments must pickle (a module-level function)."""
    jobs = min(len(items), jobs or os.cpu_count() or 1)
    if jobs <= 1:
        return [fn(item, *extra) for item in items]
    from concurrent.futures import ProcessPoolExecutor  # imported only here: a single item skips it

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(fn, items, *([e] * len(items) for e in extra)))
