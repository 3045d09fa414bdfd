"""The analysis cache in the Python API: :func:`cache` (``hostgap cache``)."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from hostgap.api._results import Result, arrow_table

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import Console


class CacheListing(Result):
    """The analysis cache: ``to_dict()`` is ``hostgap cache --json`` (``dir``, ``max_bytes``,
    ``total_bytes``, ``entries`` most recently used first, ``cleared`` when it was cleared)."""

    kind = "cache"

    @cached_property
    def entries(self) -> pa.Table:
        return arrow_table(self._doc["entries"], ["key", "path", "size_bytes", "trace_bytes", "last_used", "parts"])

    def _render(self, con: Console) -> None:
        from hostgap.report.terminal import cache_lines

        for line in cache_lines(self._doc):
            con.print(line, markup=False, highlight=False, soft_wrap=True)

    def _summary(self) -> str:
        return f"{len(self._doc['entries'])} entries, {self._doc['total_bytes']:,} bytes in {self._doc['dir']}"


def cache(*, clear: bool = False) -> CacheListing:
    """The analysis cache's entries (``hostgap cache``); ``clear=True`` removes them first."""
    from dataclasses import asdict

    from hostgap.analysis import trace_cache as C

    root = C.cache_dir()
    cleared = C.clear(root) if clear else None
    listed = [asdict(e) for e in C.entries(root)]
    return CacheListing(
        {
            "dir": str(root),
            "enabled": C.enabled(),
            "max_bytes": C.max_bytes(),
            "total_bytes": sum(e["size_bytes"] for e in listed),
            "entries": listed,
            "cleared": None if cleared is None else {"entries": cleared[0], "bytes": cleared[1]},
        }
    )
