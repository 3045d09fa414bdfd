"""Workload accounting: what one engine step asks of one tensor-parallel rank.

For an architecture (:class:`hostgap.model.arch.Arch`) and a step (:class:`Cell`: batch,
tokens per sequence, KV length, TP degree, dtypes) this lists the step's ops, each with its
FLOPs, weight bytes read, KV bytes read and written, activation bytes and kernel launches,
**per TP rank** (METHOD.md §7).

Conventions (each one a choice a performance engineer would check):

- FLOPs of a matmul = 2 x tokens x in x out (per rank: the sharded dimension divided by k).
  Attention = 4 x heads/k x head_dim x sum over sequences of the causal q.s product
  (q (s - q) + q (q + 1) / 2; for decode, q = 1, this is s).
- The input embedding is a **gather**: it reads ``tokens x hidden`` table entries, not the
  table. The LM head runs only on the positions whose logits are kept (one per sequence by
  default: decode keeps every position, prefill with ``logits_to_keep=1`` keeps the last).
  With tied embeddings the LM head reads the (shared) embedding table. In W8A8 the
  embedding and the LM head stay in the activation dtype (as quantised checkpoints ship them).
- Weights are read once per step per rank (weights do not fit in cache at these sizes).
  Column-parallel (q, k, v, gate, up) and row-parallel (o, down) projections are split over
  k ranks; the LM head is vocab-parallel; norms and the router are replicated. When k exceeds
  the KV head count, KV heads are replicated (one per rank), as vLLM does.
- MoE: the weights read are those of the experts the batch actually hits, in expectation
  under uniform routing: E (1 - (1 - top_k / E)^T) experts for T tokens; FLOPs use top_k.
- Activations are bf16/fp16 (2 bytes) unless the weights are float32; fp8 / int8 weights
  mean W8A8: the matmul runs at the 8-bit peak and each matmul gets activation-quantisation
  kernels (:data:`QUANT_KERNELS_PER_MATMUL`).
- Launches per op come from :data:`LAUNCH_TABLES` (documented estimates per engine); a
  measured kernels-per-step figure replaces the total (:func:`scale_launches`).

Worked example (Llama-3.1-8B, decode, batch 1, TP 1, bf16): weights read per step are the
parameter count minus the embedding table plus one gathered row: 2 x (8,030,261,248 -
128,256 x 4,096 + 4,096) bytes = 15.01 GB.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.arch import Arch, dtype_bytes

FAMILIES = ("gemm", "attention", "norm", "elementwise", "gather", "collective", "quant")
"""Op families: the roofline's efficiencies are calibrated per family (or per op)."""

QUANT_KERNELS_PER_MATMUL = 1
"""Activation-quantisation kernels per matmul in W8A8 (dynamic per-token scale: one kernel)."""

# Kernel launches per op instance, per engine. Estimates from the implementations:
# - "vllm": vLLM eager (fused_add_rms_norm, one QKV GEMM, rotary kernel, reshape_and_cache,
#   one attention kernel, one gate_up GEMM, silu_and_mul, down GEMM): ~10 per layer.
# - "hf": transformers eager (RMSNorm as 8 elementwise kernels, separate q/k/v/gate/up
#   GEMMs, rotate_half rope ~10 kernels, DynamicCache cat, sdpa); "misc" covers views made
#   contiguous and dtype casts, set so Llama-3.1-8B gives ~1,700 per decode step, the figure
#   measured on H200 (docs/PLATFORM.md). MoE layers loop over the experts hit, ~14 kernels
#   each. Against TaxBreak's kernels per output token (H100, batch 4, prompt 2048, 10 new
#   tokens): Llama-3.2-1B 854 vs 847.5; OLMoE-1B-7B 7,883 vs 9,305; Qwen1.5-MoE 7,998 vs 6,695.
# A measured kernels_per_step replaces these totals (scale_launches).
LAUNCH_TABLES: dict[str, dict[str, float]] = {
    "vllm": dict(
        embed=1,
        input_norm=1,
        qkv_proj=1,
        rope=1,
        kv_write=1,
        attention=1,
        o_proj=1,
        post_norm=1,
        gate_up_proj=1,
        act=1,
        down_proj=1,
        residual_add=0,
        all_reduce=1,
        final_norm=1,
        lm_head=1,
        sample=6,
        router=1,
        topk=2,
        expert=3,
        moe_overhead=4,
        shared_expert=3,
        misc=0,
    ),
    "hf": dict(
        embed=1,
        input_norm=8,
        qkv_proj=3,
        rope=10,
        kv_write=2,
        attention=4,
        o_proj=1,
        post_norm=8,
        gate_up_proj=2,
        act=2,
        down_proj=1,
        residual_add=1,
        all_reduce=1,
        final_norm=8,
        lm_head=1,
        sample=12,
        router=1,
        topk=4,
        expert=14,
        moe_overhead=8,
        shared_expert=6,
        misc=9,
    ),
}
# transformers' continuous batching runs the same modules (its paged attention in place of the
# DynamicCache: kv_write and attention are counted as the eager path's).
LAUNCH_TABLES["hf-cb"] = LAUNCH_TABLES["hf"]


