"""``hostgap watch URL``: a running server's decode telemetry and host-exposed share, per
interval, from its own Prometheus metrics (no profiler). Library: :func:`hostgap.watch`."""

from __future__ import annotations

import contextlib
import sys

import click

from hostgap import api
from hostgap.errors import HostgapError
from hostgap.server.attach.profile import sigterm_unwinds


def register(cli: click.Group) -> None:
    @cli.command("watch")
    @click.argument("url", required=False)
    @click.option(
        "--interval",
        "interval_s",
        type=float,
        default=None,
        help="Seconds between scrapes (one row per interval) [default: 5; --prometheus: 15, a history cut "
        "into 240 intervals].",
    )
    @click.option(
        "--prometheus",
        metavar="URL",
        help="The fleet view: read every instance from this Prometheus's HTTP API (query_range) instead of "
        "scraping one server.",
    )
    @click.option("--match", metavar="SELECTOR", help="--prometheus: the instances, e.g. '{job=\"vllm\"}'.")
    @click.option("--since", metavar="DURATION", help="--prometheus: the last DURATION (2h, 30m) of history.")
    @click.option("--start", metavar="T", help="--prometheus: history from T (unix seconds or RFC 3339) ...")
    @click.option("--end", metavar="T", help="... to T [default: follow the present].")
    @click.option(
        "--hardware-label", metavar="LABEL", help="--prometheus: the label naming each server's hardware class."
    )
    @click.option(
        "--duration", "duration_s", type=float, default=None, help="Seconds to watch [default: until Ctrl-C]."
    )
    @click.option(
        "--calibration",
        "calibrations",
        multiple=True,
        metavar="RUN",
        help="vLLM: an attach run (id, directory or steps JSON) of this server; repeat for several loads.",
    )
    @click.option(
        "--band-from",
        "band_from",
        metavar="RUN",
        help="vLLM: fit the anomaly band on this stored watch of the server under normal traffic (run id, "
        "directory or watch --json file) instead of the fixed tolerance.",
    )
    @click.option(
        "--calibrate/--no-calibrate",
        "calibrate",
        default=None,
        help="vLLM: profile the server's own traffic for a calibration at the start and when it goes stale "
        "[default: on for vLLM without --calibration]; --prometheus (live): renew each class's calibration by "
        "attaching to one of its instances [default: off].",
    )
    @click.option(
        "--calibrate-steps", type=int, default=32, show_default=True, help="Engine steps each calibration profiles."
    )
    @click.option(
        "--recalibrate-after",
        "recalibrate_after_s",
        type=float,
        default=3600.0,
        show_default=True,
        help="Seconds after which a calibration is renewed.",
    )
    @click.option(
        "--trace-dir",
        default=None,
        help="--calibrate: where the server writes its traces, as this machine sees it (as attach's).",
    )
    @click.option("--jsonl", type=click.Path(dir_okay=False), help="Append one JSON object per interval to FILE.")
    @click.option(
        "--serve",
        "serve",
        default=None,
        metavar="[HOST:]PORT",
        help="Export hostgap_host_exposed_share etc. as Prometheus gauges on HOST:PORT/metrics (HOST: 127.0.0.1).",
    )
    @click.option(
        "--fail-if",
        "fail_if",
        metavar="EXPR",
        help="Exit 1 when a condition held over the window, e.g. 'host_share>0.3' (comma-separated).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object (intervals and summary) at the end.")
    @click.option(
        "--timeout",
        "timeout_s",
        type=float,
        default=None,
        help="Seconds one scrape waits for the server: to connect, for each read of the headers, for the whole body "
        "[default: the interval, 5 to 10; the first scrape at least 15].",
    )
    @click.option("--db", metavar="PATH", help="Runs database [$HOSTGAP_DB or the default].")
    @click.option("-o", "--output", default="runs", show_default=True, help="Folder for the run directory.")
    @click.option("--no-store", is_flag=True, help="Do not store the series as a run.")
    @click.option("--quiet", "-q", is_flag=True, help="No table or notes on stderr (errors still print).")
    def watch_cmd(
        url,
        interval_s,
        prometheus,
        match,
        since,
        start,
        end,
        hardware_label,
        duration_s,
        calibrations,
        band_from,
        calibrate,
        calibrate_steps,
        recalibrate_after_s,
        trace_dir,
        jsonl,
        serve,
        fail_if,
        as_json,
        timeout_s,
        db,
        output,
        no_store,
        quiet,
    ):
        """Scrape a running vLLM or SGLang server's /metrics every --interval and show, per interval,
        decode steps per second, tokens and sequences per step, the step period, the prefill/decode
        mix and an estimate of the host-exposed share with its basis and interval: SGLang's device
        timer where the server has it (SGLANG_ENABLE_METRICS_DEVICE_TIMER=1), else a step model
        calibrated on short profiles of the server's own traffic (--calibrate, the default on vLLM;
        needs the server's profile routes) or on attach runs (--calibration).

        Exit status: 0, 1 when a --fail-if condition held, 2 on bad input or a server without
        metrics. Ctrl-C or SIGTERM ends the watch normally (summary, stored run; a calibration
        profile running is stopped).

        \b
        Examples:
          hostgap watch http://127.0.0.1:8000 --interval 5
          hostgap watch http://127.0.0.1:8000 --calibrate --serve 0.0.0.0:9400 --jsonl w.jsonl
          hostgap watch http://127.0.0.1:8000 --calibration 20261203-0112 --duration 600
          hostgap watch http://127.0.0.1:30000 --serve 9400          # Grafana beside SGLang's panels
          hostgap watch $URL --duration 300 --fail-if 'host_share>0.3' --json > watch.json
          hostgap watch --prometheus http://prom:9090 --match '{job="vllm"}' --since 2h --calibration RUN
        """

        def note(msg: str) -> None:
            if not quiet:
                click.echo(f"watch: {msg}", err=True)

        if prometheus is not None:
            if band_from is not None:
                raise HostgapError("--band-from", "a band is fitted for one server's watch, not the fleet view")
            _fleet(
                url,
                prometheus,
                match,
                since,
                start,
                end,
                hardware_label,
                interval_s,
                duration_s,
                calibrations,
                db,
                fail_if,
                jsonl,
                as_json,
                quiet,
                note,
                {
                    "calibrate": bool(calibrate),
                    "calibrate_steps": calibrate_steps,
                    "recalibrate_after": recalibrate_after_s,
                    "trace_dir": trace_dir,
                    "output": output,
                    "store": not no_store,
                },
            )
            return
        session = api.watch(
            url,
            match=match,
            since=since,
            start=start,
            end=end,
            hardware_label=hardware_label,
            interval=interval_s,
            duration=duration_s,
            calibration=calibrations,
            calibrate=calibrate,
            calibrate_steps=calibrate_steps,
            recalibrate_after=recalibrate_after_s,
            trace_dir=trace_dir,
            timeout=timeout_s,
            fail_if=fail_if,
            jsonl=jsonl,
            serve=serve,
            db=db,
            output=output,
            store=not no_store,
            on_note=note,
            band_from=band_from,
        )
        table = None if quiet else (sys.stderr if as_json else sys.stdout)
        with sigterm_unwinds(), session, contextlib.suppress(KeyboardInterrupt):
            for row in session:
                if table is not None:
                    print(session.table_line(row), file=table, flush=True)
        if as_json:
            click.echo(session.to_json())
        elif not quiet:
            session.print()
        if session.failed:
            click.echo(f"hostgap: fail-if held over the window: {', '.join(session.failed)}", err=True)
            sys.exit(1)


