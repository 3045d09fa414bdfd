"""Measured cells in, a fitted step model out (JSON with provenance), and back.

A **cell** is one measured configuration (preset, batch, prompt, engine, mode, device) from a
``hostgap measure`` results JSON. Missing keys are unknown, never guessed. Per (device, engine)
group the fit yields:

- a device scale: measured GPU-active per step over the roofline's prediction (geometric
  mean), so per-op efficiencies (from per-op data such as vidur, or the defaults) keep their
  shape and step data set the level;
- the host parts of :class:`hostgap.model.stepmodel.HostModel`.

Held-out error is leave-one-out over cells: each cell's step time is predicted (device time
from the roofline x scale, host from the host model) by a fit on the other cells.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.accounting import Cell, account
from hostgap.model.arch import Arch, get_preset
from hostgap.model.devices import DeviceSpec, find_device, launch_floor_ns
from hostgap.model.roofline import Metrics, RooflineModel, default_model, device_time, error_metrics
from hostgap.model.stepmodel import DEFAULT_HOST, HostModel, HostSamples, fit_host, for_device, predict_host
from hostgap.model.tp import AllReduceModel
from hostgap.version import SCHEMA_VERSION, __version__

MODEL_KIND = "hostgap.step_model"


def _num(d: dict | None, key: str) -> float:
    v = (d or {}).get(key)
    try:
        return float(v) if v is not None else float("nan")
    except (TypeError, ValueError):
        return float("nan")


@dataclass(frozen=True)
class MeasuredCell:
    """The fields of one results JSON the models use (NaN / None: unknown)."""

    run_id: str
    preset: str | None
    arch: Arch | None
    device: str | None
    device_name: str | None
    engine: str | None
    mode: str | None
    batch: int | None
    prompt_len: int | None
    dtype: str | None
    n1: int | None
    n2: int | None
    t_step_ns: float
    g_step_ns: float
    h_step_ns: float
    k_step: float
    host_fraction: float
    hdbi: float
    verdict: str | None
    source: str = ""
    orch_per_kernel_ns: float = float("nan")  # TaxBreak orchestration / launches, per step
    launch_floor_ns: float = float("nan")
    tp: int = 1  # `hostgap measure` runs one GPU: a results file without "tp" is TP 1

    @property
    def context(self) -> int | None:
        """Mean KV length over the differenced decode steps: prompt + (N1 + N2 - 1) / 2."""
        if self.prompt_len is None:
            return None
        n1, n2 = self.n1 or 1, self.n2 or 1
        return int(round(self.prompt_len + (n1 + n2 - 1) / 2))

    @property
    def missing(self) -> list[str]:
        """The keys a fit needs that this run lacks (or holds as non-positive / non-numbers)."""
        out = [] if self.arch is not None else ["arch (or a known preset)"]
        out += [] if self.batch is not None else ["batch"]
        for key, v in (("t_step_ns", self.t_step_ns), ("g_step_ns", self.g_step_ns), ("k_step", self.k_step)):
            if not (math.isfinite(v) and v > 0):
                out.append(f"differencing.{key}")
        return out

    @property
    def usable(self) -> bool:
        return not self.missing


def _arch(doc: dict) -> Arch | None:
    a = doc.get("arch")
    if isinstance(a, dict):
        try:
            return Arch(**{k: a[k] for k in Arch.__dataclass_fields__ if k in a})
        except TypeError:
            pass
    if doc.get("preset"):
        try:
            return get_preset(doc["preset"])
        except HostgapError:
            return None
    return None


def _int(v) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def cell_from_results(doc: dict, source: str = "") -> MeasuredCell:
    d, v = doc.get("differencing") or {}, doc.get("verdict") or {}
    hf = _num(d, "host_fraction")
    if not math.isfinite(hf):
        hf = _num(v, "host_fraction")
    hdbi = _num(doc.get("taxbreak"), "hdbi")
    if not math.isfinite(hdbi):
        hdbi = _num(v, "hdbi")
    tb = doc.get("taxbreak") or {}
    steps = doc.get("steps_decode")
    n_steps = len(steps) if isinstance(steps, list) else _int(steps)
    orch = _num(tb, "orchestrate_ns")
    kps = _num(tb, "kernels_per_step")
    per_kernel = orch / (n_steps * kps) if n_steps and math.isfinite(orch) and kps > 0 else float("nan")
    return MeasuredCell(
        str(doc.get("run_id", source)),
        doc.get("preset"),
        _arch(doc),
        doc.get("device"),
        doc.get("device_name"),
        doc.get("engine"),
        doc.get("mode"),
        _int(doc.get("batch")),
        _int(doc.get("prompt_len")),
        doc.get("dtype"),
        _int(doc.get("n1")),
        _int(doc.get("n2")),
        _num(d, "t_step_ns"),
        _num(d, "g_step_ns"),
        _num(d, "h_step_ns"),
        _num(d, "k_step"),
        hf,
        hdbi,
        v.get("verdict"),
        source,
        per_kernel,
        _num(tb, "launch_floor_ns"),
        _int(doc.get("tp")) or 1,
    )


def load_results(paths=(), db: str | None = None) -> list[dict]:
    """Results JSON documents from files and/or the runs database (when available)."""
    docs = []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
        except OSError as e:
            raise HostgapError(str(p), f"cannot read: {e.strerror}") from None
        except ValueError as e:
            raise HostgapError(str(p), f"not valid JSON: {e}") from None
        items = doc if isinstance(doc, list) else [doc]
        for item in items:
            if not isinstance(item, dict):
                raise HostgapError(str(p), "expected a results JSON object (or a list of them)")
            item.setdefault("run_id", str(p))
            docs.append(item)
    if db is not None:
        try:
            from hostgap.store.database import RunsDB
        except ImportError:
            raise HostgapError(
                "--db", "the runs database is not available in this build; pass --results FILE"
            ) from None
        if str(db) != ":memory:" and not Path(db).is_file():
            raise HostgapError(str(db), "no runs database there (run `hostgap measure` first, or pass --results FILE)")
        try:
            docs.extend(RunsDB(db).results())
        except HostgapError:
            raise
        except Exception as e:  # the store's own failure, reported as one line
            raise HostgapError(str(db), f"cannot read runs database: {e}") from None
    return docs


def default_db() -> str | None:
    """The runs database's default location when it exists (and the store is installed)."""
    try:
        from hostgap.store.database import default_path
    except ImportError:
        return None
    p = default_path()
    return str(p) if p.is_file() else None


