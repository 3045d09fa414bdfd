"""The trace-set section of ``hostgap report``: a ranks table and a heat map of per-rank
host-caused idle over the aligned steps, the straggler of each step marked.

:func:`split_trace_sets` picks the report arguments that are trace sets (a directory that is
not a run directory but holds traces); :func:`trace_set_section` draws one as an HTML section
(``<section id='trace-set-N'>``) with the figure ``fig-ranks-N``.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from hostgap.report.figures import Figure, draw, new_figure

esc = html.escape


def split_trace_sets(args) -> tuple[list[str], list[str]]:
    """(trace-set directories, the other arguments), order kept within each."""
    sets, rest = [], []
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


def rank_heatmap(doc: dict, fid: str) -> Figure:
    """Rows: ranks; columns: aligned steps; colour: host-caused idle (ms); a black dot on the
    straggler of each step."""
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

    cap = ("Each cell is the rank's host-caused idle in the aligned step (GPU idle while the host had not yet "
           "enqueued the next op; docs/method.md). The dot marks the step's straggler: the rank with the most "
           "time not spent waiting in collectives (wall − collective wait; docs/multirank.md). A row darker "
           "than the others is a rank whose host makes the others wait.")
    return Figure(fid, title, cap, draw(build, salt=fid), {"ranks": ranks, "host_wait_ms": grid.tolist(),
                                                            "straggler_row": strag.tolist()})


def _ms(ns) -> str:
    return "—" if ns is None else f"{ns / 1e6:.3f}"


def ranks_table(doc: dict) -> str:
    """One row per rank: steps, walls and host-caused idle summed, communication, straggler count."""
    counts = doc["cross_rank"]["summary"]["straggler_counts"]
    head = ("<tr><th>rank</th><th class='name'>trace</th><th>steps</th><th>wall ms</th><th>GPU-active ms</th>"
            "<th>host-caused idle ms</th><th>compute ms</th><th>communication ms</th><th>straggler in</th></tr>")
    rows = []
    for r in doc["ranks"]:
        s, c = r["steps"], r["communication"]
        rows.append(f"<tr><td>{r['rank']}</td><td class='name'>{esc(os.path.basename(r['trace']))}</td>"
                    f"<td>{len(s)}</td><td>{_ms(sum(x['wall_ns'] for x in s))}</td>"
                    f"<td>{_ms(sum(x['gpu_active_ns'] for x in s))}</td>"
                    f"<td>{_ms(sum(x['host_wait_ns'] for x in s))}</td><td>{_ms(c['compute_active_ns'])}</td>"
                    f"<td>{_ms(c['comm_active_ns'])}</td><td>{counts.get(str(r['rank']), 0)}</td></tr>")
    return f"<table><caption>ranks</caption>{head}{''.join(rows)}</table>"


def trace_set_section(n: int, source: str, doc: dict) -> tuple[str, Figure]:
    """(the HTML section of trace set ``n``, its heat map figure)."""
    from hostgap.report.html import _figure, active_content
    from hostgap.errors import HostgapError

    fig = rank_heatmap(doc, f"fig-ranks-{n}")
    bad = active_content(fig.svg) if fig.svg is not None else None
    if bad:
        raise HostgapError(fig.id, f"figure SVG holds active content ({bad}); refusing to write it")
    cr = doc["cross_rank"]
    sm = cr["summary"]
    notes = "".join(f"<p class='note'>{esc(x)}</p>" for x in doc["notes"])
    causes = ", ".join(f"{esc(c)}: {k}" for c, k in sm["cause_counts"].items()) or "none"
    meta = (f"{len(doc['ranks'])} ranks of world size {cr['world_size']}, {sm['steps']} aligned steps "
            f"(matched by {esc(cr['step_match'])}); straggler causes: {causes}; median spread "
            f"{_ms(sm['median_spread_ns'])} ms")
    body = "\n".join([f"<section id='trace-set-{n}'><h2>Trace set {n + 1}: {esc(source)}</h2>",
                      f"<p class='meta'>{meta}</p>{notes}", ranks_table(doc), _figure(fig), "</section>"])
    return body, fig


def report_trace_sets(dirs: list[str], step_marker=None, launch_floor_us=None, floor_file=None,
                      progress=None) -> list[tuple[str, str, dict]]:
    """``render``'s ``extra`` for the trace-set directories: (section, "trace_sets", entry)."""
    from hostgap.ranks.traceset import Options, analyse

    out = []
    for n, d in enumerate(dirs):
        if progress:
            progress(f"analysing trace set {d}")
        opts = Options(step_marker, launch_floor_us * 1000 if launch_floor_us else None, floor_file)
        doc = analyse([d], opts)
        section, fig = trace_set_section(n, d, doc)
        entry = {"source": d, "figure": fig.id, "heatmap": fig.drawn, "world_size": doc["cross_rank"]["world_size"],
                 "ranks": [{"rank": r["rank"], "trace": r["trace"]} for r in doc["ranks"]],
                 "cross_rank": doc["cross_rank"]}
        out.append((section, "trace_sets", entry))
    return out
