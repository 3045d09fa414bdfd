"""The differencing paper's lens of what-ifs over one cell (METHOD.md §7), and a faster host.

Each what-if states its assumptions and changes only what it names:

- ``graphs[:capture=piecewise|full]``: CUDA graph replay. The per-kernel orchestration (ΔFT +
  ΔCT + ΔKT) of the captured kernels is replaced by one launch per graph; the per-step
  dispatch and the kernels outside the graphs stay (vLLM V1 default: piecewise, one graph per
  layer, attention, LM head and sampling eager; accounting.GRAPH_CAPTURE). Orchestration
  overlaps GPU work, so only its exposed part is gained: where it was already hidden the step
  does not change.
- ``spec:gamma=G,alpha=A[,draft=PRESET]``: speculative decoding. One cycle = G draft steps
  (device time of ``draft``; 0 for n-gram/prompt-lookup drafting) + one verify step over G+1
  tokens per sequence, paying the serial host term once per cycle. Tokens per cycle
  E = (1 - A^(G+1)) / (1 - A) (G + 1 at A = 1); per-token speed-up = baseline step / (cycle / E).
  A = 0 gives E = 1: no per-token gain (a loss, by the verify and draft cost).
- ``fp8[:gemm_eff=F]``: W8A8. Quantised matmul weights take 1 byte (x 0.5), matmuls run at the
  FP8 peak (bf16 rate where the device has none), one activation-quantisation kernel per matmul
  adds device time and launches (the paper measured ~1.7x launches). ``gemm_eff`` scales the
  8-bit GEMMs' efficiencies relative to 16-bit (default 1: as efficient as 16-bit). The
  small-batch slowdown the paper measured comes from the extra kernels' orchestration.
- ``tp=K``: the prediction of the same cell at ``--tp K`` (one code path: :func:`predict`):
  per-rank device time, all-reduce time, the host term's per-rank part; other TP forms beside.
- ``host=F``: a host CPU F times faster single-thread (F < 1: slower): serial host work,
  per-step dispatch and the CPU part of per-kernel orchestration divide by F; the launch floor
  (driver/hardware) does not.

Each predicts from the cell's setup (:mod:`hostgap.model.cell`), whose floors every prediction
respects; :mod:`.registry` knows these and the operators' what-ifs beside them by name.
"""

from __future__ import annotations

from dataclasses import replace

from hostgap.errors import HostgapError
from hostgap.model.accounting import GRAPH_CAPTURE, Account, account, graph_split
from hostgap.model.arch import get_preset
from hostgap.model.cell import (
    Setup,
    form_totals,
    overlap_form,
    predict,
    setup_account,
)
from hostgap.model.roofline import RooflineModel
from hostgap.model.stepmodel import StepPrediction
from hostgap.model.tp import default_all_reduce
from hostgap.model.whatif.change import WhatIf, _float


def parse(spec: str, known: dict | None = None) -> tuple[str, dict]:
    """``"spec:gamma=4,alpha=0.7"`` -> ("spec", {...}); ``"tp=4"`` -> ("tp", {"k": "4"})."""
    spec = spec.strip()
    if ":" in spec:
        name, rest = spec.split(":", 1)
    elif "=" in spec and spec.split("=", 1)[0] in ("tp", "host"):
        name, val = spec.split("=", 1)
        rest = f"{'k' if name == 'tp' else 'speed'}={val}"
    else:
        name, rest = spec, ""
    kw = {}
    for part in filter(None, rest.split(",")):
        if "=" not in part:
            raise HostgapError("--what-if", f"{spec!r}: expected key=value, got {part!r}")
        k, v = part.split("=", 1)
        kw[k.strip()] = v.strip()
    known = WHATIFS if known is None else known
    if name not in known:
        raise HostgapError("--what-if", f"unknown what-if {name!r}; known: {', '.join(known)}")
    return name, kw