def device_for(cell: MeasuredCell, extra: dict | None = None) -> DeviceSpec:
    if cell.device == "cpu" and not cell.device_name:
        return find_device("cpu", extra)
    try:
        return find_device(cell.device_name or cell.device or "cpu", extra)
    except HostgapError:
        if cell.device == "cpu":
            return find_device("cpu", extra)
        raise


def roofline_ns(arch: Arch, cell: Cell, device: DeviceSpec, rl: RooflineModel) -> float:
    return device_time(account(arch, cell), device, rl).total_ns


def _model_cell(c: MeasuredCell) -> Cell:
    engine = c.engine if c.engine in DEFAULT_HOST else "vllm"
    dtype = c.dtype if c.dtype in ("bfloat16", "float16", "float32", "fp8", "int8") else "bfloat16"
    # models are fitted on usable cells only: batch (and arch) known
    return Cell(
        batch=cast(int, c.batch), q_tokens=1, context=max(c.context or 1, 1), tp=c.tp, dtype=dtype, engine=engine
    )


@dataclass(frozen=True)
class GroupModel:
    """The fitted step model of one (device, engine)."""

    device: str
    device_name: str
    engine: str
    device_scale: float
    host: HostModel
    roofline: RooflineModel
    n_cells: int
    heldout: Metrics
    heldout_host_only: Metrics
    tp: int = 1

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "device_name": self.device_name,
            "engine": self.engine,
            "tp": self.tp,
            "device_scale": self.device_scale,
            "host": self.host.to_dict(),
            "roofline": self.roofline.to_dict(),
            "n_cells": self.n_cells,
            "heldout": self.heldout.to_dict(),
            "heldout_host_only": self.heldout_host_only.to_dict(),
        }

    @staticmethod
    def from_dict(d: dict) -> GroupModel:
        return GroupModel(
            d["device"],
            d.get("device_name", d["device"]),
            d["engine"],
            float(d["device_scale"]),
            HostModel.from_dict(d["host"]),
            RooflineModel.from_dict(d["roofline"]),
            int(d["n_cells"]),
            Metrics(**d["heldout"]),
            Metrics(**d["heldout_host_only"]),
            int(d.get("tp", 1)),
        )


