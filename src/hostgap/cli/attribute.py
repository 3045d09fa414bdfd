"""`hostgap attribute`: per-request shares of co-batched steps (fit, eval, explain, synth)."""

from __future__ import annotations

import csv
import json
import math
import sys

import click
import numpy as np

from hostgap.errors import HostgapError

_STEPS_HELP = "STEPS: a harvest table or a generic CSV/Parquet (docs/attribution.md)."


def _console():
    from hostgap.report.terminal import stdout_console

    # Tables are data: when piped, do not squeeze them into 80 columns.
    return stdout_console(width=None if sys.stdout.isatty() else 160)


def _log(msg: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(msg, highlight=False)


def _load(path: str, requests: str | None):
    from hostgap.model.steps_table import load_steps

    steps = load_steps(path, requests)
    for note in steps.notes:
        _log(f"{path}: {note}")
    return steps


def _finite(v) -> float | None:
    """A float for JSON: NaN or ±inf (unknown) become None."""
    v = float(v)
    return v if math.isfinite(v) else None


def strict_json(obj) -> str:
    """JSON text with no NaN/Infinity tokens (invalid JSON): non-finite floats become null."""

    def clean(o):
        if isinstance(o, float):
            return o if math.isfinite(o) else None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(obj), indent=2, allow_nan=False)


def _ms(v) -> str:
    return "—" if v is None or v != v else f"{v / 1e6:.3f}"


def _pct(v) -> str:
    return "—" if v is None or v != v else f"{100 * v:.1f}%"


def _ratio(v) -> str:
    return "—" if v is None or v != v else f"{v:.2f}×"


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
    from hostgap.model import attribution as A

    steps = _only_source(_load(steps_path, requests_path), source, steps_path)
    test = A.split_mask(steps, test_fraction, seed)
    train = steps.subset(~test)
    prov = {
        "split": {
            "rule": "splitmix64(step content, seed) < test_fraction (file name and order ignored)",
            "test_fraction": test_fraction,
            "seed": seed,
        },
        "data_sha256_all": steps.data_sha256(),
        "steps_path": steps_path,
        "fit_source": source,
    }
    cls = A.CLASSES if classes == "both" else (classes,)
    model = A.fit(train, target=f"{target}_ns", classes=cls, use_pc=not no_pc, loss=loss, provenance=prov)
    if output is None:
        click.echo(json.dumps(A.to_json(model), indent=2, allow_nan=False))
        return
    A.save_model(model, output)
    _log(f"wrote {output}: trained on {len(train)} steps, {int(test.sum())} held out")
    held = steps.subset(test & _fitted_class_mask(model, steps))
    metrics = A.evaluate(model, held) if len(held) else None
    if as_json:
        click.echo(strict_json({"model": output, "held_out": metrics.to_dict() if metrics else None}))
        return
    _print_model(model)
    if metrics is not None:
        _print_metrics(metrics, "held-out steps")


def _only_source(steps, source: str | None, path: str):
    if source is None:
        return steps
    if source not in steps.sources:
        raise HostgapError("--source", f"{source!r} not in {path} (sources: {', '.join(steps.sources)})")
    return steps.subset(steps.source_idx == steps.sources.index(source))


def _fitted_class_mask(model, steps) -> np.ndarray:
    ok = np.zeros(len(steps), bool)
    if "prefill" in model.classes:
        ok |= steps.is_prefill
    if "decode" in model.classes:
        ok |= ~steps.is_prefill
    return ok


