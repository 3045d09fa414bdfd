"""Sweeps: many measurements over a grid, into the runs database, resumable.

A grid is the product presets x batch x context x mode (x engine), or an explicit list of cells
(JSON: a list of objects with :class:`~hostgap.capture.protocol.orchestrate.MeasureConfig` fields that
override the common settings). Each cell has a key (:func:`~hostgap.capture.protocol.orchestrate.cell_key`);
a cell whose key is already in the database is skipped, so rerunning an interrupted sweep
resumes it. A cell's row is written in one transaction only after its run finished; a run
directory left incomplete by an interruption is removed.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from hostgap.capture.protocol.orchestrate import MeasureConfig, cell_key, measure, resolve, validate
from hostgap.errors import HostgapError

CONFIG_FIELDS = {f.name for f in fields(MeasureConfig)}


def grid(
    base: MeasureConfig, presets=(None,), batches=(None,), contexts=(None,), modes=(None,), engines=(None,)
) -> list[MeasureConfig]:
    """The cross product; ``None`` entries keep the base value."""
    cells = []
    for p, b, c, m, e in itertools.product(
        presets or (None,), batches or (None,), contexts or (None,), modes or (None,), engines or (None,)
    ):
        kw = {
            k: v
            for k, v in (("preset", p), ("batch", b), ("prompt_len", c), ("mode", m), ("engine", e))
            if v is not None
        }
        cells.append(replace(base, **kw))
    return cells


def cells_from_file(base: MeasureConfig, path: str) -> list[MeasureConfig]:
    """Cells from a JSON list of overrides, e.g. ``[{"preset": "tiny", "batch": 4}]``."""
    try:
        items = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise HostgapError(path, "no such cells file") from None
    except ValueError as e:
        raise HostgapError(path, f"not valid JSON ({e})") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise HostgapError(path, "cells file must be a JSON list of objects")
    cells = []
    for i, item in enumerate(items):
        bad = set(item) - CONFIG_FIELDS
        if bad:
            raise HostgapError(path, f"cell {i}: unknown field(s) {', '.join(sorted(bad))}")
        if "sweep" in item and item["sweep"] is not None:
            item = dict(item, sweep=tuple(item["sweep"]))
        cells.append(replace(base, **item))
    return cells


@dataclass
class SweepOutcome:
    total: int
    done: int = 0
    skipped: int = 0
    failed: list = field(default_factory=list)
    run_ids: list = field(default_factory=list)
    interrupted: bool = False


CellProgress = Callable[[int, int, str, str], None]
"""``on_cell(index, total, key, status)`` with status ``start``/``done``/``skip``/``fail: ...``."""


def run_sweep(
    cells: list[MeasureConfig], db, *, on_cell: CellProgress | None = None, progress=None, engine_kw_for=None
) -> SweepOutcome:
    """Measure every cell not yet in ``db``; KeyboardInterrupt stops cleanly (db consistent)."""
    resolved = []
    for c in cells:
        validate(c)
        resolved.append(resolve(c))
    out = SweepOutcome(total=len(resolved))
    emit = on_cell or (lambda *a: None)
    for i, cfg in enumerate(resolved):
        key = cell_key(cfg)
        if db.has_cell(key):
            out.skipped += 1
            emit(i, len(resolved), key, "skip")
            continue
        emit(i, len(resolved), key, "start")
        run_dir = None
        try:
            from hostgap.capture.protocol.orchestrate import new_run_id

            run_id = new_run_id(cfg)
            run_dir = Path(cfg.out) / run_id
            cfg_i = replace(cfg, run_dir=str(run_dir))
            kw = engine_kw_for(cfg) if engine_kw_for else None
            result = measure(cfg_i, progress=progress, engine_kw=kw)
            db.add(result)
            out.done += 1
            out.run_ids.append(result["run_id"])
            emit(i, len(resolved), key, "done" + cell_flags(result))
        except KeyboardInterrupt:
            _remove_incomplete(run_dir)  # measure() cleans up too; this covers the gap before it
            out.interrupted = True
            return out
        except HostgapError as e:
            _remove_incomplete(run_dir)
            out.failed.append({"cell": key, "error": str(e)})
            emit(i, len(resolved), key, f"fail: {e}")
    return out


def cell_flags(result: dict) -> str:
    """What a finished cell's status line adds: `` (invalid: <reason>)`` or `` (machine busy)``.

    >>> cell_flags({"valid": True, "differencing": {"contended": False}})
    ''
    >>> cell_flags({"valid": False, "invalid_reasons": ["negative host-exposed time"]})
    ' (invalid: negative host-exposed time)'
    """
    if not result.get("valid", True):
        why = result.get("invalid_reasons") or ["checks failed"]
        return f" (invalid: {why[0]})"
    if (result.get("differencing") or {}).get("contended"):
        return " (machine busy)"
    return ""


def _remove_incomplete(run_dir: Path | None) -> None:
    """Remove a run directory this sweep created whose results were never written."""
    if run_dir is not None and run_dir.is_dir() and not (run_dir / "results.json").exists():
        shutil.rmtree(run_dir, ignore_errors=True)


class Eta:
    """Seconds left from the rate of finished cells (skipped cells do not count)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.measured = 0

    def tick(self) -> None:
        self.measured += 1

    def left_s(self, remaining: int) -> float | None:
        if not self.measured:
            return None
        return (time.monotonic() - self.t0) / self.measured * remaining
