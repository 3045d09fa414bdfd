"""`hostgap measure`, `presets`, `floor`, `runs`, `show`, `sweep`: the measuring instrument."""

from __future__ import annotations

import csv
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import click

from hostgap.errors import HostgapError

MODES = ("eager", "static", "graph")


def _ints(text: str | None, name: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise HostgapError(name, f"expected comma-separated integers, got {text!r}") from None


def _strs(text: str | None) -> tuple[str, ...] | None:
    return tuple(x.strip() for x in text.split(",") if x.strip()) if text else None


_ERR = None


def _stderr():
    """A console on a duplicate of file descriptor 2, so progress keeps drawing while the
    capture filters Kineto's lines on descriptor 2 itself."""
    global _ERR
    from rich.console import Console

    if _ERR is None:
        try:
            _ERR = os.fdopen(os.dup(2), "w", buffering=1)
        except OSError:
            _ERR = sys.stderr
    return Console(file=_ERR, highlight=False)


def _stdout():
    from rich.console import Console

    from hostgap.report.terminal import stdout_console

    probe = Console()
    return stdout_console(highlight=False, soft_wrap=False, width=probe.width if probe.is_terminal else 160)


class _Bar:
    """A rich progress bar on stderr (tokens generated, with ETA); plain lines when stderr is
    not a terminal."""

    def __init__(self, label: str, quiet: bool = False, cells: int | None = None):
        self.label, self.quiet = label, quiet
        self.console = _stderr()
        self.live = self.console.is_terminal and not quiet
        self.task = None
        self.cells_task = None
        self.cells = cells  # a sweep: a second bar over cells, with its own ETA
        self.progress = None
        self.last_phase = None

    def __enter__(self):
        if self.live:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self.progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                console=self.console, transient=True,
            )
            self.progress.__enter__()
            if self.cells:
                self.cells_task = self.progress.add_task("cells", total=self.cells, unit="cells")
            self.task = self.progress.add_task(self.label, total=None, unit="tokens")
        return self

    def cell(self, done: int, label: str) -> None:
        """Sweep: ``done`` cells finished (measured or skipped); ``label`` the current one."""
        if self.live and self.cells_task is not None:
            from rich.markup import escape

            self.progress.update(self.cells_task, completed=done, description=escape(f"cells ({label})"))
            self.label = "  tokens"

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.live:
            from rich.markup import escape

            self.progress.update(self.task, description=escape(f"{self.label}: {phase}"), completed=done, total=total)
        elif not self.quiet and phase != self.last_phase:
            self.console.print(f"{self.label}: {phase} ({done}/{total} tokens)", markup=False)
        self.last_phase = phase

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)


def render(r: dict, console=None) -> None:
    """The short table of one run (stdout)."""
    from rich.markup import escape
    from rich.table import Table

    from hostgap.capture import summary as s

    console = console or _stdout()
    t = Table(title=escape(s.title(r)), title_justify="left", show_header=True, header_style="bold",
              box=None, pad_edge=False)
    t.add_column("per decode step")
    t.add_column("value", justify="right")
    t.add_column("95 % CI / basis")
    for row in s.step_rows(r):
        t.add_row(*map(escape, row))
    t.add_section()
    t.add_row("[bold]checks[/bold]", "", "")
    for row in s.check_rows(r):
        t.add_row(*map(escape, row))
    console.print(t)
    note = s.agreement_note(r)
    if note:
        console.print(note, style="bold yellow", markup=False)
    console.print(s.footnote(r), style="dim", markup=False)
    if r.get("run_dir"):
        console.print(f"run directory: {r['run_dir']}", style="dim", markup=False)


