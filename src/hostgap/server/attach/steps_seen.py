"""From an attached profile's files to attach's result: the analysis of ``hostgap analyze``
(:func:`hostgap.analysis.traceset.analyse`, handed the file paths) plus what a server run adds:
the batch sizes of the steps seen, the profiler settings the trace shows, and the per-step
medians the runs database lists.

>>> batches_seen([{"kind": "decode", "gen_requests": 4}, {"kind": "decode", "gen_requests": 4},
...               {"kind": "prefill", "ctx_requests": 2}])
{'decode': {'4': 2}, 'prefill': {'2': 1}}
"""

from __future__ import annotations

import statistics
from collections import Counter

from hostgap.analysis.traceset import analyse
from hostgap.anatomy.steps import AnalysisOptions


def analyse_paths(workers: list[str], opts: AnalysisOptions) -> dict:
    """The ``hostgap analyze --json`` document of the worker files: one trace's document, or
    the trace-set object of several ranks."""
    doc = analyse(workers, opts, jobs=1 if len(workers) == 1 else None)
    if isinstance(doc, list):  # unrelated files: take them as one set of ranks in file order
        from hostgap.analysis.traceset import analyse_files, trace_set_document

        return trace_set_document(analyse_files(workers, opts))
    return doc


def first_rank(doc: dict) -> dict:
    """The single-trace document, or rank 0's part of a trace set."""
    if doc.get("kind") == "trace_set":
        return doc["ranks"][0] if doc.get("ranks") else {}
    return doc


def batches_seen(steps: list[dict]) -> dict[str, dict[str, int]]:
    """Per step kind, how many steps at each batch size (requests in the step)."""
    out: dict[str, Counter] = {}
    for s in steps:
        kind = s.get("kind") or "unknown"
        if kind == "decode":
            b = s.get("gen_requests")
        elif kind == "prefill":
            b = s.get("ctx_requests")
        else:
            b = None
        if b is None and kind in ("mixed", "unknown"):
            b = _sum_or_none(s.get("ctx_requests"), s.get("gen_requests"))
        out.setdefault(kind, Counter())[str(b) if b is not None else "?"] += 1
    return {
        k: dict(sorted(v.items(), key=lambda kv: (kv[0] == "?", int(kv[0]) if kv[0].isdigit() else 0)))
        for k, v in out.items()
    }


def _sum_or_none(a, b) -> int | None:
    return None if a is None and b is None else int(a or 0) + int(b or 0)


def decode_steps(doc: dict) -> list[dict]:
    return [s for s in doc.get("steps") or [] if s.get("kind") == "decode" and not s.get("partial")]


def load_turnover_notes(
    steps: list[dict], concurrency: int, output_len: int, late: bool = False, restarted: bool = False
) -> list[str]:
    """What the complete profiled steps that were not decode at the load's batch say: fewer
    requests (a prefill, a mixed step, a smaller decode batch) is the load's requests ending and
    being replaced inside the window; a larger decode batch is other traffic on the server.
    ``late``: the load's streams came late (``loadgen.late_streams``), so the requests' ends
    could not be seen in time to keep them out of the window, whatever their length.
    ``restarted``: the load's requests were restarted together just before the start
    (``make_room``: only where ``output_len`` covers the window), so fresh requests, each with
    more tokens than the window has steps, cannot have ended inside it unless the server ran
    behind what the client saw: no longer ``--output-len`` is advised then.

    >>> steps = [{"kind": "prefill", "ctx_requests": 1}, {"kind": "decode", "gen_requests": 1},
    ...          {"kind": "decode", "gen_requests": 2}, {"kind": "decode", "gen_requests": 2, "partial": True}]
    >>> load_turnover_notes(steps, 2, 64)[0][:66]
    '2 of the 3 complete profiled steps held fewer requests than the lo'
    >>> load_turnover_notes([{"kind": "decode", "gen_requests": 3}], 2, 64)
    ['1 decode step(s) ran at a larger batch than the load of 2: other traffic shares the server']
    >>> load_turnover_notes(steps, 2, 64, late=True)[0][-78:]
    'the server streamed them late (see the notes), so their ends could not be seen'
    >>> load_turnover_notes(steps, 2, 64, restarted=True)[0][-54:]
    "the window's batch could not be chosen from the client"
    """
    whole = [s for s in steps if not s.get("partial")]
    fewer = [s for s in whole if s.get("kind") != "decode" or (s.get("gen_requests") or 0) < concurrency]
    more = [s for s in whole if s.get("kind") == "decode" and (s.get("gen_requests") or 0) > concurrency]
    out = []
    if fewer:
        kinds = batches_seen(fewer)
        seen = "; ".join(
            f"{kind}: " + ", ".join(f"{n} at batch {b}" for b, n in counts.items()) for kind, counts in kinds.items()
        )
        head = (
            f"{len(fewer)} of the {len(whole)} complete profiled steps held fewer requests than the load of "
            f"{concurrency} in decode ({seen}): "
        )
        if late:
            why = (
                f"its requests of {output_len} tokens ended and were replaced inside the window; the server "
                "streamed them late (see the notes), so their ends could not be seen"
            )
        elif restarted:
            why = (
                f"its requests were restarted together just before the start, each with {output_len} tokens, "
                "more than the window has steps: the server ran behind what it streamed (its API process "
                "behind its engine, or the start slow to reach the engine), and the window's batch could not "
                "be chosen from the client"
            )
        else:
            why = (
                f"its requests of {output_len} tokens ended and were replaced inside the window; a larger "
                "--output-len (more steps per request than pass before the profile starts) keeps the batch steady"
            )
        out.append(head + why)
    if more:
        out.append(
            f"{len(more)} decode step(s) ran at a larger batch than the load of {concurrency}: "
            "other traffic shares the server"
        )
    return out


