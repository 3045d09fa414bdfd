"""A long watch, quickly: thousands of intervals against a scripted stand-in
(tests/soak_standin.py: a clock that does not sleep, scrapes built in memory), with a fault of
each kind every 97 intervals. The watch's memory stays flat, the stored run stays bounded (the
recent intervals and the buckets: docs/watch.md, "Long runs") while ``--jsonl`` keeps every
interval, and each fault ends in its documented status: never a traceback, a negative rate or a
share outside [0, 1]."""

from __future__ import annotations

import gc
import json
import resource
import sqlite3
from pathlib import Path

import pytest

from hostgap.server.watch.estimate import fit_calibration
from hostgap.server.watch.session import WatchSession
from hostgap.server.watch.window import MAX_BUCKETS, RECENT_ROWS
from soak_standin import BATCH, FAULTS, INTERVAL_S, ITL_S, FakeClock, SoakServer, fault_plan

NONNEGATIVE = ("steps", "steps_per_s", "tokens_per_step", "seqs_per_step", "step_period_s", "step_period_p90_s")
SHARES = ("host_share", "host_share_low", "host_share_high", "busy_share", "prefill_share")


def calibration():
    steps = [
        {"kind": "decode", "wall_ns": 9_000_000, "gpu_active_ns": 1_000_000 + 500_000 * b, "gen_requests": b}
        for b in (2, 4, 8) * 8
    ]
    return fit_calibration(steps, "hand")


def footprint() -> dict:
    """Live Python objects (after a full collection) and the resident set size in bytes."""
    gc.collect()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * resource.getpagesize()
    return {"objects": len(gc.get_objects()), "rss": rss}


def soak(tmp_path: Path, intervals: int, marks: tuple[int, ...] = ()) -> dict:
    """Run a watch of ``intervals`` intervals; the memory footprint at each interval number in
    ``marks``."""
    clock = FakeClock()
    server = SoakServer(clock, fault_plan(intervals + 1))
    cal_path = tmp_path / "cal.json"
    cal_path.write_text(json.dumps({"calibration": calibration().to_dict()}))
    jsonl = tmp_path / "w.jsonl"
    memory: dict[int, dict] = {}
    notes: list[str] = []
    if True:
        session = WatchSession(
            "http://127.0.0.1:9/metrics",
            interval_s=INTERVAL_S,
            calibrations=[str(cal_path)],
            calibrate=False,
            jsonl=str(jsonl),
            serve="127.0.0.1:0",
            db=str(tmp_path / "runs.sqlite"),
            output=str(tmp_path / "runs"),
            max_intervals=intervals,
            on_note=lambda m: notes.append(m) if len(notes) < 100 else None,
            read=server.read,
            clock=clock,
        )
        with session:
            for n, _row in enumerate(session, start=1):
                if n in marks:
                    memory[n] = footprint()
        doc = session.document
    return {"doc": doc, "memory": memory, "server": server, "jsonl": jsonl, "notes": notes}


def check_rows(rows: list[dict], seen: list[str]) -> None:
    """Every row's numbers in range, and each fault's interval in its documented status."""
    for r in rows:
        for key in NONNEGATIVE:
            assert r[key] is None or r[key] >= 0, (key, r)
        for key in SHARES:
            assert r[key] is None or 0.0 <= r[key] <= 1.0, (key, r)
    # scrape k (k >= 2) closes interval k - 1; the opening scrape is number 1
    for k, fault in enumerate(seen[1:], start=0):
        if fault and k < len(rows):
            assert rows[k]["status"] == FAULTS[fault], (fault, rows[k]["status"], rows[k]["notes"])
    ok = [r for r in rows if r["status"] == "ok" and r["step_period_s"] is not None]
    assert ok and all(r["step_period_s"] == pytest.approx(ITL_S) for r in ok)
    assert all(r["seqs_per_step"] == pytest.approx(BATCH) for r in ok if r["seqs_per_step"] is not None)
    assert all(r["host_share"] == pytest.approx(1 - 0.003 / ITL_S) for r in ok)  # GPU 3 ms at batch 4


def test_soak_short_every_fault_and_bounded_storage(tmp_path):
    out = soak(tmp_path, 1000)
    doc, server = out["doc"], out["server"]
    rows = [json.loads(x) for x in out["jsonl"].read_text().splitlines()]
    assert len(rows) == 1000  # --jsonl: the full record
    check_rows(rows, server.seen)
    assert {f for f in server.seen if f} == set(FAULTS)  # every fault happened
    assert doc["intervals_total"] == 1000 and len(doc["intervals"]) == RECENT_ROWS
    by = doc["summary"]["by_status"]
    assert sum(by.values()) == 1000 and by["reset"] > 0 and by["no-scrape"] > 0 and by["idle"] > 0
    stored = json.loads((Path(doc["run_dir"]) / "results.json").read_text())["watch"]
    assert stored["intervals_total"] == 1000 and stored["intervals_dropped"] == 1000 - RECENT_ROWS
    assert len(stored["buckets"]) <= MAX_BUCKETS
    assert sum(b["intervals"] for b in stored["buckets"]) == 1000
    con = sqlite3.connect(tmp_path / "runs.sqlite")
    (n,) = con.execute("SELECT COUNT(*) FROM runs").fetchone()
    con.close()
    assert n == 1  # checkpoints rewrite the one row of the watch


