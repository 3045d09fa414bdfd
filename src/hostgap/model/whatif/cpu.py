"""``cpu:cores=N[,load=L][,speed=S]``: CPU provisioning and interference.

The engine's host processes compete for ``N`` cores with ``L`` co-located CPU-bound threads
(another job, a noisy neighbour; may be fractional: 0.5 = one thread busy half the time).

Processes on the step's critical path (:data:`PROCESSES`): vLLM V1 runs an API server
(HTTP, tokenisation, detokenisation), an engine core (scheduler; at TP 1 it also runs the
model runner) and, at TP > 1, one worker per GPU rank. Each is counted as one busy thread
while the engine decodes: the workers and the engine core spin or work for the whole step
(they wait for the GPU in a busy poll), and under serving load the API server streams
tokens every step. transformers' generate loop is one process.

With ``R = processes + L`` runnable threads on ``N`` cores, a fair scheduler (Linux CFS)
gives each thread ``min(1, N / R)`` of a core, so every CPU part of the host term stretches
by ``f = max(1, R / N)``; a core ``S`` times as fast single-thread divides it by ``S``. The
step is then predicted at host speed ``S / f`` (the ``host=`` what-if's arithmetic: serial
work, per-step dispatch and the CPU part of each launch divide by it; the launch floor,
driver/hardware, does not).

TTFT: the prefill step of a ``prompt``-token request (default: the cell's context) is
predicted at the same host speed; ``ttft_added_ns`` is its change. The API server's own
tokenisation and HTTP work, also stretched, is not in the model.

Limits, stated: the baseline assumes each process has a core of its own (the condition the
host term was fitted in); context-switch and cache costs beyond fair sharing, SMT siblings
and NUMA placement are not modelled; a load L that is I/O-bound rather than CPU-bound
competes less than modelled.
"""

from __future__ import annotations

from dataclasses import replace

from hostgap.model.cell import Setup, predict
from hostgap.model.whatif.change import WhatIf, num

PROCESSES = {
    "vllm": ("API server (HTTP, tokenizer, detokenizer)", "engine core (scheduler; model runner at TP 1)"),
    "hf": ("generate loop (tokenizer, model, sampling)",),
    "hf-cb": ("continuous-batching loop (batch preparation, model, sampling, output processing)",),
}
"""Busy host processes per engine at TP 1; TP > 1 adds one worker per rank (vLLM)."""


def busy_threads(engine: str, tp: int) -> float:
    """Host threads busy while the engine decodes (see the module docstring)."""
    n = len(PROCESSES[engine])
    return float(n + (tp if engine == "vllm" and tp > 1 else 0))


def slowdown(threads: float, cores: float, load: float = 0.0) -> float:
    """Fair-share stretch of each busy thread: max(1, (threads + load) / cores)."""
    return max(1.0, (threads + load) / cores)


def cpu(s: Setup, kw: dict) -> WhatIf:
    spec = "cpu"
    cores = num(kw, "cores", None, spec, 1, 4096)
    load = num(kw, "load", 0.0, spec, 0.0, 4096)
    speed = num(kw, "speed", 1.0, spec, 0.05, 20.0)
    prompt = int(num(kw, "prompt", float(s.cell.context), spec, 1, 1e6))
    threads = busy_threads(s.cell.engine, s.cell.tp)
    f = slowdown(threads, cores, load)
    eff = speed / f
    base = predict(s)
    new = predict(s, host_speed=eff)
    pre = replace(s.cell, q_tokens=prompt, context=max(prompt, 1), logits_kept=s.cell.batch)
    ttft0 = predict(s, cell=pre).total_ns
    ttft1 = predict(s, cell=pre, host_speed=eff).total_ns
    procs = ", ".join(PROCESSES[s.cell.engine]) + (
        f", {s.cell.tp} workers" if s.cell.engine == "vllm" and s.cell.tp > 1 else ""
    )
    return WhatIf(
        "cpu",
        (
            f"{threads:g} busy host threads ({procs}) + co-located load {load:g} on {cores:g} core(s): each gets "
            f"min(1, {cores:g} / {threads + load:g}) of a core, host work x{f:.3g}",
            f"core speed x{speed:g} single-thread: host term at {eff:.3g}x speed (serial, dispatch and per-kernel "
            "CPU work divide by it; the launch floor does not)",
            f"TTFT: the {prompt}-token prefill step {ttft0 / 1e6:.3f} -> {ttft1 / 1e6:.3f} ms (API-server tokenisation "
            "not modelled)",
            "baseline: one core per host process; no context-switch, SMT or NUMA costs beyond fair sharing",
        ),
        base,
        new,
        extra={
            "cores": cores,
            "load": load,
            "speed": speed,
            "threads": threads,
            "slowdown": f,
            "host_speed": eff,
            "ttft_base_ns": ttft0,
            "ttft_ns": ttft1,
            "ttft_added_ns": ttft1 - ttft0,
        },
        scenario_extra={"ttft_added_ns": ttft1 - ttft0},
    )
