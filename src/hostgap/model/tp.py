"""Tensor parallelism: all-reduce cost and the forms a step's host term may take vs TP degree.

All-reduce (fitted from vidur's A100 DGX measurements): per worker count k,
``t = alpha_k + size_bytes / bw_k`` — a fixed latency and an effective bandwidth. A degree not
measured takes the nearest measured one; another device scales the bandwidth term by the
ratio of interconnect bandwidths (an assumption, stated wherever it is used).

Step-latency forms vs TP degree k (METHOD.md §7). With D_k the per-rank compute time, C_k the
collectives' time, D_1 the TP-1 compute time and h, s fitted parameters:

===================  ===================================  ========================================
form                 step time                            reading
===================  ===================================  ========================================
``additive``         D_k + C_k + h                        the host term does not depend on k
``compute_comm``     (D_1 + h) / k + C_k                  the whole TP-1 step divides by k
``host_over_k``      D_k + C_k + h / k                    host work splits over ranks
``host_times_k``     D_k + C_k + h k                      one host serialises k ranks
``additive_skew``    D_k + C_k + h + s (k - 1)            k-invariant host term plus a per-extra-
                                                          rank skew/sync cost (hostgap's choice:
                                                          the slowest rank's lag shows up in the
                                                          all-reduce wait)
===================  ===================================  ========================================

Every form is linear in its parameters: fitting is weighted least squares on relative error.
No multi-GPU step data exists on hostgap's machines: the machinery is validated on synthetic
data with a known winning form, and each form is checked against the differencing paper's
published TP cells (:func:`paper_reference_check`). Held-out validation on real TP runs is
pending.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hostgap.model.accounting import Cell, account
from hostgap.model.arch import Arch, get_preset
from hostgap.model.devices import DeviceSpec, find_device
from hostgap.model.roofline import Metrics, RooflineModel, default_model, device_time, error_metrics

FORMS = ("additive", "compute_comm", "host_over_k", "host_times_k", "additive_skew")


# -- all-reduce ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AllReduceModel:
    """Per worker count: latency (ns) and effective bandwidth (bytes/s), on ``device``."""

    device: str
    latency_ns: dict  # k -> ns
    bw_bytes_per_s: dict  # k -> bytes/s of message size
    interconnect_bw_bytes_per_s: float
    source: str = ""

    def time_ns(self, size_bytes, k: int, device: DeviceSpec | None = None) -> np.ndarray:
        """All-reduce time of a ``size_bytes`` message over k ranks (0 for k = 1)."""
        size = np.asarray(size_bytes, float)
        if k <= 1:
            return np.zeros_like(size)
        keys = np.array(sorted(int(x) for x in self.latency_ns))
        kk = int(keys[np.argmin(np.abs(keys - k))])
        scale = 1.0 if device is None else device.interconnect_bw_bytes_per_s / self.interconnect_bw_bytes_per_s
        return self.latency_ns[kk] + 1e9 * size / (self.bw_bytes_per_s[kk] * scale)

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "source": self.source,
            "interconnect_bw_bytes_per_s": self.interconnect_bw_bytes_per_s,
            "latency_ns": {str(k): v for k, v in self.latency_ns.items()},
            "bw_bytes_per_s": {str(k): v for k, v in self.bw_bytes_per_s.items()},
        }

    @staticmethod
    def from_dict(d: dict) -> AllReduceModel:
        return AllReduceModel(
            d["device"],
            {int(k): v for k, v in d["latency_ns"].items()},
            {int(k): v for k, v in d["bw_bytes_per_s"].items()},
            d["interconnect_bw_bytes_per_s"],
            d.get("source", ""),
        )


def fit_all_reduce(samples, device: DeviceSpec, single_node: bool = True) -> AllReduceModel:
    """Weighted least squares (relative error) of t = a + size / bw per worker count.

    ``samples``: :class:`hostgap.model.vidur.AllReduceSamples`. ``single_node`` keeps the
    rows where all workers share one node (NVLink), the TP case.
    """
    lat, bw = {}, {}
    for k in np.unique(samples.workers):
        m = samples.workers == k
        if single_node:
            m &= samples.devices_per_node == k
        if m.sum() < 2:
            continue
        a, b = _fit_affine(samples.size_bytes[m], samples.time_ns[m])
        lat[int(k)], bw[int(k)] = a, 1e9 / b  # b: ns per byte
    return AllReduceModel(
        device.name,
        lat,
        bw,
        device.interconnect_bw_bytes_per_s,
        "fitted on vidur a100_dgx all_reduce (median times, single node)",
    )


def _fit_affine(x, y):
    w = 1.0 / y
    A = np.column_stack([np.ones_like(x), x]) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, y * w, rcond=None)
    return max(float(a), 0.0), max(float(b), 1e-15)


def evaluate_all_reduce(model: AllReduceModel, samples, single_node: bool = True) -> dict:
    out = {}
    for k in sorted(model.latency_ns):
        m = samples.workers == k
        if single_node:
            m &= samples.devices_per_node == k
        out[k] = error_metrics(model.time_ns(samples.size_bytes[m], k), samples.time_ns[m])
    return out


def default_all_reduce(device: DeviceSpec) -> AllReduceModel:
    """Without a fit: 10 us latency, half the interconnect bandwidth x k / (2 (k - 1))."""
    lat = {k: 10_000.0 for k in (2, 4, 8)}
    bw = {k: 0.5 * device.interconnect_bw_bytes_per_s * k / (2 * (k - 1)) for k in (2, 4, 8)}
    return AllReduceModel(
        device.name,
        lat,
        bw,
        device.interconnect_bw_bytes_per_s,
        "default: 10 us + ring all-reduce at 50 % of interconnect bandwidth",
    )


# -- forms --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TPCell:
    """One (model, TP degree) cell: predicted device parts and, when known, measured wall."""

    k: int
    device_ns: float  # D_k: per-rank compute
    comm_ns: float  # C_k
    device1_ns: float  # D_1 of the same model
    wall_ns: float = float("nan")
    label: str = ""


def _design(form: str, cells: list[TPCell]) -> tuple[np.ndarray, np.ndarray]:
    k = np.array([c.k for c in cells], float)
    D = np.array([c.device_ns for c in cells])
    C = np.array([c.comm_ns for c in cells])
    D1 = np.array([c.device1_ns for c in cells])
    if form == "additive":
        return D + C, np.ones((len(k), 1))
    if form == "compute_comm":
        return D1 / k + C, (1.0 / k)[:, None]
    if form == "host_over_k":
        return D + C, (1.0 / k)[:, None]
    if form == "host_times_k":
        return D + C, k[:, None]
    if form == "additive_skew":
        return D + C, np.column_stack([np.ones_like(k), k - 1])
    raise ValueError(f"unknown TP form {form!r}; known: {', '.join(FORMS)}")


@dataclass(frozen=True)
class TPFormFit:
    form: str
    params: tuple  # h (and s for additive_skew), ns

    def predict(self, cells: list[TPCell]) -> np.ndarray:
        base, X = _design(self.form, cells)
        return base + X @ np.array(self.params)

    def to_dict(self) -> dict:
        return {"form": self.form, "params_ns": list(self.params)}


def fit_form(form: str, cells: list[TPCell]) -> TPFormFit:
    """Least squares on relative error; parameters are host times, kept >= 0."""
    base, X = _design(form, cells)
    y = np.array([c.wall_ns for c in cells])
    w = 1.0 / y
    p, *_ = np.linalg.lstsq(X * w[:, None], (y - base) * w, rcond=None)
    return TPFormFit(form, tuple(float(max(v, 0.0)) for v in p))


def compare_forms(fit_cells: list[TPCell], test_cells: list[TPCell]) -> dict[str, Metrics]:
    """Held-out error of every form fitted on ``fit_cells`` and scored on ``test_cells``."""
    y = np.array([c.wall_ns for c in test_cells])
    return {f: error_metrics(fit_form(f, fit_cells).predict(test_cells), y) for f in FORMS}


def synthetic_cells(
    form: str,
    params: tuple,
    ks=(1, 2, 4, 8),
    models=((6e6, 1.5e6), (30e6, 3e6), (12e6, 2e6)),
    noise: float = 0.02,
    seed: int = 0,
) -> list[TPCell]:
    """Cells generated from a known form: per model (D_1 ns, fixed per-kernel latency ns).

    The fixed per-kernel latency (t_min x kernels) does not split over ranks, so
    D_k = (D_1 - fixed) / k + fixed; C_k grows with log2 k.
    """
    rng = np.random.default_rng(seed)
    cells = []
    for mi, (d1, floor) in enumerate(models):
        for k in ks:
            dk = (d1 - floor) / k + floor
            ck = 0.0 if k == 1 else 3e4 + 2e4 * np.log2(k)
            cells.append(TPCell(k, dk, ck, d1, 0.0, f"m{mi}-tp{k}"))
    true = TPFormFit(form, tuple(params)).predict(cells)
    noisy = true * (1 + noise * rng.standard_normal(len(true)))
    return [TPCell(c.k, c.device_ns, c.comm_ns, c.device1_ns, float(t), c.label) for c, t in zip(cells, noisy)]


# -- the paper's published TP cells -------------------------------------------------------

LLAMA_31_70B = get_preset("llama-3.1-70b")


def _paper_values() -> dict:
    """The published TP values, from the one data file of published cells (paper_cells.json)."""
    import json
    from pathlib import Path

    cells = {c["id"]: c for c in json.loads(Path(__file__).with_name("paper_cells.json").read_text())["cells"]}
    return {
        "8b_tp1": dict(wall_ms=cells["8b_b1"]["published"]["wall_ms"], gpu_ms=cells["8b_b1"]["gpu_ms"]),
        "8b_tp2": dict(wall_ms=cells["8b_tp2"]["published"]["wall_ms"], gpu_ms=cells["8b_tp2"]["gpu_active_ms"]),
        "70b_tp2_over_tp4": cells["70b_tp2_over_tp4"]["published"]["speedup"],
    }


PAPER_CELLS = _paper_values()


def _cells_for(
    arch: Arch, ks, device: DeviceSpec, rl: RooflineModel, ar: AllReduceModel, scale: float, context: int = 2048
) -> list[TPCell]:
    """One TPCell per degree in ``ks`` (which starts at 1: D_1 comes from it)."""
    out: list[TPCell] = []
    for k in ks:
        acc = account(arch, Cell(batch=1, q_tokens=1, context=context, tp=k, engine="vllm"))
        dt = device_time(acc, device, rl)
        comm = float(dt.collective_ops * ar.time_ns(dt.collective_bytes / max(dt.collective_ops, 1), k, device))
        dk = scale * dt.total_ns
        out.append(TPCell(k, dk, comm, out[0].device_ns if out else dk, label=f"{arch.name}-tp{k}"))
    return out


@dataclass(frozen=True)
class PaperCheck:
    form: str
    tp2_wall_pred_ms: float
    tp2_wall_error: float  # relative, vs 15.9 ms
    ratio_70b_pred: float  # t(TP-2) / t(TP-4)
    ratio_70b_error: float  # relative, vs 1.11

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def paper_reference_check(ar: AllReduceModel | None = None, rl: RooflineModel | None = None) -> dict:
    """How each form fares on the paper's TP cells (H100, vLLM eager, batch 1, ctx 2048).

    1. Fit on Llama-3.1-8B TP-1 (wall 12.19 ms, GPU 6.41 ms), predict the TP-2 wall (15.9 ms).
    2. Fit on 8B TP-1 and TP-2, predict the 70B TP-2 -> TP-4 decode speed-up (1.11x).
    Device time: the roofline scaled so 8B TP-1 matches the measured 6.41 ms; all-reduce:
    ``ar`` (vidur A100 fit, bandwidth scaled by H100/A100 NVLink) or the default.
    """
    dev = find_device("h100-sxm")
    rl = rl or default_model(dev.name)
    ar = ar or default_all_reduce(dev)
    arch8 = get_preset("llama-3.1-8b")
    raw1 = device_time(account(arch8, Cell(batch=1, context=2048, engine="vllm")), dev, rl).total_ns
    scale = PAPER_CELLS["8b_tp1"]["gpu_ms"] * 1e6 / raw1
    c8 = _cells_for(arch8, (1, 2), dev, rl, ar, scale)
    c8[0] = TPCell(1, c8[0].device_ns, 0.0, c8[0].device1_ns, PAPER_CELLS["8b_tp1"]["wall_ms"] * 1e6, c8[0].label)
    c8[1] = TPCell(
        2, c8[1].device_ns, c8[1].comm_ns, c8[1].device1_ns, PAPER_CELLS["8b_tp2"]["wall_ms"] * 1e6, c8[1].label
    )
    c70 = _cells_for(LLAMA_31_70B, (1, 2, 4), dev, rl, ar, scale)[1:]
    rows = []
    for f in FORMS:
        fit1 = fit_form(f, c8[:1])
        p2 = float(fit1.predict(c8[1:2])[0])
        fit2 = fit_form(f, c8)
        t70 = fit2.predict(c70)
        ratio = float(t70[0] / t70[1])
        w2, r70 = PAPER_CELLS["8b_tp2"]["wall_ms"], PAPER_CELLS["70b_tp2_over_tp4"]
        rows.append(PaperCheck(f, p2 / 1e6, abs(p2 / 1e6 - w2) / w2, ratio, abs(ratio - r70) / r70))
    return {
        "forms": rows,
        "device_scale": scale,
        "predicted_8b_tp2_device_ms": (c8[1].device_ns + c8[1].comm_ns) / 1e6,
        "measured_8b_tp2_gpu_ms": PAPER_CELLS["8b_tp2"]["gpu_ms"],
        "all_reduce_source": ar.source,
        "note": "held-out validation on real multi-GPU TP runs is pending (no multi-GPU data here)",
    }
