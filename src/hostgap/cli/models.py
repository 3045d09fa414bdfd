"""`hostgap account`, `fit`, `predict`, `regimes`: the latency models on the command line, glue
over :mod:`hostgap.model` (the numbers) and :mod:`hostgap.report.model_view` (their text).
``fit`` and ``predict`` live in :mod:`hostgap.cli.fit` and :mod:`hostgap.cli.predict`; this
module registers all four."""

from __future__ import annotations

import click

from hostgap.cli.fit import fit_cmd
from hostgap.cli.models_common import _DTYPES, _ENGINES, _echo, _echo_json
from hostgap.cli.predict import predict_cmd

# -- account ------------------------------------------------------------------------------


@click.command("account")
@click.argument("preset")
@click.option("--batch", default=1, show_default=True, help="Sequences in the step.")
@click.option("--context", default=2048, show_default=True, help="KV tokens each sequence reads.")
@click.option("--q-tokens", default=1, show_default=True, help="Tokens per sequence this step (1: decode).")
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel degree (figures are per rank).")
@click.option("--dtype", type=_DTYPES, default="bfloat16", show_default=True, help="Weight dtype (fp8/int8: W8A8).")
@click.option("--engine", type=_ENGINES, default="vllm", show_default=True, help="Launch table to use.")
@click.option("--json", "as_json", is_flag=True, help="JSON to stdout.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV to stdout (one row per op).")
def account_cmd(preset, batch, context, q_tokens, tp, dtype, engine, as_json, as_csv):
    """Per-step workload of PRESET on one TP rank: bytes, FLOPs, launches per op.

    \b
    Example:
      hostgap account llama-3.1-8b --batch 8 --context 4096 --tp 2
    """
    from hostgap.model.accounting import Cell, account
    from hostgap.model.arch import get_preset
    from hostgap.report import model_view as view

    cell = Cell(batch=batch, q_tokens=q_tokens, context=max(context, q_tokens), tp=tp, dtype=dtype, engine=engine)
    acc = account(get_preset(preset), cell)
    if as_json:
        _echo_json(acc.to_dict())
    else:
        _echo(view.account_csv_lines(acc) if as_csv else view.account_lines(acc, context))


# -- regimes ------------------------------------------------------------------------------


@click.command("regimes")
@click.option("--results", multiple=True, type=click.Path(), help="Results JSON files (repeatable).")
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option(
    "--predict",
    is_flag=True,
    help="Beside each measured cell, the model's host fraction and regime for the same cell (p ...).",
)
@click.option(
    "--model",
    default=None,
    type=click.Path(),
    help="Model JSON from `hostgap fit` for --predict (default: the shipped defaults).",
)
@click.option(
    "--paper-cells",
    is_flag=True,
    help="Map the published cells shipped with hostgap (H100, vLLM eager) instead of runs.",
)
@click.option(
    "--published",
    "published",
    is_flag=True,
    help="List published host-overhead figures (overlap, CPU cores, graph launches, megakernels, "
    "speculation, engine blog posts) with hostgap's prediction and error for each.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON to stdout: cells and boundaries.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV to stdout: one row per cell.")
@click.argument("files", nargs=-1, type=click.Path())
def regimes_cmd(results, db, predict, model, paper_cells, published, as_json, as_csv, files):
    """Place each measured cell by host fraction (verdict thresholds) and find the boundary.

    \b
    Example:
      hostgap regimes --results runs/*.json
    """
    from hostgap.model import regimes
    from hostgap.report import model_view as view

    if published:
        from hostgap.model.published import table

        if as_json:
            _echo_json(regimes.published_document())
        else:
            _echo((view.published_csv_lines if as_csv else view.published_lines)(table()))
        return
    m = regimes.regime_map([*results, *files], db, paper_cells=paper_cells, predict=predict, model=model)
    if as_json:
        _echo_json(m.to_dict())
    else:
        _echo((view.regime_csv_lines if as_csv else view.regime_lines)(m))


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""
    cli.add_command(account_cmd)
    cli.add_command(fit_cmd)
    cli.add_command(predict_cmd)
    cli.add_command(regimes_cmd)
