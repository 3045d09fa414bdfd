"""Report verbs: ``report`` (HTML with figures), ``compare`` (two inputs, regression gate),
``overlay`` (Perfetto tracks)."""

from __future__ import annotations

import os
import sys

import click

from hostgap.errors import HostgapError
from hostgap.report.terminal import StderrConsole

_err = StderrConsole()


def _progress(quiet: bool):
    if quiet:
        return None
    return lambda msg: _err.print(f"[dim]{msg}[/dim]", soft_wrap=True, highlight=False)


def _warn_notes(inputs, quiet: bool) -> None:
    """What each input lacks (a run directory not found, a missing trace or timings.json), on
    stderr: the page and the table say it too, but a weaker report must not be silent."""
    if quiet:
        return
    for inp in inputs:
        for note in inp.notes:
            _err.print(f"note: {inp.source}: {note}", style="yellow", soft_wrap=True, highlight=False, markup=False)


def _input_options(f):
    f = click.option("--db", metavar="PATH", help="Runs database for run ids [$HOSTGAP_DB or the default].")(f)
    f = click.option(
        "--floor-file", type=click.Path(dir_okay=False), help="Launch-floor result written by `hostgap floor`."
    )(f)
    f = click.option("--launch-floor-us", type=float, help="Launch floor T_floor in µs.")(f)
    f = click.option(
        "--step-marker", metavar="REGEX", help="Annotation names that delimit steps (default: auto-detect)."
    )(f)
    return f


def _config(step_marker, launch_floor_us, floor_file, db):
    from hostgap.report.inputs import InputConfig

    return InputConfig(
        step_marker=step_marker,
        launch_floor_ns=launch_floor_us * 1000 if launch_floor_us else None,
        floor_file=floor_file,
        db=db,
    )


def write_text_atomic(path: str, text: str) -> None:
    import tempfile

    from hostgap.store.rundir import file_mode

    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        raise HostgapError(path, "output folder does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".hostgap-", suffix=".tmp")
    except OSError as e:
        raise HostgapError(path, f"cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except OSError as e:
        os.unlink(tmp)
        raise HostgapError(path, f"cannot write ({e.strerror})") from None


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
        from hostgap.report.html import render
        from hostgap.report.inputs import resolve_all
        from hostgap.report.terminal import dumps_json

        if max_bars < 10:
            raise HostgapError("--max-bars", "must be at least 10")
        say = _progress(quiet)
        from hostgap.report.traceset_view import report_trace_sets, split_trace_sets
        from hostgap.report.watch_section import split_watch_runs, watch_sections

        sets, inputs = split_trace_sets(inputs)
        watched, inputs = split_watch_runs(inputs, db)
        extra = report_trace_sets(sets, step_marker, launch_floor_us, floor_file, say) + watch_sections(watched)
        docs = resolve_all(inputs, _config(step_marker, launch_floor_us, floor_file, db), say)
        _warn_notes(docs, quiet)
        others = sets + [a for a, _ in watched]
        text, data = render(
            docs,
            title or (f"hostgap report: {', '.join(others)}" if others and not docs else None),
            max_bars,
            say,
            extra,
        )
        write_text_atomic(output, text)
        if not quiet:
            _err.print(f"wrote {output} ({len(text.encode()) / 1e6:.2f} MB, {len(data['figures'])} figures)")
        if as_json:
            click.echo(dumps_json(data))

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
        from hostgap.report.compare import compare as do_compare
        from hostgap.report.compare import csv_rows, fail_lines, parse_conditions, render
        from hostgap.report.inputs import resolve
        from hostgap.report.terminal import console, dumps_json, write_csv

        conds = parse_conditions(fail_if) if fail_if else None
        cfg = _config(step_marker, launch_floor_us, floor_file, db)
        say = _progress(quiet)
        ia, ib = resolve(a, cfg, say), resolve(b, cfg, say)
        _warn_notes((ia, ib), quiet)
        if outside_noise and not fail_if:
            raise HostgapError("--outside-noise", "applies to --fail-if conditions; give --fail-if too")
        doc = do_compare(ia, ib, basis, conds, outside_noise)
        if as_json:
            click.echo(dumps_json(doc))
        elif as_csv:
            write_csv(csv_rows(doc))
        else:
            render(doc, console())
        for line in fail_lines(doc):
            click.echo(line, err=True)
        if doc["failed"]:
            held = [r["condition"] for r in doc["fail_if"] if r["holds"]]
            click.echo(f"hostgap: compare: failing: {', '.join(held)}", err=True)
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
    def overlay(trace, output, step_marker, launch_floor_us, floor_file, quiet):
        """TRACE plus hostgap's tracks (process "hostgap"): step boundaries labelled with their
        numbers, host-exposed gaps per step, and TaxBreak intervals per launch (T_py,
        T_dispatch, the launch call). Opens in Perfetto (ui.perfetto.dev) and chrome://tracing.

        \b
        Examples:
          hostgap overlay trace.json.gz -o trace.hostgap.json.gz
          hostgap overlay profile.sqlite -o profile.hostgap.json.gz
        """
        from hostgap.anatomy.link import link
        from hostgap.anatomy.steps import AnatomyConfig, analyze
        from hostgap.readers import load_trace
        from hostgap.report.kineto_writer import write_json_gz
        from hostgap.report.overlay import PROCESS_NAME, build

        say = _progress(quiet)
        if os.path.abspath(trace) == os.path.abspath(output):
            raise HostgapError(output, "output would overwrite the input trace")
        if say:
            say(f"loading {trace}")
        t = load_trace(trace)
        links = link(t)
        cfg = AnatomyConfig(
            step_marker=step_marker,
            launch_floor_ns=launch_floor_us * 1000 if launch_floor_us else None,
            floor_file=floor_file,
        )
        an = analyze(t, cfg, links)
        doc = build(trace, t, an)
        write_json_gz(doc, output)
        from hostgap.store.rundir import file_mode

        os.chmod(output, file_mode())  # the temp file it was renamed from is private
        if not quiet:
            added = sum(
                1 for e in doc["traceEvents"] if isinstance(e, dict) and str(e.get("cat", "")).startswith("hostgap.")
            )
            _err.print(f"wrote {output}: {added:,} events on process '{PROCESS_NAME}' ({len(an.steps)} steps)")
