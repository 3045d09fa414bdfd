"""`hostgap account`, `fit`, `predict`, `regimes`: the latency models on the command line.
``fit`` and ``predict`` live in :mod:`hostgap.cli.fit` and :mod:`hostgap.cli.predict`; this
module registers all four."""

from __future__ import annotations

import click
import numpy as np

from hostgap.cli.fit import fit_cmd
from hostgap.cli.models_common import _DTYPES, _ENGINES, _echo_json, _table
from hostgap.cli.predict import _setup, predict_cmd
from hostgap.errors import HostgapError

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

    arch = get_preset(preset)
    acc = account(
        arch, Cell(batch=batch, q_tokens=q_tokens, context=max(context, q_tokens), tp=tp, dtype=dtype, engine=engine)
    )
    if as_json:
        _echo_json(acc.to_dict())
        return
    keys = (
        "name",
        "family",
        "count",
        "flops",
        "weight_bytes",
        "kv_read_bytes",
        "kv_write_bytes",
        "act_bytes",
        "launches",
    )
    if as_csv:
        click.echo(",".join(keys))
        for o in acc.ops:
            click.echo(",".join(str(getattr(o, k)) for k in keys))
        return
    rows: list[tuple[object, ...]] = [
        (
            o.name,
            o.family,
            o.count,
            f"{o.count * o.flops / 1e9:.3f}",
            f"{o.count * o.weight_bytes / 1e6:.2f}",
            f"{o.count * o.kv_read_bytes / 1e6:.2f}",
            f"{o.count * o.kv_write_bytes / 1e6:.3f}",
            f"{o.count * o.act_bytes / 1e6:.3f}",
            f"{o.count * o.launches:g}",
        )
        for o in acc.ops
    ]
    t = acc.totals()
    rows.append(
        (
            "total",
            "",
            "",
            f"{t['flops'] / 1e9:.3f}",
            f"{t['weight_bytes'] / 1e6:.2f}",
            f"{t['kv_read_bytes'] / 1e6:.2f}",
            f"{t['kv_write_bytes'] / 1e6:.3f}",
            f"{t['act_bytes'] / 1e6:.3f}",
            f"{t['launches']:g}",
        )
    )
    click.echo(
        f"{arch.name}: batch {batch}, {q_tokens} token(s)/seq, KV {context}, TP {tp} (per rank), {dtype}, {engine} launches"
    )
    click.echo(
        _table(
            ("op", "family", "count", "GFLOP", "weights MB", "KV read MB", "KV write MB", "act MB", "launches"), rows
        )
    )


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
    "model_path",
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
def regimes_cmd(results, db, predict, model_path, paper_cells, published, as_json, as_csv, files):
    """Place each measured cell by host fraction (verdict thresholds) and find the boundary.

    \b
    Example:
      hostgap regimes --results runs/*.json
    """
    from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN
    from hostgap.model import fitting

    if published:
        from hostgap.cli.published import show

        show(as_json, as_csv)
        return
    invalid: dict[str, list[str]] = {}
    busy: set[str] = set()
    if paper_cells:
        from hostgap.model import calibrate

        cells = calibrate.regime_cells()
    else:
        if not (results or files or db):
            db = fitting.default_db()
        docs = fitting.load_results([*results, *files], db)
        invalid, busy = _validity(docs)
        cells = fitting.regime_cells([d for d in docs if str(d.get("run_id", "")) not in invalid])
    if predict:
        cells = [_predicted(c, model_path) for c in cells]
    if not cells:
        raise HostgapError("--results", "no measured cell with a host fraction, batch and prompt length")
    bounds = fitting.boundaries(cells)
    if as_json:
        _echo_json(
            {
                "schema_version": __import__("hostgap").SCHEMA_VERSION,
                "thresholds": {"host_bound_min": HOST_BOUND_MIN, "device_bound_max": DEVICE_BOUND_MAX},
                "cells": [dict(c.__dict__, contended=c.run_id in busy) for c in cells],
                "boundaries": [b.__dict__ for b in bounds],
                "invalid": [{"run_id": k, "reasons": v} for k, v in invalid.items()],
            }
        )
        return
    if as_csv:
        click.echo(
            "model,device,engine,mode,batch,prompt_len,host_fraction,regime,run_id,contended"
            + (",predicted_host_fraction,predicted_regime" if predict else "")
        )
        for c in cells:
            click.echo(
                f"{c.model},{c.device},{c.engine},{c.mode},{c.batch},{c.prompt_len},{c.host_fraction:.4f},"
                f"{c.regime},{c.run_id},{int(c.run_id in busy)}"
                + (f",{c.predicted_host_fraction:.4f},{c.predicted_regime}" if predict else "")
            )
        return
    click.echo(
        f"regimes by host fraction: host-bound >= {HOST_BOUND_MIN}, balanced >= {DEVICE_BOUND_MAX}, else device-bound"
    )
    short = {"host-bound": "H", "balanced": "B", "device-bound": "D"}
    groups: dict = {}
    for c in cells:
        groups.setdefault((c.model, c.device, c.engine, c.mode, c.tp), []).append(c)
    for (model, dev, eng, mode, k), cs in sorted(groups.items()):
        prompts = sorted({c.prompt_len for c in cs})
        batches = sorted({c.batch for c in cs})
        grid: dict = {}
        for c in cs:
            grid.setdefault((c.batch, c.prompt_len), []).append((c.host_fraction, c.predicted_host_fraction))
            if c.run_id in busy:
                grid.setdefault(("busy", c.batch, c.prompt_len), [])
        click.echo(
            f"\n{model} on {dev} ({eng} {mode}{fitting.tp_label(k)}): host fraction (median over runs), rows batch, columns prompt length"
        )
        rows = [
            (
                str(b),
                *(
                    _regime_text(grid[(b, p)], short) + ("!" if ("busy", b, p) in grid else "")
                    if (b, p) in grid
                    else "."
                    for p in prompts
                ),
            )
            for b in batches
        ]
        click.echo(_table(("batch", *map(str, prompts)), rows))
    click.echo("\nH: host-bound, B: balanced, D: device-bound; !: measured on a busy machine. Boundaries:")
    for b in bounds:
        click.echo(f"  {b.model}: {b.note}")
    labels = {f"{c.model} ({c.device}, {c.engine} {c.mode}{fitting.tp_label(c.tp)})" for c in cells}
    for label in sorted(labels - {b.model for b in bounds}):
        click.echo(f"  {label}: no boundary: needs two or more batch sizes or prompt lengths")
    for rid, why in invalid.items():
        click.echo(f"left out, invalid measurement {rid}: {why[0]}")


