"""Published host-overhead figures placed on the model: ``hostgap regimes --published``.

Each :class:`Figure` is one number (or range) from a paper, a blog post or an engine's issue
tracker, the cell hostgap predicts for it (stated: where the source does not give the
setting, the assumption is written beside the row), the model's value and the error, or
"outside the model" with the reason where the setting is not one the model has.

No constant here is fitted to any of these figures. The host term is the one fitted on the
differencing paper's H100 vLLM eager cells (stepmodel.DEFAULT_HOST, ``hostgap fit
--paper-cells``); the graph-launch per-node cost is fitted on the three graph launches of
graphlaunch.POINTS and each of the two published ones is scored here by the fit on the
other points (leave-one-out); the megakernel's bandwidth fraction is the published 78 %.

The error of a value against a published range is 0 inside it, else the relative distance to
the nearer end; against a single value, (predicted - published) / published.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hostgap.anatomy.verdict import classify
from hostgap.model import graphlaunch
from hostgap.model.cell import Setup, predict
from hostgap.model.stepmodel import StepPrediction
from hostgap.model.whatif.registry import default_setup, run
from hostgap.model.whatif.spec_residual import paper_condition


def error_against(predicted: float, low: float, high: float) -> float:
    """0 inside [low, high], else the relative distance to the nearer end."""
    if predicted < low:
        return (predicted - low) / low
    if predicted > high:
        return (predicted - high) / high
    return 0.0


@dataclass(frozen=True)
class Placed:
    """The model's side of one figure."""

    cell: str
    predicted: float | None
    host_fraction: float | None = None
    note: str = ""
    outside: str = ""  # non-empty: outside the model, and why


@dataclass(frozen=True)
class Figure:
    id: str
    what: str
    source: str
    low: float
    high: float
    unit: str
    place: Callable[[], Placed] = field(repr=False)

    def row(self) -> dict:
        p = self.place()
        err = None if p.predicted is None or p.outside else error_against(p.predicted, self.low, self.high)
        regime = classify(p.host_fraction) if p.host_fraction is not None else None
        return {
            "id": self.id,
            "figure": self.what,
            "source": self.source,
            "published": self.low if self.low == self.high else [self.low, self.high],
            "unit": self.unit,
            "cell": p.cell,
            "host_fraction": p.host_fraction,
            "regime": regime,
            "predicted": p.predicted,
            "error": err,
            "status": "outside the model" if p.outside else "predicted",
            "reason": p.outside,
            "note": p.note,
        }


# -- placements ----------------------------------------------------------------------------


def _sglang_overlap() -> Placed:
    s = default_setup("llama-3.1-8b", batch=64, mode="graph")
    w = run(s, "overlap")
    return Placed(
        "Llama-3.1-8B, H100, graph, batch 64, KV 2048: throughput with / without overlap",
        w.baseline.total_ns / w.scenario.total_ns,
        w.baseline.host_fraction,
        "SGLang's host term is not fitted: vLLM V1's stands in; the blog's model and batch are assumed",
    )


def _gap_cell() -> Setup:
    return default_setup("llama-3.1-8b", batch=256, mode="graph")


def _vllm_gap() -> Placed:
    p = predict(_gap_cell())
    return Placed(
        "Llama-3.1-8B (for Llama-2-7B), H100, graph, batch 256: host-exposed time per step, ms",
        p.host_ns / 1e6,
        p.host_fraction,
        "the host term is fitted on vLLM V1 cells; #10634 measured V0, whose Python scheduler and "
        "output processing cost more per sequence",
    )


def _vllm_async_target() -> Placed:
    w = run(_gap_cell(), "overlap")
    return Placed(
        "the same cell with async scheduling: host-exposed time per step, ms",
        w.scenario.host_ns / 1e6,
        w.scenario.host_fraction,
        "a target, not a measurement; the model hides the whole serial term behind a long GPU step and "
        "has no step-boundary remainder",
    )


def _cores_ttft() -> Placed:
    ratios = []
    for tp in (2, 4, 8):
        s = default_setup("llama-3.1-70b", tp=tp, context=2048)
        starved = run(s, "cpu:cores=1")
        ratios.append(starved.extra["ttft_ns"] / starved.extra["ttft_base_ns"])
    return Placed(
        "Llama-3.1-70B TP-2/4/8, H100, 2048-token prefill: TTFT on 1 core / one core per process "
        "(largest of the three)",
        max(ratios),
        None,
        "the model's TTFT is the prefill step alone; queueing behind CPU-starved API server and "
        "tokenizer processes under load is not in it",
    )


def _vllm_8147() -> Placed:
    bound = 1 / 0.7  # GPU 70 % busy: an infinitely fast host gives at most GPU-time / step = 1 / 0.7
    return Placed(
        "a step 70 % GPU-busy (the issue's starting utilisation): the most a faster host can give",
        bound,
        0.3,
        outside=(
            f"3.8x exceeds the {bound:.2f}x bound that removing all host time gives a step whose GPU was "
            "70 % busy; the agent workload's gain lies outside the decode step (request handling, "
            "tokenisation between turns), which the model does not have"
        ),
    )


