"""``hostgap fit`` from its sources: measured runs (results files, the runs database), vidur's
kernel times (``*_mlp.csv``: per-op efficiencies, each file scored by a fit on the others and
test files by the fit on all), vidur's all-reduce times, or the published cells shipped with
hostgap (the default vLLM/H100 host term). The fits themselves are :mod:`hostgap.model.fitting.measured`,
:mod:`hostgap.model.roofline`, :mod:`hostgap.model.tp` and :mod:`hostgap.model.fitting.calibrate`."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model import roofline, tp, vidur
from hostgap.model.devices import DeviceSpec, find_device, load_device_file
from hostgap.model.fitting import calibrate
from hostgap.model.fitting import measured as fitting
from hostgap.model.stepmodel import HostModel
from hostgap.version import SCHEMA_VERSION

PathArg = str | Path


def default_model_path() -> Path:
    """Where `hostgap fit` writes without -o: $HOSTGAP_MODEL, else the data folder of the runs
    database ($XDG_DATA_HOME or ~/.local/share)/hostgap/model.json."""
    env = os.environ.get("HOSTGAP_MODEL")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "hostgap" / "model.json"


@dataclass(frozen=True)
class PaperFit:
    """The host term and device scale fitted on the published cells, and every cell's row."""

    host: HostModel
    device_scale: float
    rows: tuple[calibrate.Row, ...]


@dataclass(frozen=True)
class FitOutcome:
    """A fitted model and its scores: ``report`` holds the JSON document's keys besides the
    model (``heldout_files``, ``tests`` and ``groups``; for the published cells ``host``,
    ``device_scale`` and ``cells``); ``kernel_files`` how many kernel-time files were fitted,
    on ``kernel_device``, with test files on ``test_device``."""

    model: fitting.FittedModel
    report: dict = field(default_factory=dict)
    kernel_files: int = 0
    kernel_device: str | None = None
    test_device: str | None = None
    paper: PaperFit | None = None

    def to_dict(self) -> dict:
        """``fit --json``."""
        return {"schema_version": SCHEMA_VERSION, **self.report, "model": self.model.to_dict()}


def fit_sources(
    results: Sequence[PathArg] = (),
    db: str | None = None,
    *,
    vidur_mlp: Sequence[PathArg] = (),
    device: str | None = None,
    test_mlp: Sequence[PathArg] = (),
    test_device: str | None = None,
    all_reduce: PathArg | None = None,
    device_file: PathArg | None = None,
) -> FitOutcome:
    """Fit on measured runs (``results`` files, the runs database ``db``: hostgap's own where
    nothing is given), on vidur kernel times measured on ``device`` (``vidur_mlp``; scored on
    ``test_mlp`` measured on ``test_device``, default ``device``) and on an all-reduce file.
    Which GPU measured kernel times is never assumed: ``device`` is required with them. A run
    given as a file that lacks a key the fit needs is an error naming it."""
    extra = load_device_file(device_file) if device_file else None
    if not (results or db or vidur_mlp):
        db = fitting.default_db()
    docs = fitting.load_results(results, db)
    _check_options(docs, vidur_mlp, device, test_mlp, test_device, all_reduce)
    kernel_data: dict = {}
    report: dict = {"heldout_files": [], "tests": []}
    dev = find_device(device, extra) if device else None
    rl = None
    names: tuple[str | None, str | None] = (None, None)  # the GPUs kernel times were fitted, tested on
    if vidur_mlp:
        assert dev is not None  # _check_options: kernel times need --device
        test_dev = find_device(test_device, extra) if test_device else dev
        rl = fit_kernel_times(vidur_mlp, dev, test_mlp, test_dev, kernel_data, report)
        names = (dev.name, test_dev.name)
    ar = None
    if all_reduce:
        assert dev is not None
        ar = tp.fit_all_reduce(vidur.read_all_reduce(all_reduce), dev)
        kernel_data[str(all_reduce)] = fitting.file_hash(all_reduce)
    model = fitting.fit(docs, extra, rl=rl, all_reduce=ar, kernel_data=kernel_data, strict=bool(results))
    if docs and not model.groups and rl is None:
        raise HostgapError(
            "--results", "no (device, engine, TP) group has two usable cells; " + "; ".join(model.skipped[:3])
        )
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
    return FitOutcome(model, report, len(vidur_mlp), *names)


