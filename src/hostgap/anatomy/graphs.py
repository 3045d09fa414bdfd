"""Graph-mode guard: steps whose CUDA/HIP graph replays the trace does not record faithfully.

Profiler traces of graph replays are known to mislead (TraceLens #728/#827, Hyperloom #1121:
replays recorded once in N; sglang #31545: kernels of several steps deferred into one burst;
HTA #290: graph kernels missing from the critical path). On a step that launched a graph
(``graph_launches > 0``) :func:`step_flags` names what it sees:

- ``graph-no-kernels``: graph launches and no kernel recorded in the step;
- ``graph-few-kernels``: fewer kernels than graph launches, or under half the median kernel
  count of the steps with the same number of graph launches (a replay recorded once in N);
- ``gpu-after-next-step``: the step's GPU work ends after the next step's marker begins
  (kernels of several steps deferred into one burst);
- ``annotation-ends-early``: the CPU step annotation ends more than half the step's wall before
  its GPU work ends (the host range says nothing about when the replay ran).

A flagged step's host-exposed time is not a measurement of host cost: :func:`guard_verdict`
withholds a host-bound verdict resting on flagged steps (``graph-untrusted``) and says to use
differencing (``hostgap measure``), which needs no per-kernel trace of the replay.

>>> step_flags([{"index": 0, "graph_launches": 1, "kernel_count": 0, "wall_ns": 10, "start_ns": 0,
...              "marker_end_ns": 10, "last_gpu_end_ns": None}])
[['graph-no-kernels']]
"""

from __future__ import annotations

import statistics

GRAPH_UNTRUSTED = "graph-untrusted"
EARLY_END_SHARE = 0.5
"""GPU work running on after the annotation for more than this share of the wall: flagged."""
FEW_KERNELS_SHARE = 0.5
"""Fewer kernels than this share of the median of like steps: a replay recorded in part."""
ADVICE = (
    "graph replays in this trace are not recorded faithfully, so its host-exposed time is not host cost: "
    "measure host time by differencing instead (hostgap measure --mode graph; docs/method.md)"
)


def step_flags(steps: list[dict]) -> list[list[str]]:
    """Per step, the graph-trace problems seen (empty for a trustworthy or eager step)."""
    medians = _median_kernels(steps)
    out = []
    for i, s in enumerate(steps):
        flags: list[str] = []
        g = s.get("graph_launches") or 0
        if g > 0:
            k = s.get("kernel_count") or 0
            if k == 0:
                flags.append("graph-no-kernels")
            elif k < g or k < FEW_KERNELS_SHARE * medians.get(g, 0):
                flags.append("graph-few-kernels")
            end = s.get("last_gpu_end_ns")
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            if end is not None and nxt is not None and nxt.get("start_ns") is not None and end > nxt["start_ns"]:
                flags.append("gpu-after-next-step")
            mend, wall = s.get("marker_end_ns"), s.get("wall_ns") or 0
            if end is not None and mend is not None and wall > 0 and end - mend > EARLY_END_SHARE * wall:
                flags.append("annotation-ends-early")
        out.append(flags)
    return out


def _median_kernels(steps: list[dict]) -> dict[int, float]:
    by: dict[int, list[int]] = {}
    for s in steps:
        g = s.get("graph_launches") or 0
        if g > 0 and (s.get("kernel_count") or 0) > 0:
            by.setdefault(g, []).append(int(s["kernel_count"]))
    return {g: statistics.median(v) for g, v in by.items()}


def guard_verdict(verdict: dict, steps: list[dict]) -> dict:
    """``verdict`` with ``graph_flagged_steps`` added; a host-bound verdict or raw verdict
    becomes ``graph-untrusted`` when any graph step is flagged."""
    flagged = [s["index"] for s in steps if s.get("graph_flags")]
    out = {**verdict, "graph_flagged_steps": flagged}
    if not flagged:
        return out
    kinds = sorted({f for s in steps for f in s.get("graph_flags") or []})
    why = f"{len(flagged)} of {len(steps)} steps flagged ({', '.join(kinds)}): {ADVICE}"
    if out.get("verdict") == "host-bound":
        out["verdict"] = GRAPH_UNTRUSTED
    if out.get("raw_verdict") == "host-bound":
        out["raw_verdict"] = GRAPH_UNTRUSTED
    out["note"] = f"{out['note']}; {why}" if out.get("note") else why
    return out
