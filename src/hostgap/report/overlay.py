"""``hostgap overlay``: the input trace plus hostgap's own tracks, for Perfetto / chrome://tracing.

The input's events are kept as they are (a Kineto file is re-read as raw JSON and extended; an
Nsight Systems export is first written out as Kineto events by
:func:`hostgap.report.kineto_writer.trace_document`). The added events live in one extra
process named ``hostgap`` (a pid no input event uses), with one track (tid) each for:

- ``steps``: one span per engine step, from its marker start to the next step's marker start,
  named ``step N (kind)``, with the step's numbers in ``args``; an instant at every boundary;
- ``host-exposed gaps``: the parts of each step's wall time when no device op ran (the
  intervals whose total is wall − device-active when the step's work runs inside its window);
- per launching thread: ``T_py``, ``T_dispatch`` and the ``launch call`` of every launch
  (TaxBreak intervals, METHOD.md §5), with ΔFT/ΔCT/ΔKT_fw in ``args``.

Timestamps are written in the input's own µs clock with three decimals (exact ns).
"""

from __future__ import annotations

import gzip
import os

import msgspec
import numpy as np

from hostgap.anatomy.steps import AnalysisOptions
from hostgap.errors import HostgapError
from hostgap.events import Trace
from hostgap.report.kineto_writer import write_json_gz
from hostgap.store.rundir import file_mode

TRACK_STEPS = 1
TRACK_GAPS = 2
TRACK_TAX0 = 10  # then 3 tracks per launching thread
PROCESS_NAME = "hostgap"


def us(ns: int) -> float:
    """ns -> µs with exactly three decimals (round-trips to the same integer ns)."""
    ns = int(ns)
    return float(f"{ns // 1000}.{ns % 1000:03d}") if ns >= 0 else -us(-ns)


def read_raw(path: str) -> dict:
    """A Kineto/Chrome trace file as a dict with a ``traceEvents`` list."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc = msgspec.json.decode(data)
    except (OSError, EOFError, msgspec.DecodeError) as e:
        raise HostgapError(path, f"cannot re-read the trace JSON ({e})") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise HostgapError(path, "no traceEvents list in the trace JSON")
    return doc


def free_pid(events: list) -> int:
    pids = [e.get("pid") for e in events if isinstance(e, dict)]
    ints = [p for p in pids if isinstance(p, int) and not isinstance(p, bool)]
    return (max(ints) + 1) if ints else 1


def _meta(pid: int, tid: int | None, name: str, value) -> dict:
    ev = {"ph": "M", "pid": pid, "name": name, "args": {"name" if "name" in name else "sort_index": value}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _x(pid, tid, name, start_ns, end_ns, cat, args) -> dict:
    return {
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "name": name,
        "cat": cat,
        "ts": us(start_ns),
        "dur": us(max(int(end_ns) - int(start_ns), 0)),
        "args": args,
    }


def step_events(anatomy: dict, pid: int) -> list[dict]:
    out = []
    for s in anatomy.get("steps") or []:
        lo, hi = int(s["start_ns"]), int(s["start_ns"]) + int(s["wall_ns"])
        args = {
            k: s.get(k)
            for k in (
                "index",
                "name",
                "kind",
                "wall_ns",
                "gpu_active_ns",
                "host_exposed_ns",
                "host_wait_ns",
                "host_fraction",
                "kernel_count",
                "launches",
                "queued",
                "partial",
            )
        }
        out.append(_x(pid, TRACK_STEPS, f"step {s['index']} ({s['kind']})", lo, hi, "hostgap.step", args))
        out.append(
            {
                "ph": "i",
                "s": "p",
                "pid": pid,
                "tid": TRACK_STEPS,
                "name": f"step {s['index']} start",
                "cat": "hostgap.step",
                "ts": us(lo),
                "args": {"index": s["index"]},
            }
        )
    return out


def gap_events(trace: Trace, anatomy: dict, pid: int) -> list[dict]:
    """Device-idle intervals inside each step's wall window (device-wide union of ops)."""
    from hostgap.anatomy.intervals import merge
    from hostgap.anatomy.timeline import activity_rows

    ev = trace.events
    _, rows = activity_rows(trace)
    seg_s, seg_e = merge(ev.start_ns[rows], ev.end_ns[rows])
    out = []
    for s in anatomy.get("steps") or []:
        lo, hi = int(s["start_ns"]), int(s["start_ns"]) + int(s["wall_ns"])
        i0 = int(np.searchsorted(seg_e, lo, side="right"))
        i1 = int(np.searchsorted(seg_s, hi, side="left"))
        cuts_s = np.concatenate(([lo], np.minimum(seg_e[i0:i1], hi)))
        cuts_e = np.concatenate((np.maximum(seg_s[i0:i1], lo), [hi]))
        keep = cuts_e > cuts_s
        for a, b in zip(cuts_s[keep].tolist(), cuts_e[keep].tolist()):
            out.append(
                _x(
                    pid,
                    TRACK_GAPS,
                    f"host-exposed, step {s['index']}",
                    a,
                    b,
                    "hostgap.gap",
                    {"step": s["index"], "gap_ns": b - a, "step_host_exposed_ns": s["host_exposed_ns"]},
                )
            )
    return out