def graphs(s: Setup, kw: dict) -> WhatIf:
    """Same cell in graph mode: captured kernels' launches -> graph launches; the per-step
    dispatch and the kernels launched outside the graphs stay (accounting.GRAPH_CAPTURE)."""
    capture = kw.get("capture")
    if capture is not None:
        known = GRAPH_CAPTURE[s.cell.engine]
        if capture not in known:
            raise HostgapError(
                "--what-if", f"graphs: {s.cell.engine} has no capture={capture!r}; known: {', '.join(known)}"
            )
        s = replace(s, capture=capture)
    base = predict(s)
    new = predict(s, mode="graph")
    _, _, how = graph_split(setup_account(s), s.arch.layers, s.capture)
    hidden = base.orchestration_exposed_ns == 0
    where = (
        "attention between the pieces, LM head, sampling"
        if how == "piecewise"
        else "LM head, sampling"
        if s.cell.engine == "vllm"
        else "sampling"
    )
    return WhatIf(
        "graphs",
        (
            f"orchestration {base.orchestration_ns / 1e6:.3f} ms (dispatch {s.host.dispatch_ns / 1e6:.3f} ms + "
            f"{base.kernels:.0f} launches x {s.host.per_kernel_ns / 1e3:.1f} us) -> "
            f"{new.orchestration_ns / 1e6:.3f} ms with {how} CUDA graphs: {new.graph_launches:.0f} graph launch(es) "
            f"x {s.host.graph_launch_ns / 1e3:.0f} us + {setup_account(s).launches - new.kernels:.0f} replayed nodes x "
            f"{s.host.graph_node_ns / 1e3:.2f} us (graph launch host cost by node count) + {new.kernels:.0f} kernels "
            f"still launched eagerly ({where})",
            "the per-step dispatch (input and attention-metadata preparation) runs in both modes"
            + ("; graphs:capture=full for one graph per step" if how == "piecewise" else ""),
            f"orchestration overlaps GPU work: exposed part {base.orchestration_exposed_ns / 1e6:.3f} ms"
            + (" (already hidden: no gain)" if hidden else ""),
            "serial host work (scheduler, IPC, sampling) is unchanged",
        ),
        base,
        new,
        extra={"capture": how},
    )


def expected_tokens(gamma: int, alpha: float) -> float:
    """E[tokens per draft-verify cycle] = (1 - alpha^(gamma+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speculative(s: Setup, kw: dict) -> WhatIf:
    spec = "spec"
    gamma = int(_float(kw, "gamma", 4, spec, 1, 64))
    alpha = _float(kw, "alpha", None, spec, 0.0, 1.0)
    base = predict(s)
    verify_cell = replace(
        s.cell, q_tokens=gamma + 1, context=s.cell.context + gamma, logits_kept=s.cell.batch * (gamma + 1)
    )
    verify = predict(s, cell=verify_cell)
    draft_dev, draft_orch, draft_name = 0.0, 0.0, "none (n-gram / prompt-lookup drafting: no draft model time)"
    if kw.get("draft"):
        d_arch = get_preset(kw["draft"])  # the draft's launches come from the table, not the target's run
        draft = overlap_form(replace(s, arch=d_arch, kernels_per_step=None), s.cell, s.mode, 1.0)
        draft_dev = draft.device_ns + draft.collective_ns
        draft_orch, draft_name = draft.orchestration_ns, d_arch.name
    cycle = StepPrediction(
        verify.device_ns + gamma * draft_dev,
        verify.collective_ns,
        verify.serial_ns,
        verify.orchestration_ns + gamma * draft_orch,
        verify.kernels,
        verify.mode,
        verify.tp,
        verify.graph_launches,
    )
    e = expected_tokens(gamma, alpha)
    return WhatIf(
        "spec",
        (
            f"draft length gamma={gamma}, acceptance alpha={alpha:g}: E[tokens per cycle] = "
            f"(1 - alpha^(gamma+1)) / (1 - alpha) = {e:.3f}",
            f"verify = one step over {gamma + 1} tokens per sequence; draft model: {draft_name}",
            "serial host term paid once per cycle; draft steps' orchestration overlaps their GPU work",
            "acceptance independent per position (i.i.d.), as in the expected-tokens formula",
        ),
        base,
        cycle,
        tokens_per_step=e,
        extra={
            "gamma": gamma,
            "alpha": alpha,
            "expected_tokens": e,
            "host_per_cycle_ns": cycle.host_ns,
            "host_per_token_ns": cycle.host_ns / e,
        },
    )


def _derated(rl: RooflineModel, acc: Account, factor: float) -> RooflineModel:
    """``rl`` with the 8-bit GEMMs' e_c and e_m multiplied by ``factor``."""
    effs = dict(rl.efficiencies)
    for o in acc.ops:
        if o.family == "gemm" and o.compute_dtype in ("fp8", "int8"):
            e = rl.efficiency(o.name, o.family)
            effs[o.name] = replace(e, e_c=e.e_c * factor, e_m=e.e_m * factor)
    return replace(rl, efficiencies=effs, keyed_by="op")