def _print_model(model) -> None:
    from rich.table import Table

    from hostgap.model.attribution import TERMS

    t = Table(title=f"attribution model (target {model.target}, NNLS, {model.loss} loss)")
    for col in ("class", "Σp range", "β ms", "a1 µs/tok", "a2 ns/kv", "a3 ns/tok²", "a4 µs/req", "a5 ns/(tok·kv)"):
        t.add_column(col, justify="right")
    for name, cm in model.classes.items():
        lo = 0.0
        for s in cm.segments:
            hi = "∞" if s.sum_p_max == float("inf") else f"{s.sum_p_max:g}"
            c = dict(zip(TERMS, s.coef))
            t.add_row(
                name,
                f"({lo:g}, {hi}]",
                f"{c['beta_ns'] / 1e6:.3f}",
                f"{c['a1_ns_per_token'] / 1e3:.3f}",
                f"{c['a2_ns_per_kv_token']:.3f}",
                f"{c['a3_ns_per_token2']:.4f}",
                f"{c['a4_ns_per_request'] / 1e3:.3f}",
                f"{c['a5_ns_per_token_kv_token']:.5f}",
            )
            lo = s.sum_p_max
    con = _console()
    con.print(t)
    for name, cm in model.classes.items():
        for n in cm.notes:
            con.print(f"  {name}: {n}", highlight=False)
    for n in model.notes:
        con.print(f"  {n}", highlight=False)
    if "decode" in model.classes:
        con.print("  decode: p = 1, so a4 is the per-request constant a1 + a3 + a4", highlight=False)


def _print_metrics(metrics, title: str) -> None:
    from rich.table import Table

    t = Table(title=f"{title}: |T̂ − T| / T, model vs token baseline")
    for col in (
        "source",
        "class",
        "steps",
        "R²",
        "p50",
        "p90",
        "p99",
        "base R²",
        "base p50",
        "base p90",
        "base p99",
        "gain p90",
        "gain p99",
        "host frac",
    ):
        t.add_column(col, justify="right")
    for g in metrics.groups:
        r2 = "—" if g.r2 is None else f"{g.r2:.4f}"
        br2 = "—" if g.baseline_r2 is None else f"{g.baseline_r2:.3f}"
        t.add_row(
            g.source,
            g.step_class,
            str(g.n_steps),
            r2,
            *map(_pct, g.rel_err),
            br2,
            *map(_pct, g.baseline_rel_err),
            _ratio(g.improvement[1]),
            _ratio(g.improvement[2]),
            _pct(g.host_fraction_median),
        )
    con = _console()
    con.print(t)
    by_source: dict = {}
    for g in metrics.groups:  # one note per source: its all-classes group when there is one
        if g.source not in by_source or g.step_class == "all":
            by_source[g.source] = g.note
    for src, note in by_source.items():
        if note:
            con.print(f"  {src}: {note}", highlight=False)
    if metrics.note:
        con.print(f"  {metrics.note}", highlight=False)


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
    from hostgap.model import attribution as A

    model = A.load_model(model_path)
    steps = _load(steps_path, requests_path)
    keep = np.ones(len(steps), bool) if include_training else A.held_out(model, steps)
    if not keep.any():
        raise HostgapError(
            steps_path, "every step here trained the model: nothing held out to score (refit with --test-fraction > 0)"
        )
    keep &= _fitted_class_mask(model, steps)
    if not keep.any():
        raise HostgapError(steps_path, "no steps of a class the model was fitted for")
    metrics = A.evaluate(model, steps.subset(keep))
    note = (
        ""
        if keep.all()
        else (f"{int(len(steps) - keep.sum())} step(s) not scored: training steps of this model or classes it lacks")
    )
    if include_training:
        note = "in-sample: training steps included (--include-training)"
    extrapolated = A.range_note(model, steps.subset(keep))
    if extrapolated:
        note = f"{note}; {extrapolated}" if note else extrapolated
    metrics = A.Metrics(metrics.groups, metrics.n_steps, int(len(steps) - keep.sum()), note)
    if as_json:
        click.echo(strict_json(metrics.to_dict()))
    elif as_csv:
        rows = [g.to_dict() for g in metrics.groups]
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    else:
        _print_metrics(metrics, f"{metrics.n_steps} steps")


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
@click.option("--json", "as_json", is_flag=True, help="Rows as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Rows as CSV.")
def explain_cmd(model_path, steps_path, step_id, source, requests_path, rescale, split, as_json, as_csv) -> None:
    """One row per request of one step: share, device part, host part, cost alone.

    \b
    Example:
      hostgap attribute explain model.json run.parquet --step 42 --split model
    """
    from hostgap.model import attribution as A

    model = A.load_model(model_path)
    steps = _load(steps_path, requests_path)
    one = steps.subset(_select_step(steps, step_id, source, steps_path))
    sh = A.attribute(model, one, rescale=rescale, split=split)
    rows = _explain_rows(sh)
    head = {
        "source": one.sources[one.source_idx[0]],
        "step": step_id,
        "class": "prefill" if one.is_prefill[0] else "decode",
        "requests": int(one.n_requests[0]),
        "predicted_ns": _finite(sh.predicted_ns[0]),
        "measured_ns": _finite(sh.measured_ns[0]),
        "host_fraction": _finite(sh.host_fraction[0]),
        "split": split,
        "rescaled": rescale,
        "range_note": A.range_note(model, one),
    }
    if as_json:
        click.echo(strict_json({**head, "requests_shares": rows}))
    elif as_csv:
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    else:
        _print_explain(head, rows)


