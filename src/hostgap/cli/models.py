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
    return "\n".join(fmt(r).rstrip() for r in (headers, *rows))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}" if ns == ns else "-"


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


def default_model_path():
    """Where `hostgap fit` writes without -o: $HOSTGAP_MODEL, else the data folder of the runs
    database ($XDG_DATA_HOME or ~/.local/share)/hostgap/model.json."""
    import os
    from pathlib import Path

    env = os.environ.get("HOSTGAP_MODEL")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "hostgap" / "model.json"


@click.command("fit")
@click.option("--results", "results", multiple=True, type=click.Path(),
              help="Results JSON of `hostgap measure` (repeatable); each must carry the keys a fit needs.")
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option("--paper-cells", is_flag=True,
              help="Fit the default vLLM/H100 host term on the published cells shipped with hostgap and print "
                   "every cell's published value, default and leave-one-out prediction.")
@click.option("--vidur-mlp", "vidur_mlp", multiple=True, type=click.Path(),
              help="vidur *_mlp.csv kernel times to fit efficiencies on (GEMMs one family, other ops each their own; repeatable; needs --device).")
@click.option("--device", "mlp_device", default=None,
              help="The GPU the --vidur-mlp files were MEASURED on (e.g. a100-80gb for vidur's a100_* files). "
                   "Not a prediction target: `predict --gpu` chooses that.")
@click.option("--test-mlp", "test_mlp", multiple=True, type=click.Path(),
              help="vidur *_mlp.csv files to score the fit on, never fitted on (repeatable).")
@click.option("--test-device", default=None,
              help="The GPU the --test-mlp files were measured on (default: --device).")
@click.option("--all-reduce", "all_reduce", default=None, type=click.Path(),
              help="vidur all_reduce.csv to fit collective cost on (measured on --device, default a100-80gb).")
@click.option("--device-file", default=None, type=click.Path(), help="Extra device specs (JSON/TOML).")
@click.option("-o", "--output", default=None, type=click.Path(),
              help="Model JSON to write [default: $HOSTGAP_MODEL, else ~/.local/share/hostgap/model.json].")
@click.option("--json", "as_json", is_flag=True,
              help="JSON to stdout (tables go to stderr): held-out scores, vidur test scores ('tests') and the model.")
@click.argument("files", nargs=-1, type=click.Path())
def fit_cmd(results, db, paper_cells, vidur_mlp, mlp_device, test_mlp, test_device, all_reduce, device_file,
            output, as_json, files):
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
    from hostgap.model import fitting

    out = click.echo if not as_json else _log
    extra = _devices(device_file)
    if paper_cells:
        model, report = _fit_paper(out)
        _write_model(model, output, out)
        if as_json:
            _echo_json({"schema_version": __import__("hostgap").SCHEMA_VERSION, **report, "model": model.to_dict()})
        return
    if not (results or files or db or vidur_mlp):
        db = fitting.default_db()
    docs = fitting.load_results([*results, *files], db)
    if not docs and not vidur_mlp:
        raise HostgapError("--results", "no measured runs given (pass --results FILE..., --db PATH, --vidur-mlp CSV "
                                        "or --paper-cells)")
    if (test_mlp or mlp_device or test_device) and not vidur_mlp:
        raise HostgapError("--test-mlp" if test_mlp else "--device", "needs --vidur-mlp files to fit on")
    kernel_data, rl, report = {}, None, {"heldout_files": [], "tests": []}
    mlp_dev = _find(mlp_device or "a100-80gb", extra) if (vidur_mlp or all_reduce) else None
    if vidur_mlp:
        if not mlp_device:
            raise HostgapError("--vidur-mlp", "needs --device: the GPU the kernel times were measured on "
                                              "(vidur names its files a100_*, h100_*)")
        rl = _fit_vidur(vidur_mlp, mlp_dev, test_mlp, _find(test_device, extra) if test_device else mlp_dev,
                        kernel_data, report, out)
    ar = None
    if all_reduce:
        from hostgap.model import tp, vidur

        ar = tp.fit_all_reduce(vidur.read_all_reduce(all_reduce), mlp_dev)
        kernel_data[str(all_reduce)] = fitting.file_hash(all_reduce)
    model = fitting.fit(docs, extra, rl=rl, all_reduce=ar, kernel_data=kernel_data, strict=bool(results or files))
    if docs and not model.groups and rl is None:
        raise HostgapError("--results", "no (device, engine, TP) group has two usable cells; " + "; ".join(model.skipped[:3]))
    for s in model.skipped:
        _log(f"skipped: {s}")
    if model.groups:
        rows = [(g.device_name, g.engine, g.tp, g.n_cells, f"{g.device_scale:.3f}", _ms(g.host.serial_ns),
                 f"{g.host.per_seq_ns / 1e3:.1f}", f"{g.host.per_kernel_ns / 1e3:.2f}", f"{g.heldout.mape * 100:.1f}",
                 f"{g.heldout.max_error * 100:.1f}", f"{g.heldout_host_only.mape * 100:.1f}") for g in model.groups]
        out(_table(("device", "engine", "TP", "cells", "dev scale", "serial ms", "per-seq us", "per-kernel us",
                    "held-out MAPE %", "max err %", "host-only MAPE %"), rows))
    if ar is not None:
        out("all-reduce: " + ", ".join(f"k={k} {ar.latency_ns[k] / 1e3:.1f} us + size / {ar.bw_bytes_per_s[k] / 1e9:.0f} GB/s"
                                       for k in sorted(ar.latency_ns)))
    _write_model(model, output, out)
    if as_json:
        report["groups"] = [{"device": g.device, "engine": g.engine, "tp": g.tp, "n_cells": g.n_cells,
                             "heldout": g.heldout.to_dict(), "heldout_host_only": g.heldout_host_only.to_dict()}
                            for g in model.groups]
        _echo_json({"schema_version": __import__("hostgap").SCHEMA_VERSION, **report, "model": model.to_dict()})


