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
    )


def baseline(doc: dict, preset: str | None = None, gpu: str | None = None) -> Baseline:
    """A trace's or a run's baseline, by what the document is: a measured run (its differencing),
    an attached run (its analysis, even where ``attach --json`` also carries the steps), a rank
    set, one trace."""
    if isinstance(doc.get("differencing"), dict):
        return from_run(doc, preset, gpu)
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
