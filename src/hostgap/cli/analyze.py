"""Trace verbs: ``analyze``, ``steps``, ``kernels``, ``trim``."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import click

from hostgap.report.terminal import (
    StderrConsole,
    console,
    dumps_json,
    overview_csv_rows,
    render_anatomy,
    render_overview,
    render_steps,
    step_csv_rows,
    write_csv,
)

_err = StderrConsole()


@contextmanager
def status(message: str, quiet: bool):
    if quiet or not sys.stderr.isatty():
        yield
        return
    with _err.status(message):
        yield


def output_options(f):
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


def anatomy_config(step_marker, launch_floor_us, floor_file, **kw):
    from hostgap.anatomy.steps import AnatomyConfig

    return AnatomyConfig(
        step_marker=step_marker,
        launch_floor_ns=launch_floor_us * 1000 if launch_floor_us is not None else None,
        floor_file=floor_file,
        **kw,
    )


def load_all(paths, quiet):
    from hostgap.readers import load_trace

    for p in paths:
        with status(f"loading {p}", quiet):
            yield load_trace(p)


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
        help="Processes that analyse a trace set in parallel (default: one per core).",
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
        from hostgap.analysis.traceset import Options, analyse

        if address and backend != "ray":
            raise click.UsageError("--address needs --backend ray")
        gap_ns = int(gap_threshold_us * 1000)
        anatomy_config(step_marker, launch_floor_us, floor_file)  # validates the options early
        opts = Options(
            step_marker, launch_floor_us * 1000 if launch_floor_us is not None else None, floor_file, gap_ns, top
        )
        with status(f"analysing {len(traces)} input(s)", quiet):
            result = analyse(list(traces), opts, jobs=jobs, backend=backend, address=address)
        if isinstance(result, dict) and result.get("kind") == "trace_set":
            from hostgap.report.traceset_view import cross_rank_csv_rows, render_trace_set

            if as_json:
                click.echo(dumps_json(result))
            elif as_csv:
                write_csv(cross_rank_csv_rows(result))
            else:
                render_trace_set(result, console(quiet=False))
            return
        docs = result if isinstance(result, list) else [result]
        if as_json:
            click.echo(dumps_json(docs[0] if len(docs) == 1 else docs))
        elif as_csv:
            write_csv([r for d in docs for r in overview_csv_rows(d)])
        else:
            con = console(quiet=False)
            for d in docs:
                render_overview(d, con)
                render_anatomy(d, con)

    @cli.command()
    @click.argument("trace", type=str)
    @anatomy_options
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
        from hostgap.anatomy.steps import analyze as anatomy

        (t,) = load_all([trace], quiet)
        a = anatomy(t, anatomy_config(step_marker, launch_floor_us, floor_file)).to_dict()
        if as_json:
            click.echo(dumps_json(a))
        elif as_csv:
            write_csv(step_csv_rows(a))
        else:
            render_steps(a, console())

    @cli.command()
    @click.argument("trace", type=str)
    @anatomy_options
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
        from hostgap.anatomy.kernels import kernel_rows
        from hostgap.anatomy.steps import analyze as anatomy

        (t,) = load_all([trace], quiet)
        a = anatomy(t, anatomy_config(step_marker, launch_floor_us, floor_file))
        rows = kernel_rows(t, a)
        if as_json:
            click.echo(dumps_json(rows))
        elif as_csv:
            write_csv(rows)
        else:
            from hostgap.report.terminal import render_kernels

            render_kernels(rows, console(), t.meta.path)

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
    def trim(trace, step_range, output, step_marker, quiet):
        """Write a smaller valid trace holding only steps A:B, the GPU work they launched and the
        GPU work that ran inside them (for fixtures and bug reports); the last kept step ends
        with its own work (docs/anatomy.md, "Trim"). Output is Kineto JSON whatever the input
        format.

        \b
        Example:
          hostgap trim big.json.gz --steps 10:13 -o small.json.gz
        """
        from hostgap.anatomy.markers import find_markers
        from hostgap.anatomy.trim import parse_range, trim_rows
        from hostgap.report.kineto_writer import trace_document, write_json_gz

        (t,) = load_all([trace], quiet)
        _, markers = find_markers(t, step_marker)
        a, b = parse_range(step_range, max(len(markers), 1))
        rows = trim_rows(t, a, b, step_marker)
        write_json_gz(trace_document(t, rows), output)
        if not quiet:
            _err.print(f"wrote {output}: steps {a}:{b}, {len(rows):,} of {len(t.events):,} events")
