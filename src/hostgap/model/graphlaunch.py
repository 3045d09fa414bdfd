"""Host cost of one CUDA (HIP) graph launch by the graph's node count.

A graph launch is one API call, but the driver still walks the graph: its host time grows
with the nodes it submits. ``launch = fixed + per_node x nodes``. ``fixed`` is the small-graph
launch the host model already carries (``HostModel.graph_launch_ns``, ~30 us); ``per_node_ns``
is fitted here, per device where a device has published or traced launches, pooled otherwise.

Points (:data:`POINTS`), each with its source:

- SGLang #29960 (Blackwell B200): a 2,876-node decode graph, 2.8 ms of host launch time;
- the same issue's vLLM figure (B200): 2,187 nodes, 2.0 ms;
- the corpus trace ``tracelens/mi300x_vllm_decode_fullgraph`` (vLLM FULL graph, batch 32,
  MI300X): one ``hipGraphLaunch`` of 506.8 us replaying 421 kernels.

The fit is one parameter (``per_node_ns``) on relative error with ``fixed`` held, so every
point can be scored by a fit on the others (:func:`leave_one_out`). ``hostgap regimes
--published`` prints the fit and the held-out errors.
"""

from __future__ import annotations

from dataclasses import dataclass

FIXED_NS = 30e3
"""The small-graph launch (stepmodel.DEFAULT_HOST's graph_launch_ns), held in the fit."""


@dataclass(frozen=True)
class LaunchPoint:
    id: str
    device: str  # hostgap device name (devices.BUILTIN)
    nodes: float
    launch_ns: float
    source: str


POINTS: tuple[LaunchPoint, ...] = (
    LaunchPoint(
        "sglang_29960",
        "b200",
        2876,
        2.8e6,
        "SGLang #29960: 2.8 ms host time to launch a 2,876-node CUDA graph on Blackwell",
    ),
    LaunchPoint(
        "vllm_b200", "b200", 2187, 2.0e6, "SGLang #29960, vLLM comparison: 2.0 ms for a 2,187-node graph on Blackwell"
    ),
    LaunchPoint(
        "trace_mi300x",
        "mi300x",
        421,
        506.768e3,
        "corpus trace tracelens/mi300x_vllm_decode_fullgraph: hipGraphLaunch 506.8 us, 421 kernels",
    ),
)


@dataclass(frozen=True)
class GraphLaunchCost:
    per_node_ns: float
    fixed_ns: float
    source: str

    def launch_ns(self, nodes: float) -> float:
        """Host time of one launch of a graph of ``nodes`` nodes."""
        return self.fixed_ns + self.per_node_ns * max(nodes, 0.0)

    def to_dict(self) -> dict:
        return {"per_node_ns": self.per_node_ns, "fixed_ns": self.fixed_ns, "source": self.source}


def fit_per_node(points: tuple[LaunchPoint, ...] | list[LaunchPoint], fixed_ns: float = FIXED_NS) -> float:
    """Least squares on relative error of ``fixed + b n`` against each point's launch time:
    b = sum(x y) / sum(x^2) with x = n / t, y = (t - fixed) / t."""
    if not points:
        raise ValueError("no graph-launch points to fit")
    xs = [p.nodes / p.launch_ns for p in points]
    ys = [(p.launch_ns - fixed_ns) / p.launch_ns for p in points]
    den = sum(x * x for x in xs)
    if den <= 0:
        raise ValueError("graph-launch points need nodes > 0")
    return max(sum(x * y for x, y in zip(xs, ys)) / den, 0.0)


def _label(points) -> str:
    return ", ".join(f"{p.id} ({p.nodes:g} nodes)" for p in points)


POOLED = GraphLaunchCost(fit_per_node(POINTS), FIXED_NS, f"pooled fit on {_label(POINTS)}")


def for_device(device: str) -> GraphLaunchCost:
    """The device's own fit where it has points, else the pooled fit (labelled as such)."""
    own = [p for p in POINTS if p.device == device]
    if own:
        return GraphLaunchCost(fit_per_node(own), FIXED_NS, f"fitted on {device}'s {_label(own)}")
    return GraphLaunchCost(POOLED.per_node_ns, FIXED_NS, f"no graph-launch measurement on {device}: {POOLED.source}")


def leave_one_out(points: tuple[LaunchPoint, ...] = POINTS) -> list[dict]:
    """Each point predicted by the pooled fit on the others."""
    out = []
    for p in points:
        rest = [q for q in points if q is not p]
        b = fit_per_node(rest)
        pred = FIXED_NS + b * p.nodes
        out.append(
            {
                "id": p.id,
                "nodes": p.nodes,
                "published_ns": p.launch_ns,
                "predicted_ns": pred,
                "error": (pred - p.launch_ns) / p.launch_ns,
                "fitted_on": [q.id for q in rest],
            }
        )
    return out