def _find(name, extra):
    from hostgap.model.devices import find_device

    return find_device(name, extra)


def _write_model(model, output, out) -> None:
    from hostgap.model import fitting

    path = output or default_model_path()
    if output is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    fitting.write_model(model, path)
    out(f"wrote {path}{' (the default location; -o to choose)' if output is None else ''} "
        f"(schema_version {model.to_dict()['schema_version']}, data sha256 {model.provenance['data_sha256'][:12]})")


def _mlp_scores(name, device, pred, s, gemm_ops) -> dict:
    g = np.isin(s.key, gemm_ops)
    rel = np.abs(pred - s.time_ns) / s.time_ns
    return {"file": name, "device": device, "gemm_mape_pct": float(rel[g].mean() * 100),
            "op_mape_pct": float(rel.mean() * 100), "max_err_pct": float(rel.max() * 100), "rows": int(len(s))}


def _fit_vidur(paths, dev, test_paths, test_dev, kernel_data, report, out):
    """Roofline on the files' kernel times (on ``dev``; GEMMs one family, vidur.as_hostgap_ops); scores."""
    from hostgap.model import fitting, roofline, vidur

    gemm = list(vidur.GEMM_KEYS)
    samples = [vidur.as_hostgap_ops(vidur.read_mlp(p, dev)) for p in paths]
    kernel_data.update({str(p): fitting.file_hash(p) for p in paths})
    name = lambda p: str(p).rsplit("/", 1)[-1]  # noqa: E731
    if len(samples) > 1:
        for i, held in enumerate(samples):
            m = roofline.fit(_concat([x for j, x in enumerate(samples) if j != i]), dev.name)
            report["heldout_files"].append(_mlp_scores(name(paths[i]), dev.name, roofline.predict(m, held), held, gemm))
    rl = roofline.fit(_concat(samples), dev.name,
                      source=f"vidur kernel times {', '.join(map(name, paths))} measured on {dev.name}")
    for p in test_paths:
        t = vidur.as_hostgap_ops(vidur.read_mlp(p, test_dev))
        report["tests"].append(_mlp_scores(name(p), test_dev.name, roofline.predict(rl, t), t, gemm))
    head = ("file", "device", "GEMM MAPE %", "all-op MAPE %", "max err %", "rows")
    fmt = lambda r: (r["file"], r["device"], f"{r['gemm_mape_pct']:.1f}", f"{r['op_mape_pct']:.1f}",  # noqa: E731
                     f"{r['max_err_pct']:.1f}", r["rows"])
    if report["heldout_files"]:
        out("roofline (GEMMs one family), each file held out (fit on the others):")
        out(_table(head, [fmt(r) for r in report["heldout_files"]]))
    if report["tests"]:
        out(f"roofline (GEMMs one family) fitted on all {len(paths)} file(s) ({dev.name}), scored on the test files "
            + (f"(efficiencies and t_min applied to {test_dev.name}'s datasheet peaks and bandwidth):"
               if test_dev.name != dev.name else "(same GPU):"))
        out(_table(head, [fmt(r) for r in report["tests"]]))
    return rl