# What a CUDA graph captures per engine, for graph-mode orchestration (stepmodel):
# - vllm: V1 compiles the forward with torch.compile and splits it at every attention op
#   ("piecewise" CUDA graphs, V1's default capture): each layer replays one graph piece, its
#   attention ops (KV-cache write, attention) run eagerly between pieces, layers + 1 pieces in
#   all; logits (LM head) and sampling run outside the captured forward. ``full`` capture
#   (one graph for the decode forward) keeps only the LM head and sampling outside.
# - hf: torch.compile "reduce-overhead" with a static cache captures the whole forward (LM
#   head included) as one graph; sampling runs outside.
# - hf-cb: transformers' continuous batching with use_cuda_graph captures the padded forward the
#   same way; sampling runs outside.
GRAPH_CAPTURE: dict[str, dict[str, tuple]] = {  # engine -> capture -> ops launched outside (first: default)
    "vllm": {"piecewise": ("kv_write", "attention", "lm_head", "sample"), "full": ("lm_head", "sample")},
    "hf": {"full": ("sample",)},
    "hf-cb": {"full": ("sample",)},  # use_cuda_graph: the padded forward replayed; sampling outside
}


@dataclass(frozen=True)
class Cell:
    """One engine step's shape, from the point of view of one TP rank.

    ``q_tokens`` tokens per sequence are processed this step (1 in decode; the prompt, or a
    chunk of it, in prefill); ``context`` is the KV length each sequence attends to after the
    step (cached + scheduled). ``logits_kept`` defaults to one position per sequence.
    """

    batch: int = 1
    q_tokens: int = 1
    context: int = 2048
    tp: int = 1
    dtype: str = "bfloat16"
    kv_dtype: str | None = None
    logits_kept: int | None = None
    engine: str = "vllm"

    def __post_init__(self):
        for name in ("batch", "q_tokens", "tp"):
            if getattr(self, name) < 1:
                raise HostgapError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.context < self.q_tokens:
            raise HostgapError("context", f"KV length {self.context} < tokens per step {self.q_tokens}")
        if self.engine not in LAUNCH_TABLES:
            raise HostgapError("engine", f"unknown engine {self.engine!r}; known: {', '.join(LAUNCH_TABLES)}")
        dtype_bytes(self.dtype)
        if self.kv_dtype is not None:
            dtype_bytes(self.kv_dtype)

    @property
    def tokens(self) -> int:
        return self.batch * self.q_tokens

    @property
    def act_dtype(self) -> str:
        return "float32" if self.dtype == "float32" else ("float16" if self.dtype == "float16" else "bfloat16")

    @property
    def kv_cache_dtype(self) -> str:
        return self.kv_dtype or self.act_dtype

    @property
    def w8a8(self) -> bool:
        return self.dtype in ("fp8", "int8")

    @property
    def logits(self) -> int:
        return self.batch if self.logits_kept is None else self.logits_kept

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Op:
    """One op of a step, per TP rank. Quantities are per instance; ``count`` instances run.

    ``kernels`` is the number of device kernels one instance runs (each pays the fixed
    per-kernel latency t_min); ``launches`` the host launches it costs.
    """

    name: str
    family: str
    count: int
    flops: float
    weight_bytes: float
    kv_read_bytes: float = 0.0
    kv_write_bytes: float = 0.0
    act_bytes: float = 0.0
    kernels: float = 1.0
    launches: float = 1.0
    compute_dtype: str = "bfloat16"

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes + self.act_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bytes"] = self.bytes
        return d


