"""The energy paper's figures (METHOD.md §9) placed through the decomposition
``E_window(N) = E_fixed + N e_step`` (docs/energy.md): what e_step and E_fixed they imply, whether
the figures agree with each other within their rounding, and what the H200's power limit says
about the step time they imply. ``regimes --published`` prints it; tests pin every number.

The paper states, for Llama-3.2-1B on one H200, batch 16, context 4K: output 10 -> 512 tokens
takes token energy from 7.46 to 0.72 J/token and the batched window from 1.19 to 5.93 kJ; at 10
output tokens the batch-16 over batch-1 token-energy gain is 6.31x at context 512 and 1.17x at
context 4K. It does not state step times, power, the counters' scope (GPU only or more) or the
batch-1 and context-512 energies themselves: what needs them is said not reproducible.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

BATCH = 16
CONTEXT = 4096
N_SHORT, N_LONG = 10, 512
TOKEN_J = {N_SHORT: 7.46, N_LONG: 0.72}  # J per output token, as printed
WINDOW_J = {N_SHORT: 1190.0, N_LONG: 5930.0}  # the batched window, 1.19 and 5.93 kJ as printed
GAIN = {512: 6.31, 4096: 1.17}  # batch-16 over batch-1 token-energy gain at N = 10, by context
H200_POWER_LIMIT_W = 700.0  # the H200 SXM's maximum board power (TDP)

# Llama-3.2-1B (config.json): 16 layers, hidden 2048, 8 KV heads of 64, 1.236 B parameters (bf16)
LAYERS, HIDDEN, KV_HEADS, HEAD_DIM, PARAMS = 16, 2048, 8, 64, 1.236e9
H200_BANDWIDTH = 4.8e12  # B/s, HBM3e
H200_BF16_FLOPS = 989e12  # dense


TOKEN_HALF_J = 0.005  # token energies are printed to two decimals (7.46, 0.72)
WINDOW_HALF_J = 5.0  # windows to two decimals of a kJ (1.19, 5.93)


@dataclass(frozen=True)
class Row:
    id: str
    quantity: str
    value: float | None
    unit: str
    how: str
    status: str  # "implied", "consistent", "inconsistent", "not reproducible"

    def to_dict(self) -> dict:
        return asdict(self)


def implied_step_j() -> float:
    """e_step from the two windows: (5930 - 1190) / (512 - 10) J per decode step (of the batch)."""
    return (WINDOW_J[N_LONG] - WINDOW_J[N_SHORT]) / (N_LONG - N_SHORT)


def implied_fixed_j() -> float:
    """E_fixed = E_window(10) - 10 e_step."""
    return WINDOW_J[N_SHORT] - N_SHORT * implied_step_j()


def step_bytes(context: int = CONTEXT, batch: int = BATCH) -> float:
    """Bytes one decode step reads at least: the weights once and every sequence's KV cache (bf16)."""
    kv_per_token = 2 * LAYERS * KV_HEADS * HEAD_DIM * 2
    return PARAMS * 2 + batch * context * kv_per_token


def prefill_flops(context: int = CONTEXT, batch: int = BATCH) -> float:
    """The prefill's matmul FLOPs (2 per parameter per token) and causal attention's
    (2 x 2 x L x ctx^2 / 2 x hidden per sequence: QK^T and AV over half the square)."""
    return batch * (2 * PARAMS * context + 2 * LAYERS * context**2 * HIDDEN)


