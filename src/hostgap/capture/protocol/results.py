"""From traces and timings to the run's ``results.json``.

The trace analysis itself lives in :mod:`hostgap.anatomy` (totals for G(N) and K(N); the
per-step anatomy, TaxBreak and verdict of the N2 trace); this module only calls it and lays the
numbers out under the results contract read by ``hostgap fit``/``regimes``/``report``.

On a CPU trace there is no device: ``activity`` is ``"cpu-compute"`` and every
"device-active" number is the CPU-compute analogue defined in
:func:`hostgap.anatomy.timeline.cpu_compute_mask` (union of compute ops); GPU-only
quantities (HDBI, launch floor) are reported as not applicable (``None`` with a note).
"""

from __future__ import annotations

import os
import time

import numpy as np

from hostgap.anatomy.verdict import verdict as make_verdict
from hostgap.capture.protocol import validity
from hostgap.capture.protocol.engine import STEP_PREFIX
from hostgap.events import Kind
from hostgap.model.levers.baseline import compute_growth
from hostgap.stats.differencing import ACTIVITY_LABEL

RESULTS_SCHEMA_VERSION = 1
"""Schema version of a run directory's ``results.json``, ``config.json`` and ``timings.json``."""


def trace_stats(path, trace=None) -> dict:
    """Whole-trace totals of one traced run (one row of G(N), K(N), copies); ``trace``: the
    already loaded trace of ``path``."""
    from hostgap.analysis.trace import analyse_trace
    from hostgap.anatomy.timeline import activity_rows, totals

    trace = trace if trace is not None else analyse_trace(path).trace
    tot = totals(trace)
    ev = trace.events
    _act, rows = activity_rows(trace)
    kernel_rows = rows[ev.kind[rows] == Kind.KERNEL] if tot.activity == "gpu" else rows
    steps = trace.name_mask(lambda s: s.startswith(STEP_PREFIX)) & ev.of_kind(Kind.ANNOTATION)
    return {
        "activity": tot.activity,
        "busy_ns": int(tot.busy_ns),
        "kernel_sum_ns": int(tot.kernel_sum_ns),
        "kernel_union_ns": int(tot.kernel_union_ns),
        "kernel_count": int(tot.kernel_count),
        "unique_kernels": int(len(np.unique(ev.name[kernel_rows]))),
        "copy_ns": int(tot.copy_ns),
        "copies": int(np.count_nonzero(ev.kind == Kind.MEMCPY)),
        "h2d_bytes": int(tot.h2d_bytes),
        "d2h_bytes": int(tot.d2h_bytes),
        "step_annotations": int(np.count_nonzero(steps)),
        "launches": int(np.count_nonzero(ev.kind == Kind.LAUNCH)),
        "graph_launches": int(np.count_nonzero(ev.kind == Kind.GRAPH_LAUNCH)),
    }


def anatomy_of(trace_path, floor_file: str | None = None, trace=None) -> dict | None:
    """The anatomy JSON of one trace (``hostgap.anatomy.steps.analyze``), or a dict saying
    why it is unavailable. ``trace``: the already loaded trace of ``trace_path``."""
    from hostgap.analysis.trace import analyse_trace
    from hostgap.anatomy.steps import AnalysisOptions

    cfg = AnalysisOptions(step_marker=None, launch_floor_ns=None, floor_file=floor_file)
    return analyse_trace(trace if trace is not None else trace_path, cfg).anatomy().to_dict()


def cell_key(cfg) -> str:
    """The identity of a grid cell for resuming sweeps: what the workload is, not how long
    it was measured for (``cfg``: a :class:`~hostgap.capture.protocol.orchestrate.MeasureConfig`)."""
    what = cfg.preset or f"model:{cfg.model_path}"
    return "|".join(
        str(x)
        for x in (
            what,
            cfg.engine,
            cfg.device,
            cfg.mode,
            f"b{cfg.batch}",
            f"L{cfg.prompt_len}",
            cfg.dtype,
            f"t{cfg.threads}" if cfg.device == "cpu" else "t-",
            f"n{cfg.n1}-{cfg.n2}",
        )
        + ((f"tp{cfg.tp}",) if cfg.tp > 1 else ())
    )


