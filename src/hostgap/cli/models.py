"""`hostgap account`, `fit`, `predict`, `regimes`: the latency models on the command line."""

from __future__ import annotations

import json

import click
import numpy as np

from hostgap.errors import HostgapError

_ENGINES = click.Choice(["vllm", "hf"])
_DTYPES = click.Choice(["bfloat16", "float16", "float32", "fp8", "int8"])


def _echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, default=float, allow_nan=True))


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _devices(device_file):
    from hostgap.model.devices import load_device_file

    return load_device_file(device_file) if device_file else None


def _table(headers, rows) -> str:
    cols = [headers, *rows]
    widths = [max(len(str(r[i])) for r in cols) for i in range(len(headers))]
    fmt = lambda r: "  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(headers), *(fmt(r) for r in rows)])


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}" if ns == ns else "-"


# -- account ------------------------------------------------------------------------------


@click.command("account")
@click.argument("preset")
@click.option("--batch", default=1, show_default=True, help="Sequences in the step.")
@click.option("--context", default=2048, show_default=True, help="KV tokens each sequence reads.")
@click.option("--q-tokens", default=1, show_default=True, help="Tokens per sequence this step (1: decode).")
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel degree (figures are per rank).")
@click.option("--dtype", type=_DTYPES, default="bfloat16", show_default=True, help="Weights and activations dtype.")
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
    acc = account(arch, Cell(batch=batch, q_tokens=q_tokens, context=max(context, q_tokens), tp=tp, dtype=dtype, engine=engine))
    if as_json:
        _echo_json(acc.to_dict())
        return
    keys = ("name", "family", "count", "flops", "weight_bytes", "kv_read_bytes", "kv_write_bytes", "act_bytes", "launches")
    if as_csv:
        click.echo(",".join(keys))
        for o in acc.ops:
            click.echo(",".join(str(getattr(o, k)) for k in keys))
        return
    rows = [(o.name, o.family, o.count, f"{o.count * o.flops / 1e9:.3f}", f"{o.count * o.weight_bytes / 1e6:.2f}",
             f"{o.count * o.kv_read_bytes / 1e6:.2f}", f"{o.count * o.kv_write_bytes / 1e6:.3f}",
             f"{o.count * o.act_bytes / 1e6:.3f}", f"{o.count * o.launches:g}") for o in acc.ops]
    t = acc.totals()
    rows.append(("total", "", "", f"{t['flops'] / 1e9:.3f}", f"{t['weight_bytes'] / 1e6:.2f}", f"{t['kv_read_bytes'] / 1e6:.2f}",
                 f"{t['kv_write_bytes'] / 1e6:.3f}", f"{t['act_bytes'] / 1e6:.3f}", f"{t['launches']:g}"))
    click.echo(f"{arch.name}: batch {batch}, {q_tokens} token(s)/seq, KV {context}, TP {tp} (per rank), {dtype}, {engine} launches")
    click.echo(_table(("op", "family", "count", "GFLOP", "weights MB", "KV read MB", "KV write MB", "act MB", "launches"), rows))


# -- fit ----------------------------------------------------------------------------------


@click.command("fit")
@click.option("--results", "results", multiple=True, type=click.Path(), help="Results JSON of `hostgap measure` (repeatable).")
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option("--vidur-mlp", "vidur_mlp", multiple=True, type=click.Path(),
              help="vidur *_mlp.csv kernel times (A100): fit per-op efficiencies (repeatable).")
