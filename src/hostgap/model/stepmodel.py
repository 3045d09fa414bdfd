"""Step latency = device time + host term, with physically meaningful host parts.

Per decode step the host does two kinds of work (METHOD.md §5-§7, docs/models.md §4):

- **orchestration**, which overlaps GPU work: the per-step dispatch of the forward pass
  (``dispatch_ns``: module calls, input and metadata preparation that run interleaved with
  the step's kernels) plus ``per_kernel_ns`` per launch (ΔFT + ΔCT + ΔKT, METHOD.md §5).
  CUDA graph replay replaces the per-kernel part of the captured kernels with one
  ``graph_launch_ns`` per graph (vLLM V1: one piece per layer, attention and sampling still
  launched eagerly; accounting.GRAPH_CAPTURE); the dispatch stays;
- **serial** work that no GPU work overlaps and no graph removes: the scheduler / engine IPC /
  sampling round-trip, ``serial_ns + per_seq_ns x batch``, plus ``per_rank_ns`` per extra
  tensor-parallel rank (broadcasting the step to the workers and gathering the result).

::

    wall = serial + max(orchestration, device + collectives)

Orchestration is exposed only when it outlasts the GPU work (small batch, small model,
eager); that is why the host term collapses with batch and why graphs gain nothing where
orchestration was already hidden. With TP > 1 every rank orchestrates its own kernels in
parallel, and the exposed orchestration of the slowest rank is spent by the others spinning
inside the all-reduce (METHOD.md §7): measured GPU-active absorbs it (``collective_wait_ns``)
and the host-exposed residual that differencing measures is the serial part alone.

The defaults (:data:`DEFAULT_HOST`) are fitted on the differencing paper's published cells
(``hostgap fit --paper-cells``, :mod:`hostgap.model.fitting.calibrate`); fits on measured runs
(:func:`fit_host`) replace them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from hostgap.model import graphlaunch
from hostgap.model.roofline import Metrics, error_metrics


@dataclass(frozen=True)
class HostModel:
    """The host term's parts, ns (see the module docstring)."""

    serial_ns: float
    per_seq_ns: float
    per_kernel_ns: float
    launch_floor_ns: float  # the ΔKT part of per_kernel_ns (driver/hardware; a faster CPU does not help it)
    graph_launch_ns: float
    source: str = "default"
    per_rank_ns: float = 0.0  # serial, per TP rank beyond the first
    dispatch_ns: float = 0.0  # overlapping, per step (eager only)
    graph_node_ns: float = 0.0  # overlapping, per node a graph launch submits (graphlaunch.py)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> HostModel:
        return HostModel(**{k: d[k] for k in HostModel.__dataclass_fields__ if k in d})


DEFAULT_HOST: dict[str, HostModel] = {
    # vLLM V1 eager on H100, fitted on the differencing paper's cells (paper_cells.json):
    # `hostgap fit --paper-cells` reproduces these (rounded) values; docs/models.md §4.
    "vllm": HostModel(
        serial_ns=222.5e3,
        per_seq_ns=5.74e3,
        per_kernel_ns=33.28e3,
        launch_floor_ns=4.707e3,
        graph_launch_ns=30e3,
        per_rank_ns=251.3e3,
        dispatch_ns=1.176e6,
        graph_node_ns=graphlaunch.POOLED.per_node_ns,
        source="default: fitted on the differencing paper's H100 vLLM eager cells (hostgap fit --paper-cells)",
    ),
    # transformers eager: ~1,700 kernels and ~20 ms of host time per 8B decode step on H200
    # (docs/PLATFORM.md): ~12 us per kernel; a short serial part for the generate loop.
    "hf": HostModel(
        serial_ns=0.5e6,
        per_seq_ns=2e3,
        per_kernel_ns=12e3,
        launch_floor_ns=4.5e3,
        graph_launch_ns=30e3,
        graph_node_ns=graphlaunch.POOLED.per_node_ns,
        source="default (transformers eager, ~12 us per kernel, docs/PLATFORM.md)",
    ),
    # transformers' continuous batching: the forward's host work as "hf"; the serial part is the
    # loop's own work between forward passes (admission, scheduling, KV indices, input tensors,
    # output processing), measured by `hostgap measure --engine hf-cb` (engine_facts.cb_split,
    # between_ns) on a tiny Llama on this project's 2-core CPU machine, quiet, two valid runs per
    # batch: 0.391 and 0.441 ms at batch 1, 0.646 and 0.722 ms at batch 4 (bench/results/hf_cb_cpu).
    # A measured hf-cb run given to predict replaces it (prediction.measured_loop).
    "hf-cb": HostModel(
        serial_ns=0.327e6,
        per_seq_ns=0.0893e6,
        per_kernel_ns=12e3,
        launch_floor_ns=4.5e3,
        graph_launch_ns=30e3,
        graph_node_ns=graphlaunch.POOLED.per_node_ns,
        source="default (transformers eager per kernel; the continuous-batching loop's serial part "
        "measured on a CPU: bench/results/hf_cb_cpu)",
    ),
}
"""One graph launch ~30 us plus ~1 us per node it submits (graphlaunch.py); the launch floor and
the per-node cost are replaced per device (:func:`for_device`)."""

