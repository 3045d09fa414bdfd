"""`hostgap measure`, `presets`, `floor`, `sweep`: the measuring instrument (:func:`hostgap.measure`,
:func:`hostgap.presets`). The progress bar is :mod:`hostgap.cli.measure_console`; reading recorded
runs back (`runs`, `show`) is :mod:`hostgap.cli.runs`."""

from __future__ import annotations

import json
import sys

import click

from hostgap import api
from hostgap.cli.measure_console import ProgressBar, err_console
from hostgap.errors import EXIT_INVALID, HostgapError

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


MEASURE_KEYS = (
    "device",
    "mode",
    "batch",
    "prompt_len",
    "dtype",
    "threads",
    "n1",
    "n2",
    "repeats",
    "traced_repeats",
    "warmup",
    "estimator",
    "retries",
    "budget",
    "seed",
    "keep_traces",
    "gzip",
    "floor_file",
    "kv_cache_gib",
    "tp",
    "stacks",
    "db",
)
"""Options of ``measure`` passed to :func:`hostgap.measure` under the same name."""


def _common(f):
    """Options shared by measure and sweep."""
    opts = [
        click.option(
            "--device",
            default="auto",
            show_default=True,
            type=click.Choice(["auto", "cpu", "cuda"]),
            help="where to run: auto (CUDA when available), cpu or cuda",
        ),
        click.option("--dtype", default="auto", show_default=True, help="auto: float32 on CPU, bfloat16 on CUDA"),
        click.option("--threads", default=1, show_default=True, help="CPU intra-op threads"),
        click.option("--n1", default=1, show_default=True, help="tokens of the short run"),
        click.option("--n2", type=int, default=None, help="tokens of the long run [128 CPU, 64 CUDA]"),
        click.option("--repeats", "-r", default=5, show_default=True, help="untraced repeats per N"),
        click.option("--traced-repeats", default=2, show_default=True, help="traced repeats at N1 and N2"),
        click.option("--sweep", default=None, help="N values for the linearity check, e.g. 1,16,32,64,128"),
        click.option("--warmup", default=2, show_default=True, help="untimed decode runs before the timed ones"),
        click.option(
            "--estimator",
            default="theil-sen",
            show_default=True,
            type=click.Choice(["theil-sen", "median", "min", "mean"]),
            help="theil-sen: robust slope over every run, intervals tested for coverage",
        ),
        click.option(
            "--retries",
            default=2,
            show_default=True,
            help="measure again (at most this often) while the machine is busy",
        ),
        click.option(
            "--budget",
            default=None,
            type=float,
            help="seconds for the runs, re-measurements included: while a check fails and the "
            "machine is not busy, more rounds are measured until it passes or this is spent "
            "[40 hf, 300 vllm; engines measured together: the larger]",
        ),
        click.option("--seed", default=0, show_default=True, help="seed of the random weights and prompt tokens"),
        click.option(
            "--keep-traces",
            default="ends",
            show_default=True,
            type=click.Choice(["all", "ends", "none"]),
            help="profiler traces kept in the run directory: all, those at N1 and N2, none",
        ),
        click.option("--gzip/--no-gzip", default=True, show_default=True, help="gzip kept traces"),
        click.option("--floor-file", type=click.Path(), default=None, help="launch floor JSON (hostgap floor)"),
        click.option("--kv-cache-gib", type=float, default=None, help="vLLM engine: KV-cache space in GiB [1 on CPU]"),
        click.option(
            "--tp",
            type=int,
            default=1,
            show_default=True,
            help="vLLM engine: tensor-parallel ranks; each traced run keeps every rank's trace "
            "in traces/ranks/ (docs/multirank.md)",
        ),
        click.option(
            "-o",
            "--output",
            "out",
            default="runs",
            show_default=True,
            help="folder the run directories are written in (relative: to the current folder)",
        ),
        click.option("--out", "out_old", default=None, hidden=True, help="former name of --output, kept working"),
        click.option("--db", default=None, help="runs database [$HOSTGAP_DB or ~/.local/share/hostgap/runs.sqlite]"),
        click.option("--quiet", "-q", is_flag=True, help="no progress on stderr"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""

    @cli.command("measure")
    @click.option("--preset", "-p", default=None, help="workload preset [tiny on CPU, llama-3.2-1b on CUDA]")
    @click.option("--model", type=click.Path(), default=None, help="local checkpoint directory instead of a preset")
    @click.option(
        "--engine",
        default="hf",
        show_default=True,
        help="hf (generate), hf-cb or hf-cb-async (transformers continuous batching), vllm; two side by side: hf,vllm",
    )
    @click.option(
        "--mode",
        default="eager",
        show_default=True,
        type=click.Choice(MODES),
        help="eager: DynamicCache; static: StaticCache, same step as graph; graph: CUDA graph replay",
    )
    @click.option("--batch", "-b", default=1, show_default=True, help="sequences decoded together")
    @click.option(
        "--prompt-len",
        "--context",
        "-L",
        "prompt_len",
        default=128,
        show_default=True,
        help="prompt tokens per sequence",
    )
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
        what = opts["preset"] or opts["model"] or "default workload"
        engines = ",".join(_strs(opts["engine"]) or ("hf",))
        with ProgressBar(f"measure {what} [{engines}]", opts["quiet"]) as bar:
            result = api.measure(
                opts["preset"],
                model=opts["model"],
                engine=opts["engine"] or "hf",
                sweep=_ints(opts.get("sweep"), "--sweep"),
                output=opts.get("out_old") or opts["out"],
                store=not opts["no_db"],
                progress=bar,
                **{k: opts[k] for k in MEASURE_KEYS},
            )
        if opts["as_json"]:
            click.echo(result.to_json())
        else:
            result.print()
        if not result.valid:
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
        result = api.presets(dtype)
        if as_json:
            click.echo(result.to_json())
        elif as_csv:
            result.to_csv()
        else:
            result.print()

    @cli.command("floor")
    @click.option(
        "--device",
        default="auto",
        show_default=True,
        type=click.Choice(["auto", "cpu", "cuda"]),
        help="Where to measure: auto (CUDA when available), cpu or cuda.",
    )
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
        from hostgap.capture.protocol.null_kernel import measure_to_file

        f, path = measure_to_file(device, samples, warmup, out_old or out)
        if as_json:
            click.echo(json.dumps(f.to_dict(), indent=2))
        else:
            click.echo(
                f"{'launch' if f.device == 'cuda' else 'dispatch'} floor on {f.device} ({f.device_name}): "
                f"mean {f.mean_ns / 1e3:.3f} µs, p50 {f.p50_ns / 1e3:.3f} µs, p95 {f.p95_ns / 1e3:.3f} µs "
                f"({f.samples} samples)"
            )
        err_console().print(f"wrote {path}", style="dim", markup=False)

    @cli.command("sweep")
    @click.option("--presets", "-p", default=None, help="comma-separated presets [device default]")
    @click.option("--batch", "-b", "batches", default="1", show_default=True, help="comma-separated batch sizes")
    @click.option(
        "--context", "-L", "contexts", default="128", show_default=True, help="comma-separated prompt lengths"
    )
    @click.option("--mode", "modes", default="eager", show_default=True, help="comma-separated modes")
    @click.option("--engine", "engines", default="hf", show_default=True, help="comma-separated engines")
    @click.option("--cells", type=click.Path(), default=None, help="JSON list of cells (overrides the grid)")
    @click.option(
        "--backend",
        type=click.Choice(["local", "ray"]),
        default="local",
        show_default=True,
        help="local: one cell after another here; ray: cells as Ray tasks (docs/ray.md)",
    )
    @click.option(
        "--address",
        metavar="ADDR",
        default=None,
        help="Ray cluster to join, e.g. 10.0.0.5:6379 (with --backend ray; default: start one here)",
    )
    @click.option(
        "--ray-retries",
        default=2,
        show_default=True,
        help="runs of a cell again after its Ray worker died (with --backend ray)",
    )
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
        from hostgap.capture.protocol import cells as sw

        if opts["address"] and opts["backend"] != "ray":
            raise click.UsageError("--address needs --backend ray")
        opts.update(preset=None, model=None, engine="hf", mode="eager", batch=1, prompt_len=128)
        cells_ = sw.plan(
            sw.base_config(opts, _ints(opts.get("sweep"), "--sweep")),
            _strs(presets),
            _ints(batches, "--batch"),
            _ints(contexts, "--context"),
            _strs(modes),
            _strs(engines),
            cells,
        )
        _run_sweep(cells_, opts)


def _run_sweep(cells, opts) -> None:
    from hostgap.capture.protocol import cells as sw

    console = err_console()
    eta = sw.Eta()

    def on_cell(i, n, key, status):
        if status.startswith("done"):
            eta.tick()
        left = eta.left_s(n - i - 1)
        eta_txt = f", ETA {left:.0f} s" if left is not None and status.startswith(("done", "skip")) else ""
        if bar is not None:
            bar.cell(i + (status != "start"), key.split("|n")[0])
        if not opts["quiet"] or status.startswith("fail"):
            console.print(
                f"[{i + 1}/{n}] {status} {key}{eta_txt}",
                style="red" if status.startswith("fail") else None,
                markup=False,
            )

    ray = opts.get("backend") == "ray"  # cells run on the workers: no token bar here
    with ProgressBar("  tokens", quiet=opts["quiet"] or ray, cells=len(cells)) as bar:
        outcome, path = sw.run_grid(
            cells,
            opts["db"],
            backend=opts["backend"],
            address=opts["address"],
            ray_retries=opts["ray_retries"],
            on_cell=on_cell,
            progress=bar,
        )
    console.print(
        f"sweep: {outcome.done} measured, {outcome.skipped} already done, {len(outcome.failed)} failed, "
        f"of {outcome.total} cells; database {path}"
    )
    if outcome.interrupted:
        console.print("interrupted: the database holds every finished cell; rerun the same command to resume")
        sys.exit(130)
    if outcome.failed:
        sys.exit(1)
