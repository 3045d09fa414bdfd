"""Resolve a ``report``/``compare`` argument into the documents the reports are drawn from.

An argument is, first that applies:

1. a **run directory** (holds ``results.json``; its trace is ``results["anatomy_trace"]``
   inside it, its sweep ``timings.json``);
2. a **results JSON** file (``results.json`` of a run; the run directory is its folder);
3. a **trace file** (Kineto JSON or Nsight Systems SQLite, format from content);
4. a **run id** (or unique prefix) in the runs database.

Whatever the form, the result is an :class:`Input`: the run's results (None for a bare trace),
the differencing sweep points, and -- when a trace is at hand -- the anatomy and overview
documents of that trace (the same dicts ``hostgap analyze --json`` prints) plus the timeline
excerpt of one steady-state step. A run whose trace is missing falls back to the anatomy parts
stored in its results (decode steps, summary, TaxBreak, verdict, top ops).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from hostgap.anatomy.steps import AnalysisOptions
from hostgap.errors import HostgapError

FRAME_POOL = 100_000
"""Python frames kept from the analysis before same-call-site frames are merged."""

EXCERPT_MAX_BARS = 1500
"""Bars drawn in one timeline excerpt (GPU ops + host calls); the rest are counted, not drawn."""


@dataclass(frozen=True)
class Input:
    """One report input, resolved."""

    source: str  # the argument as given
    kind: str  # "run" or "trace"
    label: str  # short name for legends and headings
    trace_path: str | None
    results: dict | None = None
    sweep: dict | None = None  # {"n", "wall_ns", "gpu_ns", "estimator"}: differencing points
    anatomy: dict | None = None  # Anatomy.to_dict()
    overview: dict | None = None  # hostgap.anatomy.overview.overview()
    excerpt: dict | None = None  # one steady step's Gantt bars
    gap_time_ns: dict | None = None  # idle-gap time per class per log2 bin, all streams (see gap_time)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def run_kind(self) -> str:
        """``trace`` for a bare trace, else the stored run's kind (``measured``, ``attached``,
        ``watched``; :func:`hostgap.store.save.run_kind`)."""
        if self.results is None:
            return "trace"
        from hostgap.store.save import run_kind

        return run_kind(self.results)

    @property
    def has_differencing(self) -> bool:
        """Whether the input carries a differencing measurement (a measured run does; an attached
        run is one traced window of a server's traffic, a trace is one trace)."""
        return bool((self.results or {}).get("differencing"))

    @property
    def activity(self) -> str:
        if self.anatomy:
            return self.anatomy.get("activity") or "gpu"
        d = (self.results or {}).get("differencing") or {}
        return d.get("activity") or "gpu"


def resolve(arg: str, config: AnalysisOptions = AnalysisOptions(), progress=None, db: str | None = None) -> Input:
    """Turn one command-line argument into an :class:`Input` (HostgapError when it is none of
    run directory, results JSON, trace file or run id in the runs database ``db``)."""
    p = Path(arg)
    if p.is_dir():
        if not (p / "results.json").is_file():
            raise HostgapError(arg, "directory has no results.json: not a run directory")
        return _from_results(arg, _read_json(p / "results.json"), p, config, progress)
    if p.is_file():
        if _looks_like_results(p):
            return _from_results(arg, _read_json(p), p.parent, config, progress)
        return from_trace(arg, config, progress)
    results, db_path = _lookup_db(arg, db)
    if results is None:
        raise HostgapError(arg, "not a run directory, results JSON, trace file or run id in the runs database")
    from hostgap.store.database import resolve_run_dir

    run_dir = resolve_run_dir(results.get("run_dir"), db_path)
    notes: tuple[str, ...] = ()
    if run_dir is None:
        stored = results.get("run_dir")
        notes = (
            f"run directory {stored!r} (from {db_path}) not found from {os.getcwd()}"
            + (
                ": it was stored relative to the folder the run was measured in; run the report there "
                "or give the run directory"
                if stored and not os.path.isabs(stored)
                else ""
            )
            if stored
            else f"the runs database {db_path} names no run directory for this run",
        )
    return _from_results(arg, results, run_dir, config, progress, notes)


def resolve_all(args, config: AnalysisOptions = AnalysisOptions(), progress=None, db: str | None = None) -> list[Input]:
    return [resolve(a, config, progress, db) for a in args]


# -- the three forms ---------------------------------------------------------------------


def from_trace(
    path: str,
    config: AnalysisOptions = AnalysisOptions(),
    progress=None,
    *,
    label: str | None = None,
    kind: str = "trace",
    results: dict | None = None,
    sweep: dict | None = None,
    source: str | None = None,
) -> Input:
    """Load and analyse one trace file."""
    from hostgap.analysis.trace import analyse_trace

    analysis = analyse_trace(path, config, progress)
    _say(progress, f"analysing {path}")
    # every frame, not the top few: frames that differ only by an object address are merged
    # (report.words.merge_frames) before the top ones are taken
    doc = analysis.anatomy(top=FRAME_POOL).to_dict()
    doc["top_ops"] = doc["top_ops"][: config.top]
    doc["top_frames_max"] = config.top
    ov = analysis.overview()
    trace, links = analysis.trace, analysis.links
    return Input(
        source=source or path,
        kind=kind,
        label=label or _trace_label(path),
        trace_path=str(path),
        results=results,
        sweep=sweep,
        anatomy=doc,
        overview=ov,
        excerpt=excerpt(trace, doc),
        gap_time_ns=gap_time(trace, links, config.gap_threshold_ns),
    )


def gap_time(trace, links, threshold_ns: int) -> dict[str, list[int]]:
    """Idle-gap time (ns) per class and log2 length bin (``timeline.gap_bins``), summed over
    every stream of every device: the time-weighted twin of the overview's gap counts."""
    from hostgap.anatomy.timeline import IDLE_CLASSES, classify_gaps, gap_bins
    from hostgap.events import GPU_OP_KINDS

    rows = np.flatnonzero(trace.events.of_kind(*GPU_OP_KINDS))
    gap, cls = classify_gaps(trace, links, rows, threshold_ns)[1:3]
    bins = gap_bins()
    return {
        name: np.histogram(gap[cls == i], bins=bins, weights=gap[cls == i])[0].astype(np.int64).tolist()
        for i, name in enumerate(IDLE_CLASSES)
    }


def _from_results(arg: str, results: dict, run_dir: Path | None, config: AnalysisOptions, progress, notes=()) -> Input:
    if not isinstance(results, dict) or "differencing" not in results:
        raise HostgapError(arg, "not a hostgap results JSON (no 'differencing' key)")
    sweep = None
    notes = list(notes)
    if not results.get("differencing"):
        pass  # an attached run: no sweep to draw, and no timings.json to miss
    elif run_dir is not None and (run_dir / "timings.json").is_file():
        sweep = sweep_points(results, _read_json(run_dir / "timings.json"))
    else:
        where = f"in {run_dir}" if run_dir is not None else "(no run directory)"
        notes.append(f"timings.json not found {where}: the differencing fit is drawn without its points")
    trace_rel = results.get("anatomy_trace")
    trace_path = None
    if trace_rel and run_dir is not None:
        cand = Path(trace_rel) if os.path.isabs(trace_rel) else run_dir / trace_rel
        trace_path = str(cand) if cand.is_file() else None
    label = run_label(results)
    if trace_path:
        floor = results.get("floor_file")
        cfg = (
            config if config.floor_file or not floor or not os.path.isfile(floor) else replace(config, floor_file=floor)
        )
        inp = from_trace(trace_path, cfg, progress, label=label, kind="run", results=results, sweep=sweep, source=arg)
        return replace(inp, notes=tuple(notes))
    notes.append(
        "the run's trace is not available: step figures use the decode steps stored in results.json"
        if not trace_rel or run_dir is None
        else f"the run's trace is not available ({trace_rel} not found in {run_dir}): step figures use the "
        "decode steps stored in results.json"
    )
    return Input(
        source=arg,
        kind="run",
        label=label,
        trace_path=None,
        results=results,
        sweep=sweep,
        anatomy=anatomy_from_results(results),
        overview=None,
        excerpt=None,
        notes=tuple(notes),
    )


def anatomy_from_results(results: dict) -> dict:
    """The anatomy document as far as ``results.json`` keeps it (decode steps only)."""
    d = results.get("differencing") or {}
    return {
        "trace": results.get("anatomy_trace"),
        "activity": d.get("activity") or "gpu",
        "marker_family": "hostgap",
        "steps": results.get("steps_decode") or [],
        "summary": results.get("anatomy_summary") or {},
        "taxbreak": results.get("taxbreak") or {"applicable": False, "note": "not in results.json"},
        "verdict": results.get("anatomy_verdict") or results.get("verdict") or {},
        "top_ops": results.get("top_ops") or [],
        "top_frames": [],
    }


def sweep_points(results: dict, timings: dict) -> dict:
    """Differencing points per N: untraced wall W(N) and traced device-active G(N), each the
    run's estimator (min/median/mean) over its repeats -- the values the fitted lines use."""
    from hostgap.stats.differencing import estimate

    est = (results.get("differencing") or {}).get("estimator") or "min"
    wall = {int(n): v for n, v in (timings.get("untraced_wall_ns") or {}).items() if v}
    gpu = {int(n): [r["busy_ns"] for r in v] for n, v in (timings.get("traced") or {}).items() if v}
    ns = sorted(set(wall) | set(gpu))
    return {
        "n": ns,
        "wall_ns": [float(estimate(wall[n], est)) if n in wall else None for n in ns],
        "gpu_ns": [float(estimate(gpu[n], est)) if n in gpu else None for n in ns],
        "estimator": est,
    }


# -- helpers ---------------------------------------------------------------------------


def run_label(results: dict) -> str:
    parts = [
        results.get("preset") or Path(str(results.get("model") or results.get("model_path") or "model")).name,
        results.get("engine"),
        results.get("mode"),
        f"b{results['batch']}" if results.get("batch") is not None else None,
        f"L{results['prompt_len']}" if results.get("prompt_len") is not None else None,
        results.get("device_name") or results.get("device"),
    ]
    return " ".join(str(p) for p in parts if p)


def _trace_label(path: str) -> str:
    return Path(path).name


def _looks_like_results(p: Path) -> bool:
    if p.suffix != ".json":
        return False
    with open(p, "rb") as f:
        head = f.read(4096)
    return b'"differencing"' in head or b'"run_id"' in head


def _read_json(p: Path) -> dict:
    try:
        return json.loads(Path(p).read_bytes())
    except FileNotFoundError:
        raise HostgapError(str(p), "no such file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise HostgapError(str(p), f"not valid JSON ({e})") from None


def _lookup_db(arg: str, db: str | None) -> tuple[dict | None, Path]:
    from hostgap.store.database import RunsDB, default_path

    path = Path(db) if db else default_path()
    if not path.is_file():
        if db:
            raise HostgapError(db, "runs database not found")
        return None, path
    with RunsDB(path) as rdb:
        return rdb.get(arg), path


def _say(progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


# -- timeline excerpt ------------------------------------------------------------------


def excerpt_step(anatomy: dict) -> tuple[int | None, str]:
    """The step to draw and why: the steady decode step whose wall is the median of the steady
    ones (else the longest non-partial step)."""
    steps = anatomy.get("steps") or []
    if not steps:
        return None, ""
    steady = set((anatomy.get("summary") or {}).get("steady", {}).get("indices") or [])
    pool = [s for s in steps if s["index"] in steady and s["wall_ns"]]
    if not pool:
        pool = [s for s in steps if not s["partial"] and s["wall_ns"]] or steps
        return max(pool, key=lambda s: s["wall_ns"])["index"], "the longest step (the trace has no steady decode steps)"
    pool.sort(key=lambda s: (s["wall_ns"], s["index"]))
    return pool[(len(pool) - 1) // 2]["index"], "the steady decode step with the median wall time"


def excerpt(trace, anatomy: dict) -> dict | None:
    """Gantt bars of one step's time window: device ops per (device, stream) lane and host
    launch/runtime calls per thread (CPU traces: CPU-compute ops on their thread)."""
    from hostgap.anatomy.timeline import activity_rows
    from hostgap.events import HOST_API_KINDS

    idx, choice = excerpt_step(anatomy)
    if idx is None:
        return None
    step = next(s for s in anatomy["steps"] if s["index"] == idx)
    lo = int(step["start_ns"])
    hi = lo + int(step["wall_ns"])
    ev = trace.events
    activity, op_rows = activity_rows(trace)
    host = np.flatnonzero(ev.of_kind(*HOST_API_KINDS))
    lanes = []

    def add(rows, lane_of, kind):
        rows = rows[(ev.end_ns[rows] > lo) & (ev.start_ns[rows] < hi)]
        keys = lane_of(rows)
        for key in sorted(set(keys)):
            sel = rows[keys == key]
            lanes.append({"label": key, "kind": kind, "rows": sel})

    if activity == "gpu":
        add(
            op_rows,
            lambda r: np.array([f"GPU {d} stream {s}" for d, s in zip(ev.device[r], ev.stream[r])], dtype=object),
            "device",
        )
        add(host, lambda r: np.array([f"host thread {t}" for t in ev.tid[r]], dtype=object), "host")
    else:
        add(op_rows, lambda r: np.array([f"CPU compute, thread {t}" for t in ev.tid[r]], dtype=object), "device")
        add(host, lambda r: np.array([f"host thread {t}" for t in ev.tid[r]], dtype=object), "host")
    total = sum(len(ln["rows"]) for ln in lanes)
    keep = max(1, EXCERPT_MAX_BARS // max(len(lanes), 1))
    names: dict[str, int] = {}
    out_lanes = []
    dropped = 0
    for ln in lanes:
        rows = ln["rows"]
        if len(rows) > keep:  # keep the longest bars: they are the ones visible at this scale
            order = np.argsort(-ev.dur_ns[rows], kind="stable")[:keep]
            dropped += len(rows) - keep
            rows = np.sort(rows[order])
        bars = []
        for r in rows.tolist():
            nm = trace.names[int(ev.name[r])]
            code = names.setdefault(nm, len(names))
            bars.append([int(max(ev.start_ns[r], lo) - lo), int(min(ev.end_ns[r], hi) - lo), code])
        out_lanes.append({"label": ln["label"], "kind": ln["kind"], "bars": bars})
    return {
        "step": idx,
        "kind": step["kind"],
        "start_ns": lo,
        "wall_ns": hi - lo,
        "lanes": out_lanes,
        "names": list(names),
        "bars": total,
        "dropped": dropped,
        "choice": choice,
        "activity": activity,
    }
