"""The levers that change the device's work (``batch``, ``fp8``, ``tp``, ``spec``, and the
megakernel's bandwidth bound): the model in model/ (accounting, roofline, the what-ifs) gives the
change as a ratio of the cell's device time and host term, and the ratio is applied to the
input's own measured parts, so the input's level (its efficiencies, its host) is kept and only
the change is the model's (docs/advise.md).

They need the model's architecture (a preset: from the run, or ``--preset``) and the device's
spec (from the input's device name, or ``--gpu``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.cell import Setup, bandwidth_floor_ns, setup_account
from hostgap.model.devices import find_device
from hostgap.model.levers.arithmetic import Baseline, Outcome, Steps
from hostgap.model.roofline import device_time
from hostgap.model.stepmodel import DEFAULT_HOST
from hostgap.model.whatif.megakernel import BW_FRACTION

SPEC_GAMMA, SPEC_ALPHA = 4, 0.6
"""The ``spec`` lever's target: n-gram (prompt-lookup) drafting, 4 draft tokens, acceptance 0.6
per position: an assumption (acceptance depends on the workload; the lever's basis says so)."""
TP_TARGET = 2
BATCH_FACTOR = 4
"""The ``batch`` lever's target: 4x today's batch."""

ENGINE_OF = {"vllm": "vllm", "sglang": "vllm", "hf": "hf", "hf-cb": "hf-cb", "hf-cb-async": "hf-cb"}
"""The host model standing in for each engine (SGLang's host term is not fitted: vLLM's)."""


@dataclass(frozen=True)
class Ratios:
    """Scenario / baseline of the model's device time (GPU-active), host term and tokens."""

    device: float
    host: float
    tokens: float
    words: str


def setup_for(base: Baseline, gpu: str | None = None, batch: float | None = None) -> Setup:
    """The model's setup of the input's cell (its preset, device, batch, engine, mode)."""
    from hostgap.model.whatif.registry import (
        build_setup,  # the registry (and the fitting it loads) only where a lever needs it
    )

    if base.preset is None:
        raise HostgapError("--preset", "needs the model's architecture")
    dev = gpu or (base.device_name if base.gpu else "cpu")
    if dev is None:
        raise HostgapError("--gpu", "needs the GPU's spec: the input does not name a known device")
    try:
        find_device(dev)
    except HostgapError:
        raise HostgapError("--gpu", f"needs the GPU's spec: {dev!r} is not in the device table (--gpu NAME)") from None
    mode = "graph" if float(np.median(base.steps.graph_launches)) > 0 else "eager"
    s, _ = build_setup(
        base.preset,
        device=dev,
        batch=max(int(round(batch or base.batch)), 1),
        context=base.context,
        engine=ENGINE_OF.get(base.engine or "", "vllm"),
        mode=mode,
    )
    return s


def apply_ratios(s: Steps, r: Ratios) -> Outcome:
    """The input's device time x the device ratio, its host-exposed time x the host ratio."""
    dev = s.device * r.device
    host = np.maximum(s.wall - s.device, 0.0) * r.host
    return Outcome(dev + host, dev, r.tokens)


def _ratios(base_p, new_p, tokens: float, words: str) -> Ratios:
    """Device work (compute + collectives, without the TP ranks' waits for each other, which are
    host-caused) and the rest of the step, scenario over baseline."""
    g0, g1 = base_p.device_ns + base_p.collective_ns, new_p.device_ns + new_p.collective_ns
    h0, h1 = base_p.total_ns - g0, new_p.total_ns - g1
    return Ratios(g1 / g0 if g0 > 0 else 1.0, h1 / h0 if h0 > 0 else 1.0, tokens, words)


def whatif_ratios(s: Setup, spec: str) -> Ratios:
    """A what-if of model/whatif/registry.py as ratios."""
    from hostgap.model.whatif.registry import run  # the registry (and the fitting it loads) only where a lever needs it

    w = run(s, spec)
    return _ratios(w.baseline, w.scenario, w.tokens_per_step / w.baseline_tokens, "; ".join(w.assumptions[:2]))


def batch_ratios(base: Baseline, target: int, gpu: str | None = None) -> Ratios:
    """Device time at ``target`` sequences / today's, by the roofline of the model's account of
    both cells on the device (the model's efficiencies); the host term grows by the engine's
    serial cost per sequence (stepmodel.DEFAULT_HOST), relative to the input's host-exposed time."""
    s = setup_for(base, gpu)
    s1 = replace(s, cell=replace(s.cell, batch=target))
    d0 = device_time(setup_account(s), s.device, s.roofline).total_ns
    d1 = device_time(setup_account(s1), s1.device, s1.roofline).total_ns
    return Ratios(d1 / d0 if d0 > 0 else 1.0, 1.0, target / base.batch, f"roofline {s.device.name}")


def batch_outcome(base: Baseline, target: int, gpu: str | None = None) -> tuple[Callable[[Steps], Outcome], str]:
    """The step at ``target`` sequences: device x the roofline ratio of the model's account,
    host-exposed + the engine's per-sequence serial cost x the added sequences."""
    per_seq = DEFAULT_HOST[ENGINE_OF.get(base.engine or "", "vllm")].per_seq_ns
    added = per_seq * (target - base.batch)
    r = batch_ratios(base, target, gpu)
    how = f"device time x{r.device:.3f} (the {r.words} of the model's account at batch {base.batch:g} and {target})"

    def apply(s: Steps) -> Outcome:
        dev = s.device * r.device
        return Outcome(dev + np.maximum(s.wall - s.device, 0.0) + added, dev, r.tokens)

    words = (
        f"{how}; host-exposed + {per_seq / 1e3:.1f} us per added sequence x {target - base.batch:g} "
        f"(stepmodel.DEFAULT_HOST[{ENGINE_OF.get(base.engine or '', 'vllm')}].per_seq_ns)"
    )
    return apply, words


def cpu_batch_outcome(
    base: Baseline, target: int
) -> tuple[Callable[[Steps], Outcome], tuple[Callable[[Steps], Outcome], Callable[[Steps], Outcome]], str]:
    """The step at ``target`` sequences on a CPU run, from the run's own compute (baseline.
    compute_growth), as a bracket of two bounds and a point between them. The low end: only the
    added rows' matrix work grows (the prefill's compute per prompt row beyond a decode step's:
    the cheapest a row is on this core, everything else shared). The high end: every added
    sequence costs as much as one of today's sequences does (today's compute / today's batch:
    batching shares nothing). The point: the added rows plus half of each sequence's attention
    and KV-cache work as its decode steps' growth per token of context gives it (x the context;
    that growth, from one traced run, varies several-fold from run to run, so it sets the point
    only, never an end), at most the high end. The host term grows by the engine's serial cost
    per sequence. A CPU's small matrix products are far from its roofline, so the roofline's
    ratio (the GPU path) does not apply here (docs/advise.md)."""
    g = base.facts.get("compute_growth")
    if not isinstance(g, dict) or not g.get("decode_ns"):
        raise HostgapError(
            "batch", "needs the run's compute growth (a traced prefill and steady decode steps): not in this input"
        )
    added = target - base.batch
    per_seq = DEFAULT_HOST[ENGINE_OF.get(base.engine or "", "vllm")].per_seq_ns
    rows = max(g["decode_rows"], 1.0)
    kv = g["context_slope_ns"] * g["context"] / rows
    hi = target / base.batch
    lo = min(1.0 + added * g["row_ns"] / g["decode_ns"], hi)
    mid = min(1.0 + added * (g["row_ns"] + kv / 2) / g["decode_ns"], hi)

    def at(f: float) -> Callable[[Steps], Outcome]:
        def apply(s: Steps) -> Outcome:
            dev = s.device * f
            return Outcome(dev + np.maximum(s.wall - s.device, 0.0) + per_seq * added, dev, target / base.batch)

        return apply

    per = "" if rows == 1 else f" / {rows:g} sequences"
    words = (
        f"CPU compute x{mid:.3f}: the added rows' matrix work ({g['row_ns'] / 1e3:.1f} us per row: the prefill's "
        f"{g['prefill_ns'] / 1e6:.3f} ms over {g['prefill_rows']:g} rows beyond a decode step's "
        f"{g['decode_ns'] / 1e6:.3f} ms) + half of each added sequence's attention and KV-cache work "
        f"({g['context_slope_ns'] / 1e3:.2f} us per context token x {g['context']:.0f} tokens{per}: the steps' growth "
        f"with the context, one traced run's); bounds x{lo:.3f} (only the rows' work grows) to x{hi:.3f} (each added "
        f"sequence costs one of today's: nothing shared) x {added:g} added sequence(s); host-exposed + "
        f"{per_seq / 1e3:.1f} us per added sequence (stepmodel.DEFAULT_HOST[{ENGINE_OF.get(base.engine or '', 'vllm')}]"
        ".per_seq_ns)"
    )
    return at(mid), (at(lo), at(hi)), words


def watch_batch_outcome(
    base: Baseline, target: int
) -> tuple[Callable[[Steps], Outcome], tuple[Callable[[Steps], Outcome], Callable[[Steps], Outcome]], str]:
    """The step at ``target`` sequences of a watched run: the watch's calibration (lines in the
    batch of the device time and of the host term, fitted on profiles of this server) gives both
    ratios, applied to each interval's own device time and host-exposed time; the ends carry the
    calibration's held-out error and, beyond its batches, the extrapolation bound
    (server/watch/estimate.py's ``extrapolation``, the same rule)."""
    c = base.facts["watch_calibration"]
    batches = [float(x) for x in c["batches"]]

    def line(i: str, sl: str, b: float) -> float:
        return float(c[i]) + float(c[sl]) * b

    g0, g1 = line("gpu_intercept_s", "gpu_slope_s", base.batch), line("gpu_intercept_s", "gpu_slope_s", target)
    h0, h1 = line("host_intercept_s", "host_slope_s", base.batch), line("host_intercept_s", "host_slope_s", target)
    if not (g0 > 0 and g1 > 0):
        raise HostgapError("batch", "the watch's calibration gives no device time at these batches")
    rg, rh = g1 / g0, (h1 / h0 if h0 > 0 and h1 > 0 else 1.0)
    lo_b, hi_b = min(batches), max(batches)
    edge = lo_b if target < lo_b else hi_b
    extra = (
        0.0
        if lo_b <= target <= hi_b
        else abs(target - edge) / (min(target, edge) if lo_b == hi_b else max(target, edge))
    )
    err = float(c.get("block_rel_err") or 0.0) + extra

    def at(f_dev: float) -> Callable[[Steps], Outcome]:
        def apply(s: Steps) -> Outcome:
            dev = s.device * f_dev
            return Outcome(dev + np.maximum(s.wall - s.device, 0.0) * rh, dev, target / base.batch)

        return apply

    words = (
        f"device time x{rg:.3f}, host term x{rh:.3f}: the watch's calibration lines at batch {base.batch:g} and "
        f"{target} (calibrated batches {[int(b) if b == int(b) else b for b in batches]}, {c.get('source', '')}); "
        f"ends +-{err:.0%} (held-out error {float(c.get('block_rel_err') or 0):.0%}"
        + (f", extrapolated beyond batch {edge:g}" if extra else "")
        + ")"
    )
    return at(rg), (at(rg * (1 - err)), at(rg * (1 + err))), words


def megakernel_device_ns(base: Baseline, gpu: str | None = None) -> float | None:
    """The bytes a step must stream at the published megakernels' 78 % of the datasheet
    bandwidth (whatif_megakernel.py), as a ratio of the model's graph-mode device time applied to
    nothing: the absolute bound, ns; None without the architecture."""
    if base.preset is None:
        return None
    s = setup_for(base, gpu)
    return bandwidth_floor_ns(setup_account(s), s.device) / BW_FRACTION


def device_levers(base: Baseline, gpu: str | None = None) -> dict[str, tuple[Ratios | None, str]]:
    """fp8, tp and spec as ratios, or None and why not."""
    out: dict[str, tuple[Ratios | None, str]] = {}
    if not base.gpu:
        why = "a device-side lever: no device model for a CPU run"
        return {k: (None, why) for k in ("fp8", "tp", "spec")}
    try:
        s = setup_for(base, gpu)
    except HostgapError as e:
        return {k: (None, str(e).split(": ", 1)[-1]) for k in ("fp8", "tp", "spec")}
    for name, spec in (
        ("fp8", "fp8"),
        ("tp", f"tp={TP_TARGET}"),
        ("spec", f"spec:gamma={SPEC_GAMMA},alpha={SPEC_ALPHA}"),
    ):
        try:
            out[name] = (whatif_ratios(s, spec), "")
        except HostgapError as e:
            out[name] = (None, str(e))
    return out