def _config_from(opts: dict):
    from hostgap.capture.protocol import MeasureConfig

    return MeasureConfig(
        preset=opts.get("preset"), model_path=opts.get("model"), engine=opts.get("engine") or "hf",
        device=opts["device"], mode=opts["mode"], batch=opts["batch"],
        prompt_len=opts["prompt_len"], dtype=opts["dtype"], threads=opts["threads"],
        n1=opts["n1"], n2=opts["n2"], repeats=opts["repeats"],
        traced_repeats=opts["traced_repeats"], sweep=_ints(opts.get("sweep"), "--sweep"),
        warmup=opts["warmup"], estimator=opts["estimator"], seed=opts["seed"],
        stacks=opts.get("stacks", False), keep_traces=opts["keep_traces"],
        trace_gzip=opts["gzip"], floor_file=opts.get("floor_file"), out=opts.get("out_old") or opts["out"],
        kv_cache_gib=opts.get("kv_cache_gib"), retries=opts.get("retries", 2),
        tp=1 if opts.get("tp") is None else opts["tp"],
    )


def _common(f):
    """Options shared by measure and sweep."""
    opts = [
        click.option("--device", default="auto", show_default=True, type=click.Choice(["auto", "cpu", "cuda"]),
                     help="where to run: auto (CUDA when available), cpu or cuda"),
        click.option("--dtype", default="auto", show_default=True, help="auto: float32 on CPU, bfloat16 on CUDA"),
        click.option("--threads", default=1, show_default=True, help="CPU intra-op threads"),
        click.option("--n1", default=1, show_default=True, help="tokens of the short run"),
        click.option("--n2", type=int, default=None, help="tokens of the long run [128 CPU, 64 CUDA]"),
        click.option("--repeats", "-r", default=5, show_default=True, help="untraced repeats per N"),
        click.option("--traced-repeats", default=2, show_default=True, help="traced repeats at N1 and N2"),
        click.option("--sweep", default=None, help="N values for the linearity check, e.g. 1,16,32,64,128"),
        click.option("--warmup", default=2, show_default=True, help="untimed decode runs before the timed ones"),
        click.option("--estimator", default="theil-sen", show_default=True,
                     type=click.Choice(["theil-sen", "median", "min", "mean"]),
                     help="theil-sen: robust slope over every run, intervals tested for coverage"),
        click.option("--retries", default=2, show_default=True,
                     help="measure again (at most this often) while the machine is busy"),
        click.option("--seed", default=0, show_default=True, help="seed of the random weights and prompt tokens"),
        click.option("--keep-traces", default="ends", show_default=True, type=click.Choice(["all", "ends", "none"]),
                     help="profiler traces kept in the run directory: all, those at N1 and N2, none"),
        click.option("--gzip/--no-gzip", default=True, show_default=True, help="gzip kept traces"),
        click.option("--floor-file", type=click.Path(), default=None, help="launch floor JSON (hostgap floor)"),
        click.option("--kv-cache-gib", type=float, default=None,
                     help="vLLM engine: KV-cache space in GiB [1 on CPU]"),
        click.option("--tp", type=int, default=1, show_default=True,
                     help="vLLM engine: tensor-parallel ranks; each traced run keeps every rank's trace "
                          "in traces/ranks/ (docs/multirank.md)"),
        click.option("-o", "--output", "out", default="runs", show_default=True,
                     help="folder the run directories are written in (relative: to the current folder)"),
        click.option("--out", "out_old", default=None, hidden=True, help="former name of --output, kept working"),
        click.option("--db", default=None, help="runs database [$HOSTGAP_DB or ~/.local/share/hostgap/runs.sqlite]"),
        click.option("--quiet", "-q", is_flag=True, help="no progress on stderr"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _db(path):
    from hostgap.store import RunsDB

    return RunsDB(path)


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""

    @cli.command("measure")
    @click.option("--preset", "-p", default=None, help="workload preset [tiny on CPU, llama-3.2-1b on CUDA]")
    @click.option("--model", type=click.Path(), default=None, help="local checkpoint directory instead of a preset")
    @click.option("--engine", default="hf", show_default=True, help="hf, vllm, or hf,vllm side by side")
    @click.option("--mode", default="eager", show_default=True, type=click.Choice(MODES),
                  help="eager: DynamicCache; static: StaticCache, same step as graph; graph: CUDA graph replay")
    @click.option("--batch", "-b", default=1, show_default=True, help="sequences decoded together")
    @click.option("--prompt-len", "--context", "-L", "prompt_len", default=128, show_default=True,
                  help="prompt tokens per sequence")
    @click.option("--stacks", is_flag=True, help="py-spy samples of the host during one long run")
    @click.option("--no-db", is_flag=True, help="do not record the run in the database")
    @click.option("--json", "as_json", is_flag=True, help="print results JSON instead of the table")
    @_common
    def measure_cmd(**opts):
        """Measure per-decode-step wall, device-active and host-exposed time of a real workload
        (differencing method, docs/method.md), with checks, anatomy and a verdict.

        A measurement whose checks fail (a value out of range, non-linear totals, a machine that
        stayed busy through --retries re-measurements, ...) is reported as "invalid: <reason>"
        and the command exits with status 3 (docs/measure.md, Validity); 2 means bad input.

        \b
        Examples:
          hostgap measure                                   # tiny on CPU / llama-3.2-1b on CUDA
          hostgap measure -p llama-3.1-8b --context 2048 --mode graph --n2 64
          hostgap measure -p tiny --engine hf,vllm          # engine host cost side by side
        """
        engines = _strs(opts["engine"]) or ("hf",)
        if len(engines) > 2 or len(set(engines)) != len(engines):
            raise HostgapError("--engine", f"one engine or two different ones (hf,vllm), got {opts['engine']!r}")
        base = _config_from(opts)
        from hostgap.capture.engine import load_engine
        from hostgap.capture import protocol

        cfgs = [replace(base, engine=name) for name in engines]
        for cfg in cfgs:  # every engine must load before the first one runs
            protocol.validate(cfg)
            load_engine(cfg.engine)
        what = base.preset or base.model_path or "default workload"
        with _Bar(f"measure {what} [{','.join(engines)}]", opts["quiet"]) as bar:
            if len(cfgs) == 1:
                results = [protocol.measure(cfgs[0], progress=bar, argv=sys.argv[1:])]
            else:  # both engines built first, then their runs interleaved
                results = protocol.measure_together(cfgs, progress=bar, argv=sys.argv[1:])
        if not opts["no_db"]:
            with _db(opts["db"]) as db:
                for r in results:
                    db.add(r)
        if opts["as_json"]:
            click.echo(json.dumps(results[0] if len(results) == 1 else results, indent=2, default=str))
        else:
            for r in results:
                render(r)
            if len(results) == 2:
                from hostgap.capture.engine_diff import difference_line

                diff = results[0]["engine_difference"]
                _stdout().print("\n" + difference_line(diff), markup=False,
                                style=None if diff["valid"] else "bold yellow")
        if not all(r.get("valid", True) for r in results):
            from hostgap.capture.validity import EXIT_INVALID

            click.get_current_context().exit(EXIT_INVALID)

    @cli.command("presets")
    @click.option("--dtype", default="bfloat16", show_default=True, help="dtype for weight bytes")
    @click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
    @click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout.")
    def presets_cmd(dtype, as_json, as_csv):
        """List workload presets with exact parameter counts and weight bytes (nothing is built).

        \b
        Example:
          hostgap presets --json | jq '.[] | {name, params}'
        """
        from hostgap.model.arch import PRESETS

        rows = []
        for a in PRESETS.values():
            rows.append({
                "name": a.name, "family": a.family, "params": a.param_count(),
                "active_params": a.param_count(active=True), "weight_bytes": a.weight_bytes(dtype),
                "dtype": dtype, "layers": a.layers, "hidden": a.hidden, "heads": a.heads,
                "kv_heads": a.kv_heads, "vocab": a.vocab, "experts": a.experts, "top_k": a.top_k,
                "kv_bytes_per_token": a.kv_bytes_per_token(dtype), "description": a.description,
            })
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        if as_csv:
            from hostgap.report.terminal import write_csv

            write_csv(rows)
            return
        from rich.table import Table

        t = Table(box=None, header_style="bold")
        for c in ("preset", "family", "params", "active", f"weights ({dtype})", "layers", "hidden", "description"):
            t.add_column(c, justify="right" if c not in ("preset", "family", "description") else "left")
        for r in rows:
            t.add_row(r["name"], r["family"], f"{r['params']:,}",
                      f"{r['active_params']:,}" if r["experts"] else "", f"{r['weight_bytes'] / 1e9:.2f} GB",
                      str(r["layers"]), str(r["hidden"]), r["description"])
        _stdout().print(t)

    @cli.command("floor")
    @click.option("--device", default="auto", show_default=True, type=click.Choice(["auto", "cpu", "cuda"]),
                  help="Where to measure: auto (CUDA when available), cpu or cuda.")
    @click.option("--samples", default=200, show_default=True, help="Timed launches (or CPU dispatches).")
    @click.option("--warmup", default=50, show_default=True, help="Untimed launches before the samples.")
    @click.option("-o", "--output", "out", default=None, help="Result file [floor-<device>.json].")
    @click.option("--out", "out_old", default=None, hidden=True, help="Former name of --output, kept working.")
    @click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout instead of one line.")
    def floor_cmd(device, samples, warmup, out, out_old, as_json):
        """Measure the launch floor: CUDA null-kernel launch (kernel start - launch start), or on
        CPU the dispatch floor of a minimal torch op. Writes a file for --floor-file.

        \b
        Examples:
          hostgap floor                       # -> floor-cuda.json on a GPU machine
          hostgap analyze trace.json.gz --floor-file floor-cuda.json
        """
        from hostgap.capture.floor import measure_floor, write_floor

        out = out_old or out
        if out:
            from hostgap.capture.rundir import check_writable

            check_writable(Path(out).parent if str(Path(out).parent) else Path("."))
        f = measure_floor(device, samples, warmup)
        path = write_floor(f, Path(out or f"floor-{f.device}.json"))
        if as_json:
            click.echo(json.dumps(f.to_dict(), indent=2))
        else:
            _stdout().print(
                f"{'launch' if f.device == 'cuda' else 'dispatch'} floor on {f.device} ({f.device_name}): "
                f"mean {f.mean_ns / 1e3:.3f} µs, p50 {f.p50_ns / 1e3:.3f} µs, p95 {f.p95_ns / 1e3:.3f} µs "
                f"({f.samples} samples)"
            )
        _stderr().print(f"wrote {path}", style="dim", markup=False)

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
        from hostgap.store import RunsDB

        with RunsDB(db) as d:
            rows = d.rows(limit=limit, preset=preset, device=device)
            total = d.count()
        # stderr, so --json/--csv stay clean: which database this is (shared by every checkout
        # unless --db or $HOSTGAP_DB says otherwise)
        _stderr().print(f"runs database: {d.path} ({total} run{'s' if total != 1 else ''})", style="dim",
                        markup=False, soft_wrap=True)
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
        for c in ("run_id", "preset", "engine", "mode", "device", "batch", "prompt", "wall ms",
                  "device ms", "host ms", "host %", "verdict", "busy"):
            t.add_column(c, justify="left" if c in ("run_id", "preset", "engine", "mode", "device", "verdict") else "right")
        for r in rows:
            f = lambda v: "-" if v is None else f"{v / 1e6:.3f}"  # noqa: E731
            hf = r["host_fraction"]
            cells = (r["run_id"], str(r["preset"]), str(r["engine"]), str(r["mode"]), str(r["device"]),
                     str(r["batch"]), str(r["prompt_len"]), f(r["t_step_ns"]), f(r["g_step_ns"]),
                     f(r["h_step_ns"]), "-" if hf is None else f"{hf * 100:.1f}", _verdict_cell(r),
                     {None: "-", 0: "no", 1: "yes"}.get(r.get("contended"), "-"))
            t.add_row(*map(escape, cells))
        _stdout().print(t)

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
            why = (f"not found from {Path.cwd()} (stored relative to the folder the run was measured in)"
                   if not os.path.isabs(r["run_dir"]) else "not found (moved or deleted)")
            _stderr().print(f"note: run directory {r['run_dir']} {why}", style="yellow", markup=False,
                            soft_wrap=True)
        if as_json:
            click.echo(json.dumps(r, indent=2, default=str))
        else:
            render(r)

    @cli.command("sweep")
    @click.option("--presets", "-p", default=None, help="comma-separated presets [device default]")
    @click.option("--batch", "-b", "batches", default="1", show_default=True, help="comma-separated batch sizes")
    @click.option("--context", "-L", "contexts", default="128", show_default=True, help="comma-separated prompt lengths")
    @click.option("--mode", "modes", default="eager", show_default=True, help="comma-separated modes")
    @click.option("--engine", "engines", default="hf", show_default=True, help="comma-separated engines")
    @click.option("--cells", type=click.Path(), default=None, help="JSON list of cells (overrides the grid)")
    @click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                  help="local: one cell after another here; ray: cells as Ray tasks (docs/ray.md)")
    @click.option("--address", metavar="ADDR", default=None,
                  help="Ray cluster to join, e.g. 10.0.0.5:6379 (with --backend ray; default: start one here)")
    @click.option("--ray-retries", default=2, show_default=True,
                  help="runs of a cell again after its Ray worker died (with --backend ray)")
    @_common
    def sweep_cmd(presets, batches, contexts, modes, engines, cells, **opts):
        """Measure a grid (presets x batch x context x mode) into the runs database, skipping cells
        already there (an interrupted sweep resumes). Ctrl-C stops after cleaning up the cell.

        \b
        Examples:
          hostgap sweep -p tiny,tiny-moe -b 1,4,16 -L 128,512
          hostgap sweep --cells bench/gpu/cells.json -o bench/results/h200/runs
          hostgap sweep -p tiny -b 1,4,16 --backend ray --address HEAD:6379
        """
        from hostgap.capture import sweep as sw

        if opts["address"] and opts["backend"] != "ray":
            raise click.UsageError("--address needs --backend ray")

        opts.update(preset=None, model=None, engine="hf", mode="eager", batch=1, prompt_len=128)
        base = _config_from(opts)
        for m in _strs(modes) or ():
            if m not in MODES:
                raise HostgapError(f"--mode {m}", f"unknown mode; use {', '.join(MODES)}")
        if cells:
            grid = sw.cells_from_file(base, cells)
        else:
            grid = sw.grid(base, _strs(presets), _ints(batches, "--batch"), _ints(contexts, "--context"),
                           _strs(modes), _strs(engines))
        _run_sweep(grid, opts)


def _run_sweep(grid, opts) -> None:
    from hostgap.capture import sweep as sw

    console = _stderr()
    model_cache: dict = {}
    eta = sw.Eta()

    bar = None

    def on_cell(i, n, key, status):
        if status.startswith("done"):
            eta.tick()
        left = eta.left_s(n - i - 1)
        eta_txt = f", ETA {left:.0f} s" if left is not None and status.startswith(("done", "skip")) else ""
        if bar is not None:
            bar.cell(i + (status != "start"), key.split("|n")[0])
        if not opts["quiet"] or status.startswith("fail"):
            console.print(f"[{i + 1}/{n}] {status} {key}{eta_txt}", style="red" if status.startswith("fail") else None,
                          markup=False)

    kw = lambda cfg: {"model_cache": model_cache} if cfg.engine == "hf" else None  # noqa: E731
    with _db(opts["db"]) as db:
        if opts.get("backend") == "ray":  # cells run on the workers: no token bar here
            from hostgap.capture.ray_backend import run_sweep_ray

            outcome = run_sweep_ray(grid, db, address=opts["address"], retries=opts["ray_retries"], on_cell=on_cell)
        else:
            with _Bar("  tokens", quiet=opts["quiet"], cells=len(grid)) as bar:
                outcome = sw.run_sweep(grid, db, on_cell=on_cell, progress=bar, engine_kw_for=kw)
        path = db.path
    console.print(
        f"sweep: {outcome.done} measured, {outcome.skipped} already done, {len(outcome.failed)} failed, "
        f"of {outcome.total} cells; database {path}"
    )
    if outcome.interrupted:
        console.print("interrupted: the database holds every finished cell; rerun the same command to resume")
        sys.exit(130)
    if outcome.failed:
        sys.exit(1)


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
        from hostgap.capture.rundir import read_json

        return read_json(p)
    from hostgap.store import RunsDB

    with RunsDB(db_path) as db:
        r = db.get(run)
        where = db.path
    if r is None:
        raise HostgapError(run, f"no such run in {where} (and not a run directory)")
    return r
