"""A cell's setup and its predicted step: what every what-if starts from (METHOD.md §7).

:class:`Setup` holds everything a prediction for one cell rests on (architecture, cell, device,
mode, roofline, host model, all-reduce model); :func:`predict` gives the step's device,
collective and host time at the setup's TP form. Every prediction respects two physical floors:
device time is never below the bytes the step must stream (weights actually read, embedding
gathered, plus KV) at the datasheet bandwidth, and :func:`memory_check` says when weights + KV
cache do not fit in one rank's memory. The what-ifs over a cell are :mod:`hostgap.model.whatif`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hostgap.model.accounting import Account, Cell, account, graph_split, scale_launches
from hostgap.model.arch import Arch, dtype_bytes
from hostgap.model.devices import DeviceSpec
from hostgap.model.roofline import RooflineModel, device_time
from hostgap.model.stepmodel import HostModel, StepPrediction, step
from hostgap.model.tp import FORMS, AllReduceModel, default_all_reduce

TP_FORMS = ("overlap", *FORMS)
"""``overlap``: the host model's own TP terms (stepmodel); the others: tp.py's linear forms."""


@dataclass(frozen=True)
class Setup:
    """Everything a prediction for one cell rests on."""

    arch: Arch
    cell: Cell
    device: DeviceSpec
    mode: str  # "eager" | "graph"
    roofline: RooflineModel
    device_scale: float
    host: HostModel
    all_reduce: AllReduceModel | None = None
    tp_form: str = "overlap"
    kernels_per_step: float | None = None  # measured, replaces the launch table's total
    notes: tuple = ()
    capture: str | None = None  # graph mode: CUDA graph capture (None: the engine's default)


def setup_account(s: Setup, cell: Cell | None = None, arch: Arch | None = None) -> Account:
    """The account of ``cell`` (default: the setup's), with the measured kernels per step."""
    return _account(s, cell, arch)


def _account(s: Setup, cell: Cell | None = None, arch: Arch | None = None) -> Account:
    cell = cell or s.cell
    acc = account(arch or s.arch, cell)
    if s.kernels_per_step and arch is None:
        # measured kernels for the baseline cell; other cells keep the measured/table ratio
        base = account(s.arch, s.cell).launches
        acc = scale_launches(acc, s.kernels_per_step * acc.launches / base)
    return acc


def bandwidth_floor_ns(acc: Account, device: DeviceSpec) -> float:
    """Bytes the step must move (weights read, embedding gathered, KV read and written) at the
    datasheet bandwidth: no device time can be shorter."""
    return 1e9 * (acc.weight_bytes + acc.kv_read_bytes + acc.kv_write_bytes) / device.mem_bw_bytes_per_s


def collective_ns(s: Setup, dt, k: int) -> float:
    """All-reduce time of the step's collectives on k ranks (no waiting for other ranks)."""
    if k <= 1:
        return 0.0
    ar = s.all_reduce or default_all_reduce(s.device)
    per_msg = dt.collective_bytes / max(dt.collective_ops, 1)
    return float(dt.collective_ops * ar.time_ns(per_msg, k, s.device))


def overlap_form(s: Setup, cell: Cell, mode: str, host_speed: float) -> StepPrediction:
    """The step at the host model's own TP terms (the ``overlap`` form of :data:`TP_FORMS`):
    device time floored by the bytes streamed, the collectives, the host term at ``host_speed``."""
    acc = _account(s, cell)
    dt = device_time(acc, s.device, s.roofline)
    dev = max(s.device_scale * dt.total_ns, bandwidth_floor_ns(acc, s.device))
    kernels, graphs, nodes = acc.launches, 1.0, 0.0
    if mode != "eager":
        graphs, kernels, _ = graph_split(acc, s.arch.layers, s.capture)
        nodes = acc.launches - kernels
    return step(
        dev, collective_ns(s, dt, cell.tp), kernels, cell.batch, s.host, mode, host_speed, cell.tp, graphs, nodes
    )


def form_totals(s: Setup, cell: Cell | None = None, mode: str | None = None, host_speed: float = 1.0) -> dict:
    """Step total (ns) of ``cell`` under every TP form, from the TP-1 cell's host term."""
    cell, mode = cell or s.cell, mode or s.mode
    pk = overlap_form(s, cell, mode, host_speed)
    p1 = overlap_form(s, replace(cell, tp=1), mode, host_speed)
    k, h1, gk = cell.tp, p1.host_ns, pk.device_ns + pk.collective_ns
    return {
        "overlap": pk.total_ns,
        "additive": gk + h1,
        "compute_comm": p1.total_ns / k + pk.collective_ns,
        "host_over_k": gk + h1 / k,
        "host_times_k": gk + h1 * k,
        "additive_skew": gk + h1,
    }  # its skew term needs TP > 1 measurements to fit: 0 here


def predict(s: Setup, cell: Cell | None = None, mode: str | None = None, host_speed: float = 1.0) -> StepPrediction:
    """One step of ``cell`` (default: the setup's), any TP degree: ``--tp K`` and ``tp=K`` both
    land here. A TP form other than ``overlap`` replaces the host term by the form's."""
    cell, mode = cell or s.cell, mode or s.mode
    pk = overlap_form(s, cell, mode, host_speed)
    if cell.tp == 1 or s.tp_form == "overlap":
        return pk
    total = form_totals(s, cell, mode, host_speed)[s.tp_form]
    gk = pk.device_ns + pk.collective_ns
    return StepPrediction(pk.device_ns, pk.collective_ns, max(total - gk, 0.0), 0.0, pk.kernels, mode, 1)


@dataclass(frozen=True)
class MemoryCheck:
    """Weights + KV cache of one rank against the device's memory, bytes."""

    weights_bytes: float
    kv_bytes: float
    device_bytes: float

    @property
    def fits(self) -> bool:
        return self.weights_bytes + self.kv_bytes <= self.device_bytes

    def message(self, device: str) -> str:
        return (
            f"weights {self.weights_bytes / 1e9:.1f} GB + KV cache {self.kv_bytes / 1e9:.1f} GB per rank "
            f"{'fit in' if self.fits else 'exceed'} {device}'s {self.device_bytes / 1e9:.0f} GB"
        )

    def to_dict(self) -> dict:
        return {
            "weights_bytes": self.weights_bytes,
            "kv_bytes": self.kv_bytes,
            "device_bytes": self.device_bytes,
            "fits": self.fits,
        }


def memory_check(arch: Arch, cell: Cell, device: DeviceSpec) -> MemoryCheck:
    """Stored weights per rank (sharded over TP; W8A8 matmul weights 1 byte, embeddings 16-bit)
    plus the KV cache of ``batch`` sequences at ``context`` tokens."""
    emb = arch.embedding_params() + arch.lm_head_params()
    w = (arch.param_count() - emb) * dtype_bytes(cell.dtype) + emb * dtype_bytes(cell.act_dtype)
    kv_heads_rank = max(1.0, arch.kv_heads / cell.tp)
    kv = cell.batch * cell.context * 2 * kv_heads_rank * arch.head_dim * arch.layers * dtype_bytes(cell.kv_cache_dtype)
    return MemoryCheck(w / cell.tp, kv, device.mem_bytes)
