"""A stored run on the terminal, whatever made it (``measure``, ``attach``, ``watch``): the short
table of a measured run (per decode step, checks), an attached run's analysis and what it saw,
a watched run's intervals; the line comparing two engines measured together; the presets table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostgap.stats.engine_diff import QUANTITIES

if TYPE_CHECKING:
    from rich.console import Console


def render_run(r: dict, con: Console) -> None:
    """``hostgap show RUN``: each kind of run in its own words."""
    from hostgap.store.save import run_kind

    kind = run_kind(r)
    if kind == "attached":
        from hostgap.report.attach_view import render

        render(r, con)
    elif kind == "watched":
        from hostgap.report.watch_view import stored_lines

        for line in stored_lines(r):
            con.file.write(line + "\n")
    else:
        render_measured(r, con)


def render_measured(r: dict, con: Console) -> None:
    """The short table of one measured run."""
    from rich.markup import escape
    from rich.table import Table

    from hostgap.report import run_rows as s

    t = Table(
        title=escape(s.title(r)), title_justify="left", show_header=True, header_style="bold", box=None, pad_edge=False
    )
    t.add_column("per decode step")
    t.add_column("value", justify="right")
    t.add_column("95 % CI / basis")
    for row in s.step_rows(r):
        t.add_row(*map(escape, row))
    t.add_section()
    t.add_row("[bold]checks[/bold]", "", "")
    for row in s.check_rows(r):
        t.add_row(*map(escape, row))
    con.print(t)
    note = s.agreement_note(r)
    if note:
        con.print(note, style="bold yellow", markup=False)
    if "levers" in r:  # under the verdict and checks: the top levers (docs/advise.md)
        from hostgap.report.advise_view import render_top

        render_top(r, con)
    con.print(s.footnote(r), style="dim", markup=False)
    from hostgap.report.energy_view import energy_lines

    for line in energy_lines(r.get("energy")):
        con.print(line, markup=False)
    if r.get("run_dir"):
        con.print(f"run directory: {r['run_dir']}", style="dim", markup=False)


def render_engine_difference(diff: dict, con: Console) -> None:
    """The line under two engines measured together."""
    con.print("\n" + difference_line(diff), markup=False, style=None if diff["valid"] else "bold yellow")


def render_presets(rows: list[dict], con: Console) -> None:
    from rich.table import Table

    dtype = rows[0]["dtype"] if rows else "bfloat16"
    t = Table(box=None, header_style="bold")
    for c in ("preset", "family", "params", "active", f"weights ({dtype})", "layers", "hidden", "description"):
        t.add_column(c, justify="right" if c not in ("preset", "family", "description") else "left")
    for r in rows:
        t.add_row(
            r["name"],
            r["family"],
            f"{r['params']:,}",
            f"{r['active_params']:,}" if r["experts"] else "",
            f"{r['weight_bytes'] / 1e9:.2f} GB",
            str(r["layers"]),
            str(r["hidden"]),
            r["description"],
        )
    con.print(t)


def verdict_cell(row: dict) -> str:
    """A runs-table row's verdict; "invalid: <first reason>" for an invalid measurement; "-" where
    the run has none (a watched run)."""
    if row.get("valid") == 0:
        why = (row.get("invalid_reasons") or "checks failed").split("\n")[0]
        return f"invalid: {why}"
    v = row.get("verdict")
    return "-" if v is None else str(v)


def render_runs(rows: list[dict], con: Console) -> None:
    """``hostgap runs``: one line per run, newest first; "-" where a run kind has no such number
    (a watched run has no preset, batch or per-step split)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(box=None, header_style="bold")
    for c in (
        "run_id",
        "preset",
        "engine",
        "mode",
        "device",
        "batch",
        "prompt",
        "wall ms",
        "device ms",
        "host ms",
        "host %",
        "verdict",
        "busy",
    ):
        t.add_column(c, justify="left" if c in ("run_id", "preset", "engine", "mode", "device", "verdict") else "right")
    text = lambda v: "-" if v is None else str(v)  # noqa: E731
    ms = lambda v: "-" if v is None else f"{v / 1e6:.3f}"  # noqa: E731
    for r in rows:
        hf = r["host_fraction"]
        cells = (
            r["run_id"],
            text(r["preset"] if r["preset"] is not None else r.get("model")),
            text(r["engine"]),
            text(r["mode"]),
            text(r["device"]),
            text(r["batch"]),
            text(r["prompt_len"]),
            ms(r["t_step_ns"]),
            ms(r["g_step_ns"]),
            ms(r["h_step_ns"]),
            "-" if hf is None else f"{hf * 100:.1f}",
            verdict_cell(r),
            {None: "-", 0: "no", 1: "yes"}.get(r.get("contended"), "-"),
        )
        t.add_row(*map(escape, cells))
    con.print(t)


def difference_line(diff: dict) -> str:
    """The terminal line of :func:`hostgap.stats.engine_diff.engine_difference`."""
    head = f"{diff['other']} - {diff['base']}"
    if not diff["valid"]:
        return f"{head}: invalid, no difference reported: " + "; ".join(diff["invalid_reasons"])
    pct = int(round(100 * diff["level"]))
    txt = []
    for key, _src, words in QUANTITIES:
        p = diff[key]
        txt.append(f"{words} {p['value'] / 1e6:+.3f} ms/step [{p['lo'] / 1e6:+.3f}, {p['hi'] / 1e6:+.3f}]")
    # against hostgap's own loop (hf) the difference is the other engine's cost beyond it; between
    # two other engines (hf-cb, hf-cb-async) it is only their difference
    why = " (the engine's own host cost beyond the in-process loop)" if diff["base"] == "hf" else ""
    return f"{head} ({diff['schedule']}, {pct} % CI): " + ", ".join(txt) + why
