"""Trim a Kineto JSON trace to a time window in its own format (``hostgap trim`` cuts by step
markers and rewrites the file as current Kineto JSON; the small corpus traces without markers,
or whose old or vendor-specific format is what their tests check, are cut here instead): every
event with a ``ts`` outside [first + FROM, first + FROM + LENGTH) µs is deleted, where ``first``
is the earliest ``ts`` of an event that is not metadata (``"ph": "M"``); metadata events, events
without a ``ts`` and every top-level key (device properties, distributed info) are kept as they
are. Timestamps are compared as the file writes them (µs, fractional or whole).

    python tests/data/corpus/trim_kineto.py SRC.json.gz OUT.json.gz FROM_US LENGTH_US
"""

from __future__ import annotations

import gzip
import json
import sys


def trim(src: str, out: str, from_us: float, length_us: float) -> tuple[int, int]:
    """Write the cut copy; returns (events kept, events in the source)."""
    with gzip.open(src, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    timed = [float(e["ts"]) for e in events if e.get("ph") != "M" and "ts" in e]
    lo = min(timed) + from_us
    hi = lo + length_us
    kept = [e for e in events if e.get("ph") == "M" or "ts" not in e or lo <= float(e["ts"]) < hi]
    if isinstance(doc, dict):
        doc["traceEvents"] = kept
    else:
        doc = kept
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump(doc, f)
    return len(kept), len(events)


if __name__ == "__main__":
    n, total = trim(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
    print(f"wrote {sys.argv[2]}: {n} of {total} events")