def _contention(cfg, raw: dict) -> dict:
    """The last attempt's contention flags (recomputed for timings that predate them)."""
    attempts = raw.get("attempts")
    if attempts:
        return dict(attempts[-1], attempts=len(attempts))
    return dict(validity.contention_of(cfg, raw), attempts=1)


def _steady_fraction(anatomy: dict | None) -> float | None:
    steady = _summary_of(anatomy).get("steady") or {}
    return (steady.get("host_fraction") or {}).get("median")


def judge(
    d: dict, cont: dict, hdbi: float | None, activity: str, anatomy: dict | None, conv: dict | None = None
) -> dict:
    """Validity, the one verdict and the agreement of the two estimates, for ``build_results``.
    An invalid measurement gets ``{"verdict": "invalid", "reasons": [...]}`` as its verdict;
    when the re-measurement budget ran out first (``conv``), the last reason says how much
    more to give it."""
    from hostgap.capture.protocol.converge import budget_hint

    why = validity.reasons(d, cont)
    hint = budget_hint(conv) if why else None
    if hint:
        why.append(hint)
    elif why and cont.get("budget_spent"):
        why.append("no time left in the budget to measure again: try a larger --budget")
    if why:
        v = {
            "verdict": "invalid",
            "basis": "validity",
            "host_fraction": None,
            "host_wait_share": None,
            "hdbi": None,
            "reasons": why,
            "note": "invalid measurement, not a result: " + "; ".join(why),
        }
    else:
        v = make_verdict(d["host_fraction"], hdbi=hdbi).to_dict()
        if activity != "gpu":
            v["note"] = (
                "CPU run: host fraction = 1 - compute share of the traced runs; HDBI and "
                "the launch floor are GPU-only (not applicable)"
            )
    return {
        "valid": not why,
        "invalid_reasons": why,
        "verdict": v,
        "agreement": validity.agreement(d["host_fraction"], _steady_fraction(anatomy)),
    }


def _summary_of(anatomy: dict | None) -> dict:
    if not anatomy or "unavailable" in anatomy:
        return dict(anatomy or {})
    return anatomy.get("summary", {})


def cores_of(raw: dict, engine: str) -> dict:
    """The cores the run could use (its affinity, which the engine's processes inherit) and the
    machine's, and the CPU time this process's measuring thread spent per decode step (Theil-Sen
    over the untraced runs; for an engine in other processes: its frontend's share of a core),
    the ``cpu`` lever's evidence (docs/advise.md)."""
    from hostgap.stats.confidence import theil_sen

    runs = {
        int(n): [float(y) for y in v or [] if isinstance(y, (int, float))]
        for n, v in (raw.get("untraced_thread_ns") or {}).items()
    }
    try:
        fit = theil_sen(runs)
    except ValueError:  # a degenerate sweep (every time tied): its interval has no meaning
        fit = None
    slope = fit.value if fit is not None else float("nan")
    return {
        "usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "logical": os.cpu_count(),
        "thread_cpu_step_ns": max(slope, 0.0) if np.isfinite(slope) else None,
    }


def _hdbi(taxbreak: dict | None, activity: str) -> float | None:
    if activity != "gpu" or not taxbreak:
        return None
    v = taxbreak.get("hdbi")
    return None if v is None else float(v)