def step_period_s(steps: list[dict]) -> float | None:
    """Median start-to-start time of consecutive decode steps (index i and i+1 both decode, not
    partial), in seconds; None with fewer than two such steps.

    >>> step_period_s([{"index": 0, "kind": "decode", "start_ns": 0}, {"index": 1, "kind": "decode",
    ...                 "start_ns": 8_000_000}, {"index": 2, "kind": "decode", "start_ns": 18_000_000}])
    0.009
    """
    by = {
        s["index"]: s
        for s in steps
        if s.get("kind") == "decode" and not s.get("partial") and s.get("start_ns") is not None
    }
    gaps = [by[i + 1]["start_ns"] - s["start_ns"] for i, s in by.items() if i + 1 in by]
    return statistics.median(gaps) / 1e9 if gaps else None


def step_medians(doc: dict) -> dict:
    """Medians over the steady decode steps (else the non-partial decode steps): the numbers
    the runs database lists for an attached run (not differencing: one traced run)."""
    steps = doc.get("steps") or []
    steady = set(((doc.get("summary") or {}).get("steady") or {}).get("indices") or [])
    pool = [s for s in steps if s["index"] in steady] or decode_steps(doc)
    basis = (
        "median of the steady decode steps"
        if any(s["index"] in steady for s in steps)
        else "median of the decode steps"
    )
    if not pool:
        return {"steps": 0, "basis": "no decode steps"}
    wall = statistics.median(s["wall_ns"] for s in pool)
    dev = statistics.median(s["gpu_active_ns"] for s in pool)
    host = statistics.median(s["host_exposed_ns"] for s in pool)
    fr = [s["host_fraction"] for s in pool if s.get("host_fraction") is not None]
    return {
        "t_step_ns": float(wall),
        "g_step_ns": float(dev),
        "h_step_ns": float(host),
        "host_fraction": float(statistics.median(fr)) if fr else None,
        "activity": doc.get("activity"),
        "steps": len(pool),
        "basis": f"{basis} of the attached trace",
    }


def frontend_time(path: str, engine_steps: int) -> dict:
    """The API server's own host time from its trace (vLLM's ``async_llm`` file): the union of
    its host events on each thread, summed over threads (``busy_ns``), over the trace's span, and
    per engine step recorded by the Worker. It runs beside the step loop, not inside it: this is
    what the frontend process spends while the engine steps, not a part of the step's wall."""
    import numpy as np

    from hostgap.analysis.trace import analyse_trace
    from hostgap.anatomy.intervals import grouped_union
    from hostgap.events import GPU_OP_KINDS

    ev = analyse_trace(path).trace.events
    host = np.flatnonzero(~ev.of_kind(*GPU_OP_KINDS) & (ev.dur_ns > 0))
    if not len(host):
        return {"trace": path, "busy_ns": 0, "span_ns": 0, "threads": 0, "per_step_ns": None}
    tids, group = np.unique(ev.tid[host], return_inverse=True)
    busy = int(grouped_union(group, ev.start_ns[host], ev.end_ns[host], len(tids)).sum())
    span = int(ev.end_ns[host].max() - ev.start_ns[host].min())
    return {
        "trace": path,
        "busy_ns": busy,
        "span_ns": span,
        "threads": int(len(tids)),
        "per_step_ns": busy / engine_steps if engine_steps else None,
    }
