"""Trace verbs: ``analyze``, ``steps``, ``kernels``, ``trim`` (:func:`hostgap.analyze`,
:func:`hostgap.steps`, :func:`hostgap.kernels`)."""

from __future__ import annotations

import click

from hostgap import api
from hostgap.cli.output import jobs_option, no_cache_option, note, status


def output_options(f):
    f = no_cache_option(f)
    f = click.option("--quiet", "-q", is_flag=True, help="No progress or notes on stderr.")(f)
    f = click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout.")(f)
    f = click.option("--json", "as_json", is_flag=True, help="JSON on stdout (schema: docs/json.md).")(f)
    return f


def anatomy_options(f):
    f = click.option("--floor-file", type=str, help="Launch-floor result written by `hostgap floor`.")(f)
    f = click.option("--launch-floor-us", type=float, help="Launch floor T_floor in µs.")(f)
    f = click.option(
        "--step-marker", metavar="REGEX", help="Annotation names that delimit steps (default: auto-detect)."
    )(f)
    return f


def emit(result, as_json: bool, as_csv: bool) -> None:
    """A result on stdout: its JSON, its CSV, or its terminal table."""
    if as_json:
        click.echo(result.to_json())
    elif as_csv:
        result.to_csv()
    else:
        result.print()


def register(cli: click.Group) -> None:
    @cli.command()
    @click.argument("traces", nargs=-1, required=True, type=str)
    @click.option(
        "--gap-threshold-us",
        default=30.0,
        show_default=True,
        help="Idle gaps shorter than this that are not host-wait are kernel-wait.",
    )
    @click.option("--top", default=10, show_default=True, help="Top kernels, ops and frames shown.")
    @click.option(
        "--jobs",
        "-j",
        type=click.IntRange(min=1),
        default=None,
        help="Threads that decode one trace, or processes that analyse a trace set (default: one per core).",
    )
    @click.option(
        "--backend",
        type=click.Choice(["local", "ray"]),
        default="local",
        show_default=True,
        help="Where a trace set is analysed: this machine's cores, or Ray tasks (docs/ray.md).",
    )
    @click.option("--address", metavar="ADDR", help="Ray cluster to join (with --backend ray; default: start one).")
    @anatomy_options
    @output_options
    def analyze(
        traces,
        gap_threshold_us,
        top,
        jobs,
        backend,
        address,
        step_marker,
        launch_floor_us,
        floor_file,
        as_json,
        as_csv,
        quiet,
    ):
        """GPU timeline of every device and every ProfilerStep window of TRACE(s).

        TRACE is a PyTorch profiler / Kineto JSON (.json or .json.gz; also what vLLM and
        SGLang write) or an Nsight Systems SQLite export; the format is detected from content.
        A directory, or several traces that carry ranks, is a trace set: per-rank and
        cross-rank step tables, the straggler rank and its cause (docs/multirank.md).

        \b
        Examples:
          hostgap analyze trace.json.gz
          hostgap analyze rank_dir/                 # one report for a multi-rank run
          hostgap analyze rank0.json.gz rank1.json.gz --json > timeline.json
          hostgap analyze profile.sqlite --csv
        """
        if address and backend != "ray":
            raise click.UsageError("--address needs --backend ray")
        with status(f"analysing {len(traces)} input(s)", quiet):
            result = api.analyze(
                traces,
                step_marker=step_marker,
                launch_floor_us=launch_floor_us,
                floor_file=floor_file,
                gap_threshold_us=gap_threshold_us,
                top=top,
                jobs=jobs,
                backend=backend,
                address=address,
            )
        emit(result, as_json, as_csv)

    @cli.command()
    @click.argument("trace", type=str)
    @anatomy_options
    @jobs_option
    @output_options
    def steps(trace, step_marker, launch_floor_us, floor_file, as_json, as_csv, quiet):
        """One row per engine step of TRACE: wall, GPU-active, host-exposed, host_wait, kernels,
        launches, TaxBreak parts and the batch composition when the annotation carries it.

        \b
        Examples:
          hostgap steps vllm_worker.pt.trace.json.gz
          hostgap steps trace.json.gz --csv > steps.csv
          hostgap steps trace.json.gz --step-marker '^decode_step' --json
        """
        with status(f"loading {trace}", quiet):
            result = api.steps(trace, step_marker=step_marker, launch_floor_us=launch_floor_us, floor_file=floor_file)
        emit(result, as_json, as_csv)

    @cli.command()
    @click.argument("trace", type=str)
    @anatomy_options
    @jobs_option
    @output_options
    def kernels(trace, step_marker, launch_floor_us, floor_file, as_json, as_csv, quiet):
        """One row per launch (eager kernel or graph launch) with its TaxBreak intervals:
        T_py, T_dispatch, T_launch, I_lib, ΔFT, ΔCT, ΔKT_fw (docs/method.md). A table on the
        terminal (the first 1,000 launches); --csv or --json for every row and column.

        \b
        Examples:
          hostgap kernels trace.json.gz
          hostgap kernels trace.json.gz --csv > kernels.csv
          hostgap kernels trace.json.gz --launch-floor-us 4.5
        """
        with status(f"loading {trace}", quiet):
            result = api.kernels(trace, step_marker=step_marker, launch_floor_us=launch_floor_us, floor_file=floor_file)
        emit(result, as_json, as_csv)

    @cli.command()
    @click.argument("trace", type=str)
    @click.option(
        "--steps",
        "step_range",
        required=True,
        metavar="A:B",
        help="Steps to keep, Python slice rules (end exclusive): 2:5, :3, 10:.",
    )
    @click.option("-o", "--output", required=True, type=str, help="Output trace (.json or .json.gz).")
    @click.option("--step-marker", metavar="REGEX", help="Annotation names that delimit steps.")
    @click.option("--quiet", "-q", is_flag=True, help="No progress or notes on stderr.")
    @jobs_option
    @no_cache_option
    def trim(trace, step_range, output, step_marker, quiet):
        """Write a smaller valid trace holding only steps A:B, the GPU work they launched and the
        GPU work that ran inside them (for fixtures and bug reports); the last kept step ends
        with its own work (docs/anatomy.md, "Trim"). Output is Kineto JSON whatever the input
        format.

        \b
        Example:
          hostgap trim big.json.gz --steps 10:13 -o small.json.gz
        """
        from hostgap.report.kineto_writer import write_trimmed

        with status(f"loading {trace}", quiet):
            done = write_trimmed(trace, step_range, output, step_marker)
        if not quiet:
            note(f"wrote {output}: steps {done.first}:{done.end}, {done.kept:,} of {done.total:,} events")
