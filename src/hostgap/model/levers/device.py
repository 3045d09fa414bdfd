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