def taxbreak_events(trace: Trace, anatomy_obj, pid: int) -> tuple[list[dict], dict[int, int]]:
    """T_py, T_dispatch and launch-call spans per launch; returns (events, thread -> first tid)."""
    k = anatomy_obj.kernels
    if k is None or not len(k):
        return [], {}
    ev = trace.events
    names = trace.names
    threads = {int(t): TRACK_TAX0 + 3 * j for j, t in enumerate(np.unique(k.thread).tolist())}
    out = []
    for i in range(len(k)):
        base = threads[int(k.thread[i])]
        lr = int(k.launch_row[i])
        gr = int(k.gpu_row[i])
        kname = names[int(ev.name[gr])] if gr >= 0 else ""
        step = int(k.step[i])
        fw = float(k.dkt_fw_ns[i])
        common = {"step": step, "kernel": kname if not k.graph[i] else f"graph replay ({int(k.gpu_ops[i])} ops)"}
        ps, pe = int(k.py_start_ns[i]), int(k.py_end_ns[i])
        if pe > ps:
            out.append(_x(pid, base, "T_py", ps, pe, "hostgap.taxbreak", {**common, "t_py_ns": pe - ps}))
        ds, de = int(k.dispatch_start_ns[i]), int(k.dispatch_end_ns[i])
        if de > ds:
            out.append(
                _x(
                    pid,
                    base + 1,
                    "T_dispatch",
                    ds,
                    de,
                    "hostgap.taxbreak",
                    {**common, "t_dispatch_ns": de - ds, "i_lib": int(k.i_lib[i])},
                )
            )
        out.append(
            _x(
                pid,
                base + 2,
                names[int(ev.name[lr])],
                int(ev.start_ns[lr]),
                int(ev.end_ns[lr]),
                "hostgap.taxbreak",
                {
                    **common,
                    "dft_ns": int(k.dft_ns[i]),
                    "dct_ns": int(k.dct_ns[i]),
                    "dkt_ns": float(k.floor_ns),
                    "dkt_fw_ns": None if fw != fw else fw,
                    "t_launch_ns": int(k.t_launch_ns[i]),
                    "queued": bool(k.queued[i]),
                },
            )
        )
    return out, threads


def overlay_events(trace: Trace, anatomy_obj, pid: int) -> list[dict]:
    """Every event hostgap adds (metadata first)."""
    doc = anatomy_obj.to_dict()
    tax, threads = taxbreak_events(trace, anatomy_obj, pid)
    meta = [
        _meta(pid, None, "process_name", PROCESS_NAME),
        _meta(pid, None, "process_sort_index", -1),
        _meta(pid, TRACK_STEPS, "thread_name", "steps"),
        _meta(pid, TRACK_STEPS, "thread_sort_index", 0),
        _meta(pid, TRACK_GAPS, "thread_name", "host-exposed gaps"),
        _meta(pid, TRACK_GAPS, "thread_sort_index", 1),
    ]
    for t, base in threads.items():
        for j, what in enumerate(("T_py", "T_dispatch", "launch call")):
            meta.append(_meta(pid, base + j, "thread_name", f"{what} (thread {t})"))
            meta.append(_meta(pid, base + j, "thread_sort_index", base + j))
    return meta + step_events(doc, pid) + gap_events(trace, doc, pid) + tax


def build(path: str, trace: Trace, anatomy_obj) -> dict:
    """The overlay document: the input's events (raw for Kineto, rewritten for nsys) plus
    hostgap's tracks."""
    if trace.meta.format == "kineto":
        doc = read_raw(path)
    else:
        from hostgap.report.kineto_writer import trace_document

        doc = trace_document(trace, np.arange(len(trace.events)))
    events = doc["traceEvents"]
    pid = free_pid(events)
    events.extend(overlay_events(trace, anatomy_obj, pid))
    return doc


def write_overlay(
    trace_path: str,
    output: str,
    step_marker: str | None = None,
    launch_floor_us: float | None = None,
    floor_file: str | None = None,
    progress=None,
) -> tuple[int, int]:
    """``hostgap overlay``: ``trace_path`` plus hostgap's tracks (:mod:`hostgap.report.overlay`)
    written to ``output``; (events added, steps)."""
    from hostgap.analysis.trace import analyse_trace

    if os.path.abspath(trace_path) == os.path.abspath(output):
        raise HostgapError(output, "output would overwrite the input trace")
    options = AnalysisOptions(
        step_marker=step_marker,
        launch_floor_ns=launch_floor_us * 1000 if launch_floor_us else None,
        floor_file=floor_file,
    )
    analysis = analyse_trace(trace_path, options, progress)
    anatomy = analysis.anatomy()
    doc = build(trace_path, analysis.trace, anatomy)
    write_json_gz(doc, output)
    os.chmod(output, file_mode())  # the temp file it was renamed from is private
    added = sum(1 for e in doc["traceEvents"] if isinstance(e, dict) and str(e.get("cat", "")).startswith("hostgap."))
    return added, len(anatomy.steps)