def _samples(cells: list[MeasuredCell]) -> HostSamples:
    return HostSamples(
        np.array([c.t_step_ns for c in cells]),
        np.array([c.g_step_ns for c in cells]),
        np.array([c.k_step for c in cells]),
        np.array([float(cast(int, c.batch)) for c in cells]),  # usable cells: batch known
        np.array([c.mode == "graph" for c in cells]),
    )


def _measured_median(cells, attr) -> float | None:
    v = [getattr(c, attr) for c in cells if math.isfinite(getattr(c, attr)) and getattr(c, attr) > 0]
    return float(np.median(v)) if v else None


def _fit_group(cells, device, rl, base) -> tuple[float, HostModel]:
    raw = np.array([roofline_ns(c.arch, _model_cell(c), device, rl) for c in cells])
    g = np.array([c.g_step_ns for c in cells])
    scale = float(np.exp(np.mean(np.log(g / raw))))
    return scale, fit_host(
        _samples(cells),
        base,
        launch_floor_ns=_measured_median(cells, "launch_floor_ns"),
        per_kernel_ns=_measured_median(cells, "orch_per_kernel_ns"),
    )


def fit_group(cells: list[MeasuredCell], device: DeviceSpec, rl: RooflineModel | None = None) -> GroupModel:
    """Fit one (device, engine) group; held-out error by leave-one-out over cells."""
    rl = rl or default_model(device.name)
    engine = cells[0].engine if cells[0].engine in DEFAULT_HOST else "vllm"
    base = for_device(DEFAULT_HOST[engine], launch_floor_ns(device)[0], device.name)
    scale, host = _fit_group(cells, device, rl, base)
    n = len(cells)
    pred_full, pred_host = [], []
    if n >= 3:
        for i in range(n):
            rest = cells[:i] + cells[i + 1 :]
            s_i, h_i = _fit_group(rest, device, rl, base)
            c = cells[i]
            one = _samples([c])
            pred_host.append(predict_host(h_i, one)[0])
            dev = s_i * roofline_ns(cast(Arch, c.arch), _model_cell(c), device, rl)  # usable: arch known
            pred_full.append(
                predict_host(h_i, HostSamples(one.t_step_ns, np.array([dev]), one.k_step, one.batch, one.graph))[0]
            )
    meas = np.array([c.t_step_ns for c in cells]) if n >= 3 else np.array([])
    return GroupModel(
        device.name,
        cells[0].device_name or device.name,
        engine,
        scale,
        host,
        rl,
        n,
        error_metrics(np.array(pred_full), meas),
        error_metrics(np.array(pred_host), meas),
        cells[0].tp,
    )


@dataclass(frozen=True)
class FittedModel:
    groups: tuple
    provenance: dict
    all_reduce: AllReduceModel | None = None
    tp_form: str = "overlap"
    skipped: tuple = field(default=())
    rooflines: tuple = field(default=())  # per-op fits (e.g. from vidur kernel times), by device

    def roofline_for(self, device: str) -> RooflineModel | None:
        for r in self.rooflines:
            if r.device == device:
                return r
        return None

    def group_for(self, device: str, engine: str, tp: int = 1) -> GroupModel | None:
        """The group fitted on runs like this cell: same device, engine and TP degree."""
        for g in self.groups:
            if g.device == device and g.engine == engine and g.tp == tp:
                return g
        return None

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": MODEL_KIND,
            "provenance": self.provenance,
            "tp_form": self.tp_form,
            "groups": [g.to_dict() for g in self.groups],
            "all_reduce": self.all_reduce.to_dict() if self.all_reduce else None,
            "rooflines": [r.to_dict() for r in self.rooflines],
            "skipped": list(self.skipped),
        }