DEFAULT_DEVICE_SCALE: dict[str, float] = {"h100-sxm": 0.864}
"""Level of the default roofline per device where a published step sets it: H100 from the 8B
batch-1 cell's 6.41 ms GPU time (paper_cells.json; ``hostgap fit --paper-cells`` prints it)."""


def for_device(host: HostModel, floor_ns: float, device: str = "") -> HostModel:
    """``host`` with the device's launch floor (never above the per-kernel cost) and, where the
    host carries a per-node graph-launch cost, ``device``'s own (graphlaunch.for_device)."""
    node = graphlaunch.for_device(device).per_node_ns if device and host.graph_node_ns > 0 else host.graph_node_ns
    return replace(host, launch_floor_ns=min(floor_ns, host.per_kernel_ns), graph_node_ns=node)


@dataclass(frozen=True)
class StepPrediction:
    """One step: the parts and the total, ns."""

    device_ns: float  # compute kernels
    collective_ns: float  # all-reduce etc. (GPU-busy), without waiting for other ranks
    serial_ns: float
    orchestration_ns: float
    kernels: float
    mode: str
    tp: int = 1
    graph_launches: float = 0.0  # graph mode: graphs replayed per step (kernels: launched outside them)

    @property
    def total_ns(self) -> float:
        return self.serial_ns + max(self.orchestration_ns, self.device_ns + self.collective_ns)

    @property
    def orchestration_exposed_ns(self) -> float:
        """Orchestration not hidden behind this rank's GPU work."""
        return max(0.0, self.orchestration_ns - self.device_ns - self.collective_ns)

    @property
    def collective_wait_ns(self) -> float:
        """TP > 1: exposed orchestration spent spinning in all-reduce (GPU-busy, host-caused)."""
        return self.orchestration_exposed_ns if self.tp > 1 else 0.0

    @property
    def gpu_ns(self) -> float:
        """GPU-active as a trace would measure it (all-reduce waits included)."""
        return self.device_ns + self.collective_ns + self.collective_wait_ns

    @property
    def host_ns(self) -> float:
        """Host-exposed time as differencing measures it: total - GPU-active."""
        return self.total_ns - self.gpu_ns

    @property
    def host_caused_ns(self) -> float:
        """Time the step waits on the host: serial + exposed orchestration (wherever it hides)."""
        return self.serial_ns + self.orchestration_exposed_ns

    @property
    def host_fraction(self) -> float:
        return self.host_ns / self.total_ns if self.total_ns > 0 else float("nan")

    def to_dict(self) -> dict:
        return {
            "device_ns": self.device_ns,
            "collective_ns": self.collective_ns,
            "collective_wait_ns": self.collective_wait_ns,
            "gpu_active_ns": self.gpu_ns,
            "host_ns": self.host_ns,
            "total_ns": self.total_ns,
            "host_fraction": self.host_fraction,
            "host_caused_ns": self.host_caused_ns,
            "serial_host_ns": self.serial_ns,
            "orchestration_ns": self.orchestration_ns,
            "orchestration_exposed_ns": self.orchestration_exposed_ns,
            "kernels": self.kernels,
            "graph_launches": self.graph_launches,
            "mode": self.mode,
            "tp": self.tp,
        }


def orchestration_ns(
    host: HostModel,
    kernels: float,
    mode: str = "eager",
    host_speed: float = 1.0,
    graphs: float = 1.0,
    graph_nodes: float = 0.0,
) -> float:
    """Overlapping host work of one step: dispatch + per-kernel cost x ``kernels``, plus, in graph
    mode, ``graphs`` graph launches (``kernels`` then counts the kernels launched eagerly
    outside the graphs: accounting.graph_split).

    The dispatch (per-step input and attention-metadata preparation) runs in both modes: a
    graph replays kernels, not the Python that prepares the step's inputs.
    ``graph_nodes`` (the kernels the graphs replay) cost ``graph_node_ns`` each to submit.
    ``host_speed`` > 1 (a faster CPU) divides the CPU part; the launch floor is hardware.
    """
    floor = min(host.launch_floor_ns, host.per_kernel_ns)
    t = host.dispatch_ns / host_speed + kernels * ((host.per_kernel_ns - floor) / host_speed + floor)
    if mode == "eager":
        return t
    return t + (graphs * host.graph_launch_ns + graph_nodes * host.graph_node_ns) / host_speed


def serial_ns(host: HostModel, batch: float, tp: int = 1, host_speed: float = 1.0) -> float:
    """Non-overlapping host work of one step."""
    return (host.serial_ns + host.per_seq_ns * batch + host.per_rank_ns * (tp - 1)) / host_speed


