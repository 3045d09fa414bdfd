"""`hostgap predict`: one decode step's device, host and total time from the latency model, with
what-ifs and measured runs beside it (docs/models.md)."""

from __future__ import annotations

import click
import numpy as np

from hostgap.cli.models_common import (
    _DTYPES,
    _ENGINES,
    _devices,
    _echo_json,
    _log,
    _ms,
    _table,
)
from hostgap.errors import HostgapError


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
            basis = (
                f"{model_path}: efficiencies fitted on {other.device} applied to {dev.name} "
                f"(same fractions of {dev.name}'s datasheet peaks and bandwidth, same t_min); default host term"
            )
        elif rl is not None:
            basis = (
                f"{model_path}: efficiencies fitted for {dev.name} ({rl.source}); "
                f"no measured runs for {dev.name}/{engine}/TP-{tp}: default host term"
            )
        else:
            basis = (
                "no fitted model: default efficiencies and host term (docs/models.md)"
                if not fitted
                else f"{model_path} has no group for {dev.name}/{engine}/TP-{tp}: default efficiencies and host term"
            )
        host = for_device(DEFAULT_HOST[engine], floor, dev.name)
        scale = 1.0 if rl is not None else DEFAULT_DEVICE_SCALE.get(dev.name, 1.0)
        if scale != 1.0:
            basis += f"; default efficiencies x {scale:g} ({dev.name} level from the published 8B step)"
        basis += f"; launch floor {floor / 1e3:.3f} us ({floor_src})"
        setup = Setup(
            arch,
            cell,
            dev,
            mode,
            rl or default_model(dev.name),
            scale,
            host,
            fitted.all_reduce if fitted else None,
            fitted.tp_form if fitted else "overlap",
            kernels,
        )
        return setup, basis, None
    basis = (
        f"fitted model {model_path} ({group.device_name}/{group.engine}/TP-{group.tp}, {group.n_cells} cells, "
        f"held-out MAPE {group.heldout.mape * 100:.1f} %, max {group.heldout.max_error * 100:.1f} %)"
    )
    assert fitted is not None  # a group comes from a fitted model
    setup = Setup(
        arch,
        cell,
        dev,
        mode,
        group.roofline,
        group.device_scale,
        group.host,
        fitted.all_reduce,
        fitted.tp_form,
        kernels,
    )
    return setup, basis, group