def _select_step(steps, step_id: int, source: str | None, path: str) -> np.ndarray:
    m = steps.step == step_id
    if source is not None:
        if source not in steps.sources:
            raise HostgapError("--source", f"{source!r} not in {path} (sources: {', '.join(steps.sources)})")
        m &= steps.source_idx == steps.sources.index(source)
    if not m.any():
        where = f"source {source!r} of {path}" if source is not None else path
        raise HostgapError("--step", f"step {step_id} not in {where}")
    if m.sum() > 1:
        raise HostgapError(
            "--step", f"step {step_id} exists in several sources; pick one with --source ({', '.join(steps.sources)})"
        )
    return m


def _explain_rows(sh) -> list[dict]:
    total = float(sh.share_ns.sum())
    tokens = float(sh.p.sum())
    return [
        {
            "request": str(sh.request[i]),
            "phase": "prefill" if sh.prefill[i] else "decode",
            "q": int(sh.p[i]),
            "s": int(sh.c[i]),
            "share_ns": float(sh.share_ns[i]),
            "share_fraction": float(sh.share_ns[i] / total) if total > 0 else None,
            "token_fraction": float(sh.p[i] / tokens),  # what the token baseline charges
            "device_ns": _finite(sh.device_ns[i]),
            "host_ns": _finite(sh.host_ns[i]),
            "alone_ns": None if np.isnan(sh.alone_ns[i]) else float(sh.alone_ns[i]),
        }
        for i in range(len(sh.share_ns))
    ]


def _print_explain(head: dict, rows: list[dict]) -> None:
    from rich.table import Table

    t = Table(
        title=f"{head['source']} step {head['step']} ({head['class']}, "
        f"{head['requests']} requests): predicted {_ms(head['predicted_ns'])} ms, "
        f"measured {_ms(head['measured_ns'])} ms"
    )
    for col in ("request", "phase", "q", "s", "share ms", "share", "by tokens", "device ms", "host ms", "alone ms"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            r["request"],
            r["phase"],
            str(r["q"]),
            str(r["s"]),
            _ms(r["share_ns"]),
            _pct(r["share_fraction"]),
            _pct(r["token_fraction"]),
            _ms(r["device_ns"]),
            _ms(r["host_ns"]),
            _ms(r["alone_ns"]),
        )
    con = _console()
    con.print(t)
    basis = (
        "each request's device/host model ratio"
        if head["split"] == "model"
        else f"the step's host fraction {_pct(head['host_fraction'])}"
        if head["host_fraction"] is not None
        else "the step's host fraction, which is unknown (no host_exposed_ns here or in training)"
    )
    con.print(
        f"  shares add up to the {'measured' if head['rescaled'] else 'predicted'} step "
        f"time; host part from {basis}; 'by tokens' is the token-count baseline's share",
        highlight=False,
    )
    if head.get("range_note"):
        con.print(f"  note: {head['range_note']}", highlight=False)


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
    from hostgap.model.steps_table import write_steps
    from hostgap.model.synth import synth_steps

    if not (output.endswith(".parquet") or output.endswith(".csv")):
        raise HostgapError(output, "output must end in .parquet or .csv")
    data = synth_steps(n_steps, seed=seed, noise=noise, context=context)
    for p in write_steps(data.steps, output):
        _log(f"wrote {p}")


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""
    cli.add_command(attribute_group)
