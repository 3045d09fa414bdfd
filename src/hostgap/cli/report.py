"""Report verbs: ``report`` (HTML with figures, :func:`hostgap.write_report`), ``compare`` (two
inputs, regression gate, :func:`hostgap.compare`), ``overlay`` (Perfetto tracks)."""

from __future__ import annotations

import sys

import click

from hostgap import api
from hostgap.cli.output import jobs_option, no_cache_option, note, progress, status


def warn_notes(notes, quiet: bool) -> None:
    """What each input lacks (a run directory not found, a missing trace or timings.json), on
    stderr: the page and the table say it too, but a weaker report must not be silent."""
    if not quiet:
        for source, text in notes:
            note(f"note: {source}: {text}", style="yellow")


def _input_options(f):
    f = no_cache_option(f)
    f = jobs_option(f)
    f = click.option("--db", metavar="PATH", help="Runs database for run ids [$HOSTGAP_DB or the default].")(f)
    f = click.option(
        "--floor-file", type=click.Path(dir_okay=False), help="Launch-floor result written by `hostgap floor`."
    )(f)
    f = click.option("--launch-floor-us", type=float, help="Launch floor T_floor in µs.")(f)
    f = click.option(
        "--step-marker", metavar="REGEX", help="Annotation names that delimit steps (default: auto-detect)."
    )(f)
    return f


def register(cli: click.Group) -> None:
    @cli.command()
    @click.argument("inputs", nargs=-1, required=True, metavar="RUN_OR_TRACE...")
    @click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
    @click.option("--title", help="Page title (default: the inputs' labels).")
    @click.option(
        "--max-bars", default=300, show_default=True, help="Per-step charts average longer traces over bins of steps."
    )
    @_input_options
    @click.option("--json", "as_json", is_flag=True, help="Also print the report's numbers as JSON on stdout.")
    @click.option("--quiet", "-q", is_flag=True, help="No progress or notes on stderr (errors still print).")
    def report(inputs, output, title, max_bars, step_marker, launch_floor_us, floor_file, db, as_json, quiet):
        """One self-contained HTML report (offline: no scripts, no network) with the verdict, key
        numbers and figures of each RUN_OR_TRACE, and a regime map when several are given.

        RUN_OR_TRACE is a run directory (hostgap measure), its results.json, a trace file
        (Kineto JSON or Nsight Systems SQLite), or a run id in the runs database.

        \b
        Examples:
          hostgap report runs/20261130-152104-tiny-hf-cpu-eager-b1-bf3eac -o report.html
          hostgap report trace.json.gz -o trace.html
          hostgap report runs/* -o sweep.html --json > sweep.json
        """
        with status("reading the inputs", quiet):
            page = api.write_report(
                inputs,
                output,
                title=title,
                max_bars=max_bars,
                step_marker=step_marker,
                launch_floor_us=launch_floor_us,
                floor_file=floor_file,
                db=db,
                progress=progress(quiet),
            )
        warn_notes(page.notes, quiet)
        if not quiet:
            page.print(sys.stderr)
        if as_json:
            click.echo(page.to_json())

    @cli.command()
    @click.argument("a", metavar="A")
    @click.argument("b", metavar="B")
    @click.option(
        "--fail-if",
        "fail_if",
        metavar="EXPR",
        help="Exit 1 when a condition on B − A holds, e.g. 'host_fraction>+5%,wall_ns>+0.1ms,hdbi<-0.05'.",
    )
    @click.option(
        "--outside-noise",
        is_flag=True,
        help="A --fail-if condition on wall/device/host-exposed/host fraction holds only when the "
        "change's interval (MOVER of both runs' intervals) excludes 0.",
    )
    @click.option(
        "--basis",
        type=click.Choice(["auto", "differencing", "steps"]),
        default="auto",
        show_default=True,
        help="differencing: both measured runs; steps: medians over steady decode steps.",
    )
    @_input_options
    @click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
    @click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout.")
    @click.option("--quiet", "-q", is_flag=True, help="No progress or notes on stderr (errors still print).")
    def compare(
        a, b, fail_if, outside_noise, basis, step_marker, launch_floor_us, floor_file, db, as_json, as_csv, quiet
    ):
        """Two runs or traces side by side (A is the baseline): per-step parts, kernel counts,
        TaxBreak, HDBI, and B − A with its sign, absolute and relative; for two measured runs,
        B − A of wall, device-active, host-exposed and host fraction with its 95 % interval
        (MOVER) and whether the change lies within both runs' noise.

        --fail-if conditions (comma-separated; any that holds exits 1): METRIC OP NUMBER[UNIT]
        with OP one of > >= < <= and UNIT % (relative), pp (percentage points of a
        fraction), ns/us/ms/s (time metrics), or none (the metric's own unit). Grammar and
        metric names: docs/report.md.

        \b
        Examples:
          hostgap compare runs/eager runs/graph
          hostgap compare base.json.gz new.json.gz --fail-if 'host_fraction>+5%,wall_ns>+2%'
          hostgap compare RUN_A RUN_B --json > diff.json
          hostgap compare RUN_A RUN_B --fail-if 'wall_ns>+5%' --outside-noise
        """
        with status("comparing", quiet):
            result = api.compare(
                a,
                b,
                fail_if=fail_if,
                outside_noise=outside_noise,
                basis=basis,
                step_marker=step_marker,
                launch_floor_us=launch_floor_us,
                floor_file=floor_file,
                db=db,
                progress=progress(quiet),
            )
        warn_notes(result.notes, quiet)
        if as_json:
            click.echo(result.to_json())
        elif as_csv:
            result.to_csv()
        else:
            result.print()
        for line in result.fail_lines():
            click.echo(line, err=True)
        if result.failed:
            click.echo(f"hostgap: compare: failing: {', '.join(result.held)}", err=True)
            sys.exit(1)

    @cli.command()
    @click.argument("trace", type=click.Path(dir_okay=False))
    @click.option(
        "-o", "--output", required=True, type=click.Path(dir_okay=False), help="Output trace (.json or .json.gz)."
    )
    @click.option("--step-marker", metavar="REGEX", help="Annotation names that delimit steps (default: auto).")
    @click.option("--launch-floor-us", type=float, help="Launch floor T_floor in µs.")
    @click.option("--floor-file", type=click.Path(dir_okay=False), help="Launch-floor result of `hostgap floor`.")
    @click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
    @jobs_option
    @no_cache_option
    def overlay(trace, output, step_marker, launch_floor_us, floor_file, quiet):
        """TRACE plus hostgap's tracks (process "hostgap"): step boundaries labelled with their
        numbers, host-exposed gaps per step, and TaxBreak intervals per launch (T_py,
        T_dispatch, the launch call). Opens in Perfetto (ui.perfetto.dev) and chrome://tracing.

        \b
        Examples:
          hostgap overlay trace.json.gz -o trace.hostgap.json.gz
          hostgap overlay profile.sqlite -o profile.hostgap.json.gz
        """
        from hostgap.report.overlay import PROCESS_NAME, write_overlay

        with status(f"loading {trace}", quiet):
            added, n_steps = write_overlay(trace, output, step_marker, launch_floor_us, floor_file, progress(quiet))
        if not quiet:
            note(f"wrote {output}: {added:,} events on process '{PROCESS_NAME}' ({n_steps} steps)")
