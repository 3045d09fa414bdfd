"""The default vLLM host term, fitted on the differencing paper's published cells.

The cells (values, settings, sources) live in ``model/paper_cells.json`` (tp.py reads it too). Each
cell is turned once into host-independent *shapes* (device time, collective time, kernel
count, batch, TP degree, mode: everything but the host term), so fitting the five host
parameters (serial, per-sequence, per-rank, dispatch, per-kernel; stepmodel.HostModel) is
plain arithmetic inside a least-squares loop.

- :func:`fit_paper` fits on the ``use=fit`` cells (relative error of every published value);
  ``hostgap fit --paper-cells`` prints it, and ``DEFAULT_HOST["vllm"]`` holds its rounded result.
- :func:`table` gives, for every published value of every cell, the default prediction and
  the leave-one-out prediction (fit cells: refitted without the cell; check and excluded
  cells: the fit never sees them, so both are the same prediction).

The device level comes from the roofline scaled to the ``device_scale_cells``' measured
GPU time; a cell with a measured TP-1 GPU time (``gpu_ms``) uses it for its host term.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from hostgap.errors import HostgapError
from hostgap.model import graphlaunch
from hostgap.model.accounting import Cell, account, graph_split
from hostgap.model.arch import get_preset
from hostgap.model.cell import Setup, bandwidth_floor_ns, collective_ns
from hostgap.model.devices import find_device, launch_floor_ns
from hostgap.model.roofline import default_model, device_time
from hostgap.model.stepmodel import DEFAULT_HOST, HostModel, StepPrediction, step

CELLS_FILE = Path(__file__).parents[1] / "paper_cells.json"
PARAMS = ("serial_ns", "per_seq_ns", "per_rank_ns", "dispatch_ns", "per_kernel_ns")


@dataclass(frozen=True)
class Shape:
    """One step's host-independent parts: raw roofline device time, its floor, collectives."""

    raw_device_ns: float
    floor_ns: float
    collective_ns: float
    kernels: float
    batch: int
    tp: int
    mode: str
    gpu_ns: float | None = None  # measured TP-1 GPU-active: replaces the device model
    graphs: float = 1.0  # graph mode: graph launches per step (kernels: those launched outside)
    nodes: float = 0.0  # graph mode: kernels the graphs replay (graph launch cost by node count)
    node_ns: float = 0.0  # the device's per-node graph-launch cost (graphlaunch.for_device)

    def predict(self, host: HostModel, scale: float) -> StepPrediction:
        dev = self.gpu_ns if self.gpu_ns is not None else max(scale * self.raw_device_ns, self.floor_ns)
        return step(
            dev,
            self.collective_ns,
            self.kernels,
            self.batch,
            replace(host, graph_node_ns=self.node_ns),
            self.mode,
            tp=self.tp,
            graphs=self.graphs,
            graph_nodes=self.nodes,
        )


@dataclass(frozen=True)
class PaperCell:
    id: str
    kind: str  # step | graphs_gain | fp8_speedup | spec_cycle | tp_speedup
    use: str  # fit | check | excluded
    published: dict  # quantity -> value (ms or ratio)
    shapes: tuple  # Shape per state the kind compares (see evaluate)
    setting: dict
    source: str
    note: str = ""
    gamma: int = 4
    preset: str = ""


def _shape(arch, cell: Cell, device, mode: str, gpu_ms=None, capture: str | None = None) -> Shape:
    acc = account(arch, cell)
    dt = device_time(acc, device, default_model(device.name))
    s = Setup(arch, cell, device, mode, default_model(device.name), 1.0, DEFAULT_HOST["vllm"])
    graphs, kernels = (1.0, acc.launches) if mode == "eager" else graph_split(acc, arch.layers, capture)[:2]
    return Shape(
        dt.total_ns,
        bandwidth_floor_ns(acc, device),
        collective_ns(s, dt, cell.tp),
        kernels,
        cell.batch,
        cell.tp,
        mode,
        None if gpu_ms is None else gpu_ms * 1e6,
        graphs,
        acc.launches - kernels if mode != "eager" else 0.0,
        graphlaunch.for_device(device.name).per_node_ns,
    )


def _cell(raw: dict, defaults: dict) -> PaperCell:
    st = {**defaults, **{k: raw[k] for k in defaults if k in raw}}
    arch, dev = get_preset(raw["preset"]), find_device(st["device"])
    base = Cell(batch=st["batch"], context=st["context"], tp=st["tp"], dtype=st["dtype"], engine=st["engine"])
    kind, gamma = raw["kind"], int(raw.get("gamma", 4))
    shapes: tuple[Shape, ...]
    if kind == "step":
        shapes = (_shape(arch, base, dev, st["mode"], raw.get("gpu_ms")),)
    elif kind == "graphs_gain":
        shapes = (_shape(arch, base, dev, "eager"), _shape(arch, base, dev, "graph"))
    elif kind == "fp8_speedup":
        shapes = (_shape(arch, base, dev, st["mode"]), _shape(arch, replace(base, dtype="fp8"), dev, st["mode"]))
    elif kind == "tp_speedup":
        shapes = (_shape(arch, base, dev, st["mode"]), _shape(arch, replace(base, tp=raw["tp_to"]), dev, st["mode"]))
    elif kind == "spec_cycle":  # n-gram drafting: the cycle is one verify step over gamma + 1 tokens
        verify = replace(base, q_tokens=gamma + 1, context=base.context + gamma, logits_kept=base.batch * (gamma + 1))
        shapes = (_shape(arch, verify, dev, st["mode"]),)
    else:
        raise HostgapError(str(CELLS_FILE), f"cell {raw['id']}: unknown kind {kind!r}")
    return PaperCell(
        raw["id"],
        kind,
        raw["use"],
        dict(raw["published"]),
        shapes,
        st,
        raw["source"],
        raw.get("note", ""),
        gamma,
        raw["preset"],
    )


