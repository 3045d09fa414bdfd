"""`hostgap runs`, `show`: the runs database and run directories, read back."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import click

from hostgap.cli.measure_console import err_console, out_console, render
from hostgap.errors import HostgapError


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""

    @cli.command("runs")
    @click.option("--db", default=None, help="runs database [$HOSTGAP_DB or ~/.local/share/hostgap/runs.sqlite]")
    @click.option("--limit", "-n", default=50, show_default=True, help="Newest runs to list.")
    @click.option("--preset", default=None, help="Only runs of this preset.")
    @click.option("--device", default=None, help="Only runs on this device (cpu or cuda).")
    @click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
    @click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout.")
    def runs_cmd(db, limit, preset, device, as_json, as_csv):
        """List recorded runs, newest first.

        \b
        Example:
          hostgap runs --preset tiny --csv > runs.csv
        """
        from hostgap.store.database import RunsDB

        with RunsDB(db) as d:
            rows = d.rows(limit=limit, preset=preset, device=device)
            total = d.count()
        # stderr, so --json/--csv stay clean: which database this is (shared by every checkout
        # unless --db or $HOSTGAP_DB says otherwise)
        err_console().print(
            f"runs database: {d.path} ({total} run{'s' if total != 1 else ''})",
            style="dim",
            markup=False,
            soft_wrap=True,
        )
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        if as_csv:
            if rows:
                w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
            return
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
            t.add_column(
                c, justify="left" if c in ("run_id", "preset", "engine", "mode", "device", "verdict") else "right"
            )
        for r in rows:
            f = lambda v: "-" if v is None else f"{v / 1e6:.3f}"  # noqa: E731
            hf = r["host_fraction"]
            cells = (
                r["run_id"],
                str(r["preset"]),
                str(r["engine"]),
                str(r["mode"]),
                str(r["device"]),
                str(r["batch"]),
                str(r["prompt_len"]),
                f(r["t_step_ns"]),
                f(r["g_step_ns"]),
                f(r["h_step_ns"]),
                "-" if hf is None else f"{hf * 100:.1f}",
                _verdict_cell(r),
                {None: "-", 0: "no", 1: "yes"}.get(r.get("contended"), "-"),
            )
            t.add_row(*map(escape, cells))
        out_console().print(t)

    @cli.command("show")
    @click.argument("run")
    @click.option("--db", default=None, help="runs database [$HOSTGAP_DB or ~/.local/share/hostgap/runs.sqlite]")
    @click.option("--json", "as_json", is_flag=True, help="The run's results JSON on stdout.")
    def show_cmd(run, db, as_json):
        """Print one run: by id (or unique prefix) from the database, or a run directory.

        \b
        Examples:
          hostgap show 20261130-1517          # id prefix
          hostgap show runs/<run_id> --json
        """
        r = _find_run(run, db)
        if r.get("run_dir") and not Path(r["run_dir"]).is_dir():
            why = (
                f"not found from {Path.cwd()} (stored relative to the folder the run was measured in)"
                if not os.path.isabs(r["run_dir"])
                else "not found (moved or deleted)"
            )
            err_console().print(
                f"note: run directory {r['run_dir']} {why}", style="yellow", markup=False, soft_wrap=True
            )
        if as_json:
            click.echo(json.dumps(r, indent=2, default=str))
        elif r.get("mode") == "attach":
            from hostgap.report.attach_view import render as render_attach

            render_attach(r, out_console())
        elif r.get("mode") == "watch":
            from hostgap.cli.watch import render_stored

            render_stored(r)
        else:
            render(r)


def _verdict_cell(row: dict) -> str:
    """A runs-table row's verdict; "invalid: <first reason>" for an invalid measurement."""
    if row.get("valid") == 0:
        why = (row.get("invalid_reasons") or "checks failed").split("\n")[0]
        return f"invalid: {why}"
    return str(row.get("verdict"))


def _find_run(run: str, db_path) -> dict:
    p = Path(run)
    if p.is_dir() and (p / "results.json").is_file():
        p = p / "results.json"
    if p.is_file():
        from hostgap.store.rundir import read_json

        return read_json(p)
    from hostgap.store.database import RunsDB

    with RunsDB(db_path) as db:
        r = db.get(run)
        where = db.path
    if r is None:
        raise HostgapError(run, f"no such run in {where} (and not a run directory)")
    return r
