"""`hostgap fit`: the latency model's host term and roofline efficiencies from measured runs,
Vidur's kernel measurements or the paper's cells (docs/models.md)."""

from __future__ import annotations

import click

from hostgap.cli.models_common import _echo, _echo_json


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
    from hostgap.model import fit_sources
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
