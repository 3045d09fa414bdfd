"""A long ``hostgap watch`` without waiting for it, and its exporter under hostile clients.

1. **Soak**: N intervals (default 12,000: 16.7 hours at ``--interval 5``) of a watch against the
   scripted stand-in of tests/soak_standin.py (a clock that does not sleep, scrapes built in
   memory, a fault of each kind every 97 intervals), with ``--jsonl``, ``--serve`` and the run
   stored every 10 minutes of watch time. Reports the wall time, the live Python objects and the
   resident set size at marks, the stored run's size and the intervals by status.
2. **Exporter under load**: a real-time watch of a stand-in SGLang server at 0.2 s intervals,
   alone and then while 8 clients send a request byte a second and another opens 500 silent
   connections: how late each interval's row came after its tick (p50, max), and the slowest
   ``Exporter.update``.

Usage::

    .venv/bin/python bench/watch_soak.py --intervals 12000 --out bench/results/watch-soak
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def soak(intervals: int) -> dict:
    from test_server_watch_soak import check_rows, footprint
    from test_server_watch_soak import soak as run

    marks = tuple(m for m in (1_000, 3_000, 6_000, 9_000, 12_000, intervals) if m <= intervals)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = run(Path(tmp), intervals, marks=marks)
        wall = time.perf_counter() - t0
        rows = [json.loads(x) for x in out["jsonl"].read_text().splitlines()]
        check_rows(rows, out["server"].seen)
        doc = out["doc"]
        results = Path(doc["run_dir"]) / "results.json"
        return {
            "intervals": intervals,
            "wall_s": round(wall, 1),
            "per_interval_ms": round(1e3 * wall / intervals, 2),
            "footprint": {str(k): v for k, v in out["memory"].items()},
            "end": footprint(),
            "results_json_bytes": results.stat().st_size,
            "db_bytes": (Path(tmp) / "runs.sqlite").stat().st_size,
            "jsonl_lines": len(rows),
            "by_status": doc["summary"]["by_status"],
            "faults": sorted({f for f in out["server"].seen if f}),
        }


def cadence(hostile: bool, n: int = 60, interval_s: float = 0.2) -> dict:
    from hostgap.server.watch import loop as w
    from hostgap.server.watch.exporter import Exporter, engine_labels
    from metrics_standin import MetricsStandIn
    from test_server_watch import texts
    from test_server_watch_serve import Flood, Slowpoke

    stop = threading.Event()
    late: list[float] = []
    updates: list[float] = []
    with MetricsStandIn(texts(n + 2)) as srv:
        first = w.first_scrape(w.WatchConfig(srv.url, interval_s=interval_s))
        exp = Exporter(0, engine_labels(first))
        clients = [Slowpoke(exp.port, 1.0, stop) for _ in range(8)] + [Flood(exp.port, stop)] if hostile else []
        for c in clients:
            c.start()
        origin = first.t_mono_s
        try:

            def on_row(row: dict) -> None:
                t0 = time.perf_counter()
                exp.update(row)
                updates.append(time.perf_counter() - t0)
                tick = round((row["t_rel_s"] + row["interval_s"]) / interval_s)
                late.append(time.monotonic() - (origin + tick * interval_s))

            w.watch(w.WatchConfig(srv.url, interval_s=interval_s, max_intervals=n), on_row, lambda m: None, None, first)
        finally:
            stop.set()
            stats = dict(exp.listener.stats)
            exp.close()
    return {
        "hostile": hostile,
        "intervals": n,
        "late_ms_p50": round(1e3 * statistics.median(late), 1),
        "late_ms_max": round(1e3 * max(late), 1),
        "update_ms_max": round(1e3 * max(updates), 2),
        "listener": stats,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--intervals", type=int, default=12_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "watch-soak"))
    a = ap.parse_args()
    doc = {"soak": soak(a.intervals), "exporter": [cadence(False), cadence(True)]}
    Path(a.out + ".json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