def fp8(s: Setup, kw: dict) -> WhatIf:
    base = predict(s)
    cell8 = replace(s.cell, dtype="fp8")
    factor = _float(kw, "gemm_eff", 1.0, "fp8", 0.01, 2.0)
    s8 = replace(s, roofline=_derated(s.roofline, account(s.arch, cell8), factor))
    new = predict(s8, cell=cell8)
    a16, a8 = account(s.arch, s.cell), account(s.arch, cell8)
    w_ratio = a8.weight_bytes / a16.weight_bytes
    l_ratio = a8.launches / a16.launches
    has = "fp8" in s.device.peak_flops
    return WhatIf(
        "fp8",
        (
            f"W8A8: weight bytes x{w_ratio:.2f} (embedding and LM head stay 16-bit)",
            f"+1 activation-quantisation kernel per matmul: launches x{l_ratio:.2f} (paper measured ~1.7x), "
            "each paying the per-kernel host cost",
            f"matmuls at the FP8 peak ({s.device.peak('fp8') / 1e12:.0f} TFLOP/s)"
            if has
            else f"{s.device.name} has no FP8 tensor cores: matmuls at the 16-bit peak",
            "quantisation kernels use the 'quant' roofline family",
            f"8-bit GEMM efficiency = 16-bit x {factor:g} (fp8:gemm_eff=F to change; 1 = as efficient as 16-bit)",
        ),
        base,
        new,
        extra={"weight_bytes_ratio": w_ratio, "launch_ratio": l_ratio, "gemm_eff": factor},
    )


def tensor_parallel(s: Setup, kw: dict) -> WhatIf:
    k = int(_float(kw, "k", None, "tp", 1, 64))
    base = predict(s)
    cellk = replace(s.cell, tp=k)
    scen = predict(s, cell=cellk)
    totals = form_totals(s, cellk)
    ar = s.all_reduce or default_all_reduce(s.device)
    others = ", ".join(f"{f} {t / 1e6:.2f} ms" for f, t in totals.items() if f != s.tp_form)
    return WhatIf(
        "tp",
        (
            f"TP={k}: per-rank weights and FLOPs / {k}, KV heads split (replicated beyond {s.arch.kv_heads})",
            f"all-reduce after attention and MLP: {ar.source}"
            + ("" if ar.device == s.device.name else f" (bandwidth scaled to {s.device.name}'s interconnect)"),
            f"host term by the '{s.tp_form}' form"
            + (
                ": serial part + per extra rank; each rank orchestrates its own kernels, exposed orchestration "
                "waits inside the all-reduce"
                if s.tp_form == "overlap"
                else ""
            )
            + f"; other forms: {others}",
            "TP host terms are fitted on the paper's published 8B TP-2/TP-4 cells only (docs/models.md §4)",
        ),
        base,
        scen,
        extra={"tp": k, "form_totals_ns": totals},
    )


def host_speed(s: Setup, kw: dict) -> WhatIf:
    f = _float(kw, "speed", None, "host", 0.05, 20.0)
    base = predict(s)
    new = predict(s, host_speed=f)
    return WhatIf(
        "host",
        (
            f"host CPU {f:g}x single-thread speed ({'faster' if f > 1 else 'slower' if f < 1 else 'same'}): "
            f"serial host work, per-step dispatch and per-kernel CPU work / {f:g}",
            f"launch floor {s.host.launch_floor_ns / 1e3:.2f} us per kernel unchanged (driver/hardware)",
            "paper: orchestration -10-29 %, end-to-end up to -14 % on a faster host",
        ),
        base,
        new,
    )


WHATIFS = {"graphs": graphs, "spec": speculative, "fp8": fp8, "tp": tensor_parallel, "host": host_speed}


def run(s: Setup, spec: str) -> WhatIf:
    """This module's what-ifs; :func:`hostgap.model.whatif.registry.run` knows every what-if."""
    name, kw = parse(spec)
    return WHATIFS[name](s, kw)