def _fit_paper(out):
    """The default vLLM host term from the shipped published cells, with the leave-one-out table."""
    from hostgap.model import calibrate, fitting
    from hostgap.model.devices import find_device
    from hostgap.model.roofline import default_model, error_metrics
    from hostgap.model.stepmodel import DEFAULT_HOST

    host, scale, rows = calibrate.paper_fit()
    d = DEFAULT_HOST["vllm"]
    out(f"host term fitted on the published cells ({calibrate.CELLS_FILE.name}), H100 vLLM eager; "
        f"device scale {scale:.3f}")
    out(_table(("part", "fitted", "shipped default"),
               [(k, f"{getattr(host, k) / 1e3:.2f} us", f"{getattr(d, k) / 1e3:.2f} us") for k in calibrate.PARAMS]))
    out("")
    out(_table(("cell", "quantity", "use", "published", "default", "error %", "leave-one-out", "error %"),
               [(r.cell, r.quantity, r.use, f"{r.published:g}", f"{r.default:.3f}", f"{r.error * 100:+.1f}",
                 f"{r.loo:.3f}", f"{r.loo_error * 100:+.1f}") for r in rows]))
    fit_rows = [r for r in rows if r.use == "fit"]
    held = error_metrics(np.array([r.loo for r in fit_rows]), np.array([r.published for r in fit_rows]))
    dev = find_device("h100-sxm")
    group = fitting.GroupModel(dev.name, dev.name, "vllm", scale, host, default_model(dev.name), len(fit_rows),
                               held, held)
    model = fitting.FittedModel((group,), {"created_utc": __import__("time").strftime("%Y-%m-%dT%H:%M:%SZ"),
                                           "data_sha256": fitting.file_hash(calibrate.CELLS_FILE),
                                           "runs": [], "devices": [dev.name], "n_cells": len(fit_rows),
                                           "source": str(calibrate.CELLS_FILE.name)})
    return model, {"host": host.to_dict(), "device_scale": scale, "cells": [r.to_dict() for r in rows]}


def _concat(samples):
    from hostgap.model.roofline import OpSamples

    return OpSamples(*(np.concatenate([getattr(s, f) for s in samples]) for f in
                       ("key", "flops", "bytes", "kernels", "peak_flops", "bw_bytes_per_s", "time_ns", "group", "tokens")))


# -- predict ------------------------------------------------------------------------------


def _setup(preset, batch, context, tp, dtype, engine, mode, device, device_file, model_path, kernels):
    from hostgap.model import fitting
    from hostgap.model.accounting import Cell
    from hostgap.model.arch import get_preset
    from hostgap.model.devices import find_device, launch_floor_ns
    from hostgap.model.roofline import default_model
    from hostgap.model.stepmodel import DEFAULT_DEVICE_SCALE, DEFAULT_HOST, for_device
    from hostgap.model.whatif import Setup

    arch = get_preset(preset)
    dev = find_device(device, _devices(device_file))
    cell = Cell(batch=batch, q_tokens=1, context=context, tp=tp, dtype=dtype, engine=engine)
    fitted = fitting.load_model(model_path) if model_path else None
    group = fitted.group_for(dev.name, engine, tp) if fitted else None
    floor, floor_src = launch_floor_ns(dev)
    if group is None:
        rl = fitted.roofline_for(dev.name) if fitted else None
        if rl is None and fitted and fitted.rooflines:
            other = fitted.rooflines[0]
            rl = other
            basis = (f"{model_path}: efficiencies fitted on {other.device} applied to {dev.name} "
                     f"(same fractions of {dev.name}'s datasheet peaks and bandwidth, same t_min); default host term")
        elif rl is not None:
            basis = (f"{model_path}: efficiencies fitted for {dev.name} ({rl.source}); "
                     f"no measured runs for {dev.name}/{engine}/TP-{tp}: default host term")
        else:
            basis = ("no fitted model: default efficiencies and host term (docs/models.md)" if not fitted
                     else f"{model_path} has no group for {dev.name}/{engine}/TP-{tp}: default efficiencies and host term")
        host = for_device(DEFAULT_HOST[engine], floor)
        scale = 1.0 if rl is not None else DEFAULT_DEVICE_SCALE.get(dev.name, 1.0)
        if scale != 1.0:
            basis += f"; default efficiencies x {scale:g} ({dev.name} level from the published 8B step)"
        basis += f"; launch floor {floor / 1e3:.3f} us ({floor_src})"
        setup = Setup(arch, cell, dev, mode, rl or default_model(dev.name), scale, host,
                      fitted.all_reduce if fitted else None, fitted.tp_form if fitted else "overlap", kernels)
        return setup, basis, None
    basis = (f"fitted model {model_path} ({group.device_name}/{group.engine}/TP-{group.tp}, {group.n_cells} cells, "
             f"held-out MAPE {group.heldout.mape * 100:.1f} %, max {group.heldout.max_error * 100:.1f} %)")
    setup = Setup(arch, cell, dev, mode, group.roofline, group.device_scale, group.host, fitted.all_reduce,
                  fitted.tp_form, kernels)
    return setup, basis, group