def file_hash(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def data_hash(docs: list[dict], kernel_data: dict | None = None) -> str:
    """sha256 of the inputs: runs in canonical JSON (sorted keys, order ignored) and the
    sha256 of each kernel-time file."""
    items = sorted(json.dumps(d, sort_keys=True, default=str) for d in docs)
    items += sorted((kernel_data or {}).values())
    return hashlib.sha256("\n".join(items).encode()).hexdigest()


def _versions() -> dict:
    import scipy

    return {
        "hostgap": __version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "platform": platform.platform(),
    }


def fit(
    docs: list[dict],
    extra_devices: dict | None = None,
    rl: RooflineModel | None = None,
    all_reduce: AllReduceModel | None = None,
    tp_form: str = "overlap",
    kernel_data: dict | None = None,
    strict: bool = False,
) -> FittedModel:
    """Fit every (device, engine, TP degree) group with enough usable cells (>= 2).

    ``rl``: per-op efficiencies fitted on kernel times of one device; groups on that device
    use them (their step data then set only the scale), others the defaults. ``strict``: a
    run lacking a key the fit needs is an error naming the key (files given by the user);
    otherwise it is skipped with the key named (runs from the database).
    """
    cells = [cell_from_results(d, str(d.get("run_id", ""))) for d in docs]
    if strict:
        for c in cells:
            if c.missing:
                raise HostgapError(c.run_id, f"cannot fit on this run: missing {', '.join(c.missing)}")
    usable = [c for c in cells if c.usable]
    skipped = [f"{c.run_id}: missing {', '.join(c.missing)}" for c in cells if not c.usable]
    groups: dict[tuple, list] = {}
    for c in usable:
        dev = device_for(c, extra_devices)
        groups.setdefault((dev.name, c.engine if c.engine in DEFAULT_HOST else "vllm", c.tp), []).append((dev, c))
    fitted = []
    for (dname, engine, k), members in sorted(groups.items()):
        if len(members) < 2:
            skipped.append(f"{dname}/{engine}/TP-{k}: only one cell, nothing to fit")
            continue
        dev = members[0][0]
        model_rl = rl if rl is not None and rl.device == dev.name else default_model(dev.name)
        fitted.append(fit_group([c for _, c in members], dev, model_rl))
    prov: dict[str, Any] = {
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": _versions(),
        "data_sha256": data_hash(docs, kernel_data),
        "runs": [c.run_id for c in cells],
        "devices": sorted({g.device_name for g in fitted} | {g.device for g in fitted}),
        "n_cells": len(usable),
    }
    if kernel_data:
        prov["kernel_data_sha256"] = dict(kernel_data)
    if rl is not None:
        prov["devices"] = sorted(set(prov["devices"]) | {rl.device})
    return FittedModel(tuple(fitted), prov, all_reduce, tp_form, tuple(skipped), (rl,) if rl is not None else ())


def write_model(model: FittedModel, path: str | Path) -> None:
    """Write atomically (temp file + rename): an existing model survives a failure."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent if str(p.parent) else ".", prefix=".hostgap-model-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(model.to_dict(), f, indent=2, default=float)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_model(path: str | Path) -> FittedModel:
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise HostgapError(str(p), f"cannot read model: {e.strerror}") from None
    except ValueError as e:
        raise HostgapError(str(p), f"not valid JSON: {e}") from None
    if not isinstance(d, dict) or d.get("kind") != MODEL_KIND:
        raise HostgapError(str(p), f"not a hostgap step model (kind != {MODEL_KIND!r})")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise HostgapError(
            str(p), f"schema_version {d.get('schema_version')} != {SCHEMA_VERSION}; refit with this hostgap"
        )
    try:
        groups = tuple(GroupModel.from_dict(g) for g in d["groups"])
        ar = AllReduceModel.from_dict(d["all_reduce"]) if d.get("all_reduce") else None
        rls = tuple(RooflineModel.from_dict(r) for r in d.get("rooflines", ()))
    except (KeyError, TypeError, ValueError) as e:
        raise HostgapError(str(p), f"malformed model: {e}") from None
    return FittedModel(
        groups, d.get("provenance", {}), ar, d.get("tp_form", "overlap"), tuple(d.get("skipped", ())), rls
    )


# -- regime map ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RegimeCell:
    model: str
    device: str
    engine: str
    mode: str
    batch: int
    prompt_len: int
    host_fraction: float
    regime: str | None
    run_id: str
    context: int | None = None  # mean KV length of the differenced steps
    tp: int = 1
    dtype: str = "bfloat16"
    predicted_host_fraction: float = float("nan")  # `regimes --predict`: the model's, same cell
    predicted_regime: str | None = None


@dataclass(frozen=True)
class Boundary:
    """Where the host fraction crosses the host-bound threshold along one axis."""

    model: str
    axis: str  # "batch" (at fixed prompt_len) or "prompt_len" (at fixed batch)
    fixed: int
    crossing: float | None  # interpolated in log2 of the axis; None: no crossing
    note: str


def tp_label(k: int) -> str:
    """``", TP-k"`` for k > 1: cells of another TP degree are another setting."""
    return f", TP-{k}" if k > 1 else ""


def regime_cells(docs: list[dict]) -> list[RegimeCell]:
    """One classified cell per results JSON with a known host fraction (shared thresholds)."""
    from hostgap.anatomy.verdict import classify

    out = []
    for d in docs:
        c = cell_from_results(d, str(d.get("run_id", "")))
        if not math.isfinite(c.host_fraction) or c.batch is None or c.prompt_len is None:
            continue
        model = c.preset or (c.arch.name if c.arch else "?")
        out.append(
            RegimeCell(
                model,
                c.device_name or c.device or "?",
                c.engine or "?",
                c.mode or "?",
                c.batch,
                c.prompt_len,
                c.host_fraction,
                classify(c.host_fraction),
                c.run_id,
                c.context,
                c.tp,
                c.dtype or "bfloat16",
            )
        )
    return out


def _crossing(xs, fs, threshold) -> float | None:
    for (x0, f0), (x1, f1) in zip(zip(xs, fs), zip(xs[1:], fs[1:])):
        if (f0 - threshold) * (f1 - threshold) <= 0 and f0 != f1:
            l0, l1 = math.log2(x0), math.log2(x1)
            return 2 ** (l0 + (threshold - f0) * (l1 - l0) / (f1 - f0))
    return None


def boundaries(cells: list[RegimeCell]) -> list[Boundary]:
    """Per model and setting: the batch (at each prompt length) and prompt length (at each
    batch) where the host fraction crosses HOST_BOUND_MIN, interpolated linearly in log2
    between cells (repeats of a cell averaged)."""
    from hostgap.anatomy.verdict import HOST_BOUND_MIN as T

    out = []
    by_model: dict[str, list] = {}
    for c in cells:  # one boundary per model and setting (device, engine, mode)
        by_model.setdefault(f"{c.model} ({c.device}, {c.engine} {c.mode}{tp_label(c.tp)})", []).append(c)
    for model, cs in sorted(by_model.items()):
        for axis, fixed_attr in (("batch", "prompt_len"), ("prompt_len", "batch")):
            for fixed in sorted({getattr(c, fixed_attr) for c in cs}):
                line: dict[int, list[float]] = {}
                for c in cs:
                    if getattr(c, fixed_attr) == fixed:
                        line.setdefault(getattr(c, axis), []).append(c.host_fraction)
                if len(line) < 2:
                    continue
                xs = sorted(line)
                fs = [float(np.mean(line[x])) for x in xs]
                x = _crossing(xs, fs, T)
                if x is not None:
                    note = f"host fraction crosses {T} at {axis} ~ {x:.3g} ({fixed_attr} {fixed})"
                elif min(fs) >= T:
                    note = f"host-bound at every {axis} measured ({xs[0]}-{xs[-1]}, {fixed_attr} {fixed})"
                else:
                    note = f"below {T} at every {axis} measured ({xs[0]}-{xs[-1]}, {fixed_attr} {fixed})"
                out.append(Boundary(model, axis, fixed, x, note))
    return out