def _check_options(docs, vidur_mlp, device, test_mlp, test_device, all_reduce) -> None:
    """The option combinations ``fit`` refuses, each as the error naming the option."""
    if not docs and not vidur_mlp:
        raise HostgapError(
            "--results", "no measured runs given (pass --results FILE..., --db PATH, --vidur-mlp CSV or --paper-cells)"
        )
    if (test_mlp or test_device) and not vidur_mlp:
        raise HostgapError("--test-mlp" if test_mlp else "--device", "needs --vidur-mlp files to fit on")
    if device and not (vidur_mlp or all_reduce):
        raise HostgapError("--device", "needs --vidur-mlp or --all-reduce files to fit on")
    for flag, given in (("--vidur-mlp", vidur_mlp), ("--all-reduce", all_reduce)):
        if given and not device:  # which GPU measured them is never assumed
            raise HostgapError(
                flag,
                "needs --device: the GPU the kernel times were measured on (vidur names its files a100_*, h100_*)",
            )


def write_model(model: fitting.FittedModel, output: PathArg | None = None) -> PathArg:
    """Write ``model`` to ``output`` (default :func:`default_model_path`, its folder made);
    returns where, as given."""
    path = output or default_model_path()
    if output is None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    fitting.write_model(model, path)
    return path


def _mlp_scores(name: str, device: str, pred, s: roofline.OpSamples, gemm_ops) -> dict:
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


def _name(p: PathArg) -> str:
    return str(p).rsplit("/", 1)[-1]


def fit_kernel_times(
    paths: Sequence[PathArg],
    dev: DeviceSpec,
    test_paths: Sequence[PathArg],
    test_dev: DeviceSpec,
    kernel_data: dict,
    report: dict,
) -> roofline.RooflineModel:
    """Roofline on the files' kernel times (measured on ``dev``; GEMMs one family,
    vidur.as_hostgap_ops). With two files or more each is scored by a fit on the others
    (``report["heldout_files"]``); test files by the fit on all (``report["tests"]``). Adds each
    file's hash to ``kernel_data``."""
    gemm = list(vidur.GEMM_KEYS)
    samples = [vidur.as_hostgap_ops(vidur.read_mlp(p, dev)) for p in paths]
    kernel_data.update({str(p): fitting.file_hash(p) for p in paths})
    if len(samples) > 1:
        for i, held in enumerate(samples):
            m = roofline.fit(_concat([x for j, x in enumerate(samples) if j != i]), dev.name)
            report["heldout_files"].append(
                _mlp_scores(_name(paths[i]), dev.name, roofline.predict(m, held), held, gemm)
            )
    source = f"vidur kernel times {', '.join(map(_name, paths))} measured on {dev.name}"
    rl = roofline.fit(_concat(samples), dev.name, source=source)
    for p in test_paths:
        t = vidur.as_hostgap_ops(vidur.read_mlp(p, test_dev))
        report["tests"].append(_mlp_scores(_name(p), test_dev.name, roofline.predict(rl, t), t, gemm))
    return rl


def _concat(samples: list[roofline.OpSamples]) -> roofline.OpSamples:
    return roofline.OpSamples(
        *(
            np.concatenate([getattr(s, f) for s in samples])
            for f in ("key", "flops", "bytes", "kernels", "peak_flops", "bw_bytes_per_s", "time_ns", "group", "tokens")
        )
    )


def fit_paper(device_file: PathArg | None = None) -> FitOutcome:
    """The default vLLM host term fitted on the shipped published cells (H100, vLLM eager),
    each cell with its default and leave-one-out prediction; the model scored on the cells it
    fits by leave-one-out. ``device_file`` is read (and must be valid) but not used."""
    if device_file:
        load_device_file(device_file)
    host, scale, rows = calibrate.paper_fit()
    fit_rows = [r for r in rows if r.use == "fit"]
    held = roofline.error_metrics(np.array([r.loo for r in fit_rows]), np.array([r.published for r in fit_rows]))
    dev = find_device("h100-sxm")
    group = fitting.GroupModel(
        dev.name, dev.name, "vllm", scale, host, roofline.default_model(dev.name), len(fit_rows), held, held
    )
    model = fitting.FittedModel(
        (group,),
        {
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "data_sha256": fitting.file_hash(calibrate.CELLS_FILE),
            "runs": [],
            "devices": [dev.name],
            "n_cells": len(fit_rows),
            "source": str(calibrate.CELLS_FILE.name),
        },
    )
    report = {"host": host.to_dict(), "device_scale": scale, "cells": [r.to_dict() for r in rows]}
    return FitOutcome(model, report, paper=PaperFit(host, scale, tuple(rows)))
