"""`hostgap account`, `fit`, `predict`, `regimes`: the latency models on the command line, glue
over :mod:`hostgap.model` (the numbers) and :mod:`hostgap.report.model_view` (their text).
``predict`` lives in :mod:`hostgap.cli.predict` (over :func:`hostgap.predict`); this module
registers all four."""

from __future__ import annotations

import click

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


# -- fit ------------------------------------------------------------------------------------


@click.command("fit")
@click.option(
    "--results",
    "results",
    multiple=True,
    type=click.Path(),
    help="Results JSON of `hostgap measure` (repeatable); each must carry the keys a fit needs.",
)
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option(
    "--paper-cells",
    is_flag=True,
    help="Fit the default vLLM/H100 host term on the published cells shipped with hostgap and print "
    "every cell's published value, default and leave-one-out prediction.",
)
@click.option(
    "--vidur-mlp",
    "vidur_mlp",
    multiple=True,
    type=click.Path(),
    help="vidur *_mlp.csv kernel times to fit efficiencies on (GEMMs one family, other ops each their own; repeatable; needs --device).",
)
@click.option(
    "--device",
    "mlp_device",
    default=None,
    help="The GPU the --vidur-mlp and --all-reduce files were MEASURED on (e.g. a100-80gb for vidur's a100_* files). "
    "Not a prediction target: `predict --gpu` chooses that.",
)
@click.option(
    "--test-mlp",
    "test_mlp",
    multiple=True,
    type=click.Path(),
    help="vidur *_mlp.csv files to score the fit on, never fitted on (repeatable).",
)
@click.option("--test-device", default=None, help="The GPU the --test-mlp files were measured on (default: --device).")
@click.option(
    "--all-reduce",
    "all_reduce",
    default=None,
    type=click.Path(),
    help="vidur all_reduce.csv to fit collective cost on (needs --device: the GPU it was measured on).",
)
@click.option("--device-file", default=None, type=click.Path(), help="Extra device specs (JSON/TOML).")
@click.option(
    "-o",
    "--output",
    default=None,
    type=click.Path(),
    help="Model JSON to write [default: $HOSTGAP_MODEL, else ~/.local/share/hostgap/model.json].",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="JSON to stdout (tables go to stderr): held-out scores, vidur test scores ('tests') and the model.",
)
@click.argument("files", nargs=-1, type=click.Path())
def fit_cmd(results, db, paper_cells, vidur_mlp, mlp_device, test_mlp, test_device, all_reduce, device_file, output, as_json, files):  # fmt: skip
    """Fit device efficiencies and the host term; print held-out errors.

    From measured runs: device scale and host term per (device, engine, TP degree), each cell
    scored by a fit on the others (leave-one-out). From vidur kernel times (--vidur-mlp with
    --device): efficiencies for that device (GEMMs one family, other ops per op), each file scored by a fit on the others,
    and --test-mlp files (another model or another GPU) scored by the fit on all of them.

    \b
    Examples:
      hostgap fit --results runs/*.json -o model.json
      hostgap fit --paper-cells
      hostgap fit --vidur-mlp a100_llama3-8b_mlp.csv --device a100 \\
                  --test-mlp a100_llama2-7b_mlp.csv --all-reduce a100_dgx_all_reduce.csv -o a100.json
    """
    from hostgap.model.fitting import sources as fit_sources
    from hostgap.report import model_view as view

    if paper_cells:
        o = fit_sources.fit_paper(device_file)
        _echo(view.paper_fit_lines(o), err=as_json)
    else:
        o = fit_sources.fit_sources(
            [*results, *files], db, vidur_mlp=vidur_mlp, device=mlp_device, test_mlp=test_mlp,
            test_device=test_device, all_reduce=all_reduce, device_file=device_file,
        )  # fmt: skip
        _echo(view.kernel_fit_lines(o), err=as_json)
        _echo((f"skipped: {s}" for s in o.model.skipped), err=True)
        _echo(view.model_lines(o.model), err=as_json)
    path = fit_sources.write_model(o.model, output)
    click.echo(view.wrote_line(o.model, path, output is not None), err=as_json)
    if as_json:
        _echo_json(o.to_dict())


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
            from hostgap.model import energy_paper
            from hostgap.report import energy_view

            doc = energy_paper.document()
            if as_csv:  # one table per CSV: the host model's figures (the energy rows: --json)
                _echo(view.published_csv_lines(table()))
            else:
                _echo(view.published_lines(table()) + [""] + energy_view.paper_lines(doc))
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