@pytest.mark.slow  # 12,000 intervals: CI runs it
def test_soak_long_memory_flat(tmp_path):
    out = soak(tmp_path, 12_000, marks=(1_000, 6_000, 12_000))
    mem = out["memory"]
    # the recent rows are full from 720 on and the buckets from 6,000 (500 of 12): flat after that
    assert mem[6_000]["objects"] - mem[1_000]["objects"] < 3 * MAX_BUCKETS + 500, mem
    assert abs(mem[12_000]["objects"] - mem[6_000]["objects"]) < 0.01 * mem[6_000]["objects"], mem
    assert mem[12_000]["rss"] - mem[6_000]["rss"] < 8 * 1024 * 1024, mem
    rows = [json.loads(x) for x in out["jsonl"].read_text().splitlines()]
    assert len(rows) == 12_000
    check_rows(rows, out["server"].seen)
    size = (Path(out["doc"]["run_dir"]) / "results.json").stat().st_size
    assert size < 4 * 1024 * 1024, size


def test_window_buckets_merge_and_keep_the_sums():
    """Buckets merge in pairs and stay aligned (each covers a run of bucket_intervals
    consecutive intervals), and the window's sums equal the sums over every row, by hand."""
    from hostgap.server.watch.window import Window

    statuses = ["ok", "ok", "idle", "ok", "no-scrape", "ok", "reset", "ok"]
    rows = []
    for i in range(53):
        status = statuses[i % len(statuses)]
        steps = (10 + i % 7) if status == "ok" else (0 if status == "idle" else None)
        share = 0.2 + 0.01 * (i % 11) if status == "ok" else None
        rows.append(
            {
                "t_start": 100.0 + i,
                "t_end": 101.0 + i,
                "t_rel_s": float(i),
                "interval_s": 1.0 + (i % 3),
                "status": status,
                "steps": steps,
                "host_share": share,
                "host_share_low": None if share is None else share - 0.05,
                "host_share_high": None if share is None else share + 0.05,
                "host_share_basis": "model estimate" if share is not None else "none",
                "seqs_per_step": None if share is None else 1.0 + i % 5,
                "step_period_s": None if share is None else 0.01 * (1 + i % 4),
                "host_breakdown": {"a": 0.25, "b": 0.75} if status == "ok" else {},
            }
        )
    win = Window(recent=5, max_buckets=4, bucket_intervals=3)
    for r in rows:
        win.add(r)
    assert win.rows == rows[-5:] and win.dropped == 48 and win.count == 53
    assert win.bucket_intervals == 24 and len(win.buckets) == 3  # 3 → 6 → 12 → 24
    for k, b in enumerate(x.to_dict() for x in win.buckets):
        group = rows[24 * k : 24 * (k + 1)]
        assert b["intervals"] == len(group) and b["t_start"] == group[0]["t_start"]
        assert b["t_end"] == group[-1]["t_end"] and b["t_rel_s"] == group[0]["t_rel_s"]
        assert b["duration_s"] == pytest.approx(sum(r["interval_s"] for r in group))
        assert b["by_status"] == {s: sum(r["status"] == s for r in group) for s in ("ok", "idle", "reset", "no-scrape")}
        ok = [r for r in group if r["status"] == "ok"]
        span = sum(r["interval_s"] for r in group if r["status"] in ("ok", "idle"))
        assert b["steps"] == sum(r["steps"] for r in ok)
        assert b["steps_per_s"] == pytest.approx(b["steps"] / span)
        for key in ("host_share", "host_share_low", "host_share_high", "seqs_per_step", "step_period_s"):
            want = sum(r[key] * r["steps"] for r in ok) / sum(r["steps"] for r in ok)
            assert b[key] == pytest.approx(want), key
        assert b["host_share_min"] == min(r["host_share"] for r in ok)
        assert b["host_share_max"] == max(r["host_share"] for r in ok)
    s = win.summary()
    ok = [r for r in rows if r["status"] == "ok"]
    steps = sum(r["steps"] for r in ok)
    assert s["intervals"] == 53 and s["steps"] == steps
    assert s["duration_s"] == pytest.approx(sum(r["interval_s"] for r in rows))
    assert s["steps_per_s"] == pytest.approx(
        steps / sum(r["interval_s"] for r in rows if r["status"] in ("ok", "idle"))
    )
    assert s["host_share"] == pytest.approx(sum(r["host_share"] * r["steps"] for r in ok) / steps)
    assert (s["host_share_min"], s["host_share_max"]) == (0.2, pytest.approx(0.3))
    assert s["host_share_intervals"] == len(ok) and s["host_share_basis"] == "model estimate"
    assert s["host_breakdown"] == pytest.approx({"a": 0.25, "b": 0.75})
    assert s["tokens_per_step"] is None  # no row has it
    kept = win.retained()
    assert kept["intervals_total"] == 53 and kept["intervals_dropped"] == 48 and len(kept["buckets"]) == 3
