"""How a trace set is shown: the terminal tables and CSV rows of ``hostgap analyze`` (the ranks
table, the cross-rank step table), and the section of ``hostgap report``: a ranks table and a
heat map of per-rank host-caused idle over the aligned steps, the straggler of each step marked.

:func:`split_trace_sets` picks the report arguments that are trace sets (a directory that is
not a run directory but holds traces); :func:`trace_set_section` draws one as an HTML section
(``<section id='trace-set-N'>``) with the figure ``fig-ranks-N``.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import cast

import numpy as np
from rich.console import Console
from rich.table import Table

from hostgap.report.terminal import ms

esc = html.escape


def split_trace_sets(args) -> tuple[list[str], list[str]]:
    """(trace-set directories, the other arguments), order kept within each."""
    sets: list[str] = []
    rest: list[str] = []
    for a in args:
        p = Path(a)
        (sets if p.is_dir() and not (p / "results.json").is_file() else rest).append(a)
    return sets, rest


def heat_matrix(doc: dict) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(ranks, ranks x steps host-caused idle in ms, straggler row per step; -1: none)."""
    cr = doc["cross_rank"]
    ranks = cr["ranks_present"]
    grid = np.zeros((len(ranks), len(cr["steps"])))
    strag = np.full(len(cr["steps"]), -1)
    for j, s in enumerate(cr["steps"]):
        for i, p in enumerate(s["per_rank"]):
            grid[i, j] = p["host_wait_ns"] / 1e6
        if s["straggler_rank"] is not None:
            strag[j] = ranks.index(s["straggler_rank"])
    return ranks, grid, strag


