"""`hostgap attribute`: per-request shares of co-batched steps (fit, eval, explain, synth), as
glue over :mod:`hostgap.model.attribution` (the commands, one call each: its ``workflow``) and
:mod:`hostgap.report.attribution_view` (what they print)."""

from __future__ import annotations

import json

import click


def _load(path: str, requests: str | None):
    """STEPS (and its requests table), with what reading left out noted on stderr."""
    from hostgap import attribution as A
    from hostgap.report.attribution_view import log_notes

    steps = A.load_steps(path, requests)
    log_notes(steps)
    return steps


@click.group("attribute")
def attribute_group() -> None:
    """Per-request attribution of co-batched steps (LLMVisor form, host term included).

    \b
    Examples:
      hostgap attribute synth demo.parquet              # synthetic steps with known truth
      hostgap attribute fit demo.parquet -o model.json  # fit on 75 %, score the held-out 25 %
      hostgap attribute eval model.json demo.parquet
      hostgap attribute explain model.json demo.parquet --step 7
    """


@attribute_group.command("fit")
@click.argument("steps_path", metavar="STEPS")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the model JSON here (default: print it to stdout).",
)
@click.option(
    "--requests",
    "requests_path",
    default=None,
    help="Requests table (default: STEPS stem + .requests.parquet/.csv if present).",
)
@click.option(
    "--target",
    type=click.Choice(["wall", "gpu_active"]),
    default="wall",
    show_default=True,
    help="Measured step time to fit.",
)
@click.option(
    "--test-fraction",
    type=click.FloatRange(0, 0.9),
    default=0.25,
    show_default=True,
    help="Steps held out (deterministic hash of source and step) for scoring.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the held-out split.")
@click.option(
    "--classes",
    type=click.Choice(["both", "prefill", "decode"]),
    default="both",
    show_default=True,
    help="Step classes to fit.",
)
@click.option("--no-pc", is_flag=True, help="Leave out the Σp·c (a5) term.")
@click.option(
    "--loss",
    type=click.Choice(["relative", "absolute"]),
    default="relative",
    show_default=True,
    help="Least squares on relative or absolute error.",
)
@click.option("--source", default=None, help="Fit one data source of STEPS only.")
@click.option("--json", "as_json", is_flag=True, help="Held-out metrics as JSON on stdout.")
def fit_cmd(
    steps_path, output, requests_path, target, test_fraction, seed, classes, no_pc, loss, source, as_json
) -> None:
    """Fit the piecewise model and the token baseline on STEPS.

    \b
    Example:
      hostgap attribute fit run.parquet -o model.json --test-fraction 0.25
    """
    from hostgap import attribution as A
    from hostgap.report import attribution_view as view

    steps = _load(steps_path, requests_path)
    fitted = A.fit_held_out(
        steps,
        target=target,
        test_fraction=test_fraction,
        seed=seed,
        classes=classes,
        no_pc=no_pc,
        loss=loss,
        source=source,
    )
    if output is None:
        click.echo(json.dumps(A.to_json(fitted.model), indent=2, allow_nan=False))
        return
    A.save_model(fitted.model, output)
    view.log(f"wrote {output}: trained on {fitted.n_train} steps, {fitted.n_held} held out")
    metrics = fitted.held_out_metrics()
    if as_json:
        click.echo(view.strict_json({"model": output, "held_out": metrics.to_dict() if metrics else None}))
        return
    view.print_model(fitted.model)
    if metrics is not None:
        view.print_metrics(metrics, "held-out steps")


@attribute_group.command("eval")
@click.argument("model_path", metavar="MODEL")
@click.argument("steps_path", metavar="STEPS")
@click.option("--requests", "requests_path", default=None, help="Requests table (optional).")
@click.option("--json", "as_json", is_flag=True, help="Metrics as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Metrics as CSV, one row per group.")
@click.option("--include-training", is_flag=True, help="Score every step, training steps too (in-sample; labelled so).")
def eval_cmd(model_path, steps_path, requests_path, as_json, as_csv, include_training) -> None:
    """Score MODEL and its token baseline on the STEPS it did not train on.

    When STEPS is the model's own training file, only its held-out steps are scored.

    \b
    Example:
      hostgap attribute eval model.json run.parquet --json
    """
    from hostgap import attribution as A
    from hostgap.report import attribution_view as view

    model = A.load_model(model_path)
    steps = _load(steps_path, requests_path)
    metrics = A.evaluate_held_out(model, steps, include_training=include_training)
    if as_json:
        click.echo(view.strict_json(metrics.to_dict()))
    elif as_csv:
        view.print_csv([g.to_dict() for g in metrics.groups])
    else:
        view.print_metrics(metrics, f"{metrics.n_steps} steps")