def _fleet(
    url,
    prometheus,
    match,
    since,
    start,
    end,
    hardware_label,
    interval_s,
    duration_s,
    calibrations,
    db,
    fail_if,
    jsonl,
    as_json,
    quiet,
    note,
    renew: dict,
) -> None:
    """``watch --prometheus``: the fleet's rows as they are read, then its summary."""
    fleet = api.watch(
        url,
        prometheus=prometheus,
        match=match,
        since=since,
        start=start,
        end=end,
        hardware_label=hardware_label,
        interval=interval_s,
        duration=duration_s,
        calibration=calibrations,
        db=db,
        fail_if=fail_if,
        jsonl=jsonl,
        on_note=note,
        **renew,
    )
    assert isinstance(fleet, api.FleetWatch)
    table = None if quiet else (sys.stderr if as_json else sys.stdout)
    if table is not None:
        print(fleet.header, file=table)
    with sigterm_unwinds(), fleet, contextlib.suppress(KeyboardInterrupt):
        for row in fleet:
            if table is not None:
                print(fleet.table_line(row), file=table, flush=True)
    if as_json:
        click.echo(fleet.to_json())
    elif not quiet:
        fleet.print()
    if fleet.failed:
        click.echo(f"hostgap: fail-if held on the fleet: {', '.join(fleet.failed)}", err=True)
        sys.exit(1)