def _validity(docs: list[dict]) -> tuple[dict, set]:
    """({run_id: reasons} of invalid measurements, {run_id} measured on a busy machine); a
    result from before validity existed is judged by its numbers."""
    from hostgap.capture.protocol.validity import reasons

    invalid: dict[str, list[str]] = {}
    busy: set[str] = set()
    for d in docs:
        rid, diff = str(d.get("run_id", "")), d.get("differencing") or {}
        why = list(d.get("invalid_reasons") or []) if "valid" in d else reasons(diff)
        if ("valid" in d and not d["valid"]) or why:
            invalid[rid] = why or ["checks failed"]
        if diff.get("contended"):
            busy.add(rid)
    return invalid, busy


def _regime_text(pairs, short) -> str:
    """Median measured host fraction and class; ``p`` and the model's, when predicted."""
    from hostgap.anatomy.verdict import classify

    f = float(np.median([m for m, _ in pairs]))
    n = f" (n={len(pairs)})" if len(pairs) > 1 else ""
    text = f"{f:.2f} {short.get(classify(f), '?')}{n}"
    p = float(np.median([q for _, q in pairs]))
    return text + (f" | p {p:.2f} {short.get(classify(p), '?')}" if p == p else "")


def _predicted(c, model_path):
    """``c`` with the model's host fraction for the same cell (NaN where it cannot be predicted)."""
    from dataclasses import replace

    from hostgap.anatomy.verdict import classify
    from hostgap.model import whatif

    try:
        engine = c.engine if c.engine in ("vllm", "hf") else "vllm"
        setup, _, _ = _setup(
            c.model,
            c.batch,
            max(c.context or c.prompt_len, 1),
            c.tp,
            c.dtype,
            engine,
            c.mode if c.mode in ("eager", "graph") else "eager",
            c.device,
            None,
            model_path,
            None,
        )
    except HostgapError:
        return c
    f = whatif.predict(setup).host_fraction
    return replace(c, predicted_host_fraction=f, predicted_regime=classify(f))


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""
    cli.add_command(account_cmd)
    cli.add_command(fit_cmd)
    cli.add_command(predict_cmd)
    cli.add_command(regimes_cmd)
