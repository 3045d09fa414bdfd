"""``hostgap attach URL``: profile a running vLLM or SGLang server (docs/attach.md;
:func:`hostgap.attach`)."""

from __future__ import annotations

import sys

import click

from hostgap import api
from hostgap.cli.output import note


def register(cli: click.Group) -> None:
    @cli.command()
    @click.argument("url")
    @click.option("--steps", default=16, show_default=True, type=int, help="Engine steps to profile.")
    @click.option("--skip", default=4, show_default=True, type=int, help="Steps to let pass before profiling.")
    @click.option(
        "--load",
        "load_c",
        type=int,
        default=None,
        metavar="C",
        help="Drive the server with C concurrent streaming requests (default: profile its own traffic).",
    )
    @click.option("--prompt-len", default=32, show_default=True, type=int, help="Prompt tokens per request (--load).")
    @click.option(
        "--output-len",
        default=256,
        show_default=True,
        type=int,
        help="Tokens generated per request, EOS ignored (--load).",
    )
    @click.option("--model", default=None, help="Model name for --load requests (default: the server's first).")
    @click.option("--trace-dir", default=None, help="Where the server writes its traces, as this machine sees it.")
    @click.option(
        "--wait",
        "wait_s",
        default=120.0,
        show_default=True,
        type=float,
        help="Longest wait in seconds for the steps (an idle server ends the wait sooner).",
    )
    @click.option(
        "--idle",
        "idle_s",
        default=20.0,
        show_default=True,
        type=float,
        help="Seconds without a counted step after which the server counts as idle.",
    )
    @click.option(
        "--baseline",
        "baseline_s",
        default=3.0,
        show_default=True,
        type=float,
        help="Seconds of /metrics before and after the profile, for its cost (0: not measured).",
    )
    @click.option(
        "-o", "--output", "out", default="runs", show_default=True, help="Parent folder of the run directory."
    )
    @click.option("--db", default=None, help="runs database [$HOSTGAP_DB or ~/.local/share/hostgap/runs.sqlite]")
    @click.option(
        "--compare",
        "compare_to",
        metavar="RUN",
        default=None,
        help="Compare with RUN (id, run directory or trace); with --fail-if, a regression gate.",
    )
    @click.option(
        "--fail-if",
        "fail_if",
        metavar="EXPR",
        default=None,
        help="With --compare: conditions as in `hostgap compare` (exit 1 when one holds).",
    )
    @click.option("--step-marker", metavar="REGEX", help="Annotation names that delimit steps (default: auto-detect).")
    @click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout (docs/attach.md).")
    @click.option("--csv", "as_csv", is_flag=True, help="One CSV row per step on stdout.")
    @click.option("--quiet", "-q", is_flag=True, help="No progress or notes on stderr.")
    def attach(
        url,
        steps,
        skip,
        load_c,
        prompt_len,
        output_len,
        model,
        trace_dir,
        wait_s,
        idle_s,
        baseline_s,
        out,
        db,
        compare_to,
        fail_if,
        step_marker,
        as_json,
        as_csv,
        quiet,
    ):
        """Profile a running vLLM or SGLang server for --steps engine steps, then analyse them as
        `hostgap analyze` does; the run is stored like a measured one.

        \b
        Examples:
          hostgap attach http://127.0.0.1:8000 --steps 16 --load 4
          hostgap attach http://gpu-host:30000 --steps 32 --trace-dir /mnt/traces --json
          hostgap attach http://127.0.0.1:8000 --load 8 --compare base-run --fail-if 'host_fraction>+2pp'
        """
        if fail_if and not compare_to:
            raise click.UsageError("--fail-if needs --compare RUN")
        if fail_if:
            from hostgap.report.compare import parse_conditions

            parse_conditions(fail_if)  # a bad condition is refused before the profile
        result = api.attach(
            url,
            steps=steps,
            skip=skip,
            load=load_c,
            prompt_len=prompt_len,
            output_len=output_len,
            model=model,
            trace_dir=trace_dir,
            wait=wait_s,
            idle=idle_s,
            baseline=baseline_s,
            output=out,
            db=db,
            step_marker=step_marker,
            on_note=(lambda m: None) if quiet else (lambda m: note(m, style="dim")),
        )
        if as_json:
            click.echo(result.to_json())
        elif as_csv:
            result.to_csv()
        else:
            result.print()
        if compare_to:
            _gate(compare_to, result.run_dir, fail_if, db, quiet)


def _gate(base: str, run_dir: str | None, fail_if: str | None, db: str | None, quiet: bool) -> None:
    """``hostgap compare BASE RUN_DIR`` on stderr; exit 1 when a --fail-if condition holds."""
    doc = api.compare(base, str(run_dir), fail_if=fail_if, db=db)
    if not quiet:
        doc.print(sys.stderr)
    for line in doc.fail_lines():
        click.echo(line, err=True)
    if doc.failed:
        click.echo(f"hostgap: attach: failing: {', '.join(doc.held)}", err=True)
        sys.exit(1)