@attribute_group.command("explain")
@click.argument("model_path", metavar="MODEL")
@click.argument("steps_path", metavar="STEPS")
@click.option("--step", "step_id", type=int, required=True, help="Step id to explain.")
@click.option("--source", default=None, help="Data source, when STEPS holds several.")
@click.option("--requests", "requests_path", default=None, help="Requests table (optional).")
@click.option("--rescale", is_flag=True, help="Scale shares to the measured step time.")
@click.option(
    "--split",
    type=click.Choice(["fraction", "model"]),
    default="fraction",
    show_default=True,
    help="Host/device split of each share (docs/attribution.md).",
)
@click.option(
    "--step-energy",
    type=float,
    default=None,
    help="The step's energy in J (measure's energy.step_j): shared by the latency shares (docs/energy.md).",
)
@click.option("--device-power", type=float, default=None, help="W drawn while device-active (with --host-power).")
@click.option("--host-power", type=float, default=None, help="W drawn while host-exposed (with --device-power).")
@click.option("--json", "as_json", is_flag=True, help="Rows as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Rows as CSV.")
def explain_cmd(
    model_path,
    steps_path,
    step_id,
    source,
    requests_path,
    rescale,
    split,
    step_energy,
    device_power,
    host_power,
    as_json,
    as_csv,
) -> None:
    """One row per request of one step: share, device part, host part, cost alone.

    \b
    Example:
      hostgap attribute explain model.json run.parquet --step 42 --split model
    """
    from hostgap import attribution as A
    from hostgap.report import attribution_view as view

    model = A.load_model(model_path)
    steps = _load(steps_path, requests_path)
    explained = A.explain(model, steps, step_id, source=source, rescale=rescale, split=split)
    doc = view.explain_doc(explained)
    if step_energy is None and (device_power is not None or host_power is not None):
        from hostgap.errors import HostgapError

        raise HostgapError("--device-power", "powers weight a step's energy: give it with --step-energy")
    if step_energy is not None:
        doc["energy"] = A.explain_energy(explained.shares, step_energy, device_power, host_power)
        for row, e in zip(doc["requests_shares"], doc["energy"]["requests"]):
            row.update(energy_j=e["energy_j"], device_energy_j=e["device_j"], host_energy_j=e["host_j"])
    if as_json:
        click.echo(view.strict_json(doc))
    elif as_csv:
        view.print_csv(doc["requests_shares"])
    else:
        view.print_explain(doc)
        if "energy" in doc:
            from hostgap.report import energy_view

            for line in energy_view.shares_lines(doc["energy"]):
                click.echo(line)


@attribute_group.command("synth")
@click.argument("output", type=click.Path(dir_okay=False))
@click.option(
    "--steps",
    "n_steps",
    type=click.IntRange(1, 10_000_000),
    default=600,
    show_default=True,
    help="Co-batched steps to generate.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generator.")
@click.option(
    "--noise",
    type=click.FloatRange(0, 1),
    default=0.01,
    show_default=True,
    help="Multiplicative noise (σ of log time).",
)
@click.option(
    "--context",
    type=click.Choice(["varied", "fixed"]),
    default="varied",
    show_default=True,
    help="Decode KV lengths: log-uniform 64..32k, or all 1024.",
)
def synth_cmd(output, n_steps, seed, noise, context) -> None:
    """Write synthetic steps with known ground truth (harvest layout + requests table).

    \b
    Example:
      hostgap attribute synth demo.parquet --steps 800 --seed 1
    """
    from hostgap import attribution as A
    from hostgap.report.attribution_view import log

    for p in A.write_synthetic(output, n_steps=n_steps, seed=seed, noise=noise, context=context):
        log(f"wrote {p}")


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""
    cli.add_command(attribute_group)