def step(
    device_ns: float,
    collective_ns: float,
    kernels: float,
    batch: int,
    host: HostModel,
    mode: str = "eager",
    host_speed: float = 1.0,
    tp: int = 1,
    graphs: float = 1.0,
    graph_nodes: float = 0.0,
) -> StepPrediction:
    """Predict one step. ``host_speed`` > 1: a faster host CPU (single-thread speed factor).
    Graph mode: ``kernels`` launched outside ``graphs`` graph launches replaying ``graph_nodes``
    kernels (orchestration_ns)."""
    return StepPrediction(
        device_ns,
        collective_ns,
        serial_ns(host, batch, tp, host_speed),
        orchestration_ns(host, kernels, mode, host_speed, graphs, graph_nodes),
        kernels,
        mode,
        tp,
        graphs if mode != "eager" else 0.0,
    )


# -- fitting the host term from measured cells ---------------------------------------------


@dataclass(frozen=True)
class HostSamples:
    """Measured decode cells (per step, ns): wall, GPU-active, kernels, batch."""

    t_step_ns: np.ndarray
    g_step_ns: np.ndarray
    k_step: np.ndarray
    batch: np.ndarray
    graph: np.ndarray  # bool: CUDA-graph mode

    def take(self, m) -> HostSamples:
        return HostSamples(*(v[m] for v in (self.t_step_ns, self.g_step_ns, self.k_step, self.batch, self.graph)))

    def __len__(self) -> int:
        return len(self.t_step_ns)


def _predict(p, s: HostSamples, base: HostModel) -> np.ndarray:
    serial, per_seq, per_kernel = p
    orch = np.where(s.graph, base.graph_launch_ns, base.dispatch_ns + per_kernel * s.k_step)
    return serial + per_seq * s.batch + np.maximum(orch, s.g_step_ns)


def fit_host(
    samples: HostSamples, base: HostModel, launch_floor_ns: float | None = None, per_kernel_ns: float | None = None
) -> HostModel:
    """Least squares on relative error of ``serial + per_seq b + max(dispatch + per_kernel k, g)``.

    ``dispatch`` stays at ``base``'s value: with the kernel count of one engine it is not
    separable from the per-kernel cost (the paper-cell fit, across models, sets it).

    With one distinct batch size the per-sequence part is not identifiable and stays 0. The
    per-kernel cost is identifiable from cells whose kernel counts differ (models, engines)
    or whose orchestration is hidden; with one kernel count it trades off against serial.
    ``per_kernel_ns`` given (measured: TaxBreak orchestration per launch) is held fixed.
    """
    from scipy.optimize import least_squares  # only where a model is fitted

    if len(samples) == 0:
        raise ValueError("no samples")
    vary_b = len(np.unique(samples.batch)) > 1
    t = samples.t_step_ns

    fixed_k = per_kernel_ns is not None and np.isfinite(per_kernel_ns) and per_kernel_ns > 0

    def resid(q):
        p = (q[0], q[1] if vary_b else 0.0, per_kernel_ns if fixed_k else q[2])
        return (_predict(p, samples, base) - t) / t

    hi = float(np.max(t))
    k_step = np.maximum(samples.k_step, 1.0)
    # max(orchestration, g) is flat in the per-kernel cost wherever the GPU time is the larger,
    # so one start can stop in a flat region far from the law (an orchestration-bound cell set
    # with one kernel count: 61 % off): start from the host time put in the serial part, then
    # all of it in the per-kernel cost, and keep the better fit
    starts = (
        [np.median(t - samples.g_step_ns), 0.0, np.median(t / k_step) / 2],
        [0.0, 0.0, np.median((t - base.dispatch_ns) / k_step)],
    )
    fits = [least_squares(resid, np.clip(x0, 0.0, hi), bounds=(0.0, hi), loss="soft_l1", f_scale=0.05) for x0 in starts]
    best = min(fits, key=lambda f: f.cost)
    s, b, k = (float(v) for v in best.x)
    k = float(per_kernel_ns) if fixed_k and per_kernel_ns is not None else k
    floor = base.launch_floor_ns if launch_floor_ns is None or not np.isfinite(launch_floor_ns) else launch_floor_ns
    how = "per-kernel orchestration measured (TaxBreak), serial fitted" if fixed_k else "fitted"
    return replace(
        base,
        serial_ns=s,
        per_seq_ns=b if vary_b else 0.0,
        per_kernel_ns=k,
        launch_floor_ns=min(floor, k),
        source=f"{how} on {len(samples)} measured cells",
    )


def predict_host(model: HostModel, samples: HostSamples) -> np.ndarray:
    return _predict((model.serial_ns, model.per_seq_ns, model.per_kernel_ns), samples, model)


def evaluate_host(model: HostModel, samples: HostSamples) -> Metrics:
    return error_metrics(predict_host(model, samples), samples.t_step_ns)


def leave_one_out(samples: HostSamples, base: HostModel) -> Metrics:
    """Held-out error: each cell predicted by a model fitted on the others."""
    n = len(samples)
    if n < 3:
        return error_metrics(np.array([]), np.array([]))
    pred = np.empty(n)
    for i in range(n):
        m = np.ones(n, bool)
        m[i] = False
        pred[i] = predict_host(fit_host(samples.take(m), base), samples.take(~m))[0]
    return error_metrics(pred, samples.t_step_ns)
