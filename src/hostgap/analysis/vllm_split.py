"""Where a vLLM engine step goes across its processes (METHOD.md §5, residual profiling).

vLLM's V1 engine steps in a loop across processes: EngineCore schedules and sends the batch to
the Worker over shared memory, the Worker runs ``execute_model`` (one ``execute_...``
annotation in its trace), sends the sampled tokens back, EngineCore updates its requests and
hands the outputs to the frontend, then schedules the next step. In the Worker's trace a step
(annotation start -> next annotation start, the anatomy's step window W) therefore tiles
exactly into three parts::

    compute       device-active time in W (GPU-active; on CPU the compute-op analogue)
    worker_host   the Worker's host time inside its execute_ annotation A, not covered by
                  compute: framework, input preparation, sampling
    between       the rest of W, outside the annotation and not compute: the Worker waiting
                  for its next batch = EngineCore scheduling and output processing plus the
                  IPC round trip

    compute + worker_host + between == wall (per step, exactly; so also for their means)

The frontend (this process) runs beside EngineCore: it does not take part in the step loop
unless it falls behind. What it adds per step is measured on untraced runs from the engine's
own timestamps: the per-step slope of the frontend's wall minus that of EngineCore's
queued -> last-token time (``frontend_ns``), reported next to the tiling, not inside it.

Everything here is numpy over one loaded trace; no vLLM needed.
"""

from __future__ import annotations

import re

import numpy as np

PARTS = ("compute_ns", "worker_host_ns", "between_ns")
LABELS = {
    "compute_ns": "Worker compute",
    "worker_host_ns": "Worker host in execute_",
    "between_ns": "between Worker steps",
    "frontend_ns": "frontend beyond EngineCore",
}
DETAIL = {
    "compute_ns": "device-active in the step",
    "worker_host_ns": "framework, input preparation, sampling",
    "between_ns": "EngineCore scheduling + IPC + output processing",
}


def step_parts(
    start_ns: np.ndarray, wall_ns: np.ndarray, marker_end_ns: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray
) -> dict[str, np.ndarray]:
    """Per step, the three parts (int64 ns) from the step windows and the merged (disjoint,
    sorted) device-active segments. The annotation is clipped to its window."""
    from hostgap.anatomy.intervals import covered_each

    start = np.asarray(start_ns, dtype=np.int64)
    end = start + np.asarray(wall_ns, dtype=np.int64)
    m_end = np.clip(np.asarray(marker_end_ns, dtype=np.int64), start, end)
    compute = covered_each(start, end, seg_start, seg_end)
    in_marker = covered_each(start, m_end, seg_start, seg_end)
    worker_host = (m_end - start) - in_marker
    between = (end - m_end) - (compute - in_marker)
    return {"compute_ns": compute, "worker_host_ns": worker_host, "between_ns": between, "wall_ns": end - start}


def active_segments(trace) -> tuple[np.ndarray, np.ndarray]:
    """The merged device-active intervals of a trace (the anatomy's activity rows)."""
    from hostgap.anatomy.intervals import merge
    from hostgap.anatomy.timeline import activity_rows

    _act, rows = activity_rows(trace)
    ev = trace.events
    return merge(ev.start_ns[rows], ev.end_ns[rows])


def decode_rows(steps: list[dict], warmup: int = 1) -> list[dict]:
    """The steady decode steps (the first ``warmup`` decode steps left out when enough remain)."""
    dec = [s for s in steps if s.get("kind") == "decode" and s.get("wall_ns")]
    return dec[warmup:] if len(dec) > warmup else dec