def build_results(
    *,
    schema_version: int,
    run_id: str,
    cfg,
    arch,
    diff,
    anatomy: dict | None,
    describe: dict,
    raw: dict,
    run_dir: str,
    build_s: float,
) -> dict:
    """The results dict (``results.json``). Keys of the cross-module contract come first."""
    d = diff.to_dict()
    activity = diff.activity
    taxbreak = (anatomy or {}).get("taxbreak") if anatomy and "unavailable" not in anatomy else None
    steps = (anatomy or {}).get("steps") or []
    hdbi = _hdbi(taxbreak, activity)
    cont = _contention(cfg, raw)  # thread time only where the decode runs on this thread
    j = judge(d, cont, hdbi, activity, anatomy, raw.get("convergence"))
    k_n2 = raw["traced"][str(cfg.n2)][0]
    return {
        "schema_version": schema_version,
        "run_id": run_id,
        "valid": j["valid"],
        "invalid_reasons": j["invalid_reasons"],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "preset": cfg.preset,
        "model_path": cfg.model_path,
        "arch": arch.to_dict(),
        "device": cfg.device,
        "device_name": describe.get("device_name", cfg.device),
        "mode": cfg.mode,
        "engine": cfg.engine,
        "tp": cfg.tp,  # tensor-parallel degree (fit and predict group by it); 1 but for vLLM --tp
        "batch": cfg.batch,
        "prompt_len": cfg.prompt_len,
        "dtype": cfg.dtype,
        "n1": cfg.n1,
        "n2": cfg.n2,
        "threads": cfg.threads,
        "repeats": cfg.repeats,
        "traced_repeats": cfg.traced_repeats,
        "sweep": list(cfg.sweep),
        "cell_key": cell_key(cfg),
        "differencing": {
            "t_step_ns": d["t_step_ns"],
            "g_step_ns": d["g_step_ns"],
            "h_step_ns": d["h_step_ns"],
            "k_step": d["k_step"],
            "host_fraction": d["host_fraction"],
            "kernel_sum_step_ns": d["kernel_sum_step_ns"],
            "ci": d["ci"],
            "r2_wall": d["r2_wall"],
            "r2_gpu": d["r2_gpu"],
            "slope_agreement": d["slope_agreement"],
            "profiler_inflation": d["profiler_inflation"],
            "copies_per_step": d["copies_per_step"],
            "activity": activity,
            "activity_label": ACTIVITY_LABEL.get(activity, activity),
            "kernel_union_step_ns": d["kernel_union_step_ns"],
            "sum_minus_union_step_ns": d["sum_minus_union_step_ns"],
            "copy_step_ns": d["copy_step_ns"],
            "h2d_bytes_per_step": d["h2d_bytes_per_step"],
            "d2h_bytes_per_step": d["d2h_bytes_per_step"],
            "slope_agreement_gpu": d["slope_agreement_gpu"],
            "traced_t_step_ns": d["traced_t_step_ns"],
            "fit_wall": d["fit_wall"],
            "fit_gpu": d["fit_gpu"],
            "fit_kernels": d["fit_kernels"],
            "estimator": d["estimator"],
            "kv_range": d["kv_range"],
            "basis": d["basis"],
            "compute_share": d["compute_share"],
            "traced_g_step_ns": d["traced_g_step_ns"],
            "preempted_share": cont["preempted_share"],
            "preempted_basis": cont.get("preempted_basis"),
            "traced_preempted_share": cont["traced_preempted_share"],
            "repeat_spread": cont["repeat_spread"],
            "contended": cont["contended"],
            "contention_flags": cont["flags"],
            "attempts": cont["attempts"],
            "machine": raw.get("machine"),  # steal, pressure, frequency, throttling (capture.noise)
            "convergence": raw.get("convergence"),  # the rounds measured beyond the default
            "thread_t_step_ns": d["thread_t_step_ns"] if validity.in_thread(cfg) else None,
            "r2_thread": d["r2_thread"] if validity.in_thread(cfg) else None,
            "kernels_per_output_token": k_n2["kernel_count"] / cfg.n2,
            "unique_kernels": k_n2["unique_kernels"],
            "note": (
                f"mean per decode step over KV lengths {d['kv_range'][0]}..{d['kv_range'][1]}" if d["kv_range"] else ""
            ),
        },
        "hdbi": hdbi,
        "taxbreak": taxbreak,
        "steps_decode": [s for s in steps if s.get("kind") == "decode"],
        "verdict": j["verdict"],
        "agreement": j["agreement"],
        "anatomy_summary": _summary_of(anatomy),
        "cores": cores_of(raw, cfg.engine),
        # how compute grows with rows and context (the batch lever on a CPU run: docs/advise.md)
        "compute_growth": compute_growth(steps, _summary_of(anatomy), cfg.prompt_len, cfg.batch) if steps else None,
        "top_ops": (anatomy or {}).get("top_ops"),
        "floor_file": cfg.floor_file,
        "engine_facts": describe,
        "build_s": round(build_s, 3),
        "stacks": raw.get("stacks"),
        "interleaved": raw.get("interleaved"),  # measured together with other engines, runs alternating
        "anatomy_trace": raw.get("anatomy_trace"),
        "run_dir": run_dir,
    }
