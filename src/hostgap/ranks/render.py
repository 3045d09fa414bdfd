"""Terminal tables and CSV rows of a trace set (the ``ranks`` and cross-rank step tables)."""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table

from hostgap.report.terminal import ms


def render_trace_set(doc: dict, con: Console) -> None:
    """Per rank: its overview and step anatomy; then the ranks table and the cross-rank steps."""
    from hostgap.report.terminal import render_anatomy, render_overview

    for r in doc["ranks"]:
        con.rule(f"rank {r['rank']}")
        render_overview(r, con)
        render_anatomy(r, con)
    con.rule("cross-rank")
    for note in doc["notes"]:
        con.print(f"  note: {note}")
    render_ranks(doc, con)
    render_cross_steps(doc, con)


def render_ranks(doc: dict, con: Console) -> None:
    """One row per rank: totals over its steps (ms) and how often it was the straggler."""
    counts = doc["cross_rank"]["summary"]["straggler_counts"]
    t = Table(title=f"ranks ({len(doc['ranks'])} of world size {doc['cross_rank']['world_size']}, ms over steps)",
              title_justify="left")
    for c in ("rank", "source", "trace", "steps", "wall", "GPU-active", "host-caused idle", "compute",
              "comm", "overlap", "straggler in"):
        t.add_column(c, justify="left" if c in ("source", "trace") else "right")
    for r in doc["ranks"]:
        s = r["steps"]
        c = r["communication"]
        where = os.path.basename(r["trace"]) + (f" pid {r['process']}" if r["process"] is not None else "")
        t.add_row(str(r["rank"]), r["rank_source"], where,
                  str(len(s)), ms(sum(x["wall_ns"] for x in s)), ms(sum(x["gpu_active_ns"] for x in s)),
                  ms(sum(x["host_wait_ns"] for x in s)), ms(c["compute_active_ns"]), ms(c["comm_active_ns"]),
                  ms(c["comm_overlap_ns"]), str(counts.get(str(r["rank"]), 0)))
    con.print(t)


def render_cross_steps(doc: dict, con: Console, limit: int = 200) -> None:
    """One row per matched step and rank: wall, GPU-active, host-caused idle, collective wait;
    the straggler marked, with its cause and the spread."""
    cr = doc["cross_rank"]
    t = Table(title=f"steps across ranks (matched by {cr['step_match']}, ms; * straggler)", title_justify="left")
    for c in ("step", "rank", "wall", "GPU-active", "host-caused idle", "compute", "comm", "collective wait",
              "own", "cause", "spread"):
        t.add_column(c, justify="left" if c in ("step", "cause") else "right", no_wrap=c == "step")
    for s in cr["steps"][:limit]:
        for j, p in enumerate(s["per_rank"]):
            star = "*" if p["rank"] == s["straggler_rank"] else ""
            first = j == 0
            t.add_row(s["name"] if first else "", f"{p['rank']}{star}", ms(p["wall_ns"]), ms(p["gpu_active_ns"]),
                      ms(p["host_wait_ns"]), ms(p["compute_active_ns"]), ms(p["comm_active_ns"]),
                      ms(p["collective_wait_ns"]), ms(p["own_ns"]),
                      (s["cause"] or "—") if star else "", ms(s["spread_ns"]) if first else "")
    con.print(t)
    if len(cr["steps"]) > limit:
        con.print(f"  ({len(cr['steps']) - limit} more steps: --json or --csv for all)")
    sm = cr["summary"]
    if sm["straggler_counts"]:
        who = ", ".join(f"rank {r}: {n}" for r, n in sorted(sm["straggler_counts"].items(), key=lambda x: -x[1]))
        why = ", ".join(f"{c}: {n}" for c, n in sm["cause_counts"].items()) or "none"
        con.print(f"  straggler steps by rank: {who}; causes: {why}; median spread "
                  f"{ms(sm['median_spread_ns'])} ms")


def cross_rank_csv_rows(doc: dict) -> list[dict]:
    """One row per matched step and rank (``straggler`` true on the straggler's row)."""
    rows = []
    for s in doc["cross_rank"]["steps"]:
        for p in s["per_rank"]:
            rows.append({"step_index": s["index"], "step_name": s["name"], **p,
                         "straggler": p["rank"] == s["straggler_rank"], "straggler_rank": s["straggler_rank"],
                         "cause": s["cause"], "spread_ns": s["spread_ns"]})
    return rows