def _measured_match(docs, setup, mode, dtype):
    from hostgap.model import fitting

    out = []
    for d in docs:
        c = fitting.cell_from_results(d, str(d.get("run_id", "")))
        if (
            not c.usable
            or c.arch is None
            or c.arch.name != setup.arch.name
            or c.batch != setup.cell.batch
            or c.tp != setup.cell.tp
        ):
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
    "device",
    default="h100-sxm",
    show_default=True,
    help="GPU to predict for: name or alias from the device table (docs/models.md §2).",
)
@click.option("--device", "device_alias", default=None, hidden=True, help="Alias of --gpu.")
@click.option("--device-file", default=None, type=click.Path(), help="Extra device specs (JSON/TOML).")
@click.option("--model", "model_path", default=None, type=click.Path(), help="Model JSON from `hostgap fit`.")
@click.option(
    "--kernels-per-step", default=None, type=float, help="Measured kernels per step (replaces the launch table)."
)
@click.option(
    "--what-if",
    "what_ifs",
    multiple=True,
    help="Scenario beside the prediction (repeatable): graphs[:capture=piecewise|full] (CUDA graph "
    "replay; vLLM default piecewise: attention, LM head and sampling stay eager) | "
    "spec:gamma=4,alpha=0.7[,draft=PRESET] (speculative decoding) | fp8[:gemm_eff=F] (W8A8) | "
    "tp=K (K GPUs) | host=F (a host CPU F times as fast single-thread: host=1.3 is 30 % faster, "
    "host=0.5 a CPU half as fast; the launch floor does not change) | overlap[:out=N] (async/overlap "
    "scheduling) | cpu:cores=N[,load=L][,speed=S] (N cores shared with L busy threads) | "
    "megakernel[:bw=F] (one persistent kernel per step); docs/models.md.",
)
@click.option("--results", multiple=True, type=click.Path(), help="Measured runs to show beside the prediction.")
@click.option("--db", default=None, help="Runs database (default: hostgap's, when no files are given).")
@click.option(
    "--tp-form",
    type=click.Choice(["overlap", "additive", "compute_comm", "host_over_k", "host_times_k", "additive_skew"]),
    default=None,
    help="Host term vs TP degree (default: the model's, else overlap: docs/models.md §5).",
)
@click.option("--json", "as_json", is_flag=True, help="JSON to stdout: device, host and total separately.")
@click.argument("files", nargs=-1, type=click.Path())
def predict_cmd(
    preset,
    batch,
    context,
    tp,
    dtype,
    engine,
    mode,
    device,
    device_alias,
    device_file,
    model_path,
    kernels_per_step,
    what_ifs,
    results,
    db,
    tp_form,
    as_json,
    files,
):
    """Predict one decode step of PRESET: device time + host term, and what-ifs.

    Measured runs (--results, or FILES after PRESET) of the same cell are shown beside the
    prediction with its error.

    \b
    Examples:
      hostgap predict llama-3.1-8b --gpu h100 --batch 1 --context 2048
      hostgap predict llama-3.2-1b --engine hf --what-if graphs --what-if spec:gamma=4,alpha=0.8
      hostgap predict llama-3.1-8b --model model.json --json runs/*.json
    """
    from dataclasses import replace

    from hostgap.model import fitting, scenarios, whatif

    device = device_alias or device
    setup, basis, _ = _setup(
        preset, batch, context, tp, dtype, engine, mode, device, device_file, model_path, kernels_per_step
    )
    if tp_form:
        setup = replace(setup, tp_form=tp_form)
    specs = [scenarios.parse(s) for s in what_ifs]  # validate before any work
    del specs
    base = whatif.predict(setup)
    wis = [scenarios.run(setup, s) for s in what_ifs]
    results = [*results, *files]
    docs = fitting.load_results(results, db) if (results or db) else []
    measured = _measured_match(docs, setup, mode, dtype)
    ks = [c.k_step for c in measured if c.k_step == c.k_step and c.k_step > 0]
    if kernels_per_step is None and ks:
        setup = replace(setup, kernels_per_step=float(np.median(ks)))
        basis += f"; kernels per step {np.median(ks):g} from {len(ks)} measured run(s)"
        base = whatif.predict(setup)
        wis = [scenarios.run(setup, s) for s in what_ifs]
    if as_json and (not model_path or "default" in basis):
        _log(f"note: {basis}")  # the table prints its basis line; JSON holds it out of sight
    mem = whatif.memory_check(setup.arch, setup.cell, setup.device)
    if not mem.fits:
        _log(f"warning: {mem.message(setup.device.name)}: this cell does not run as given (use --tp or a larger GPU)")
    if as_json:
        _echo_json(
            {
                "schema_version": __import__("hostgap").SCHEMA_VERSION,
                "preset": preset,
                "device": setup.device.name,
                "cell": setup.cell.to_dict(),
                "mode": mode,
                "basis": basis,
                "prediction": base.to_dict(),
                "memory": mem.to_dict(),
                "measured": [_measured_dict(c, base) for c in measured],
                "what_ifs": [
                    {
                        **w.to_dict(),
                        "measured": [
                            _measured_dict(c, w.scenario) for c in _scenario_measured(w, docs, setup, mode, dtype)
                        ],
                    }
                    for w in wis
                ],
            }
        )
        return
    click.echo(f"{preset} on {setup.device.name}: batch {batch}, KV {context}, TP {tp}, {dtype}, {engine} {mode}")
    click.echo(f"basis: {basis}")
    rows = [
        (
            "predicted",
            _ms(base.device_ns),
            _ms(base.collective_ns + base.collective_wait_ns),
            _ms(base.host_ns),
            _ms(base.total_ns),
            f"{base.host_fraction:.2f}",
            "",
        )
    ]
    for c in measured:
        err = (base.total_ns - c.t_step_ns) / c.t_step_ns
        rows.append(
            (
                f"measured {c.run_id}"[:40],
                _ms(c.g_step_ns),
                "",
                _ms(c.h_step_ns),
                _ms(c.t_step_ns),
                f"{c.host_fraction:.2f}" if c.host_fraction == c.host_fraction else "-",
                f"{err * 100:+.1f} %",
            )
        )
    click.echo(_table(("", "device ms", "collective ms", "host ms", "total ms", "host frac", "error"), rows))
    if base.collective_wait_ns:
        click.echo(
            f"collective includes {_ms(base.collective_wait_ns)} ms waiting for the slowest rank's host "
            f"(host-caused: serial + exposed orchestration {_ms(base.host_caused_ns)} ms)"
        )
    for w in wis:
        click.echo("")
        click.echo(
            f"what-if {w.name}: step {_ms(w.baseline.total_ns)} -> {_ms(w.scenario.total_ns)} ms "
            f"({w.step_change * 100:+.1f} %), per-token speed-up {w.per_token_speedup:.2f}x"
        )
        click.echo(
            f"  device {_ms(w.scenario.device_ns)} ms, collective {_ms(w.scenario.collective_ns)} ms"
            + (
                f" + {_ms(w.scenario.collective_wait_ns)} ms waiting in all-reduce for the slowest rank's host"
                if w.scenario.collective_wait_ns
                else ""
            )
            + f", host {_ms(w.scenario.host_ns)} ms"
        )
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
    return {
        "run_id": c.run_id,
        "t_step_ns": c.t_step_ns,
        "g_step_ns": c.g_step_ns,
        "h_step_ns": c.h_step_ns,
        "host_fraction": c.host_fraction,
        "error_total": (base.total_ns - c.t_step_ns) / c.t_step_ns,
    }
