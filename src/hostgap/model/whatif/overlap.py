"""``overlap``: the host work of step k+1 runs while step k's GPU work executes.

vLLM's async scheduling, SGLang's overlap scheduler and TRT-LLM's overlap scheduler all do
the same thing: while the GPU runs step k, the CPU already schedules step k+1, prepares its
inputs and processes step k's outputs (the sampled tokens stay on the GPU and feed step k+1
directly; stop checks and detokenisation run one step behind).

The host term's parts (stepmodel.py) split into what can move off the critical path and what
cannot:

- **hideable** ``H``: the serial part (scheduler, engine IPC, output processing, per sequence
  and per TP rank): it no longer waits for the GPU, it runs during the previous step's GPU time;
- **not hideable** ``O``: the step's orchestration (dispatch + the launch path of its own
  kernels, or its graph launches): a kernel cannot be launched before its step is scheduled,
  and in eager mode the launches of step k+1 occupy the same CPU thread that must also do
  ``H``. Orchestration already overlaps the step's own GPU work (``max(O, GPU)``).

One host thread then does ``O + H`` per step while the GPU does ``G`` (device + collectives)::

    without overlap:  step = H + max(O, G)
    with overlap:     step = max(O + H, G)

``max(O + H, G) <= H + max(O, G)`` always: overlap is never slower per step. It gains all of
``H`` where the GPU step is long (graph mode, large batch) and nothing where the CPU is the
bottleneck anyway (eager, small batch: ``O + H >= G``).

Costs: a request that arrives is scheduled one step later than it would be (its prefill
waits for the step in flight): ``ttft_added_ns`` = one scenario step. A request that finishes
at step k has already been scheduled into step k+1: one wasted token of work per finished
request, ``1 / out`` of all decode work for requests of ``out`` output tokens.
"""

from __future__ import annotations

from dataclasses import replace

from hostgap.errors import HostgapError
from hostgap.model.cell import Setup, predict
from hostgap.model.stepmodel import StepPrediction
from hostgap.model.whatif.change import WhatIf, num

ENGINES = {
    "vllm": "vLLM async scheduling (--async-scheduling); SGLang's overlap scheduler and TRT-LLM's "
    "overlap scheduler split the host term the same way",
    "hf-cb": "transformers' asynchronous batching (use_async_batching): the next batch is prepared "
    "(admission, scheduling, KV indices, input tensors) while the forward runs",
}

SERIAL_WORK = {
    "vllm": "scheduler, IPC, output processing",
    "hf-cb": "the loop's work between forward passes",
}


def overlapped(p: StepPrediction) -> StepPrediction:
    """``p`` with its serial host work moved into the CPU's per-step budget beside the
    orchestration: step = max(orchestration + serial, GPU)."""
    return replace(p, serial_ns=0.0, orchestration_ns=p.orchestration_ns + p.serial_ns)


def is_cpu_bound(p: StepPrediction) -> bool:
    """The CPU's work per step (orchestration, and with overlap the serial part) outlasts the
    GPU's (device + collectives): the step is the CPU's."""
    return p.orchestration_ns >= p.device_ns + p.collective_ns


def overlap(s: Setup, kw: dict) -> WhatIf:
    if s.cell.engine not in ENGINES:
        raise HostgapError(
            "--what-if", f"overlap: engine {s.cell.engine!r} has no overlap scheduler (known: {', '.join(ENGINES)})"
        )
    out = num(kw, "out", 0.0, "overlap", 0.0, 1e7)
    base = predict(s)
    new = overlapped(base)
    wasted = 1.0 / out if out >= 1 else None
    hidden = base.total_ns - new.total_ns
    cpu_bound = is_cpu_bound(new)
    return WhatIf(
        "overlap",
        (
            f"{ENGINES[s.cell.engine]}: the serial host work ({base.serial_ns / 1e6:.3f} ms: "
            f"{SERIAL_WORK[s.cell.engine]}) runs during the previous step's GPU time; {hidden / 1e6:.3f} ms of it "
            "leaves the step",
            f"the step's own orchestration ({base.orchestration_ns / 1e6:.3f} ms: dispatch and the launch path of its "
            "kernels) cannot move ahead of its step; one CPU thread does orchestration + serial per step"
            + (": the CPU is the bottleneck, so overlap gains only what the GPU time can absorb" if cpu_bound else ""),
            f"a new request waits one step more for its first token: +{new.total_ns / 1e6:.3f} ms TTFT",
            "a request that finishes was already scheduled into the next step: one wasted token of work per finished "
            "request"
            + (
                f" ({wasted * 100:.2f} % of decode work at {out:g} output tokens)"
                if wasted
                else " (overlap:out=N for the share at N output tokens)"
            ),
        ),
        base,
        new,
        extra={"ttft_added_ns": new.total_ns, "hidden_ns": hidden, "wasted_fraction": wasted, "cpu_bound": cpu_bound},
        scenario_extra={"ttft_added_ns": new.total_ns},
    )
