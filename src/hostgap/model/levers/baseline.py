"""The levers' inputs (:class:`~hostgap.model.levers.arithmetic.Baseline`) from the documents hostgap already
writes: ``analyze --json`` of one trace (its steps), and the results of a measured, attached or
watched run (``measure --json``: the differencing medians and their intervals; an attached run's
analysed steps). Every number comes from the document; what it does not say is named in
``notes``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.arch import PRESETS
from hostgap.model.levers.arithmetic import Baseline, Steps
from hostgap.stats.confidence import theil_sen_line

ENGINES_BY_MARKER = {"vllm": "vllm", "sglang": "sglang"}


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")


def _chosen(doc: dict) -> list[dict]:
    """The steps the verdict rests on: steady decode steps, else decode/unknown steps that are not
    partial, else every step."""
    steps = doc.get("steps") or []
    steady = set((doc.get("summary") or {}).get("steady", {}).get("indices") or [])
    pick = [s for s in steps if s.get("index") in steady]
    if not pick:
        pick = [s for s in steps if s.get("kind") in ("decode", "unknown") and not s.get("partial")]
    return pick or list(steps)


def trace_steps(rows: list[dict]) -> Steps:
    """Per-step quantities of ``analyze --json`` step objects."""

    def col(f) -> np.ndarray:
        return np.array([f(r) for r in rows], dtype=float)

    def tb(key: str):
        return lambda r: _num((r.get("taxbreak") or {}).get(key))

    return Steps(
        wall=col(lambda r: _num(r.get("wall_ns"))),
        device=col(lambda r: _num(r.get("gpu_active_ns"))),
        host_wait=col(lambda r: _num(r.get("host_wait_ns"))),
        between=col(
            lambda r: max(_num(r.get("wall_ns")) - (_num(r.get("marker_end_ns")) - _num(r.get("start_ns"))), 0.0)
        ),
        orchestrate=col(tb("orchestrate_ns")),
        launches=col(lambda r: _num(r.get("launches") or 0)),
        graph_launches=col(lambda r: _num(r.get("graph_launches") or 0)),
        kernels=col(lambda r: _num(r.get("kernel_count") or 0)),
    )


def _preset(name: str | None) -> str | None:
    return name if name in PRESETS else None


def from_trace(doc: dict, preset: str | None = None, gpu: str | None = None) -> Baseline:
    """The baseline of one trace's ``analyze --json`` document."""
    if "steps" not in doc:
        raise HostgapError(str(doc.get("trace", "input")), "not an analysed trace: no steps")
    rows = _chosen(doc)
    if not rows:
        raise HostgapError(str(doc.get("trace", "input")), "no steps to advise on")
    s = trace_steps(rows)
    keep = np.isfinite(s.wall) & (s.wall > 0)
    s = s.take(np.flatnonzero(keep))
    if not len(s):
        raise HostgapError(str(doc.get("trace", "input")), "no step with a wall time")
    s = Steps(s.wall, np.nan_to_num(s.device), np.nan_to_num(s.host_wait), s.between, s.orchestrate, *_counts(s))
    gen = [float(r["gen_requests"]) for r in rows if isinstance(r.get("gen_requests"), (int, float))]
    notes = []
    batch = float(np.median(gen)) if gen else 1.0
    if not gen:
        notes.append("batch not in the trace's step markers: 1 sequence per step assumed (tokens/s per sequence)")
    verdict = doc.get("verdict") or {}
    unfaithful = []
    flagged = verdict.get("graph_flagged_steps")
    if flagged:
        unfaithful.append(f"graph replays flagged on {flagged if isinstance(flagged, int) else len(flagged)} step(s)")
    if verdict.get("verdict") == "incomplete-capture":
        unfaithful.append("incomplete capture: the device idle lies with work the trace does not contain")
    tb = doc.get("taxbreak") or {}
    devices = doc.get("devices") or []
    gpu_run = doc.get("activity", "gpu") == "gpu"
    return Baseline(
        source=f"this trace ({len(s)} step{'' if len(s) == 1 else 's'})",
        gpu=gpu_run,
        steps=s,
        batch=max(batch, 1.0),
        batch_known=bool(gen),
        engine=ENGINES_BY_MARKER.get(str(doc.get("marker_family"))),
        launch_floor_ns=tb.get("launch_floor_ns"),
        device_name=gpu or next((d.get("name") for d in devices if d.get("name_source", "trace") == "trace"), None),
        preset=preset,
        unfaithful=tuple(unfaithful),
        notes=tuple(notes),
    )


