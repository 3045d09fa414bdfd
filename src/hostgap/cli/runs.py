"""`hostgap runs`, `show`: the runs database and run directories, read back
(:func:`hostgap.runs`, :func:`hostgap.run`)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from hostgap import api
from hostgap.cli.output import note

DB_HELP = "runs database [$HOSTGAP_DB or ~/.local/share/hostgap/runs.sqlite]"


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""

    @cli.command("runs")
    @click.option("--db", default=None, help=DB_HELP)
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
        listed = api.runs(db, limit=limit, preset=preset, device=device)
        # stderr, so --json/--csv stay clean: which database this is (shared by every checkout
        # unless --db or $HOSTGAP_DB says otherwise)
        n = listed.total
        note(f"runs database: {listed.database} ({n} run{'s' if n != 1 else ''})", style="dim", fd2=True)
        if as_json:
            click.echo(listed.to_json())
        elif as_csv:
            listed.to_csv()
        else:
            listed.print()

    @cli.command("show")
    @click.argument("run")
    @click.option("--db", default=None, help=DB_HELP)
    @click.option("--json", "as_json", is_flag=True, help="The run's results JSON on stdout.")
    def show_cmd(run, db, as_json):
        """Print one run: by id (or unique prefix) from the database, or a run directory.

        \b
        Examples:
          hostgap show 20261130-1517          # id prefix
          hostgap show runs/<run_id> --json
        """
        r = api.run(run, db)
        where = r.run_dir
        if where and not Path(where).is_dir():
            why = (
                f"not found from {Path.cwd()} (stored relative to the folder the run was measured in)"
                if not os.path.isabs(where)
                else "not found (moved or deleted)"
            )
            note(f"note: run directory {where} {why}", style="yellow", fd2=True)
        if as_json:
            click.echo(r.to_json())
        else:
            r.print()