def _measured_match(docs, setup, mode, dtype):
    from hostgap.model import fitting

    out = []
    for d in docs:
        c = fitting.cell_from_results(d, str(d.get("run_id", "")))
        if not c.usable or c.arch.name != setup.arch.name or c.batch != setup.cell.batch or c.tp != setup.cell.tp:
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
@click.option("--tp", default=1, show_default=True, help="Tensor-parallel degree (same path as --what-if tp=K).")
@click.option("--dtype", type=_DTYPES, default="bfloat16", show_default=True, help="Weight dtype (fp8/int8: W8A8).")
@click.option("--engine", type=_ENGINES, default="vllm", show_default=True, help="Engine whose host term and launch table to use.")
@click.option("--mode", type=click.Choice(["eager", "graph"]), default="eager", show_default=True,
              help="eager launches, or CUDA graph replay.")
@click.option("--gpu", "device", default="h100-sxm", show_default=True,
              help="GPU to predict for: name or alias from the device table (docs/models.md §2).")
@click.option("--device", "device_alias", default=None, hidden=True, help="Alias of --gpu.")
@click.option("--device-file", default=None, type=click.Path(), help="Extra device specs (JSON/TOML).")
@click.option("--model", "model_path", default=None, type=click.Path(), help="Model JSON from `hostgap fit`.")
@click.option("--kernels-per-step", default=None, type=float, help="Measured kernels per step (replaces the launch table).")
@click.option("--what-if", "what_ifs", multiple=True,
              help="Scenario beside the prediction (repeatable): graphs[:capture=piecewise|full] (CUDA graph "
                   "replay; vLLM default piecewise: attention, LM head and sampling stay eager) | "
                   "spec:gamma=4,alpha=0.7[,draft=PRESET] (speculative decoding) | fp8[:gemm_eff=F] (W8A8) | "
                   "tp=K (K GPUs) | host=F (a host CPU F times as fast single-thread: host=1.3 is 30 % faster, "
                   "host=0.5 a CPU half as fast; the launch floor does not change).")
@click.option("--results", multiple=True, type=click.Path(), help="Measured runs to show beside the prediction.")
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option("--tp-form", type=click.Choice(["overlap", "additive", "compute_comm", "host_over_k", "host_times_k",
                                              "additive_skew"]),
              default=None, help="Host term vs TP degree (default: the model's, else overlap: docs/models.md §5).")