def steady_steps(trace, steps: list[dict] | None, warmup: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The steady decode steps (:func:`decode_rows`) of a trace as three arrays: start, wall and
    marker end (ns); None without decode steps. ``steps``: the anatomy's step rows of this trace
    (analysed here when not given)."""
    if steps is None:
        from hostgap.anatomy.steps import AnalysisOptions, analyze

        steps = analyze(trace, AnalysisOptions()).to_dict()["steps"]
    rows = decode_rows(steps, warmup)
    if not rows:
        return None
    return (
        np.array([r["start_ns"] for r in rows]),
        np.array([r["wall_ns"] for r in rows]),
        np.array([r["marker_end_ns"] for r in rows]),
    )


def split_of_trace(trace, steps: list[dict] | None = None, warmup: int = 1) -> dict | None:
    """The tiled split of a Worker trace: mean per steady decode step of each part, the mean
    step (their exact sum), shares, and the per-step arrays' count. None without decode steps.

    ``steps``: the anatomy's step rows of this trace (analysed here when not given)."""
    steady = steady_steps(trace, steps, warmup)
    if steady is None:
        return None
    return summarize(step_parts(*steady, *active_segments(trace)))


def summarize(parts: dict[str, np.ndarray]) -> dict:
    """Means per step of each part (they add up to ``step_ns`` exactly: integer sums over the
    same steps, divided once), with shares of the step."""
    n = len(parts["wall_ns"])
    total = int(parts["wall_ns"].sum())
    sums = {k: int(parts[k].sum()) for k in PARTS}
    return {
        "basis": "traced N2 run, Worker trace: mean per steady decode step",
        "steps": n,
        "step_ns": total / n,
        **{k: v / n for k, v in sums.items()},
        "shares": {k: (v / total if total else None) for k, v in sums.items()},
    }


def with_frontend(split: dict | None, engine_timing: dict | None) -> dict | None:
    """Add the frontend's per-step cost from untraced runs (``engine_timing.per_step``) beside
    the tiling; negative values (clock noise between two processes) are shown as 0 with the
    raw value kept."""
    if split is None or "unavailable" in split:
        return split
    per = (engine_timing or {}).get("per_step") or {}
    raw = per.get("frontend_ns")
    out = dict(split)
    out["frontend_ns"] = None if raw is None else max(0.0, float(raw))
    out["frontend_raw_ns"] = raw
    out["frontend_basis"] = (
        "untraced runs: frontend wall slope - EngineCore queued->last-token slope; "
        "runs beside the step loop, not part of the tiling"
    )
    return out


def rows(split: dict | None) -> list[tuple[str, str, str]]:
    """Label / value / basis rows for the measure table (empty without a split)."""
    if not split:
        return []
    if "unavailable" in split:
        return [("per-process split", "-", str(split["unavailable"])[:120])]

    def ms(v):
        return "-" if v is None else f"{v / 1e6:.3f} ms"

    out = [
        (
            "per-process split (traced)",
            ms(split["step_ns"]),
            f"mean of {split['steps']} decode steps; parts add up to it",
        )
    ]
    for k in PARTS:
        share = split["shares"].get(k)
        out.append(
            (f"  {LABELS[k]}", ms(split[k]), f"{share * 100:.1f} % · {DETAIL[k]}" if share is not None else DETAIL[k])
        )
    if "frontend_ns" in split:
        out.append((f"  {LABELS['frontend_ns']}", ms(split["frontend_ns"]), "untraced; beside the loop"))
    return out


def engine_rows(facts: dict) -> list[tuple[str, str, str]]:
    """The engine's start-up and shutdown times (never part of a step), and other work on
    the machine during the untraced runs (:func:`hostgap.capture.engines.vllm.contention`)."""
    out = []
    up, down = facts.get("startup_ns"), facts.get("shutdown_ns")
    if up:
        down_txt = f"{down / 1e9:.1f} s" if down else "-"
        out.append(("engine start-up / shutdown", f"{up / 1e9:.1f} s / {down_txt}", "outside every timed call"))
    c = facts.get("contention")
    if c:
        out.append(
            (
                "other work during runs",
                f"{c['other_cpu_share'] * 100:.0f} % of a core",
                f"{c['preempted_share'] * 100:.0f} % of {c['calls']} runs over {c['threshold'] * 100:.0f} % "
                "(CPU time of other processes)",
            )
        )
    return out


# -- thread states per process (py-spy, --stacks) ----------------------------------------------

STATES = ("running", "socket_poll", "lock_gil", "idle")
_STATE_RULES = (
    (
        "socket_poll",
        re.compile(r"epoll_wait|\bpoll\b|__poll|\bselect\b|zmq|socket|\brecv|\bsend\b|sendmsg|recvmsg", re.IGNORECASE),
    ),
    (
        "lock_gil",
        re.compile(
            r"futex|pthread_cond_|sem_wait|take_gil|PyThread_acquire_lock|acquire \(|"
            r"_wait_for_tstate_lock|Condition\.wait|\bwait \(",
            re.IGNORECASE,
        ),
    ),
    ("idle", re.compile(r"nanosleep|clock_nanosleep|time_sleep|\bsleep\b", re.IGNORECASE)),
)
_PROCESS = re.compile(r"^process (\d+)")


def thread_state(frames: list[str]) -> str:
    """The state of one sample from its frames (root first): the innermost frame that names a
    wait decides; a sample with none is ``running``.

    >>> thread_state(["run (core.py:1)", "zmq_poll (libzmq.so)", "epoll_wait (libc.so.6)"])
    'socket_poll'
    >>> thread_state(["forward (m.py:3)", "take_gil (libpython)"]), thread_state(["main (x.py:1)"])
    ('lock_gil', 'running')
    """
    for f in reversed(frames):
        for state, rule in _STATE_RULES:
            if rule.search(f):
                return state
    return "running"


def process_states(raw: str, roles: dict[int, str]) -> dict | None:
    """Per process of the engine (``roles``: pid -> frontend / EngineCore / Worker), the share
    of py-spy samples (all threads) in each of :data:`STATES`; samples of other processes
    (py-spy's own children, resource trackers) are left out. A thread-state distribution over
    the sampled run, not a critical path."""
    counts: dict[str, dict[str, int]] = {}
    for line in raw.splitlines():
        stack, _, n = line.strip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        m = _PROCESS.match(frames[0])
        role = roles.get(int(m.group(1))) if m else None
        if role is None:
            continue
        body = [f for f in frames[1:] if not f.startswith("thread (")]
        c = counts.setdefault(role, dict.fromkeys(STATES, 0))
        c[thread_state(body)] += int(n)
    out = {}
    for role, c in counts.items():
        total = sum(c.values())
        out[role] = {"samples": total, **{s: c[s] / total for s in STATES}}
    return (
        {
            "processes": out,
            "basis": "py-spy samples of every thread of each process during one untraced N2 "
            "run: a thread-state distribution, not a critical path",
        }
        if out
        else None
    )


def state_rows(states: dict | None) -> list[tuple[str, str, str]]:
    """One row per process: running / socket-poll / lock-GIL / idle shares."""
    if not states:
        return []
    out = []
    for role in ("frontend", "EngineCore", "Worker"):
        s = states["processes"].get(role)
        if s:
            out.append(
                (
                    f"  {role} threads (py-spy)",
                    f"run {s['running'] * 100:.0f} % · poll {s['socket_poll'] * 100:.0f} % · "
                    f"lock {s['lock_gil'] * 100:.0f} % · idle {s['idle'] * 100:.0f} %",
                    f"{s['samples']} samples; thread states, not a critical path",
                )
            )
    return out


def table_rows(facts: dict) -> list[tuple[str, str, str]]:
    """Every vLLM row of the measure table from the engine's facts (``engine_facts``)."""
    return rows(facts.get("process_split")) + state_rows(facts.get("process_states")) + engine_rows(facts)