@click.option("--all-reduce", "all_reduce", default=None, type=click.Path(), help="vidur all_reduce.csv to fit collective cost.")
@click.option("--device-file", default=None, type=click.Path(), help="Extra device specs (JSON/TOML).")
@click.option("-o", "--output", default="hostgap-model.json", show_default=True, help="Model JSON to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the model JSON to stdout too.")
@click.argument("files", nargs=-1, type=click.Path())
def fit_cmd(results, db, vidur_mlp, all_reduce, device_file, output, as_json, files):
    """Fit device scale and host term per (device, engine) from measured runs.

    Prints held-out error: leave-one-out over measured cells (MAPE, max error of the step
    time) and, with two or more vidur files, each file scored by a fit on the others.

    \b
    Examples:
      hostgap fit --results runs/*.json -o model.json
      hostgap fit --vidur-mlp a100_llama3-8b_mlp.csv --vidur-mlp a100_llama2-7b_mlp.csv \\
                  --all-reduce a100_dgx_all_reduce.csv -o a100.json
    """
    from hostgap.model import fitting, roofline, tp, vidur
    from hostgap.model.devices import find_device

    if not (results or files or db or vidur_mlp):
        db = fitting.default_db()
    docs = fitting.load_results([*results, *files], db)
    if not docs and not vidur_mlp:
        raise HostgapError("--results", "no measured runs given (pass --results FILE..., --db PATH or --vidur-mlp CSV)")
    extra = _devices(device_file)
    a100 = find_device("a100-80gb")
    kernel_data, rl = {}, None
    if vidur_mlp:
        samples = [vidur.as_hostgap_ops(vidur.read_mlp(p, a100)) for p in vidur_mlp]
        kernel_data.update({str(p): fitting.file_hash(p) for p in vidur_mlp})
        if len(samples) > 1:
            rows = []
            for i, held in enumerate(samples):
                cal = _concat([s for j, s in enumerate(samples) if j != i])
                m = roofline.evaluate(roofline.fit(cal, a100.name), held)
                gemm = [m[k] for k in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj") if k in m]
                rows.append((str(vidur_mlp[i]).rsplit("/", 1)[-1], f"{np.mean([g.mape for g in gemm]) * 100:.1f}",
                             f"{m['overall'].mape * 100:.1f}", f"{m['overall'].max_error * 100:.1f}"))
            click.echo("per-op roofline, each vidur file held out (fit on the others):")
            click.echo(_table(("held-out file", "GEMM MAPE %", "all-op MAPE %", "max err %"), rows))
        held = ""
        if len(samples) > 1:
            held = ("; held-out GEMM MAPE " + "/".join(r[1] for r in rows) + " %, all-op MAPE "
                    + "/".join(r[2] for r in rows) + " %, max " + "/".join(r[3] for r in rows) + " %")
        names = ", ".join(str(p).rsplit("/", 1)[-1] for p in vidur_mlp)
        rl = roofline.fit(_concat(samples), a100.name, source=f"vidur kernel times {names}{held}")
    ar = None
    if all_reduce:
        ar = tp.fit_all_reduce(vidur.read_all_reduce(all_reduce), a100)
        kernel_data[str(all_reduce)] = fitting.file_hash(all_reduce)
    model = fitting.fit(docs, extra, rl=rl, all_reduce=ar, kernel_data=kernel_data)
    if docs and not model.groups and rl is None:
        raise HostgapError("--results", "no (device, engine) group has two usable cells; " + "; ".join(model.skipped[:3]))
    fitting.write_model(model, output)
    for s in model.skipped:
        _log(f"skipped: {s}")
    if model.groups:
        rows = [(g.device_name, g.engine, g.n_cells, f"{g.device_scale:.3f}", _ms(g.host.serial_ns), f"{g.host.per_seq_ns / 1e3:.1f}",
                 f"{g.host.per_kernel_ns / 1e3:.2f}", f"{g.heldout.mape * 100:.1f}", f"{g.heldout.max_error * 100:.1f}",
                 f"{g.heldout_host_only.mape * 100:.1f}") for g in model.groups]
        click.echo(_table(("device", "engine", "cells", "dev scale", "serial ms", "per-seq us", "per-kernel us",
                           "held-out MAPE %", "max err %", "host-only MAPE %"), rows))
    if ar is not None:
        click.echo("all-reduce: " + ", ".join(f"k={k} {ar.latency_ns[k] / 1e3:.1f} us + size / {ar.bw_bytes_per_s[k] / 1e9:.0f} GB/s"
                                            for k in sorted(ar.latency_ns)))
    click.echo(f"wrote {output} (schema_version {model.to_dict()['schema_version']}, data sha256 {model.provenance['data_sha256'][:12]})")
    if as_json:
        _echo_json(model.to_dict())


def _concat(samples):
    from hostgap.model.roofline import OpSamples

    return OpSamples(*(np.concatenate([getattr(s, f) for s in samples]) for f in
                       ("key", "flops", "bytes", "kernels", "peak_flops", "bw_bytes_per_s", "time_ns", "group", "tokens")))


# -- predict ------------------------------------------------------------------------------


def _setup(preset, batch, context, tp, dtype, engine, mode, device, device_file, model_path, kernels):
    from hostgap.model import fitting
    from hostgap.model.accounting import Cell
    from hostgap.model.arch import get_preset
    from hostgap.model.devices import find_device
    from hostgap.model.roofline import default_model
    from hostgap.model.stepmodel import DEFAULT_HOST
    from hostgap.model.whatif import Setup

    arch = get_preset(preset)
    dev = find_device(device, _devices(device_file))
    cell = Cell(batch=batch, q_tokens=1, context=context, tp=tp, dtype=dtype, engine=engine)
    fitted = fitting.load_model(model_path) if model_path else None
    group = fitted.group_for(dev.name, engine) if fitted else None
    if group is None:
        rl = fitted.roofline_for(dev.name) if fitted else None
        if rl is not None:
            basis = (f"{model_path}: per-op efficiencies fitted for {dev.name} ({rl.source}); "
                     f"no measured runs for {dev.name}/{engine}: default host term")
        else:
            basis = ("no fitted model: default efficiencies and host term (docs/models.md)" if not fitted
                     else f"{model_path} has no group for {dev.name}/{engine}: default efficiencies and host term")
        setup = Setup(arch, cell, dev, mode, rl or default_model(dev.name), 1.0, DEFAULT_HOST[engine],
                      fitted.all_reduce if fitted else None, fitted.tp_form if fitted else "additive", kernels)
        return setup, basis, None
    basis = (f"fitted model {model_path} ({group.device_name}/{group.engine}, {group.n_cells} cells, "
             f"held-out MAPE {group.heldout.mape * 100:.1f} %, max {group.heldout.max_error * 100:.1f} %)")
    setup = Setup(arch, cell, dev, mode, group.roofline, group.device_scale, group.host, fitted.all_reduce,
                  fitted.tp_form, kernels)
    return setup, basis, group


def _measured_match(docs, setup, mode, dtype):
    from hostgap.model import fitting

    out = []
    for d in docs:
        c = fitting.cell_from_results(d, str(d.get("run_id", "")))
        if not c.usable or c.arch.name != setup.arch.name or c.batch != setup.cell.batch:
            continue
        if (c.mode or "eager") != mode or (c.engine or "vllm") != setup.cell.engine or (c.dtype or dtype) != dtype:
            continue
        try:
            if fitting.device_for(c).name != setup.device.name:
                continue
        except HostgapError:
            continue
        ctx = c.context or 0
        if abs(ctx - setup.cell.context) <= max(64, 0.05 * setup.cell.context):
            out.append(c)
    return out


@click.command("predict")
@click.argument("preset")
@click.option("--batch", default=1, show_default=True, help="Sequences in the decode step.")
@click.option("--context", default=2048, show_default=True, help="KV length per sequence (decode).")
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel degree (figures are per rank).")
@click.option("--dtype", type=_DTYPES, default="bfloat16", show_default=True, help="Weights and activations dtype.")
@click.option("--engine", type=_ENGINES, default="vllm", show_default=True, help="Launch table to use.")
@click.option("--mode", type=click.Choice(["eager", "graph"]), default="eager", show_default=True,
              help="eager (one launch per kernel) or graph (one CUDA-graph launch per step).")
@click.option("--device", default="h100-sxm", show_default=True, help="Device name or alias (see devices table).")
@click.option("--device-file", default=None, type=click.Path(), help="Extra device specs (JSON/TOML).")
@click.option("--model", "model_path", default=None, type=click.Path(), help="Model JSON from `hostgap fit`.")
@click.option("--kernels-per-step", default=None, type=float, help="Measured kernels per step (replaces the launch table).")
@click.option("--what-if", "what_ifs", multiple=True,
              help="graphs | spec:gamma=4,alpha=0.7[,draft=PRESET] | fp8 | tp=K | host=F (repeatable).")
@click.option("--results", multiple=True, type=click.Path(), help="Measured runs to show beside the prediction.")
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option("--tp-form", type=click.Choice(["additive", "compute_comm", "host_over_k", "host_times_k", "additive_skew"]),
              default=None, help="Host term vs TP degree for --what-if tp=K (default: the model's, else additive).")
@click.option("--json", "as_json", is_flag=True, help="JSON to stdout: device, host and total separately.")
@click.argument("files", nargs=-1, type=click.Path())
def predict_cmd(preset, batch, context, tp, dtype, engine, mode, device, device_file, model_path, kernels_per_step,
                what_ifs, results, db, tp_form, as_json, files):
    """Predict one decode step of PRESET: device time + host term, and what-ifs.

    Measured runs (--results, or FILES after PRESET) of the same cell are shown beside the
    prediction with its error.

    \b
    Examples:
      hostgap predict llama-3.1-8b --device h100 --batch 1 --context 2048
      hostgap predict llama-3.2-1b --engine hf --what-if graphs --what-if spec:gamma=4,alpha=0.8
      hostgap predict llama-3.1-8b --model model.json --json runs/*.json
    """
    from hostgap.model import fitting, whatif

    from dataclasses import replace

    setup, basis, _ = _setup(preset, batch, context, tp, dtype, engine, mode, device, device_file, model_path, kernels_per_step)
    if tp_form:
        setup = replace(setup, tp_form=tp_form)
    specs = [whatif.parse(s) for s in what_ifs]  # validate before any work
    del specs
    base = whatif.predict(setup)
    wis = [whatif.run(setup, s) for s in what_ifs]
    results = [*results, *files]
    docs = fitting.load_results(results, db) if (results or db) else []
    measured = _measured_match(docs, setup, mode, dtype)
    ks = [c.k_step for c in measured if c.k_step == c.k_step and c.k_step > 0]
    if kernels_per_step is None and ks:
        setup = replace(setup, kernels_per_step=float(np.median(ks)))
        basis += f"; kernels per step {np.median(ks):g} from {len(ks)} measured run(s)"
        base = whatif.predict(setup)
        wis = [whatif.run(setup, s) for s in what_ifs]
    if not model_path or "default" in basis:
        _log(f"note: {basis}")
    if as_json:
        _echo_json({
            "schema_version": __import__("hostgap").SCHEMA_VERSION, "preset": preset, "device": setup.device.name,
            "cell": setup.cell.to_dict(), "mode": mode, "basis": basis, "prediction": base.to_dict(),
            "measured": [_measured_dict(c, base) for c in measured],
            "what_ifs": [{**w.to_dict(), "measured": [_measured_dict(c, w.scenario) for c in
                                                      _scenario_measured(w, docs, setup, mode, dtype)]} for w in wis],
        })
        return
    click.echo(f"{preset} on {setup.device.name}: batch {batch}, KV {context}, TP {tp}, {dtype}, {engine} {mode}")
    click.echo(f"basis: {basis}")
    rows = [("predicted", _ms(base.device_ns), _ms(base.collective_ns), _ms(base.host_ns), _ms(base.total_ns),
             f"{base.host_fraction:.2f}", "")]
    for c in measured:
        err = (base.total_ns - c.t_step_ns) / c.t_step_ns
        rows.append((f"measured {c.run_id}"[:40], _ms(c.g_step_ns), "", _ms(c.h_step_ns), _ms(c.t_step_ns),
                     f"{c.host_fraction:.2f}" if c.host_fraction == c.host_fraction else "-", f"{err * 100:+.1f} %"))
    click.echo(_table(("", "device ms", "collective ms", "host ms", "total ms", "host frac", "error"), rows))
    for w in wis:
        click.echo("")
        click.echo(f"what-if {w.name}: step {_ms(w.baseline.total_ns)} -> {_ms(w.scenario.total_ns)} ms "
                   f"({w.step_change * 100:+.1f} %), per-token speed-up {w.per_token_speedup:.2f}x")
        click.echo(f"  device {_ms(w.scenario.device_ns)} ms, collective {_ms(w.scenario.collective_ns)} ms, "
                   f"host {_ms(w.scenario.host_ns)} ms")
        for a in w.assumptions:
            click.echo(f"  assumes: {a}")
        for c in _scenario_measured(w, docs, setup, mode, dtype):
            err = (w.scenario.total_ns - c.t_step_ns) / c.t_step_ns
            click.echo(f"  measured {c.run_id}: {_ms(c.t_step_ns)} ms ({err * 100:+.1f} % error)")


def _scenario_measured(w, docs, setup, mode, dtype):
    """Measured runs of the what-if's own cell (graph mode; fp8 weights), when given."""
    if w.name == "graphs" and mode != "graph":
        return _measured_match(docs, setup, "graph", dtype)
    if w.name == "fp8" and dtype != "fp8":
        return _measured_match(docs, setup, mode, "fp8")
    return []


def _measured_dict(c, base) -> dict:
    return {"run_id": c.run_id, "t_step_ns": c.t_step_ns, "g_step_ns": c.g_step_ns, "h_step_ns": c.h_step_ns,
            "host_fraction": c.host_fraction, "error_total": (base.total_ns - c.t_step_ns) / c.t_step_ns}


# -- regimes ------------------------------------------------------------------------------


@click.command("regimes")
@click.option("--results", multiple=True, type=click.Path(), help="Results JSON files (repeatable).")
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV on stdout.")
@click.argument("files", nargs=-1, type=click.Path())
def regimes_cmd(results, db, as_json, as_csv, files):
    """Place each measured cell by host fraction (verdict thresholds) and find the boundary.

    \b
    Example:
      hostgap regimes --results runs/*.json
    """
    from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN
    from hostgap.model import fitting

    if not (results or files or db):
        db = fitting.default_db()
    docs = fitting.load_results([*results, *files], db)
    invalid, busy = _validity(docs)
    cells = fitting.regime_cells([d for d in docs if str(d.get("run_id", "")) not in invalid])
    if not cells:
        raise HostgapError("--results", "no measured cell with a host fraction, batch and prompt length")
    bounds = fitting.boundaries(cells)
    if as_json:
        _echo_json({"schema_version": __import__("hostgap").SCHEMA_VERSION,
                    "thresholds": {"host_bound_min": HOST_BOUND_MIN, "device_bound_max": DEVICE_BOUND_MAX},
                    "cells": [dict(c.__dict__, contended=c.run_id in busy) for c in cells],
                    "boundaries": [b.__dict__ for b in bounds],
                    "invalid": [{"run_id": k, "reasons": v} for k, v in invalid.items()]})
        return
    if as_csv:
        click.echo("model,device,engine,mode,batch,prompt_len,host_fraction,regime,run_id,contended")
        for c in cells:
            click.echo(f"{c.model},{c.device},{c.engine},{c.mode},{c.batch},{c.prompt_len},{c.host_fraction:.4f},"
                       f"{c.regime},{c.run_id},{int(c.run_id in busy)}")
        return
    click.echo(f"regimes by host fraction: host-bound >= {HOST_BOUND_MIN}, balanced >= {DEVICE_BOUND_MAX}, else device-bound")
    short = {"host-bound": "H", "balanced": "B", "device-bound": "D"}
    groups: dict = {}
    for c in cells:
        groups.setdefault((c.model, c.device, c.engine, c.mode), []).append(c)
    for (model, dev, eng, mode), cs in sorted(groups.items()):
        prompts = sorted({c.prompt_len for c in cs})
        batches = sorted({c.batch for c in cs})
        grid: dict = {}
        for c in cs:
            grid.setdefault((c.batch, c.prompt_len), []).append(c.host_fraction)
            if c.run_id in busy:
                grid.setdefault(("busy", c.batch, c.prompt_len), [])
        click.echo(f"\n{model} on {dev} ({eng} {mode}): host fraction (median over runs), rows batch, columns prompt length")
        rows = [(str(b), *(_regime_text(grid[(b, p)], short) + ("!" if ("busy", b, p) in grid else "")
                           if (b, p) in grid else "." for p in prompts)) for b in batches]
        click.echo(_table(("batch", *map(str, prompts)), rows))
    click.echo("\nH: host-bound, B: balanced, D: device-bound; !: measured on a busy machine. Boundaries:")
    for b in bounds:
        click.echo(f"  {b.model}: {b.note}")
    labels = {f"{c.model} ({c.device}, {c.engine} {c.mode})" for c in cells}
    for label in sorted(labels - {b.model for b in bounds}):
        click.echo(f"  {label}: no boundary: needs two or more batch sizes or prompt lengths")
    for rid, why in invalid.items():
        click.echo(f"left out, invalid measurement {rid}: {why[0]}")


def _validity(docs: list[dict]) -> tuple[dict, set]:
    """({run_id: reasons} of invalid measurements, {run_id} measured on a busy machine); a
    result from before validity existed is judged by its numbers."""
    from hostgap.capture.validity import reasons

    invalid, busy = {}, set()
    for d in docs:
        rid, diff = str(d.get("run_id", "")), d.get("differencing") or {}
        why = list(d.get("invalid_reasons") or []) if "valid" in d else reasons(diff)
        if ("valid" in d and not d["valid"]) or why:
            invalid[rid] = why or ["checks failed"]
        if diff.get("contended"):
            busy.add(rid)
    return invalid, busy


def _regime_text(fractions, short) -> str:
    from hostgap.anatomy.verdict import classify

    f = float(np.median(fractions))
    n = f" (n={len(fractions)})" if len(fractions) > 1 else ""
    return f"{f:.2f} {short.get(classify(f), '?')}{n}"


def register(cli: click.Group) -> None:
    """Add this module's commands to the top-level group."""
    cli.add_command(account_cmd)
    cli.add_command(fit_cmd)
    cli.add_command(predict_cmd)
    cli.add_command(regimes_cmd)