def _counts(s: Steps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.nan_to_num(s.launches), np.nan_to_num(s.graph_launches), np.nan_to_num(s.kernels)


GROWTH_MIN_STEPS = 6
"""Fewer steady decode steps give no compute growth (the context slope needs them)."""


def _theil_sen(x: np.ndarray, y: np.ndarray, most: int = 400) -> float:
    """stats.confidence's Theil-Sen slope over at most ``most`` evenly spaced points (the pairwise
    slopes grow with the square of the points); NaN without two distinct x."""
    if len(x) > most:
        pick = np.linspace(0, len(x) - 1, most).astype(int)
        x, y = x[pick], y[pick]
    try:
        return theil_sen_line(x, y)[0]
    except ValueError:
        return float("nan")


def compute_growth(steps: list[dict], summary: dict, prompt_len: int, batch: float) -> dict | None:
    """How a run's compute (device-active, CPU compute on a CPU) grows with the rows it processes
    and with the context, from its own traced steps: the prefill's compute over its ``batch x
    prompt_len`` rows against a decode step's over ``batch`` rows, and the steady decode steps'
    growth per token of context (each decode step adds one to every sequence's context). None
    where the run has no prefill or fewer than :data:`GROWTH_MIN_STEPS` steady steps.

    >>> rows = [{"index": i, "gpu_active_ns": 1000.0 + 10 * i} for i in range(2, 10)]
    >>> summary = {"steady": {"indices": list(range(2, 10))}, "prefill": {"gpu_active_ns": {"median": 2325.0}}}
    >>> g = compute_growth(rows, summary, 128, 1)
    >>> g["context_slope_ns"], g["decode_ns"], g["context"], g["row_ns"]
    (10.0, 1055.0, 133.5, 10.0)
    """
    steady = set((summary.get("steady") or {}).get("indices") or [])
    rows = [r for r in steps if r.get("index") in steady and np.isfinite(_num(r.get("gpu_active_ns")))]
    prefill = _num(((summary.get("prefill") or {}).get("gpu_active_ns") or {}).get("median"))
    if len(rows) < GROWTH_MIN_STEPS or not np.isfinite(prefill) or prompt_len < 2 or batch < 1:
        return None
    idx = np.array([float(r["index"]) for r in rows])
    g = np.array([float(r["gpu_active_ns"]) for r in rows])
    decode = float(np.median(g))
    slope = _theil_sen(idx, g)
    pre_rows, dec_rows = batch * prompt_len, batch
    return {
        "prefill_ns": prefill,
        "prefill_rows": pre_rows,
        "decode_ns": decode,
        "decode_rows": dec_rows,
        "row_ns": max((prefill - decode) / (pre_rows - dec_rows), 0.0),
        "context_slope_ns": max(slope, 0.0) if np.isfinite(slope) else 0.0,  # every step tied: no growth
        "context": float(prompt_len + np.mean(idx)),
        "steps": len(rows),
        "basis": "traced: the prefill's compute per prompt row beyond a decode step's, and the steady decode "
        "steps' growth per token of context (Theil-Sen)",
    }


def _cores(doc: dict) -> dict | None:
    """The run's cores (``results["cores"]``) with its busy host processes: this process and,
    for an engine in other processes, each of them (``engine_facts.engine_processes``)."""
    c = doc.get("cores")
    if not isinstance(c, dict) or not isinstance(c.get("usable"), int) or c["usable"] < 1:
        return None
    procs = (doc.get("engine_facts") or {}).get("engine_processes")
    return {**c, "processes": 1 + (len(procs) if isinstance(procs, dict) else 0)}


def from_run(doc: dict, preset: str | None = None, gpu: str | None = None) -> Baseline:
    """The baseline of a measured run's results (``measure --json``, one run): the differencing
    medians with the wall's interval; launches and their costs from the run's anatomy."""
    d = doc.get("differencing") or {}
    t, g, h = _num(d.get("t_step_ns")), _num(d.get("g_step_ns")), _num(d.get("h_step_ns"))
    rid = str(doc.get("run_id", "run"))
    if not (np.isfinite(t) and t > 0 and np.isfinite(g)):
        raise HostgapError(rid, "no measured step (differencing t_step_ns, g_step_ns) to advise on")
    ci = (d.get("ci") or {}).get("t_step_ns")
    wall_ci = (float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2 else None
    gpu_run = d.get("activity", "gpu") != "cpu-compute" and doc.get("device") != "cpu"
    verdict = doc.get("verdict") or {}
    share = verdict.get("host_wait_share")
    wait = float(share) * t if isinstance(share, (int, float)) and gpu_run else max(h, 0.0)
    facts = (doc.get("engine_facts") or {}).get("cb_split") or {}
    between = _num(facts.get("between_ns"))
    tb = doc.get("taxbreak") or {}
    n_steps = _num((doc.get("anatomy_summary") or {}).get("steps"))
    per = (lambda v: _num(v) / n_steps) if n_steps > 0 else (lambda v: float("nan"))
    launches = per(tb.get("launches"))
    steps = Steps(
        wall=np.array([t]),
        device=np.array([max(g, 0.0)]),
        host_wait=np.array([min(wait, t)]),
        between=np.array([between if np.isfinite(between) else 0.0]),
        orchestrate=np.array([per(tb.get("orchestrate_ns"))]),
        launches=np.array([launches if np.isfinite(launches) else 0.0]),
        graph_launches=np.array([np.nan_to_num(per(tb.get("graph_launches")))]),
        kernels=np.array([_num(d.get("k_step"))]),
    )
    notes = [] if facts else ["no between-step loop time in this run: the engine loop's wait taken as 0"]
    unfaithful = (
        () if doc.get("valid", True) else ("invalid measurement: " + ", ".join(doc.get("invalid_reasons") or []),)
    )
    growth = doc.get("compute_growth")
    if not isinstance(growth, dict) and isinstance(doc.get("steps_decode"), list):
        growth = compute_growth(
            doc["steps_decode"],
            doc.get("anatomy_summary") or {},
            int(doc.get("prompt_len") or 0),
            float(doc.get("batch") or 1),
        )
    cores = _cores(doc)
    return Baseline(
        source=f"measured run {rid}",
        gpu=gpu_run,
        steps=steps,
        wall_ci=wall_ci,
        batch=float(doc.get("batch") or 1),
        engine=doc.get("engine"),
        launch_floor_ns=tb.get("launch_floor_ns"),
        device_name=gpu or doc.get("device_name"),
        preset=preset or _preset(doc.get("preset")),
        context=int(doc.get("prompt_len") or 128) + int(doc.get("n2") or 0) // 2,
        unfaithful=unfaithful,
        notes=tuple(notes),
        facts={
            **({"compute_growth": growth} if isinstance(growth, dict) else {}),
            **({"cores": cores} if cores else {}),
        },
    )


WATCH_LAUNCHES = "needs the launches' costs: an engine's metrics carry none (hostgap advise on the attach run that calibrated the watch)"
"""Why the launch-path levers do not apply to a watched run."""


def from_watch_rows(
    rows: list[dict], calibration: dict | None, source: str, preset: str | None = None, gpu: str | None = None
) -> Baseline:
    """The baseline of watched intervals (``watch`` rows with a host-share estimate): each
    interval is one step, its mean step period ``T``, the calibration's device time ``G`` at its
    batch, ``W = T - G`` (the host-exposed time the estimate gives). The metrics carry no launches
    and no between-step loop time: the levers that need them say so. ``calibration``: the
    watch's calibration (``Calibration.to_dict()``), whose lines in the batch give the ``batch``
    lever."""
    use = [
        r
        for r in rows
        if r.get("host_share") is not None
        and isinstance(r.get("step_period_s"), (int, float))
        and r["step_period_s"] > 0
        and isinstance(r.get("gpu_s_per_step"), (int, float))
        and isinstance(r.get("seqs_per_step"), (int, float))
        and r["seqs_per_step"] > 0
    ]
    if not use:
        raise HostgapError(source, "no watched interval with a host-share estimate to advise on")
    wall = np.array([float(r["step_period_s"]) * 1e9 for r in use])
    dev = np.minimum(np.array([float(r["gpu_s_per_step"]) * 1e9 for r in use]), wall)
    nan = np.full(len(use), np.nan)
    steps = Steps(wall, dev, wall - dev, nan, nan, np.zeros(len(use)), np.zeros(len(use)), nan)
    cal = calibration if isinstance(calibration, dict) and calibration.get("batches") else None
    return Baseline(
        source=f"{source} ({len(use)} interval{'' if len(use) == 1 else 's'})",
        gpu=(cal or {}).get("activity") != "cpu-compute",
        steps=steps,
        batch=float(np.median([float(r["seqs_per_step"]) for r in use])),
        engine=next((str(r["engine"]) for r in use if r.get("engine")), None),
        device_name=gpu,
        preset=preset,
        notes=(
            "a watched run: the engine's metrics give the step period and batch, the calibration the device "
            "time; launches and the engine loop between steps are not in them",
        ),
        facts={"watch_calibration": cal, "launches_why": WATCH_LAUNCHES},
    )


def from_watch(doc: dict, preset: str | None = None, gpu: str | None = None) -> Baseline:
    """A stored watch's baseline: its retained intervals and its calibration."""
    w = doc["watch"] if isinstance(doc.get("watch"), dict) else doc  # stored, or watch --json's document
    return from_watch_rows(
        list(w.get("intervals") or []), w.get("calibration"), f"watched run {doc.get('run_id', '')}", preset, gpu
    )


def baseline(doc: dict, preset: str | None = None, gpu: str | None = None) -> Baseline:
    """A trace's or a run's baseline, by what the document is: a measured run (its differencing),
    an attached run (its analysis, even where ``attach --json`` also carries the steps), a rank
    set, one trace."""
    if isinstance(doc.get("differencing"), dict):
        return from_run(doc, preset, gpu)
    if (doc.get("kind") == "watch" and isinstance(doc.get("watch"), dict)) or (
        isinstance(doc.get("intervals"), list) and "url" in doc
    ):
        return from_watch(doc, preset, gpu)
    if isinstance(doc.get("analysis"), dict):  # an attached run carries its analysed trace(s)
        b = baseline(doc["analysis"], preset, gpu)
        n = doc.get("batch")
        if not b.batch_known and isinstance(n, (int, float)) and n >= 1:
            b = replace(b, batch=float(n), batch_known=True, notes=tuple(x for x in b.notes if "batch" not in x))
        n = len(b.steps)
        return replace(b, source=f"attached run {doc.get('run_id', '')} ({n} step{'' if n == 1 else 's'})")
    if isinstance(doc.get("ranks"), list) and doc["ranks"]:
        return from_rank_set(doc, preset, gpu)
    if "steps" in doc:
        return from_trace(doc, preset, gpu)
    raise HostgapError(
        str(doc.get("run_id") or doc.get("trace") or "input"), "neither an analysed trace nor a measured run"
    )


def from_rank_set(doc: dict, preset: str | None = None, gpu: str | None = None) -> Baseline:
    """A rank set's baseline: the rank whose steps wait longest on their host (median host-caused
    idle), the one the others' collectives wait for."""
    parts = [r for r in doc["ranks"] if isinstance(r, dict) and r.get("steps")]
    if not parts:
        raise HostgapError("input", "a rank set without steps")
    bases = [from_trace(r, preset, gpu) for r in parts]
    i = int(np.argmax([float(np.median(b.steps.host_wait)) for b in bases]))
    b = bases[i]
    note = f"rank set of {len(parts)} ranks: advised on rank {parts[i].get('rank')} (the longest host-caused wait)"
    return replace(b, notes=(*b.notes, note))
