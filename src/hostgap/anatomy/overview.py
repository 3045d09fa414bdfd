"""``hostgap analyze``: the document for one trace (devices, windows, launches, idle gaps).

The JSON document is a contract (docs/json.md): one object per trace with
``schema_version, trace, format, devices, windows, skipped`` and more.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from hostgap.anatomy.collectives import comm_of_name
from hostgap.anatomy.intervals import union_ns
from hostgap.anatomy.link import Links, link
from hostgap.anatomy.timeline import (
    DEFAULT_GAP_THRESHOLD_NS,
    gpu_times,
    idle_gaps,
    launch_stats,
    top_kernels,
    windows,
)
from hostgap.events import GPU_OP_KINDS, Kind, Trace, distinct
from hostgap.version import SCHEMA_VERSION


def overview(
    trace: Trace, links: Links | None = None, gap_threshold_ns: int = DEFAULT_GAP_THRESHOLD_NS, top: int = 10
) -> dict:
    """Everything ``hostgap analyze`` reports about the GPU timeline of ``trace``."""
    links = links if links is not None else link(trace)
    ev = trace.events
    gpu_rows = np.flatnonzero(ev.of_kind(*GPU_OP_KINDS))
    names = {d.index: d for d in trace.meta.devices}
    is_comm_name = comm_of_name(trace)
    devices = []
    for dev in distinct(ev.device[gpu_rows]):
        rows = gpu_rows[ev.device[gpu_rows] == dev]
        info = names.get(int(dev))
        entry = {
            "device": int(dev),
            "name": info.name if info else f"GPU {int(dev)} (name not in trace)",
            "name_source": info.name_source if info else "missing",
            "start_ns": int(ev.start_ns[rows].min()),
            "end_ns": int(ev.end_ns[rows].max()),
            **gpu_times(trace, rows).to_dict(),
            **_comm_split(trace, rows, is_comm_name),
            "streams": int(len(distinct(ev.stream[rows]))),
            "idle_gaps": idle_gaps(trace, links, rows, gap_threshold_ns).to_dict(),
            "top_kernels": top_kernels(trace, rows, top),
        }
        devices.append(entry)
    win = [
        {
            "name": w.name,
            "device": w.device,
            "source": w.source,
            "start_ns": w.start_ns,
            "end_ns": w.end_ns,
            **w.times.to_dict(),
        }
        for w in windows(trace)
    ]
    n_launch = int(np.sum(ev.kind == Kind.LAUNCH))
    n_graph = int(np.sum(ev.kind == Kind.GRAPH_LAUNCH))
    graph_rows = np.flatnonzero(ev.kind == Kind.GRAPH_LAUNCH)
    return {
        "schema_version": SCHEMA_VERSION,
        "trace": trace.meta.path,
        "format": trace.meta.format,
        "rank": trace.meta.rank,
        "world_size": trace.meta.world_size,
        "base_time_ns": trace.meta.base_time_ns,
        "events": int(len(ev)),
        "device_activity": bool(len(gpu_rows)),
        "devices": devices,
        "windows": win,
        "links": {
            "launches": n_launch,
            "graph_launches": n_graph,
            "graph_replayed_ops": int(links.gpu_ops_of_launch[graph_rows].sum()),
            "gpu_ops": int(len(gpu_rows)),
            "unlinked_gpu_ops": links.unlinked_gpu_ops,
            "flow_events": trace.meta.flows,
        },
        "graph_launch_cost": graph_launch_cost(ev.dur_ns[graph_rows], links.gpu_ops_of_launch[graph_rows]),
        "launch_stats": [asdict(s) for s in launch_stats(trace, links)],
        "idle_gap_threshold_ns": int(gap_threshold_ns),
        "skipped": dict(sorted(trace.meta.skipped.items())),
    }


def graph_launch_cost(dur_ns: np.ndarray, nodes: np.ndarray) -> dict | None:
    """Host time of the graph launches that replay GPU ops, per replayed node (the host cost of
    a graph launch grows with its node count, docs/models.md §7); None without such launches."""
    m = np.asarray(nodes) > 0
    if not m.any():
        return None
    d, n = np.asarray(dur_ns, float)[m], np.asarray(nodes, float)[m]
    return {
        "launches": int(m.sum()),
        "nodes": int(n.sum()),
        "host_ns": float(d.sum()),
        "host_ns_per_node": float(d.sum() / n.sum()),
        "nodes_per_launch_p50": float(np.median(n)),
    }


def _comm_split(trace: Trace, rows: np.ndarray, is_comm_name: np.ndarray) -> dict:
    """The device's GPU ops split into compute and communication over the whole trace (the
    per-step keys of the same names, docs/multirank.md): unions and their overlap."""
    ev = trace.events
    comm = is_comm_name[ev.name[rows]] if len(is_comm_name) else np.zeros(len(rows), bool)
    s, e = ev.start_ns[rows], ev.start_ns[rows] + ev.dur_ns[rows]
    compute, comm_u = union_ns(s[~comm], e[~comm]), union_ns(s[comm], e[comm])
    return {
        "compute_active_ns": compute,
        "comm_active_ns": comm_u,
        "comm_overlap_ns": compute + comm_u - union_ns(s, e),
        "comm_count": int(comm.sum()),
    }