@dataclass(frozen=True)
class Account:
    """The ops of one step on one rank, with totals (each total = sum of count x per-op)."""

    arch_name: str
    cell: Cell
    ops: tuple[Op, ...]

    def _total(self, attr: str) -> float:
        return float(sum(o.count * getattr(o, attr) for o in self.ops))

    @property
    def flops(self) -> float:
        return self._total("flops")

    @property
    def weight_bytes(self) -> float:
        return self._total("weight_bytes")

    @property
    def kv_read_bytes(self) -> float:
        return self._total("kv_read_bytes")

    @property
    def kv_write_bytes(self) -> float:
        return self._total("kv_write_bytes")

    @property
    def act_bytes(self) -> float:
        return self._total("act_bytes")

    @property
    def bytes(self) -> float:
        return self._total("bytes")

    @property
    def launches(self) -> float:
        return self._total("launches")

    @property
    def matmuls(self) -> float:
        return float(sum(o.count * o.kernels for o in self.ops if o.family == "gemm"))

    def op(self, name: str) -> Op:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def arrays(self) -> dict[str, np.ndarray]:
        """Columns for vectorised models: one entry per op."""
        cols = ("count", "flops", "weight_bytes", "kv_read_bytes", "kv_write_bytes", "act_bytes", "kernels", "launches")
        out = {c: np.array([float(getattr(o, c)) for o in self.ops]) for c in cols}
        out["bytes"] = np.array([o.bytes for o in self.ops])
        out["family"] = np.array([o.family for o in self.ops])
        out["name"] = np.array([o.name for o in self.ops])
        out["compute_dtype"] = np.array([o.compute_dtype for o in self.ops])
        return out

    def totals(self) -> dict:
        return dict(
            flops=self.flops,
            weight_bytes=self.weight_bytes,
            kv_read_bytes=self.kv_read_bytes,
            kv_write_bytes=self.kv_write_bytes,
            act_bytes=self.act_bytes,
            bytes=self.bytes,
            launches=self.launches,
        )

    def to_dict(self) -> dict:
        return dict(
            arch=self.arch_name, cell=self.cell.to_dict(), totals=self.totals(), ops=[o.to_dict() for o in self.ops]
        )


def graph_split(acc: Account, layers: int, capture: str | None = None) -> tuple[float, float, str]:
    """Graph mode, per step and rank: (graph launches, kernels launched eagerly outside the
    graphs, capture), from :data:`GRAPH_CAPTURE` for the account's engine."""
    table = GRAPH_CAPTURE[acc.cell.engine]
    capture = capture or next(iter(table))
    if capture not in table:
        raise HostgapError(
            "capture", f"{acc.cell.engine} has no {capture!r} CUDA graph capture; known: {', '.join(table)}"
        )
    outside = sum(o.count * o.launches for o in acc.ops if o.name in table[capture])
    return (layers + 1.0 if capture == "piecewise" else 1.0), float(outside), capture


def _split(n: int, k: int) -> float:
    """Per-rank share of a dimension split over k ranks."""
    return n / k


def expected_experts_hit(experts: int, top_k: int, tokens: int) -> float:
    """Distinct experts a batch of ``tokens`` touches, uniform routing: E (1 - (1 - k/E)^T)."""
    if experts == 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def _causal_qs(q: int, s: int) -> int:
    """Sum over the q new positions of the keys each attends to: q (s - q) + q (q + 1) / 2."""
    return q * (s - q) + q * (q + 1) // 2


