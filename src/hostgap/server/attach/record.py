"""The result of one attach: the analysis of its files, what was asked and seen, stored as a run.

The result is a ``results.json`` like a measured run's (``run_id``, ``engine``, ``batch``,
``prompt_len``, ``device``, ``run_dir``, ``anatomy_trace`` ...), with ``mode: "attach"`` and no
differencing (one traced run of someone else's traffic: ``differencing`` is null). The runs
database lists its per-step medians over the steady decode steps (``step_medians``);
``report`` and ``compare`` analyse its trace as they do any run's.
"""

from __future__ import annotations

import os
import time

from hostgap.analysis.trace import observed_settings
from hostgap.anatomy.steps import AnalysisOptions
from hostgap.errors import HostgapError
from hostgap.server.attach.client import EXIT_NO_RESULT, AttachError, ProfileClient
from hostgap.server.attach.config import AttachConfig, Session, config_dict
from hostgap.server.attach.loadgen import late_streams
from hostgap.server.attach.steps_seen import (
    analyse_paths,
    batches_seen,
    decode_steps,
    first_rank,
    frontend_time,
    load_turnover_notes,
    step_medians,
    step_period_s,
)
from hostgap.version import SCHEMA_VERSION


def build_result(cfg: AttachConfig, client: ProfileClient, session: Session, run_dir) -> dict:
    """Analyse the worker files (as ``hostgap analyze`` does) and assemble the result."""
    workers = [str(p) for p in session.files.workers]
    opts = AnalysisOptions(step_marker=cfg.step_marker)
    idle = (
        "the server ran no steps while profiled (no traffic): give --load C to drive it"
        if session.steps_counted == 0
        else "give --load C to drive the server while it is profiled"
    )
    try:
        doc = analyse_paths(workers, opts)
    except AttachError:
        raise
    except HostgapError as e:  # the files came back but hold nothing to analyse
        raise AttachError(e.source, f"{e.problem}; {idle}", EXIT_NO_RESULT) from None
    main = first_rank(doc)
    steps = main.get("steps") or []
    if not steps or all(s.get("partial") for s in steps):
        raise AttachError(client.url, f"the trace holds no complete engine step ({workers[0]}); {idle}", EXIT_NO_RESULT)
    medians = step_medians(main)
    seen = observed_settings(workers[0])
    settings = client.settings.to_dict()
    settings["observed"] = seen
    settings["not_turned_off"] = sorted(set(settings["not_turned_off"]) | {k for k, v in seen.items() if v})
    decode = decode_steps(main)
    batches = batches_seen(steps)
    batch = cfg.load.concurrency if cfg.load is not None else _modal_batch(batches.get("decode") or {})
    reasons = invalid_reasons(cfg, decode, batches)
    rel = os.path.relpath(workers[0], run_dir.path)
    cost = session.overhead.result(step_period_s(steps)) if session.overhead is not None else None
    result = {
        "schema_version": SCHEMA_VERSION,
        "run_id": session.run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": "attach",
        "engine": client.engine,
        "engine_version": client.version,
        "server_url": client.url,
        "model": _model_name(cfg, client),
        "preset": None,
        "device": "cpu" if main.get("activity") == "cpu-compute" else "cuda",
        "batch": batch,
        "prompt_len": cfg.load.prompt_len if cfg.load is not None else None,
        "load": None if cfg.load is None else {**config_dict(cfg)["load"]},
        "steps_requested": cfg.steps,
        "skip": cfg.skip,
        "steps_seen": len(steps),
        "decode_steps_seen": len(decode),
        "batches_seen": batches,
        "per_step_batch": [_step_batch(s) for s in steps],
        "differencing": None,
        "step_medians": medians,
        "verdict": main.get("verdict"),
        "anatomy_verdict": main.get("verdict"),
        "anatomy_summary": main.get("summary"),
        "taxbreak": main.get("taxbreak"),
        "steps_decode": decode,
        "top_ops": main.get("top_ops"),
        "analysis": doc,
        "anatomy_trace": rel,
        "traces": [os.path.relpath(p, run_dir.path) for p in session.files.all],
        "frontend_traces": [os.path.relpath(p, run_dir.path) for p in session.files.frontend],
        "frontend": _frontend(session, len(steps), run_dir),
        "trace_dir": session.trace_dir,
        "trace_dir_source": session.trace_dir_source,
        "profiling": {
            **settings,
            "started_at": session.started_at,
            "stopped_at": session.stopped_at,
            "profiled_s": round(session.stopped_at - session.started_at, 3) if session.started_at else None,
            "stop_problem": session.stop_problem,
            "inflation": cost,
        },
        "flags": ["profiler inflation above the limit: " + cost["text"]] if cost and cost.get("flagged") else [],
        "notes": session.notes,
        "load_stats": session.load_stats,
        "load_notes": load_notes(cfg, steps, session.load_stats),
        "valid": not reasons,
        "invalid_reasons": reasons,
        "run_dir": str(run_dir.path.resolve()),
    }
    return result


