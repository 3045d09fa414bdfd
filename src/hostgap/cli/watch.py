"""``hostgap watch URL``: a running server's decode telemetry and host-exposed share, per
interval, from its own Prometheus metrics (no profiler). Library: :mod:`hostgap.server.watch.loop`."""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import IO

import click

from hostgap.errors import HostgapError

HEADER = (
    f"{'t s':>6} {'steps/s':>8} {'tok/step':>8} {'seq/step':>8} {'period ms':>9} {'p90 ms':>7} "
    f"{'busy':>5} {'prefill':>7}  {'host share':<22} notes"
)


def _num(x: float | None, fmt: str, scale: float = 1.0) -> str:
    width = fmt.split(".")[0]
    return format("-", f">{width}") if x is None else format(x * scale, fmt)


def table_line(row: dict, previous: dict | None = None) -> str:
    """One live-table line of an interval row (notes the previous row had too are not repeated)."""
    if row["host_share"] is None:
        share = "-" if row["host_share_basis"] == "none" else f"- ({row['host_share_basis']})"
    else:
        share = (
            f"{row['host_share']:.2f} [{row['host_share_low']:.2f}-{row['host_share_high']:.2f}] "
            f"{'dev' if row['host_share_basis'] == 'device timer' else 'model'}"
        )
    seen = set(previous["notes"]) if previous else set()
    notes = "; ".join(n for n in row["notes"] if n not in seen)
    if row["status"] not in ("ok", "idle"):
        notes = f"{row['status']}: {notes}" if notes else row["status"]
    return (
        f"{row['t_rel_s'] + row['interval_s']:>6.0f} {_num(row['steps_per_s'], '8.1f')} {_num(row['tokens_per_step'], '8.2f')} "
        f"{_num(row['seqs_per_step'], '8.2f')} {_num(row['step_period_s'], '9.2f', 1e3)} "
        f"{_num(row['step_period_p90_s'], '7.2f', 1e3)} {_num(row['busy_share'], '5.2f')} "
        f"{_num(row['prefill_share'], '7.2f')}  {share:<22} {notes}"
    ).rstrip()


def summary_lines(summ: dict) -> list[str]:
    lines = [
        f"{summ['intervals']} intervals ({', '.join(f'{k} {v}' for k, v in summ['by_status'].items() if v)}), "
        f"{summ['steps']:.0f} steps, {_num(summ['steps_per_s'], '.1f')} steps/s, "
        f"{_num(summ['tokens_per_step'], '.2f')} tokens/step, step period {_num(summ['step_period_s'], '.2f', 1e3)} ms"
    ]
    if summ["host_share"] is not None:
        lines.append(
            f"host-exposed share {summ['host_share']:.2f} [{summ['host_share_low']:.2f}-"
            f"{summ['host_share_high']:.2f}] ({summ['host_share_basis']}; per interval "
            f"{summ['host_share_min']:.2f}-{summ['host_share_max']:.2f})"
        )
    else:
        lines.append("host-exposed share: not estimated (see the notes above)")
    if summ.get("host_breakdown"):
        parts = sorted(summ["host_breakdown"].items(), key=lambda kv: -kv[1])
        lines.append("scheduler loop by stage: " + ", ".join(f"{k} {v:.0%}" for k, v in parts))
    for c in summ["fail_if"]:
        shown = "n/a" if c["value"] is None else f"{c['value']:.4g}"
        lines.append(f"fail-if {c['condition']}: {'HOLDS' if c['holds'] else 'does not hold'} (window value {shown})")
    return lines


def render_stored(r: dict) -> None:
    """``hostgap show`` of a stored watch: its intervals as the live table showed them, then the
    window's summary."""
    w = r.get("watch") or {}
    rows = w.get("intervals") or []
    print(f"watch {r.get('run_id')} of {r.get('server_url')} ({r.get('engine')}), every {w.get('interval_s')} s")
    cal = w.get("calibration")
    if cal:
        print(f"calibration {cal['source']}: {cal['steps']} decode steps at batch {list(cal['batches'])}")
    if rows:
        print(HEADER)
    for i, row in enumerate(rows):
        print(table_line(row, rows[i - 1] if i else None))
    for line in summary_lines(w["summary"]) if w.get("summary") else []:
        print(line)
    if r.get("run_dir"):
        print(f"run directory: {r['run_dir']}")


def store_run(doc: dict, output: str, db: str | None) -> str:
    """Write the run directory (results.json, watch.jsonl) and the database row; its path."""
    from hostgap.store.database import RunsDB
    from hostgap.store.rundir import RunDir

    run = RunDir.create(Path(output) / doc["run_id"])
    doc["run_dir"] = str(run.path.resolve())
    series = "".join(json.dumps(r) + "\n" for r in doc["watch"]["intervals"])
    (run.path / "watch.jsonl").write_text(series)
    run.path.joinpath("traces").rmdir()
    run.write_json("results.json", doc)
    with RunsDB(db) as runs:
        runs.add(doc)
    return doc["run_dir"]