@click.option("--json", "as_json", is_flag=True, help="JSON to stdout: device, host and total separately.")
@click.argument("files", nargs=-1, type=click.Path())
def predict_cmd(preset, batch, context, tp, dtype, engine, mode, device, device_alias, device_file, model_path,
                kernels_per_step, what_ifs, results, db, tp_form, as_json, files):
    """Predict one decode step of PRESET: device time + host term, and what-ifs.

    Measured runs (--results, or FILES after PRESET) of the same cell are shown beside the
    prediction with its error.

    \b
    Examples:
      hostgap predict llama-3.1-8b --gpu h100 --batch 1 --context 2048
      hostgap predict llama-3.2-1b --engine hf --what-if graphs --what-if spec:gamma=4,alpha=0.8
      hostgap predict llama-3.1-8b --model model.json --json runs/*.json
    """
    from hostgap.model import fitting, whatif

    from dataclasses import replace

    device = device_alias or device
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
    if as_json and (not model_path or "default" in basis):
        _log(f"note: {basis}")  # the table prints its basis line; JSON holds it out of sight
    mem = whatif.memory_check(setup.arch, setup.cell, setup.device)
    if not mem.fits:
        _log(f"warning: {mem.message(setup.device.name)}: this cell does not run as given (use --tp or a larger GPU)")
    if as_json:
        _echo_json({
            "schema_version": __import__("hostgap").SCHEMA_VERSION, "preset": preset, "device": setup.device.name,
            "cell": setup.cell.to_dict(), "mode": mode, "basis": basis, "prediction": base.to_dict(),
            "memory": mem.to_dict(),
            "measured": [_measured_dict(c, base) for c in measured],
            "what_ifs": [{**w.to_dict(), "measured": [_measured_dict(c, w.scenario) for c in
                                                      _scenario_measured(w, docs, setup, mode, dtype)]} for w in wis],
        })
        return
    click.echo(f"{preset} on {setup.device.name}: batch {batch}, KV {context}, TP {tp}, {dtype}, {engine} {mode}")
    click.echo(f"basis: {basis}")
    rows = [("predicted", _ms(base.device_ns), _ms(base.collective_ns + base.collective_wait_ns), _ms(base.host_ns),
             _ms(base.total_ns),
             f"{base.host_fraction:.2f}", "")]
    for c in measured:
        err = (base.total_ns - c.t_step_ns) / c.t_step_ns
        rows.append((f"measured {c.run_id}"[:40], _ms(c.g_step_ns), "", _ms(c.h_step_ns), _ms(c.t_step_ns),
                     f"{c.host_fraction:.2f}" if c.host_fraction == c.host_fraction else "-", f"{err * 100:+.1f} %"))
    click.echo(_table(("", "device ms", "collective ms", "host ms", "total ms", "host frac", "error"), rows))
    if base.collective_wait_ns:
        click.echo(f"collective includes {_ms(base.collective_wait_ns)} ms waiting for the slowest rank's host "
                   f"(host-caused: serial + exposed orchestration {_ms(base.host_caused_ns)} ms)")
    for w in wis:
        click.echo("")
        click.echo(f"what-if {w.name}: step {_ms(w.baseline.total_ns)} -> {_ms(w.scenario.total_ns)} ms "
                   f"({w.step_change * 100:+.1f} %), per-token speed-up {w.per_token_speedup:.2f}x")
        click.echo(f"  device {_ms(w.scenario.device_ns)} ms, collective {_ms(w.scenario.collective_ns)} ms"
                   + (f" + {_ms(w.scenario.collective_wait_ns)} ms waiting in all-reduce for the slowest rank's host"
                      if w.scenario.collective_wait_ns else "") + f", host {_ms(w.scenario.host_ns)} ms")
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
@click.option("--predict", is_flag=True,
              help="Beside each measured cell, the model's host fraction and regime for the same cell (p ...).")
@click.option("--model", "model_path", default=None, type=click.Path(),
              help="Model JSON from `hostgap fit` for --predict (default: the shipped defaults).")
@click.option("--paper-cells", is_flag=True,
              help="Map the published cells shipped with hostgap (H100, vLLM eager) instead of runs.")
@click.option("--json", "as_json", is_flag=True, help="JSON to stdout: cells and boundaries.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV to stdout: one row per cell.")
@click.argument("files", nargs=-1, type=click.Path())
def regimes_cmd(results, db, predict, model_path, paper_cells, as_json, as_csv, files):
    """Place each measured cell by host fraction (verdict thresholds) and find the boundary.

    \b
    Example:
      hostgap regimes --results runs/*.json
    """
    from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN
    from hostgap.model import fitting

    invalid, busy = {}, set()
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
        _echo_json({"schema_version": __import__("hostgap").SCHEMA_VERSION,
                    "thresholds": {"host_bound_min": HOST_BOUND_MIN, "device_bound_max": DEVICE_BOUND_MAX},
                    "cells": [dict(c.__dict__, contended=c.run_id in busy) for c in cells],
                    "boundaries": [b.__dict__ for b in bounds],
                    "invalid": [{"run_id": k, "reasons": v} for k, v in invalid.items()]})
        return
    if as_csv:
        click.echo("model,device,engine,mode,batch,prompt_len,host_fraction,regime,run_id,contended"
                   + (",predicted_host_fraction,predicted_regime" if predict else ""))
        for c in cells:
            click.echo(f"{c.model},{c.device},{c.engine},{c.mode},{c.batch},{c.prompt_len},{c.host_fraction:.4f},"
                       f"{c.regime},{c.run_id},{int(c.run_id in busy)}"
                       + (f",{c.predicted_host_fraction:.4f},{c.predicted_regime}" if predict else ""))
        return
    click.echo(f"regimes by host fraction: host-bound >= {HOST_BOUND_MIN}, balanced >= {DEVICE_BOUND_MAX}, else device-bound")
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
        click.echo(f"\n{model} on {dev} ({eng} {mode}{fitting.tp_label(k)}): host fraction (median over runs), rows batch, columns prompt length")
        rows = [(str(b), *(_regime_text(grid[(b, p)], short) + ("!" if ("busy", b, p) in grid else "")
                           if (b, p) in grid else "." for p in prompts)) for b in batches]
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
        setup, _, _ = _setup(c.model, c.batch, max(c.context or c.prompt_len, 1), c.tp, c.dtype, engine,
                             c.mode if c.mode in ("eager", "graph") else "eager", c.device, None, model_path, None)
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
