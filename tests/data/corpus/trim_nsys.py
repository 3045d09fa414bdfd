"""Trim an Nsight Systems SQLite export to a time window (``hostgap trim`` writes Kineto JSON, so
the vendored nsys copy is cut here instead): every row of a table with a ``start`` column that
starts outside [first + FROM, first + FROM + LENGTH) ms is deleted, where ``first`` is the
earliest start in the export; the other tables (strings, threads, processes, device and capture
information) are kept whole; then the file is compacted.

    python tests/data/corpus/trim_nsys.py SRC.sqlite OUT.sqlite FROM_MS LENGTH_MS
"""

from __future__ import annotations

import shutil
import sqlite3
import sys


def trim(src: str, out: str, from_ms: float, length_ms: float) -> None:
    shutil.copyfile(src, out)
    con = sqlite3.connect(out)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    timed = [t for t in tables if "start" in {c[1] for c in con.execute(f"PRAGMA table_info([{t}])")}]
    first = min(v for t in timed for (v,) in con.execute(f"SELECT min(start) FROM [{t}]") if v is not None)
    lo = first + int(from_ms * 1e6)
    hi = lo + int(length_ms * 1e6)
    for t in timed:
        con.execute(f"DELETE FROM [{t}] WHERE start < ? OR start >= ?", (lo, hi))
    con.commit()
    con.execute("VACUUM")
    con.close()


if __name__ == "__main__":
    trim(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