def register(cli: click.Group) -> None:
    @cli.command("watch")
    @click.argument("url")
    @click.option(
        "--interval",
        "interval_s",
        type=float,
        default=5.0,
        show_default=True,
        help="Seconds between scrapes (one row per interval).",
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
    @click.option("--jsonl", type=click.Path(dir_okay=False), help="Append one JSON object per interval to FILE.")
    @click.option(
        "--serve",
        "serve_port",
        type=click.IntRange(0, 65535),
        default=None,
        metavar="PORT",
        help="Export hostgap_host_exposed_share etc. as Prometheus gauges on 127.0.0.1:PORT.",
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
        duration_s,
        calibrations,
        jsonl,
        serve_port,
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
        calibrated on an attach run of the same server (--calibration). No profiler runs.

        Exit status: 0, 1 when a --fail-if condition held, 2 on bad input or a server without
        metrics. Ctrl-C ends the watch normally (summary, stored run).

        \b
        Examples:
          hostgap watch http://127.0.0.1:8000 --interval 5
          hostgap watch http://127.0.0.1:8000 --calibration 20261203-0112 --duration 600 --jsonl w.jsonl
          hostgap watch http://127.0.0.1:30000 --serve 9400          # Grafana beside SGLang's panels
          hostgap watch $URL --duration 300 --fail-if 'host_share>0.3' --json > watch.json
        """
        from hostgap.server.metrics import metrics_url
        from hostgap.server.watch import loop as w
        from hostgap.server.watch.calibration import load_calibration

        if interval_s <= 0 or interval_s > 3600:
            raise HostgapError("--interval", f"{interval_s:g}: give seconds in (0, 3600]")
        if duration_s is not None and duration_s < interval_s:
            raise HostgapError("--duration", f"{duration_s:g} s is shorter than one interval ({interval_s:g} s)")
        if timeout_s is not None and timeout_s <= 0:
            raise HostgapError("--timeout", f"{timeout_s:g}: give seconds > 0")
        metrics_url(url)
        conditions = w.parse_conditions(fail_if) if fail_if else []
        cal = load_calibration(calibrations, db) if calibrations else None
        config = w.WatchConfig(
            url=url, interval_s=interval_s, duration_s=duration_s, timeout_s=timeout_s, calibration=cal
        )
        first = w.first_scrape(config)
        table: IO[str] | None = None if quiet else (sys.stderr if as_json else sys.stdout)
        with contextlib.ExitStack() as stack:
            sink = stack.enter_context(_open_jsonl(jsonl)) if jsonl else None
            exporter = None
            if serve_port is not None:
                from hostgap.server.watch.exporter import Exporter, engine_labels

                exporter = Exporter(serve_port, engine_labels(first))
                stack.callback(exporter.close)
                _note(f"serving hostgap gauges on http://127.0.0.1:{exporter.port}/metrics", quiet)
            if cal is not None:
                _note(
                    f"calibration {cal.source}: {cal.steps} decode steps at batch {list(cal.batches)}, "
                    f"GPU time per step {cal.gpu_intercept_s * 1e3:.3g} ms + {cal.gpu_slope_s * 1e3:.3g} ms x batch, "
                    f"held-out error {cal.block_rel_err:.1%}",
                    quiet,
                )
            rows: list[dict] = []

            def on_row(row: dict) -> None:
                rows.append(row)
                if table is not None:
                    if len(rows) == 1:
                        print(HEADER, file=table)
                    print(table_line(row, rows[-2] if len(rows) > 1 else None), file=table, flush=True)
                if sink is not None:
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                if exporter is not None:
                    exporter.update(row)

            _note(
                f"watching {first.url} ({first.engine}) every {interval_s:g} s"
                f"{f' for {duration_s:g} s' if duration_s else ' until Ctrl-C'}",
                quiet,
            )
            with contextlib.suppress(KeyboardInterrupt):
                w.watch(config, on_row, lambda msg: _note(msg, quiet), first=first)
        summ = w.summary(rows, conditions)
        doc = {
            "schema_version": w.SCHEMA_VERSION,
            "engine": first.engine,
            "url": first.url,
            "interval_s": interval_s,
            "calibration": cal.to_dict() if cal else None,
            "intervals": rows,
            "summary": summ,
        }
        if not no_store and rows:
            run_id = f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-watch-{first.engine}-{uuid.uuid4().hex[:6]}"
            stored: dict[str, object] = {
                "run_id": run_id,
                "kind": "watch",
                "mode": "watch",
                "engine": first.engine,
                "server_url": first.url,
                "valid": True,
                "invalid_reasons": [],
                "schema_version": w.SCHEMA_VERSION,
                "watch": {
                    "interval_s": interval_s,
                    "calibration": doc["calibration"],
                    "intervals": rows,
                    "summary": summ,
                },
            }
            doc["run_id"] = run_id
            doc["run_dir"] = store_run(stored, output, db)
            _note(f"stored run {run_id} ({doc['run_dir']})", quiet)
        if as_json:
            from hostgap.report.terminal import dumps_json

            click.echo(dumps_json(doc))
        elif not quiet:
            for line in summary_lines(summ):
                print(line, file=sys.stdout)
        if any(c["holds"] for c in summ["fail_if"]):
            held = ", ".join(c["condition"] for c in summ["fail_if"] if c["holds"])
            click.echo(f"hostgap: fail-if held over the window: {held}", err=True)
            sys.exit(1)


def _open_jsonl(path: str) -> IO[str]:
    try:
        return open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by the caller's ExitStack
    except OSError as exc:
        raise HostgapError(path, f"cannot write the --jsonl file ({exc.strerror or exc})") from None


def _note(msg: str, quiet: bool) -> None:
    if not quiet:
        click.echo(f"watch: {msg}", err=True)