def rows() -> list[Row]:
    """Every placed figure (module doc)."""
    e, f = implied_step_j(), implied_fixed_j()
    out = [
        Row("e_step", "energy per decode step of the batch", e, "J", "(5930 - 1190) / (512 - 10)", "implied"),
        Row("e_step_per_request", "marginal energy per output token", e / BATCH, "J", "e_step / 16", "implied"),
        Row("E_fixed", "fixed energy of the window (prefill, set-up)", f, "J", "1190 - 10 e_step", "implied"),
        Row("E_fixed_per_request", "fixed energy per request", f / BATCH, "J", "E_fixed / 16", "implied"),
        Row(
            "N_even",
            "output length where the steps' energy equals the fixed",
            f / e,
            "tokens",
            "E_fixed / e_step",
            "implied",
        ),
    ]
    for n in (N_SHORT, N_LONG):
        w = TOKEN_J[n] * BATCH * n
        d = TOKEN_HALF_J * BATCH * n + WINDOW_HALF_J  # both roundings at their widest
        ok = abs(w - WINDOW_J[n]) <= d
        out.append(
            Row(
                f"window_from_token_{n}",
                f"window at N={n} from its token energy ({TOKEN_J[n]} J x 16 x {n}) against {WINDOW_J[n]:g} J",
                w,
                "J",
                f"{TOKEN_J[n]} x {BATCH} x {n}; agrees within the printed digits when |difference| <= {d:.3g} J",
                "consistent" if ok else "inconsistent",
            )
        )
    from_tokens = (TOKEN_J[N_LONG] * BATCH * N_LONG - TOKEN_J[N_SHORT] * BATCH * N_SHORT) / (N_LONG - N_SHORT)
    lo = ((TOKEN_J[N_LONG] - TOKEN_HALF_J) * BATCH * N_LONG - (TOKEN_J[N_SHORT] + TOKEN_HALF_J) * BATCH * N_SHORT) / (
        N_LONG - N_SHORT
    )
    hi = ((TOKEN_J[N_LONG] + TOKEN_HALF_J) * BATCH * N_LONG - (TOKEN_J[N_SHORT] - TOKEN_HALF_J) * BATCH * N_SHORT) / (
        N_LONG - N_SHORT
    )
    out.append(
        Row(
            "e_step_from_tokens",
            "e_step from the token energies instead of the windows",
            from_tokens,
            "J",
            f"(0.72 x 16 x 512 - 7.46 x 16 x 10) / 502; the printed digits allow {lo:.3f}..{hi:.3f}",
            "consistent" if lo <= e <= hi else "inconsistent",
        )
    )
    b1 = TOKEN_J[N_SHORT] * GAIN[4096] * N_SHORT
    b1_step = (b1 - f / BATCH) / N_SHORT
    out.append(
        Row(
            "e_step_b1_bound",
            "largest batch-1 step energy at context 4K (if a batch-1 request's fixed energy is at least "
            "a batch-16 request's share)",
            b1_step,
            "J",
            f"(7.46 x 1.17 x 10 - E_fixed / 16) / 10; a batch-16 step then costs >= {e / b1_step:.1f}x a batch-1 "
            f"step while reading {step_bytes() / step_bytes(batch=1):.1f}x the bytes",
            "implied",
        )
    )
    t_min = e / H200_POWER_LIMIT_W
    t_roof = max(step_bytes() / H200_BANDWIDTH, 0.0)
    out += [
        Row(
            "step_time_at_limit",
            "shortest step time e_step allows at the H200's 700 W",
            t_min * 1e3,
            "ms",
            "e_step / 700 W",
            "implied",
        ),
        Row(
            "step_roofline",
            "memory-bound step time (weights + 16 x 4K KV, bf16, 4.8 TB/s)",
            t_roof * 1e3,
            "ms",
            f"{step_bytes() / 1e9:.2f} GB / 4.8 TB/s",
            "implied",
        ),
        Row(
            "step_vs_roofline",
            "the step e_step implies, over the memory-bound step",
            t_min / t_roof,
            "x",
            "at 700 W; at a lower draw the step is longer still",
            "implied",
        ),
        Row(
            "prefill_floor",
            "prefill energy at peak bf16 and 700 W (16 x 4K tokens)",
            prefill_flops() / H200_BF16_FLOPS * H200_POWER_LIMIT_W,
            "J",
            f"{prefill_flops() / 1e12:.0f} TFLOP / 989 TFLOP/s x 700 W; E_fixed holds the rest as set-up",
            "implied",
        ),
        Row(
            "window_b1_ctx4k",
            "batch-1 window at context 4K, N=10 (token energy 7.46 x 1.17)",
            TOKEN_J[N_SHORT] * GAIN[4096] * N_SHORT,
            "J",
            "7.46 x 1.17 x 10",
            "implied",
        ),
        Row(
            "ctx512_energies",
            "batch-16 and batch-1 energies at context 512 (only their ratio, 6.31, is given)",
            None,
            "J",
            "the paper states the gain, not the energies: e_step and E_fixed at 512 are not reproducible",
            "not reproducible",
        ),
        Row(
            "counter_scope",
            "whether the windows count the GPU alone (NVML) or the node",
            None,
            "",
            "not stated: a step of >= 13.5 ms at batch 16 is host-bound if GPU-only",
            "not reproducible",
        ),
    ]
    return out


def document() -> dict:
    """``regimes --published --json``'s ``energy`` block."""
    return {
        "source": "the energy paper beside LLMVisor's (METHOD.md §9): Llama-3.2-1B, H200, batch 16, context 4K",
        "rows": [r.to_dict() for r in rows()],
    }
