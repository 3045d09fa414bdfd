"""Trace verbs: ``analyze``, ``steps``, ``kernels``, ``trim``."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import click
from rich.console import Console

from hostgap.report.terminal import console, dumps_json, overview_csv_rows, render_overview, write_csv

_err = Console(stderr=True)


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


def load_all(paths, quiet):
    from hostgap.load import load_trace

    for p in paths:
        with status(f"loading {p}", quiet):
            yield load_trace(p)


def register(cli: click.Group) -> None:
    @cli.command()
    @click.argument("traces", nargs=-1, required=True, type=click.Path(dir_okay=False))
    @click.option("--gap-threshold-us", default=30.0, show_default=True,
                  help="Idle gaps shorter than this that are not host-wait are kernel-wait.")
    @click.option("--top", default=10, show_default=True, help="Top kernels per device.")
    @output_options
    def analyze(traces, gap_threshold_us, top, as_json, as_csv, quiet):
        """GPU timeline of every device and every ProfilerStep window of TRACE(s).

        TRACE is a PyTorch profiler / Kineto JSON (.json or .json.gz; also what vLLM and
        SGLang write) or an Nsight Systems SQLite export; the format is detected from content.

        \b
        Examples:
          hostgap analyze trace.json.gz
          hostgap analyze rank0.json.gz rank1.json.gz --json > timeline.json
          hostgap analyze profile.sqlite --csv
        """
        from hostgap.anatomy.overview import overview

        docs = []
        for trace in load_all(traces, quiet):
            with status("analysing", quiet):
                docs.append(overview(trace, gap_threshold_ns=int(gap_threshold_us * 1000), top=top))
        if as_json:
            click.echo(dumps_json(docs[0] if len(docs) == 1 else docs))
        elif as_csv:
            write_csv([r for d in docs for r in overview_csv_rows(d)])
        else:
            con = console(quiet=False)
            for d in docs:
                render_overview(d, con)
