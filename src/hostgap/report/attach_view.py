"""Terminal and JSON forms of an attach result (``hostgap attach``, ``hostgap show RUN``).

The analysis is drawn by the renderers of ``hostgap analyze`` (one trace, or a trace set);
attach adds a header (engine, version, server, load), the steps and batch sizes seen, the
profiler settings and their cost, and the run directory.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from hostgap.server.attach.steps_seen import first_rank


def json_document(result: dict) -> dict:
    """The ``--json`` object: the result, plus ``steps`` (the objects of ``steps --json``)."""
    doc = result.get("analysis") or {}
    return {
        **{k: v for k, v in result.items() if k != "analysis"},
        "steps": first_rank(doc).get("steps") or [],
        "analysis": doc,
    }


def header(result: dict) -> str:
    load = result.get("load")
    what = (
        f"load {load['concurrency']} x (prompt {load['prompt_len']}, output {load['output_len']})"
        if load
        else "the server's own traffic"
    )
    return (
        f"{result['engine']} {result['engine_version']} at {result['server_url']} · model "
        f"{result.get('model') or '?'} · {what} · run {result['run_id']}"
    )


def render(result: dict, con: Console, analysis: bool = True) -> None:
    con.print(escape(header(result)), style="bold")
    doc = result.get("analysis") or {}
    if analysis and doc:
        if doc.get("kind") == "trace_set":
            from hostgap.report.traceset_view import render_trace_set

            render_trace_set(doc, con)
        else:
            from hostgap.report.terminal import render_anatomy, render_overview

            render_overview(doc, con)
            render_anatomy(doc, con)
    for line in summary_lines(result):
        con.print(escape(line), soft_wrap=True)
    if "levers" in result and not (analysis and doc and doc.get("kind") != "trace_set"):
        from hostgap.report.advise_view import render_top  # else printed under the analysis's verdict

        render_top(result, con)


def summary_lines(result: dict) -> list[str]:
    out = []
    batches = result.get("batches_seen") or {}
    seen = ", ".join(
        f"{kind}: " + ", ".join(f"{n} at batch {b}" for b, n in counts.items()) for kind, counts in batches.items()
    )
    out.append(
        f"steps recorded: {result.get('steps_seen')} ({seen or 'none'}); asked for "
        f"{result.get('steps_requested')} after {result.get('skip')}"
    )
    m = result.get("step_medians") or {}
    if m.get("t_step_ns") is not None:
        hf = m.get("host_fraction")
        out.append(
            f"per step ({m.get('basis')}, {m.get('steps')} steps): wall {m['t_step_ns'] / 1e6:.3f} ms, "
            f"device-active {m['g_step_ns'] / 1e6:.3f} ms, host-exposed {m['h_step_ns'] / 1e6:.3f} ms"
            + (f", host fraction {hf * 100:.1f} %" if hf is not None else "")
        )
    fe = result.get("frontend") or {}
    if fe.get("per_step_ns") is not None:
        share = fe["busy_ns"] / fe["span_ns"] * 100 if fe.get("span_ns") else 0.0
        out.append(
            f"API server (its own trace, beside the step loop): {fe['per_step_ns'] / 1e6:.3f} ms host time per "
            f"engine step, {fe['threads']} thread(s), busy {share:.0f} % of its {fe['span_ns'] / 1e6:.1f} ms"
        )
    elif fe.get("problem"):
        out.append(f"API server trace: nothing to measure ({fe['problem'].split(': ', 1)[-1]})")
    p = result.get("profiling") or {}
    req = p.get("requested") or {}
    asked = ", ".join(f"{k}={v}" for k, v in req.items())
    out.append(f"profiler: {p.get('protocol')} ({asked})")
    if p.get("not_turned_off"):
        out.append(f"  on although not asked for (a server flag): {', '.join(p['not_turned_off'])}")
    infl = p.get("inflation")
    if isinstance(infl, dict) and infl.get("text"):
        out.append(f"  cost: {infl['text']}")
    for note in p.get("notes") or []:
        out.append(f"  note: {note}")
    for note in result.get("load_notes") or []:
        out.append(f"note: {note}")
    for flag in result.get("flags") or []:
        out.append(f"FLAGGED: {flag}")
    for reason in result.get("invalid_reasons") or []:
        out.append(f"not what was asked: {reason}")
    if result.get("run_dir"):
        out.append(f"run directory: {result['run_dir']}")
    return out