def rank_heatmap(doc: dict, fid: str):
    """The report's :class:`~hostgap.report.figures.stepwise.Figure`. Rows: ranks; columns: aligned
    steps; colour: host-caused idle (ms); a black dot on the straggler of each step."""
    from matplotlib.ticker import MaxNLocator

    from hostgap.report.figures.canvas import Figure, draw, new_figure

    ranks, grid, strag = heat_matrix(doc)
    title = "Host-caused idle per rank and step (ms); ● straggler"
    if not grid.size:
        return Figure(fid, title, "No step is present on every rank: nothing to align.", None)

    def build():
        fig = new_figure(11.0, max(2.2, 0.9 + 0.32 * len(ranks)))
        ax = fig.add_subplot(1, 1, 1)
        im = ax.imshow(grid, aspect="auto", cmap="Oranges", interpolation="nearest", vmin=0)
        cols = np.flatnonzero(strag >= 0)
        ax.scatter(cols, strag[cols], s=14, c="black", marker="o")
        ax.set_yticks(range(len(ranks)))
        ax.set_yticklabels([str(r) for r in ranks])
        ax.set_ylabel("rank")
        ax.set_xlabel("aligned step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.colorbar(im, ax=ax, label="host-caused idle (ms)")
        return fig

    cap = (
        "Each cell is the rank's host-caused idle in the aligned step (GPU idle while the host had not yet "
        "enqueued the next op; docs/method.md). The dot marks the step's straggler: the rank with the most "
        "time not spent waiting in collectives (wall − collective wait; docs/multirank.md). A row darker "
        "than the others is a rank whose host makes the others wait."
    )
    return Figure(
        fid,
        title,
        cap,
        draw(build, salt=fid),
        {"ranks": ranks, "host_wait_ms": grid.tolist(), "straggler_row": strag.tolist()},
    )


def ranks_table(doc: dict) -> str:
    """One row per rank: steps, walls and host-caused idle summed, communication, straggler count."""
    counts = doc["cross_rank"]["summary"]["straggler_counts"]
    head = (
        "<tr><th>rank</th><th class='name'>trace</th><th>steps</th><th>wall ms</th><th>GPU-active ms</th>"
        "<th>host-caused idle ms</th><th>compute ms</th><th>communication ms</th><th>straggler in</th></tr>"
    )
    rows = []
    for r in doc["ranks"]:
        s, c = r["steps"], r["communication"]
        rows.append(
            f"<tr><td>{r['rank']}</td><td class='name'>{esc(os.path.basename(r['trace']))}</td>"
            f"<td>{len(s)}</td><td>{ms(sum(x['wall_ns'] for x in s))}</td>"
            f"<td>{ms(sum(x['gpu_active_ns'] for x in s))}</td>"
            f"<td>{ms(sum(x['host_wait_ns'] for x in s))}</td><td>{ms(c['compute_active_ns'])}</td>"
            f"<td>{ms(c['comm_active_ns'])}</td><td>{counts.get(str(r['rank']), 0)}</td></tr>"
        )
    return f"<table><caption>ranks</caption>{head}{''.join(rows)}</table>"


def trace_set_section(n: int, source: str, doc: dict) -> tuple:
    """(the HTML section of trace set ``n``, its heat map figure)."""
    from hostgap.errors import HostgapError
    from hostgap.report.html import _figure, active_content

    fig = rank_heatmap(doc, f"fig-ranks-{n}")
    bad = active_content(fig.svg) if fig.svg is not None else None
    if bad:
        raise HostgapError(fig.id, f"figure SVG holds active content ({bad}); refusing to write it")
    cr = doc["cross_rank"]
    sm = cr["summary"]
    notes = "".join(f"<p class='note'>{esc(x)}</p>" for x in doc["notes"])
    causes = ", ".join(f"{esc(c)}: {k}" for c, k in sm["cause_counts"].items()) or "none"
    meta = (
        f"{len(doc['ranks'])} ranks of world size {cr['world_size']}, {sm['steps']} aligned steps "
        f"(matched by {esc(cr['step_match'])}); straggler causes: {causes}; median spread "
        f"{ms(sm['median_spread_ns'])} ms"
    )
    body = "\n".join(
        [
            f"<section id='trace-set-{n}'><h2>Trace set {n + 1}: {esc(source)}</h2>",
            f"<p class='meta'>{meta}</p>{notes}",
            ranks_table(doc),
            _figure(fig),
            "</section>",
        ]
    )
    return body, fig


def report_trace_sets(
    dirs: list[str], step_marker=None, launch_floor_us=None, floor_file=None, progress=None
) -> list[tuple[str, str, dict]]:
    """``render``'s ``extra`` for the trace-set directories: (section, "trace_sets", entry)."""
    from hostgap.analysis.traceset import analyse
    from hostgap.anatomy.steps import AnalysisOptions

    out = []
    for n, d in enumerate(dirs):
        if progress:
            progress(f"analysing trace set {d}")
        opts = AnalysisOptions(
            step_marker=step_marker,
            launch_floor_ns=launch_floor_us * 1000 if launch_floor_us else None,
            floor_file=floor_file,
        )
        doc = cast(dict, analyse([d], opts))  # a trace-set directory: the trace-set document
        section, fig = trace_set_section(n, d, doc)
        entry = {
            "source": d,
            "figure": fig.id,
            "heatmap": fig.drawn,
            "world_size": doc["cross_rank"]["world_size"],
            "ranks": [{"rank": r["rank"], "trace": r["trace"]} for r in doc["ranks"]],
            "cross_rank": doc["cross_rank"],
        }
        out.append((section, "trace_sets", entry))
    return out


# -- terminal and CSV (hostgap analyze) ------------------------------------------------------


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
    t = Table(
        title=f"ranks ({len(doc['ranks'])} of world size {doc['cross_rank']['world_size']}, ms over steps)",
        title_justify="left",
    )
    for c in (
        "rank",
        "source",
        "trace",
        "steps",
        "wall",
        "GPU-active",
        "host-caused idle",
        "compute",
        "comm",
        "overlap",
        "straggler in",
    ):
        t.add_column(c, justify="left" if c in ("source", "trace") else "right")
    for r in doc["ranks"]:
        s = r["steps"]
        c = r["communication"]
        where = os.path.basename(r["trace"]) + (f" pid {r['process']}" if r["process"] is not None else "")
        t.add_row(
            str(r["rank"]),
            r["rank_source"],
            where,
            str(len(s)),
            ms(sum(x["wall_ns"] for x in s)),
            ms(sum(x["gpu_active_ns"] for x in s)),
            ms(sum(x["host_wait_ns"] for x in s)),
            ms(c["compute_active_ns"]),
            ms(c["comm_active_ns"]),
            ms(c["comm_overlap_ns"]),
            str(counts.get(str(r["rank"]), 0)),
        )
    con.print(t)


def render_cross_steps(doc: dict, con: Console, limit: int = 200) -> None:
    """One row per matched step and rank: wall, GPU-active, host-caused idle, collective wait;
    the straggler marked, with its cause and the spread."""
    cr = doc["cross_rank"]
    t = Table(title=f"steps across ranks (matched by {cr['step_match']}, ms; * straggler)", title_justify="left")
    for c in (
        "step",
        "rank",
        "wall",
        "GPU-active",
        "host-caused idle",
        "compute",
        "comm",
        "collective wait",
        "own",
        "cause",
        "spread",
    ):
        t.add_column(c, justify="left" if c in ("step", "cause") else "right", no_wrap=c == "step")
    for s in cr["steps"][:limit]:
        for j, p in enumerate(s["per_rank"]):
            star = "*" if p["rank"] == s["straggler_rank"] else ""
            first = j == 0
            t.add_row(
                _short(s["name"]) if first else "",
                f"{p['rank']}{star}",
                ms(p["wall_ns"]),
                ms(p["gpu_active_ns"]),
                ms(p["host_wait_ns"]),
                ms(p["compute_active_ns"]),
                ms(p["comm_active_ns"]),
                ms(p["collective_wait_ns"]),
                ms(p["own_ns"]),
                (s["cause"] or "—") if star else "",
                ms(s["spread_ns"]) if first else "",
            )
    con.print(t)
    if len(cr["steps"]) > limit:
        con.print(f"  ({len(cr['steps']) - limit} more steps: --json or --csv for all)")
    sm = cr["summary"]
    if sm["straggler_counts"]:
        who = ", ".join(f"rank {r}: {n}" for r, n in sorted(sm["straggler_counts"].items(), key=lambda x: -x[1]))
        why = ", ".join(f"{c}: {n}" for c, n in sm["cause_counts"].items()) or "none"
        con.print(f"  straggler steps by rank: {who}; causes: {why}; median spread {ms(sm['median_spread_ns'])} ms")


def _short(name: str, n: int = 34) -> str:
    """A step name cut in the middle to ``n`` characters: vLLM's step annotations run to 70 and
    differ at their ends (``…sq1sk130sqsq1sqsk130)``).

    >>> _short("ProfilerStep#551"), _short("execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk130sqsq1sqsk130)")
    ('ProfilerStep#551', 'execute_1_cont…1sk130sqsq1sqsk130)')
    """
    if len(name) <= n:
        return name
    tail = (n - 1) * 3 // 5
    return name[: n - 1 - tail] + "…" + name[-tail:]


def cross_rank_csv_rows(doc: dict) -> list[dict]:
    """One row per matched step and rank (``straggler`` true on the straggler's row)."""
    rows = []
    for s in doc["cross_rank"]["steps"]:
        for p in s["per_rank"]:
            rows.append(
                {
                    "step_index": s["index"],
                    "step_name": s["name"],
                    **p,
                    "straggler": p["rank"] == s["straggler_rank"],
                    "straggler_rank": s["straggler_rank"],
                    "cause": s["cause"],
                    "spread_ns": s["spread_ns"],
                }
            )
    return rows