def _frontend(session: Session, n_steps: int, run_dir) -> dict | None:
    """The API server's host time (vLLM's frontend trace), per engine step; None without one."""
    if not session.files.frontend:
        return None
    try:
        out = frontend_time(str(session.files.frontend[0]), n_steps)
    except HostgapError as e:  # an empty or unreadable frontend file does not cost the result
        return {"trace": os.path.relpath(session.files.frontend[0], run_dir.path), "problem": e.problem}
    out["trace"] = os.path.relpath(out["trace"], run_dir.path)
    return out


def load_notes(cfg: AttachConfig, steps: list[dict], load_stats: dict | None) -> list[str]:
    """What the profiled steps say of hostgap's load (none without one): short batches put down
    to late streams, to a server behind what it streamed after a restart just before the start,
    or to requests too short for the window (:func:`load_turnover_notes`)."""
    if cfg.load is None:
        return []
    return load_turnover_notes(
        steps,
        cfg.load.concurrency,
        cfg.load.output_len,
        late=late_streams(load_stats),
        restarted=bool((load_stats or {}).get("refreshes")),
    )


def invalid_reasons(cfg: AttachConfig, decode: list[dict], batches: dict) -> list[str]:
    """Why the result does not answer what was asked (empty when it does)."""
    out = []
    if not decode:
        out.append("no decode step was recorded")
    if cfg.load is not None:
        at = (batches.get("decode") or {}).get(str(cfg.load.concurrency), 0)
        if decode and at == 0:
            out.append(f"no decode step ran at the load's batch {cfg.load.concurrency} (seen: {batches.get('decode')})")
    return out


def _modal_batch(counts: dict[str, int]) -> int | None:
    known = {int(k): v for k, v in counts.items() if k.isdigit()}
    return max(known, key=lambda k: (known[k], k)) if known else None


def _step_batch(s: dict) -> dict:
    return {
        "index": s.get("index"),
        "kind": s.get("kind"),
        **{k: s.get(k) for k in ("ctx_requests", "ctx_q", "gen_requests", "gen_q", "gen_s")},
    }


def _model_name(cfg: AttachConfig, client: ProfileClient) -> str | None:
    if cfg.load is not None and cfg.load.model:
        return cfg.load.model
    for k in ("model_path", "served_model_name"):
        if client.info.get(k):
            return str(client.info[k])
    try:
        from hostgap.server.attach.loadgen import served_model

        return served_model(client.url, timeout_s=5.0)
    except Exception:  # the name is a label only; a server without /v1/models still gives a result
        return None


def write_steps_table(result: dict, run_dir) -> None:
    """``steps.parquet`` in the run directory: the attached steps with their batch composition,
    in ``hostgap harvest``'s table, so ``attribute fit/explain`` run on a server's own steps."""
    from hostgap.analysis.harvest_table import EXTRA_COLUMNS, STEP_COLUMNS, step_rows, table_meta, write_table

    main = first_rank(result.get("analysis") or {})
    if not main.get("steps"):
        return
    rows, dropped = step_rows(main, os.path.basename(result["anatomy_trace"]), {"engine": result["engine"]})
    if rows:
        meta = table_meta(
            "steps",
            mode="attach",
            run_id=result["run_id"],
            server_url=result["server_url"],
            dropped_empty_steps=dropped,
        )
        write_table(rows, run_dir.path / "steps.parquet", STEP_COLUMNS + EXTRA_COLUMNS, meta)
        result["steps_table"] = "steps.parquet"


def store(result: dict, run_dir, db: str | None) -> None:
    """The run stored (:func:`hostgap.store.save.save_run`): the steps table and the environment
    manifest in the run directory, results.json last, then one row in the runs database."""
    from hostgap.store.manifest import manifest
    from hostgap.store.save import save_run

    write_steps_table(result, run_dir)
    facts = {k: result[k] for k in ("server_url", "engine", "engine_version")}
    save_run(result, run_dir, db, files={"manifest.json": manifest(extra=facts)})
