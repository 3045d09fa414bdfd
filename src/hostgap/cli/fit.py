"""`hostgap fit`: the latency model's host term and roofline efficiencies from measured runs,
Vidur's kernel measurements or the paper's cells (docs/models.md)."""

from __future__ import annotations

import click
import numpy as np

from hostgap.cli.models_common import _devices, _echo_json, _log, _ms, _table
from hostgap.errors import HostgapError


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
def fit_cmd(
    results,
    db,
    paper_cells,
    vidur_mlp,
    mlp_device,
    test_mlp,
    test_device,
    all_reduce,
    device_file,
    output,
    as_json,
    files,
):
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
        raise HostgapError(
            "--results", "no measured runs given (pass --results FILE..., --db PATH, --vidur-mlp CSV or --paper-cells)"
        )
    if (test_mlp or test_device) and not vidur_mlp:
        raise HostgapError("--test-mlp" if test_mlp else "--device", "needs --vidur-mlp files to fit on")
    if mlp_device and not (vidur_mlp or all_reduce):
        raise HostgapError("--device", "needs --vidur-mlp or --all-reduce files to fit on")
    for flag, given in (("--vidur-mlp", vidur_mlp), ("--all-reduce", all_reduce)):
        if given and not mlp_device:  # which GPU measured them is never assumed
            raise HostgapError(
                flag,
                "needs --device: the GPU the kernel times were measured on (vidur names its files a100_*, h100_*)",
            )
    kernel_data: dict = {}
    rl, report = None, {"heldout_files": [], "tests": []}
    mlp_dev = _find(mlp_device, extra) if mlp_device else None
    if vidur_mlp:
        rl = _fit_vidur(
            vidur_mlp,
            mlp_dev,
            test_mlp,
            _find(test_device, extra) if test_device else mlp_dev,
            kernel_data,
            report,
            out,
        )
    ar = None
    if all_reduce:
        from hostgap.model import tp, vidur

        assert mlp_dev is not None  # --device is required above whenever all_reduce is given
        ar = tp.fit_all_reduce(vidur.read_all_reduce(all_reduce), mlp_dev)
        kernel_data[str(all_reduce)] = fitting.file_hash(all_reduce)
    model = fitting.fit(docs, extra, rl=rl, all_reduce=ar, kernel_data=kernel_data, strict=bool(results or files))
    if docs and not model.groups and rl is None:
        raise HostgapError(
            "--results", "no (device, engine, TP) group has two usable cells; " + "; ".join(model.skipped[:3])
        )
    for s in model.skipped:
        _log(f"skipped: {s}")
    if model.groups:
        rows = [
            (
                g.device_name,
                g.engine,
                g.tp,
                g.n_cells,
                f"{g.device_scale:.3f}",
                _ms(g.host.serial_ns),
                f"{g.host.per_seq_ns / 1e3:.1f}",
                f"{g.host.per_kernel_ns / 1e3:.2f}",
                f"{g.heldout.mape * 100:.1f}",
                f"{g.heldout.max_error * 100:.1f}",
                f"{g.heldout_host_only.mape * 100:.1f}",
            )
            for g in model.groups
        ]
        out(
            _table(
                (
                    "device",
                    "engine",
                    "TP",
                    "cells",
                    "dev scale",
                    "serial ms",
                    "per-seq us",
                    "per-kernel us",
                    "held-out MAPE %",
                    "max err %",
                    "host-only MAPE %",
                ),
                rows,
            )
        )
    if ar is not None:
        out(
            "all-reduce: "
            + ", ".join(
                f"k={k} {ar.latency_ns[k] / 1e3:.1f} us + size / {ar.bw_bytes_per_s[k] / 1e9:.0f} GB/s"
                for k in sorted(ar.latency_ns)
            )
        )
    _write_model(model, output, out)
    if as_json:
        report["groups"] = [
            {
                "device": g.device,
                "engine": g.engine,
                "tp": g.tp,
                "n_cells": g.n_cells,
                "heldout": g.heldout.to_dict(),
                "heldout_host_only": g.heldout_host_only.to_dict(),
            }
            for g in model.groups
        ]
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
    out(
        f"wrote {path}{' (the default location; -o to choose)' if output is None else ''} "
        f"(schema_version {model.to_dict()['schema_version']}, data sha256 {model.provenance['data_sha256'][:12]})"
    )