@lru_cache(maxsize=2)
def load_cells(path: str = str(CELLS_FILE)) -> tuple[tuple[PaperCell, ...], tuple[str, ...], str]:
    """The cells, the ids that set the device scale, and the device (all cells' defaults)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise HostgapError(path, f"cannot read the paper cells: {e}") from None
    cells = tuple(_cell(c, doc["defaults"]) for c in doc["cells"])
    return cells, tuple(doc["device_scale_cells"]), doc["defaults"]["device"]


def evaluate(c: PaperCell, host: HostModel, scale: float) -> dict:
    """The model's value of each published quantity of ``c`` (ms or a ratio)."""
    p = [s.predict(host, scale) for s in c.shapes]
    if c.kind == "step":
        return {"wall_ms": p[0].total_ns / 1e6, "host_ms": p[0].host_ns / 1e6}
    if c.kind in ("graphs_gain", "fp8_speedup", "tp_speedup"):
        return {"speedup": p[0].total_ns / p[1].total_ns}
    return {"host_ms": p[0].host_ns / 1e6}  # spec_cycle: one serial host term per cycle


def device_scale(cells, scale_ids) -> float:
    """Measured GPU-active / raw roofline, geometric mean over the scale cells (1 without any)."""
    r = [s.gpu_ns / s.raw_device_ns for c in cells if c.id in scale_ids for s in c.shapes if s.gpu_ns]
    return float(np.exp(np.mean(np.log(r)))) if r else 1.0


def _host(x, floor_ns: float, source: str) -> HostModel:
    base = DEFAULT_HOST["vllm"]
    kw = dict(zip(PARAMS, (float(v) for v in x)))
    return replace(base, **kw, launch_floor_ns=min(floor_ns, kw["per_kernel_ns"]), source=source)


_UNIT = np.array([1e5, 1e3, 1e5, 1e6, 1e4])  # ns per unit of the fitted variables (well scaled)


def fit_paper(cells, scale: float, floor_ns: float) -> HostModel:
    """Least squares on the relative error of every published value of the ``use=fit`` cells."""
    fit_cells = [c for c in cells if c.use == "fit"]
    obs = [(c, q, v) for c in fit_cells for q, v in c.published.items()]

    def resid(x):
        h = _host(x * _UNIT, floor_ns, "")
        out = []
        for c in fit_cells:
            pred = evaluate(c, h, scale)
            out += [(pred[q] - v) / v for cc, q, v in obs if cc is c]
        return np.array(out)

    best = None
    for x0 in ([2, 5, 2, 2, 3], [5, 1, 5, 0.5, 2], [1, 10, 1, 4, 1]):
        r = least_squares(resid, np.array(x0, float), bounds=(0, [1e3, 1e3, 1e3, 1e3, 1e3]))
        best = r if best is None or r.cost < best.cost else best
    assert best is not None  # the three starts above each gave a result
    return _host(best.x * _UNIT, floor_ns, f"fitted on {len(fit_cells)} published cells ({len(obs)} values)")


@dataclass(frozen=True)
class Row:
    cell: str
    quantity: str
    use: str
    published: float
    default: float
    loo: float

    @property
    def error(self) -> float:
        return (self.default - self.published) / self.published

    @property
    def loo_error(self) -> float:
        return (self.loo - self.published) / self.published

    def to_dict(self) -> dict:
        return {
            "cell": self.cell,
            "quantity": self.quantity,
            "use": self.use,
            "published": self.published,
            "default": self.default,
            "leave_one_out": self.loo,
            "error": self.error,
            "loo_error": self.loo_error,
        }


def paper_fit(path: str = str(CELLS_FILE)) -> tuple[HostModel, float, list[Row]]:
    """Fit on the cells, then the table: every published value, default and held-out prediction."""
    cells, scale_ids, device = load_cells(path)
    floor, _ = launch_floor_ns(find_device(device))
    scale = device_scale(cells, scale_ids)
    host = fit_paper(cells, scale, floor)
    rows = []
    for c in cells:
        pred = evaluate(c, host, scale)
        held = pred
        if c.use == "fit":
            rest = [x for x in cells if x is not c]
            s_i = device_scale(rest, scale_ids)
            held = evaluate(c, fit_paper(rest, s_i, floor), s_i)
        rows += [Row(c.id, q, c.use, v, pred[q], held[q]) for q, v in c.published.items()]
    return host, scale, rows


def regime_cells() -> list:
    """The published step cells whose host fraction is known (host and wall, or host and GPU)."""
    from hostgap.anatomy.verdict import classify
    from hostgap.model.fitting.measured import RegimeCell

    out = []
    for c in load_cells()[0]:
        p, sh = c.published, c.shapes[0]
        if c.kind != "step" or "host_ms" not in p or not ("wall_ms" in p or sh.gpu_ns):
            continue
        wall = p.get("wall_ms") or p["host_ms"] + sh.gpu_ns / 1e6
        f = p["host_ms"] / wall
        st = c.setting
        out.append(
            RegimeCell(
                c.preset,
                st["device"],
                st["engine"],
                st["mode"],
                st["batch"],
                st["context"],
                f,
                classify(f),
                f"published:{c.id}",
                st["context"],
                st["tp"],
                st["dtype"],
            )
        )
    return out


__all__ = [
    "regime_cells",
    "CELLS_FILE",
    "PARAMS",
    "PaperCell",
    "Row",
    "device_scale",
    "evaluate",
    "fit_paper",
    "load_cells",
    "paper_fit",
]
