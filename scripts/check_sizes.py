"""Fail when a module of src/hostgap is longer than 600 lines.

Modules stay small enough to read in one sitting (../shared/docs/STYLE.md: 150-600 lines, one
idea each); a module past the limit is split along a seam (a group of functions with one job,
moved into its own module of the same package), not squeezed. scripts/lint.sh runs this check,
so CI fails when a module creeps past the limit.

Usage::

    .venv/bin/python scripts/check_sizes.py                  # src/hostgap, limit 600
    .venv/bin/python scripts/check_sizes.py --limit 550 src/hostgap/model

Exit status 0 when every module is within the limit, 1 (each offender listed, longest first)
when one is not, 2 when a folder given does not exist. Lines are counted as ``wc -l`` does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 600


def line_count(path: Path) -> int:
    """Lines of a file as ``wc -l`` counts them (plus a last line without a newline)."""
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def sizes(folders: list[Path]) -> list[tuple[int, Path]]:
    """(lines, path) of every Python module under ``folders``, longest first."""
    found = {p for folder in folders for p in folder.rglob("*.py") if p.is_file()}
    return sorted(((line_count(p), p) for p in found), key=lambda t: (-t[0], str(t[1])))


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path, help="folders to check (default: src/hostgap)")
    ap.add_argument("--limit", type=int, default=LIMIT, help=f"most lines a module may have (default {LIMIT})")
    a = ap.parse_args(argv)
    folders = a.folders or [ROOT / "src" / "hostgap"]
    for folder in folders:
        if not folder.is_dir():
            print(f"check_sizes: error: {folder}: no such folder", file=sys.stderr)
            return 2
    modules = sizes(folders)
    over = [(n, p) for n, p in modules if n > a.limit]
    where = ", ".join(_shown(f) for f in folders)
    if over:
        print(f"check_sizes: {len(over)} module(s) of {where} over {a.limit} lines; split each along a seam:")
        for n, p in over:
            print(f"  {_shown(p)}: {n} lines")
        return 1
    if modules:
        n, p = modules[0]
        print(f"check_sizes: {len(modules)} modules of {where} within {a.limit} lines (longest: {_shown(p)}, {n})")
    else:
        print(f"check_sizes: no modules under {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