def _mlp_scores(name, device, pred, s, gemm_ops) -> dict:
    g = np.isin(s.key, gemm_ops)
    rel = np.abs(pred - s.time_ns) / s.time_ns
    return {
        "file": name,
        "device": device,
        "gemm_mape_pct": float(rel[g].mean() * 100),
        "op_mape_pct": float(rel.mean() * 100),
        "max_err_pct": float(rel.max() * 100),
        "rows": int(len(s)),
    }


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
    rl = roofline.fit(
        _concat(samples), dev.name, source=f"vidur kernel times {', '.join(map(name, paths))} measured on {dev.name}"
    )
    for p in test_paths:
        t = vidur.as_hostgap_ops(vidur.read_mlp(p, test_dev))
        report["tests"].append(_mlp_scores(name(p), test_dev.name, roofline.predict(rl, t), t, gemm))
    head = ("file", "device", "GEMM MAPE %", "all-op MAPE %", "max err %", "rows")
    fmt = lambda r: (
        r["file"],
        r["device"],
        f"{r['gemm_mape_pct']:.1f}",
        f"{r['op_mape_pct']:.1f}",  # noqa: E731
        f"{r['max_err_pct']:.1f}",
        r["rows"],
    )
    if report["heldout_files"]:
        out("roofline (GEMMs one family), each file held out (fit on the others):")
        out(_table(head, [fmt(r) for r in report["heldout_files"]]))
    if report["tests"]:
        out(
            f"roofline (GEMMs one family) fitted on all {len(paths)} file(s) ({dev.name}), scored on the test files "
            + (
                f"(efficiencies and t_min applied to {test_dev.name}'s datasheet peaks and bandwidth):"
                if test_dev.name != dev.name
                else "(same GPU):"
            )
        )
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
    out(
        f"host term fitted on the published cells ({calibrate.CELLS_FILE.name}), H100 vLLM eager; "
        f"device scale {scale:.3f}"
    )
    out(
        _table(
            ("part", "fitted", "shipped default"),
            [(k, f"{getattr(host, k) / 1e3:.2f} us", f"{getattr(d, k) / 1e3:.2f} us") for k in calibrate.PARAMS],
        )
    )
    out("")
    out(
        _table(
            ("cell", "quantity", "use", "published", "default", "error %", "leave-one-out", "error %"),
            [
                (
                    r.cell,
                    r.quantity,
                    r.use,
                    f"{r.published:g}",
                    f"{r.default:.3f}",
                    f"{r.error * 100:+.1f}",
                    f"{r.loo:.3f}",
                    f"{r.loo_error * 100:+.1f}",
                )
                for r in rows
            ],
        )
    )
    fit_rows = [r for r in rows if r.use == "fit"]
    held = error_metrics(np.array([r.loo for r in fit_rows]), np.array([r.published for r in fit_rows]))
    dev = find_device("h100-sxm")
    group = fitting.GroupModel(
        dev.name, dev.name, "vllm", scale, host, default_model(dev.name), len(fit_rows), held, held
    )
    model = fitting.FittedModel(
        (group,),
        {
            "created_utc": __import__("time").strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data_sha256": fitting.file_hash(calibrate.CELLS_FILE),
            "runs": [],
            "devices": [dev.name],
            "n_cells": len(fit_rows),
            "source": str(calibrate.CELLS_FILE.name),
        },
    )
    return model, {"host": host.to_dict(), "device_scale": scale, "cells": [r.to_dict() for r in rows]}


def _concat(samples):
    from hostgap.model.roofline import OpSamples

    return OpSamples(
        *(
            np.concatenate([getattr(s, f) for s in samples])
            for f in ("key", "flops", "bytes", "kernels", "peak_flops", "bw_bytes_per_s", "time_ns", "group", "tokens")
        )
    )
