"""How a stored watch is shown in ``hostgap report``: one section per watch run with a figure of
the host-exposed share (with its interval) and the decode batch over time, and a table of the
window's summary.

:func:`split_watch_runs` picks the report arguments that are watch runs (a run id, run
directory or results.json whose ``kind`` is ``"watch"``); :func:`watch_sections` gives
``render``'s ``extra`` entries for them (``<section id='watch-N'>``, figure ``fig-watch-N``).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from hostgap.report.figures.canvas import Figure, draw, new_figure

esc = html.escape


def _watch_doc(arg: str, db: str | None) -> dict | None:
    p = Path(arg)
    path = p / "results.json" if p.is_dir() else p
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
    else:
        from hostgap.store.database import RunsDB, default_path

        db_path = Path(db) if db else default_path()
        if not db_path.exists():
            return None
        with RunsDB(db_path) as runs:
            doc = runs.get(arg)
    if isinstance(doc, dict) and doc.get("kind") == "fleet_watch" and "summary" in doc:
        return doc  # `watch --prometheus --json`: one line per instance (report/fleet_view.py)
    return doc if isinstance(doc, dict) and doc.get("kind") == "watch" and "watch" in doc else None


def split_watch_runs(args, db: str | None = None) -> tuple[list[tuple[str, dict]], list[str]]:
    """((argument, results) of the watch runs, the other arguments), order kept."""
    runs, rest = [], []
    for a in args:
        doc = _watch_doc(a, db)
        if doc is None:
            rest.append(a)
        else:
            runs.append((a, doc))
    return runs, rest


def watch_figure(doc: dict, fid: str) -> Figure:
    """Host-exposed share (line, its interval shaded) and decode sequences per step (bars, right
    axis) against the time since the watch began."""
    rows = doc["watch"]["intervals"]
    t = np.array([r["t_rel_s"] + r["interval_s"] / 2 for r in rows], dtype=float)
    share = np.array([np.nan if r["host_share"] is None else r["host_share"] for r in rows], dtype=float)
    low = np.array([np.nan if r["host_share_low"] is None else r["host_share_low"] for r in rows], dtype=float)
    high = np.array([np.nan if r["host_share_high"] is None else r["host_share_high"] for r in rows], dtype=float)
    batch = np.array([np.nan if r["seqs_per_step"] is None else r["seqs_per_step"] for r in rows], dtype=float)
    basis = doc["watch"]["summary"].get("host_share_basis")
    title = "Host-exposed share and decode batch over the watch"
    if not len(rows):
        return Figure(fid, title, "The watch recorded no interval.", None)

    def build():
        fig = new_figure(11.0, 3.4)
        ax = fig.add_subplot(1, 1, 1)
        ax2 = ax.twinx()
        width = np.array([r["interval_s"] for r in rows], dtype=float) * 0.8
        ax2.bar(t, np.nan_to_num(batch), width=width, color="#cfd8e6", label="sequences per step")
        ax2.set_ylabel("decode sequences per step")
        ax.set_zorder(ax2.get_zorder() + 1)
        ax.patch.set_visible(False)
        ax.fill_between(t, low, high, color="#c0562a", alpha=0.2, step=None, label="interval of the estimate")
        ax.plot(t, share, color="#c0562a", marker="o", ms=3, label=f"host-exposed share ({basis})")
        ax.set_ylim(0, 1)
        ax.set_ylabel("host-exposed share")
        ax.set_xlabel("seconds since the watch began (middle of each interval)")
        handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
        fig.legend(handles=handles, loc="outside lower left", fontsize=8, ncols=3, frameon=False)
        return fig

    cap = (
        "Per scrape interval: the estimated share of the decode step time the host exposes (line; shaded: its "
        "interval) and the decode batch the server's metrics report (bars: decode tokens / steps). "
        f"Basis: {basis} (docs/watch.md). Gaps are intervals without an estimate (a failed scrape, a restart, "
        "no traffic, or no calibration)."
    )
    drawn = {
        "t_s": t.tolist(),
        "host_share": [None if np.isnan(x) else float(x) for x in share],
        "seqs_per_step": [None if np.isnan(x) else float(x) for x in batch],
    }
    return Figure(fid, title, cap, draw(build, salt=fid), drawn)


def watch_sections(runs: list[tuple[str, dict]]) -> list[tuple[str, str, dict]]:
    """``render``'s ``extra`` for watch runs: (section HTML, "watch_runs", entry)."""
    out = []
    for n, (arg, doc) in enumerate(runs):
        if doc.get("kind") == "fleet_watch":
            from hostgap.report.fleet_view import fleet_section

            out.append(fleet_section(n, arg, doc))
            continue
        fig = watch_figure(doc, f"fig-watch-{n}")
        summ = doc["watch"]["summary"]
        out.append(
            (
                _section(n, arg, doc, fig),
                "watch_runs",
                {
                    "source": arg,
                    "run_id": doc.get("run_id"),
                    "engine": doc.get("engine"),
                    "url": doc.get("server_url"),
                    "figure": fig.id,
                    "drawn": fig.drawn,
                    "summary": summ,
                },
            )
        )
    return out


def _fmt(x: object, scale: float = 1.0, fmt: str = ".3g") -> str:
    return "—" if not isinstance(x, int | float) else format(x * scale, fmt)


def _section(n: int, arg: str, doc: dict, fig: Figure) -> str:
    s = doc["watch"]["summary"]
    rows = [
        ("engine", esc(str(doc.get("engine")))),
        ("server", esc(str(doc.get("server_url")))),
        ("intervals", esc(", ".join(f"{k} {v}" for k, v in s["by_status"].items() if v))),
        ("steps per second", _fmt(s["steps_per_s"])),
        ("tokens per step", _fmt(s["tokens_per_step"])),
        ("sequences per step", _fmt(s["seqs_per_step"])),
        ("step period (ms)", _fmt(s["step_period_s"], 1e3)),
        (
            "host-exposed share",
            f"{_fmt(s['host_share'], 1, '.2f')} [{_fmt(s['host_share_low'], 1, '.2f')}–"
            f"{_fmt(s['host_share_high'], 1, '.2f')}]",
        ),
        ("basis", esc(str(s["host_share_basis"]))),
    ]
    table = "<table>" + "".join(f"<tr><th class='name'>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"
    body = (
        f"<figure id='{fig.id}'><h3>{esc(fig.title)}</h3>{fig.svg}<figcaption>{esc(fig.caption)}</figcaption></figure>"
        if fig.svg
        else f"<p class='na'>{esc(fig.caption)}</p>"
    )
    return (
        f"<section id='watch-{n}'><h2>watch {esc(str(doc.get('run_id') or arg))}</h2>"
        f"<p class='meta'>hostgap watch of {esc(str(doc.get('server_url')))}, every "
        f"{_fmt(doc['watch'].get('interval_s'))} s</p>{table}{body}</section>"
    )
