"""`hostgap predict`: one decode step's device, host and total time from the latency model, with
what-ifs and measured runs beside it (docs/models.md); :func:`hostgap.predict`."""

from __future__ import annotations

import click

from hostgap.cli.models_common import _DTYPES, _ENGINES, _echo

TP_FORMS = ["overlap", "additive", "compute_comm", "host_over_k", "host_times_k", "additive_skew"]
WHAT_IF_HELP = (
    "Scenario beside the prediction (repeatable): graphs[:capture=piecewise|full] (CUDA graph "
    "replay; vLLM default piecewise: attention, LM head and sampling stay eager) | "
    "spec:gamma=4,alpha=0.7[,draft=PRESET] (speculative decoding) | fp8[:gemm_eff=F] (W8A8) | "
    "tp=K (K GPUs) | host=F (a host CPU F times as fast single-thread: host=1.3 is 30 % faster, "
    "host=0.5 a CPU half as fast; the launch floor does not change) | overlap[:out=N] (async/overlap "
    "scheduling) | cpu:cores=N[,load=L][,speed=S] (N cores shared with L busy threads) | "
    "megakernel[:bw=F] (one persistent kernel per step); docs/models.md."
)


@click.command("predict")
@click.argument("preset")
@click.option("--batch", default=1, show_default=True, help="Sequences in the decode step.")
@click.option("--context", default=2048, show_default=True, help="KV length per sequence (decode).")
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel degree (same path as --what-if tp=K).")
@click.option("--dtype", type=_DTYPES, default="bfloat16", show_default=True, help="Weight dtype (fp8/int8: W8A8).")
@click.option(
    "--engine", type=_ENGINES, default="vllm", show_default=True, help="Engine whose host term and launch table to use."
)
@click.option(
    "--mode",
    type=click.Choice(["eager", "graph"]),
    default="eager",
    show_default=True,
    help="eager launches, or CUDA graph replay.",
)
@click.option(
    "--gpu",
    default="h100-sxm",
    show_default=True,
    help="GPU to predict for: name or alias from the device table (docs/models.md §2).",
)
@click.option("--device", "device_alias", default=None, hidden=True, help="Alias of --gpu.")
@click.option("--device-file", default=None, type=click.Path(), help="Extra device specs (JSON/TOML).")
@click.option("--model", default=None, type=click.Path(), help="Model JSON from `hostgap fit`.")
@click.option(
    "--kernels-per-step", default=None, type=float, help="Measured kernels per step (replaces the launch table)."
)
@click.option("--what-if", multiple=True, help=WHAT_IF_HELP)
@click.option("--results", multiple=True, type=click.Path(), help="Measured runs to show beside the prediction.")
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option(
    "--tp-form",
    type=click.Choice(TP_FORMS),
    default=None,
    help="Host term vs TP degree (default: the model's, else overlap: docs/models.md §5).",
)
@click.option("--json", "as_json", is_flag=True, help="JSON to stdout: device, host and total separately.")
@click.argument("files", nargs=-1, type=click.Path())
def predict_cmd(preset, device_alias, results, as_json, files, **options):
    """Predict one decode step of PRESET: device time + host term, and what-ifs.

    Measured runs (--results, or FILES after PRESET) of the same cell are shown beside the
    prediction with its error.

    \b
    Examples:
      hostgap predict llama-3.1-8b --gpu h100 --batch 1 --context 2048
      hostgap predict llama-3.2-1b --engine hf --what-if graphs --what-if spec:gamma=4,alpha=0.8
      hostgap predict llama-3.1-8b --model model.json --json runs/*.json
    """
    from hostgap import api

    if device_alias:
        options["gpu"] = device_alias
    p = api.predict(preset, results=[*results, *files], **options)
    _echo(p.notes(as_json), err=True)
    if as_json:
        click.echo(p.to_json())
    else:
        p.print()