def _taxbreak() -> Placed:
    # the orchestration cut is the published 29 % (top of 10-29 %): solve the host speed giving it,
    # then predict the end-to-end change at that speed (no constant fitted to the 14 %)
    s = default_setup("llama-3.2-1b", batch=4, engine="hf")
    base = predict(s)
    lo, hi = 1.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        cut = 1 - predict(s, host_speed=mid).orchestration_ns / base.orchestration_ns
        lo, hi = (mid, hi) if cut < 0.29 else (lo, mid)
    new = predict(s, host_speed=lo)
    return Placed(
        f"Llama-3.2-1B, H100, transformers eager, batch 4, KV 2048, host {lo:.2f}x faster "
        "(the speed that cuts orchestration 29 %): end-to-end step reduction, %",
        100 * (1 - new.total_ns / base.total_ns),
        base.host_fraction,
        "the published maximum of both ranges is taken as one CPU pair",
    )


def _graph_point(pid: str) -> Callable[[], Placed]:
    def place() -> Placed:
        r = next(x for x in graphlaunch.leave_one_out() if x["id"] == pid)
        return Placed(
            f"one graph launch of {r['nodes']:g} nodes, ms (per-node cost fitted on {' + '.join(r['fitted_on'])} only)",
            r["predicted_ns"] / 1e6,
        )

    return place


def _mpk() -> Placed:
    best = None
    for preset in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"):
        w = run(default_setup(preset), "megakernel")
        x = w.extra["speedup_vs_graphs"]
        if best is None or x > best[0]:
            best = (x, preset, w.baseline.host_fraction)
    assert best is not None
    return Placed(
        f"{best[1]} (largest of Llama 1B/3B/8B), H100, batch 1: step with CUDA graphs / with a megakernel "
        "at 78 % of bandwidth",
        best[0],
        best[2],
        "MPK's baselines and models differ (Qwen3, vLLM/SGLang with graphs)",
    )


def _paper_spec() -> Placed:
    c = paper_condition()
    return Placed(c["cell"], c["host_ms"], None, c["note"])


def _api_server() -> Placed:
    return Placed(
        "Llama-3-8B, H100, vLLM v0.5.3",
        None,
        outside=(
            "the API server ran in the engine's process in v0.5.3; the model's host term covers the engine loop "
            "(scheduler, IPC, orchestration) and has no API-server part"
        ),
    )


def _scheduling_share() -> Placed:
    s = default_setup("llama-3.1-8b", batch=256, mode="graph")
    p = predict(s)
    return Placed(
        "Llama-3.1-8B, H100, graph, batch 256, KV 2048: serial host (scheduler, IPC, sampling) / step, %",
        100 * p.serial_ns / p.total_ns,
        p.host_fraction,
        "batch assumed (ShareGPT at high load); host term fitted on vLLM V1 cells, the post measured v0.5.3",
    )


def _half_cpu() -> Placed:
    best = None
    for preset in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"):
        for b in (1, 4, 16, 64):
            p = predict(default_setup(preset, batch=b))
            if best is None or p.host_fraction > best[0]:
                best = (p.host_fraction, preset, b)
    assert best is not None
    return Placed(
        f"the largest host fraction over Llama 1B/3B/8B x batch 1-64, H100, vLLM eager ({best[1]}, batch {best[2]}), %",
        100 * best[0],
        best[0],
        "an unoptimised engine taken as eager vLLM V1 without CUDA graphs",
    )


HF_CB_SYNC_S, HF_CB_IDLE = 300.6, 0.240
"""transformers' continuous batching, synchronous: 300.6 s for the run, 24.0 % of it with the GPU
idle waiting for the CPU (Hugging Face blog, "Unlocking asynchronicity in continuous batching",
2026-05-14: an 8B model, batch 32, 8K generated tokens; the GPU is not named, H200 assumed)."""


def _hf_cb_cell() -> Setup:
    return default_setup("llama-3.1-8b", device="h200", batch=32, context=4096, mode="graph", engine="hf-cb")


def _hf_cb_async_rule() -> Placed:
    from hostgap.model.whatif.overlap import overlapped

    # the blog's own sync run as the step: its idle share is the serial part H, the rest the GPU's G
    g, h = 1.0 - HF_CB_IDLE, HF_CB_IDLE
    sync = StepPrediction(device_ns=g, collective_ns=0.0, serial_ns=h, orchestration_ns=0.0, kernels=0.0, mode="graph")
    return Placed(
        "the blog's synchronous run (300.6 s, GPU idle 24.0 %) through the overlap rule "
        "step = max(orchestration + serial, GPU): the run with asynchronous batching, s",
        HF_CB_SYNC_S * overlapped(sync).total_ns / sync.total_ns,
        HF_CB_IDLE,
        "the idle share is the blog's measurement, taken as the serial part (an input, not a fit); the rule hides "
        "all of it, the run kept about 8 % of it: the per-step device-to-host sync that must end before the update",
    )