def account(arch: Arch, cell: Cell) -> Account:
    """The per-rank ops of one step of ``arch`` shaped by ``cell``."""
    k, T = cell.tp, cell.tokens
    w, a = dtype_bytes(cell.dtype), dtype_bytes(cell.act_dtype)
    kvb = dtype_bytes(cell.kv_cache_dtype)
    mm_dtype = cell.dtype if cell.w8a8 else cell.act_dtype
    lt = LAUNCH_TABLES[cell.engine]
    h, L = arch.hidden, arch.layers
    q_dim = arch.heads * arch.head_dim
    kv_heads_rank = max(1.0, arch.kv_heads / k)  # replicated when k > kv heads
    kv_dim_rank = kv_heads_rank * arch.head_dim
    heads_rank = arch.heads / k
    gated = arch.family != "gpt2" and arch.gated_mlp
    ops: list[Op] = []

    def gemm(name, count, tokens, n_in, n_out, kernels, bias=False, quantised=True):
        q8 = cell.w8a8 and quantised
        wb = n_in * n_out * (w if q8 or not cell.w8a8 else a) + (n_out * a if bias else 0)
        ops.append(
            Op(
                name,
                "gemm",
                count,
                2.0 * tokens * n_in * n_out,
                wb,
                act_bytes=tokens * (n_in + n_out) * a,
                kernels=kernels,
                launches=kernels,
                compute_dtype=mm_dtype if q8 else cell.act_dtype,
            )
        )
        if q8:
            ops.append(
                Op(
                    name + "_quant",
                    "quant",
                    count,
                    2.0 * tokens * n_in,
                    0.0,
                    act_bytes=tokens * n_in * (a + w),
                    kernels=QUANT_KERNELS_PER_MATMUL * kernels,
                    launches=QUANT_KERNELS_PER_MATMUL * kernels,
                )
            )

    def elementwise(name, family, count, n_read, n_written, lkey, weight_bytes=0.0):
        n = lt[lkey]
        ops.append(
            Op(
                name,
                family,
                count,
                float(n_read),
                float(weight_bytes),
                act_bytes=(n_read + n_written) * a,
                kernels=max(n, 1),
                launches=n,
            )
        )

    norm_w = (2 if arch.family == "gpt2" else 1) * h * a
    # -- embedding: a gather of T rows (+ learned positions for gpt2) --------------------
    emb_rows = T * (2 if arch.family == "gpt2" else 1)
    # vocab-parallel lookup: every rank gathers all T rows (out-of-shard ids are masked)
    ops.append(
        Op(
            "embed",
            "gather",
            1,
            0.0,
            emb_rows * h * a,
            act_bytes=T * h * a,
            kernels=1,
            launches=lt["embed"] + (2 if k > 1 else 0),
        )
    )
    if k > 1:
        ops.append(
            Op("embed_all_reduce", "collective", 1, 0.0, 0.0, act_bytes=T * h * a, kernels=1, launches=lt["all_reduce"])
        )
    # -- per layer ---------------------------------------------------------------------
    elementwise("input_norm", "norm", L, T * h, T * h, "input_norm", norm_w)
    qkv_bias = arch.qkv_bias or arch.family == "gpt2"
    gemm("qkv_proj", L, T, h, q_dim / k + 2 * kv_dim_rank, lt["qkv_proj"], bias=qkv_bias)
    if arch.qk_norm:  # OLMoE: RMSNorm over the full q and k projections
        elementwise(
            "qk_norm",
            "norm",
            L,
            T * (q_dim + arch.kv_heads * arch.head_dim) / k,
            T * (q_dim + arch.kv_heads * arch.head_dim) / k,
            "input_norm",
            (q_dim + arch.kv_heads * arch.head_dim) * a,
        )
    if arch.family != "gpt2":
        elementwise("rope", "elementwise", L, T * (q_dim / k + kv_dim_rank), T * (q_dim / k + kv_dim_rank), "rope")
    ops.append(
        Op(
            "kv_write",
            "elementwise",
            L,
            0.0,
            0.0,
            kv_write_bytes=cell.batch * cell.q_tokens * 2 * kv_dim_rank * kvb,
            act_bytes=T * 2 * kv_dim_rank * a,
            kernels=max(lt["kv_write"], 1),
            launches=lt["kv_write"],
        )
    )
    attn_flops = 4.0 * heads_rank * arch.head_dim * cell.batch * _causal_qs(cell.q_tokens, cell.context)
    ops.append(
        Op(
            "attention",
            "attention",
            L,
            attn_flops,
            0.0,
            kv_read_bytes=cell.batch * cell.context * 2 * kv_dim_rank * kvb,
            act_bytes=2 * T * q_dim / k * a,
            kernels=1,
            launches=lt["attention"],
            compute_dtype=cell.act_dtype,
        )
    )
    gemm("o_proj", L, T, q_dim / k, h, lt["o_proj"], bias=arch.family == "gpt2")
    if k > 1:
        ops.append(
            Op("attn_all_reduce", "collective", L, 0.0, 0.0, act_bytes=T * h * a, kernels=1, launches=lt["all_reduce"])
        )
    elementwise("residual_add", "elementwise", 2 * L, 2 * T * h, T * h, "residual_add")
    elementwise("post_norm", "norm", L, T * h, T * h, "post_norm", norm_w)
    _mlp(ops, arch, cell, gemm, elementwise, lt, T, a, w, k, gated)
    if k > 1:
        ops.append(
            Op("mlp_all_reduce", "collective", L, 0.0, 0.0, act_bytes=T * h * a, kernels=1, launches=lt["all_reduce"])
        )
    if lt["misc"]:
        ops.append(Op("misc", "elementwise", L, 0.0, 0.0, act_bytes=T * h * a, kernels=lt["misc"], launches=lt["misc"]))
    # -- head --------------------------------------------------------------------------
    elementwise("final_norm", "norm", 1, T * h, T * h, "final_norm", norm_w)
    gemm("lm_head", 1, cell.logits, h, arch.vocab / k, lt["lm_head"], quantised=False)
    ops.append(
        Op(
            "sample",
            "elementwise",
            1,
            float(cell.logits * arch.vocab / k),
            0.0,
            act_bytes=cell.logits * arch.vocab / k * a,
            kernels=lt["sample"],
            launches=lt["sample"],
        )
    )
    return Account(arch.name, cell, tuple(ops))