def _hf_cb_idle() -> Placed:
    p = predict(_hf_cb_cell())
    return Placed(
        "Llama-3.1-8B, H200, graph, batch 32, KV 4096, hf-cb: GPU idle share of the synchronous step, %",
        100 * p.host_fraction,
        p.host_fraction,
        "the default serial part was measured on a tiny Llama on a 2-core CPU (bench/results/hf_cb_cpu) and "
        "extrapolated per sequence to batch 32; a measured hf-cb run on the serving host replaces it "
        "(predict --engine hf-cb --results RUN)",
    )


FIGURES: tuple[Figure, ...] = (
    Figure(
        "sglang_overlap",
        "SGLang v0.4 overlap scheduler: throughput",
        "SGLang v0.4 release blog (2024-12)",
        1.1,
        1.1,
        "x",
        _sglang_overlap,
    ),
    Figure(
        "vllm_10634_gap", "inter-step gap at batch 256 (Llama-2-7B)", "vLLM issue #10634", 5.0, 6.0, "ms", _vllm_gap
    ),
    Figure(
        "vllm_10634_async",
        "async scheduling target for that gap",
        "vLLM issue #10634",
        0.2,
        0.3,
        "ms",
        _vllm_async_target,
    ),
    Figure(
        "cores_ttft", "more CPU cores cut TTFT in multi-GPU serving", "arXiv 2603.22774", 1.36, 5.40, "x", _cores_ttft
    ),
    Figure(
        "vllm_8147",
        "Xeon 6240 -> i9-12900K: agent workload speed-up (GPU util 70 -> 90 %)",
        "vLLM issue #8147",
        3.8,
        3.8,
        "x",
        _vllm_8147,
    ),
    Figure(
        "taxbreak_cpu",
        "faster host CPU: end-to-end reduction (orchestration -10-29 %)",
        "TaxBreak (METHOD.md §7)",
        0.0,
        14.0,
        "%",
        _taxbreak,
    ),
    Figure(
        "sglang_29960",
        "CUDA graph launch, 2,876 nodes, Blackwell",
        "SGLang issue #29960",
        2.8,
        2.8,
        "ms",
        _graph_point("sglang_29960"),
    ),
    Figure(
        "vllm_graph_b200",
        "CUDA graph launch, 2,187 nodes (vLLM), Blackwell",
        "SGLang issue #29960",
        2.0,
        2.0,
        "ms",
        _graph_point("vllm_b200"),
    ),
    Figure("mpk", "Mirage persistent kernel: latency vs graphs (up to)", "arXiv 2512.22219", 1.7, 1.7, "x", _mpk),
    Figure(
        "paper_spec_cycle",
        "speculative decoding: per-cycle host residual",
        "differencing paper (METHOD.md §7)",
        0.768,
        0.768,
        "ms",
        _paper_spec,
    ),
    Figure(
        "vllm_v06_api",
        "API server share of the step (Llama-3-8B, H100, v0.5.3)",
        "vLLM v0.6.0 blog post",
        33.0,
        33.0,
        "%",
        _api_server,
    ),
    Figure(
        "vllm_v06_sched",
        "scheduling share of the step (Llama-3-8B, H100, v0.5.3)",
        "vLLM v0.6.0 blog post",
        29.0,
        29.0,
        "%",
        _scheduling_share,
    ),
    Figure(
        "hf_cb_async",
        "transformers continuous batching, asynchronous batching: the run's time (sync 300.6 s)",
        "Hugging Face blog, continuous_async (2026-05)",
        234.5,
        234.5,
        "s",
        _hf_cb_async_rule,
    ),
    Figure(
        "hf_cb_idle",
        "transformers continuous batching, synchronous: GPU idle waiting for the CPU",
        "Hugging Face blog, continuous_async (2026-05)",
        24.0,
        24.0,
        "%",
        _hf_cb_idle,
    ),
    Figure(
        "sglang_half_cpu",
        "an unoptimised engine: CPU share of the time (up to)",
        "SGLang v0.4 release blog",
        50.0,
        50.0,
        "%",
        _half_cpu,
    ),
)


def table() -> list[dict]:
    """One row per published figure (see the module docstring)."""
    return [f.row() for f in FIGURES]


def graph_fit() -> dict:
    """The graph-launch fit the rows use, for the JSON beside the table."""
    return {
        "pooled": graphlaunch.POOLED.to_dict(),
        "per_device": {d: graphlaunch.for_device(d).to_dict() for d in sorted({p.device for p in graphlaunch.POINTS})},
        "points": [p.__dict__ for p in graphlaunch.POINTS],
        "leave_one_out": graphlaunch.leave_one_out(),
    }


__all__ = ["FIGURES", "Figure", "Placed", "default_setup", "error_against", "graph_fit", "table"]