def _mlp(ops, arch, cell, gemm, elementwise, lt, T, a, w, k, gated):
    h, L, i = arch.hidden, arch.layers, arch.intermediate
    n_up = 2 if gated else 1
    if not arch.is_moe:
        bias = arch.family == "gpt2"
        gemm("gate_up_proj", L, T, h, n_up * i / k, lt["gate_up_proj"] if gated else 1, bias=bias)
        elementwise("act", "elementwise", L, n_up * T * i / k, T * i / k, "act")
        gemm("down_proj", L, T, i / k, h, lt["down_proj"], bias=bias)
        return
    E, top = arch.experts, arch.top_k
    hit = expected_experts_hit(E, top, T)
    # router is replicated on every rank
    ops.append(
        Op(
            "router",
            "gemm",
            L,
            2.0 * T * h * E,
            h * E * w,
            act_bytes=T * (h + E) * a,
            kernels=1,
            launches=lt["router"],
            compute_dtype=cell.act_dtype,
        )
    )
    elementwise("topk", "elementwise", L, T * E, T * top, "topk")
    per_expert_w = 3 * h * i / k * w
    expert_launch = lt["expert"] * hit if cell.engine in ("hf", "hf-cb") else lt["expert"]
    ops.append(
        Op(
            "experts",
            "gemm",
            L,
            2.0 * T * top * 3 * h * i / k,
            hit * per_expert_w,
            act_bytes=T * top * (2 * h + 3 * i / k) * a,
            kernels=3,
            launches=expert_launch,
            compute_dtype=cell.dtype if cell.w8a8 else cell.act_dtype,
        )
    )
    if cell.w8a8:
        ops.append(
            Op(
                "experts_quant",
                "quant",
                L,
                2.0 * T * top * h,
                0.0,
                act_bytes=T * top * h * (a + w),
                kernels=2 * QUANT_KERNELS_PER_MATMUL,
                launches=2 * QUANT_KERNELS_PER_MATMUL,
            )
        )
    elementwise("moe_overhead", "elementwise", L, T * top * h, T * h, "moe_overhead")
    if arch.shared_expert_intermediate:
        si = arch.shared_expert_intermediate
        ops.append(
            Op(
                "shared_expert",
                "gemm",
                L,
                2.0 * T * 3 * h * si / k,
                (3 * h * si / k + h) * w,
                act_bytes=T * (2 * h + 3 * si / k) * a,
                kernels=3,
                launches=lt["shared_expert"],
                compute_dtype=cell.dtype if cell.w8a8 else cell.act_dtype,
            )
        )


def stored_params(arch: Arch) -> int:
    """Parameters the accounting stores on one TP-1 rank (the full table, all experts).

    Equals ``arch.param_count()``: a check that the accounting's weights are the model's.
    """
    acc = account(arch, Cell(batch=1, q_tokens=1, context=1, engine="vllm"))
    w = 2  # bf16
    per_layer = 0.0
    for o in acc.ops:
        if o.count == arch.layers and o.family in ("gemm", "norm"):
            if o.name == "experts":
                per_layer += arch.experts * 3 * arch.hidden * arch.intermediate * w
            else:
                per_layer += o.weight_bytes
    head = acc.op("lm_head").weight_bytes if not arch.tied_embeddings else 0.0
    final = acc.op("final_norm").weight_bytes
    table = arch.embedding_params() * w
    return int(round((arch.layers * per_layer + head + final + table) / w))


def decode_cell(batch: int, context: int, **kw) -> Cell:
    """A decode step: one new token per sequence, ``context`` KV tokens read per sequence."""
    return Cell(batch=batch, q_tokens=1, context=max(context, 1), **kw)


def prefill_cell(batch: int, prompt_len: int, **kw) -> Cell:
    """A prefill step of ``prompt_len`` tokens per sequence, logits kept for the last one."""
    return Cell(batch=batch, q_tokens=prompt_len, context=prompt_len, **kw)


def scale_launches(acc: Account, kernels_per_step: float) -> Account:
    """The same account with launches scaled so their total is a measured kernels per step."""
    total = acc.launches
    if total <= 0 or not math.isfinite(kernels_per_step) or kernels_per_step <= 0:
        return acc
    f = kernels_per_step / total
    return replace(acc, ops=tuple(replace(o, launches=o.launches * f) for o in acc.ops))
