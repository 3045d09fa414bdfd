"""Model architectures: the named presets and their parameter counts.

A preset is the real architecture of a published model (dimensions only; weights are random
when hostgap builds one). The same :class:`Arch` feeds the capture engine (it becomes a
transformers config) and the workload accounting (bytes and FLOPs per step).

Parameter counts follow the transformers implementations exactly, e.g.
Llama-3.2-1B: 1,235,814,400; Llama-3.1-8B: 8,030,261,248 (tested against a model built on
the ``meta`` device).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from hostgap.errors import HostgapError

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "int8": 1}


@dataclass(frozen=True)
class Arch:
    """Architecture dimensions of a decoder-only transformer."""

    name: str
    family: str  # transformers model_type: llama, qwen2, olmoe, qwen2_moe, gpt2
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width; per-expert width for MoE layers
    vocab: int
    tied_embeddings: bool
    max_positions: int = 131072
    experts: int = 0  # routed experts per MoE layer (0: dense)
    top_k: int = 0  # routed experts active per token
    shared_expert_intermediate: int = 0  # Qwen-MoE shared expert width (0: none)
    qkv_bias: bool = False
    qk_norm: bool = False  # OLMoE: RMSNorm over the full q and k projections
    gated_mlp: bool = True  # False: one up projection h -> i and an activation over it (phi-2)
    rope_theta: float = 500000.0
    description: str = ""

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    # -- parameter counts ---------------------------------------------------------------
    def attention_params(self) -> int:
        """Per layer: q, k, v, o projections (+ biases, + qk norms)."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        n = h * q + 2 * h * kv + q * h
        if self.family == "gpt2":
            return n + q + 2 * kv + h  # c_attn and c_proj biases
        if self.qkv_bias:
            n += q + 2 * kv
        if self.qk_norm:
            n += q + kv
        return n

    def mlp_params(self, active: bool = False) -> int:
        """Per layer MLP (or MoE block). ``active``: only the experts one token uses."""
        h, i = self.hidden, self.intermediate
        if self.family == "gpt2":
            return 2 * h * i + i + h
        if not self.is_moe:
            return (3 if self.gated_mlp else 2) * h * i
        experts = self.top_k if active else self.experts
        n = experts * 3 * h * i + h * self.experts  # experts + router
        if self.shared_expert_intermediate:
            n += 3 * h * self.shared_expert_intermediate + h  # shared expert + its gate
        return n

    def norm_params(self) -> int:
        """Per layer norms (two per layer)."""
        return 2 * (2 * self.hidden if self.family == "gpt2" else self.hidden)

    def embedding_params(self) -> int:
        n = self.vocab * self.hidden
        if self.family == "gpt2":
            n += self.max_positions * self.hidden
        return n

    def lm_head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def final_norm_params(self) -> int:
        return 2 * self.hidden if self.family == "gpt2" else self.hidden

    def param_count(self, active: bool = False) -> int:
        """Total parameters (``active``: those one token touches, for MoE)."""
        per_layer = self.attention_params() + self.mlp_params(active) + self.norm_params()
        return self.layers * per_layer + self.embedding_params() + self.lm_head_params() + self.final_norm_params()

    def weight_bytes(self, dtype: str = "bfloat16") -> int:
        return self.param_count() * dtype_bytes(dtype)

    def kv_bytes_per_token(self, dtype: str = "bfloat16") -> int:
        """KV-cache bytes one token occupies across all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(dtype)

    # -- transformers -------------------------------------------------------------------
    def hf_config(self) -> dict:
        """Keyword arguments for ``transformers.AutoConfig.for_model(family, **kw)``."""
        if not self.gated_mlp and self.family != "gpt2":
            raise HostgapError(
                self.name,
                f"a non-gated MLP has no {self.family} transformers config "
                "(such architectures are for the workload accounting only)",
            )
        if self.family == "gpt2":
            return dict(
                vocab_size=self.vocab,
                n_embd=self.hidden,
                n_layer=self.layers,
                n_head=self.heads,
                n_inner=self.intermediate,
                n_positions=self.max_positions,
                tie_word_embeddings=True,
            )
        kw: dict[str, Any] = dict(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            intermediate_size=self.intermediate,
            max_position_embeddings=self.max_positions,
            tie_word_embeddings=self.tied_embeddings,
            rope_theta=self.rope_theta,
        )
        if self.family == "llama":
            kw.update(head_dim=self.head_dim, attention_bias=False, mlp_bias=False)
        elif self.family == "qwen2":
            pass  # qkv bias is built in
        elif self.family == "olmoe":
            kw.update(num_experts=self.experts, num_experts_per_tok=self.top_k)
        elif self.family == "qwen2_moe":
            kw.update(
                num_experts=self.experts,
                num_experts_per_tok=self.top_k,
                moe_intermediate_size=self.intermediate,
                shared_expert_intermediate_size=self.shared_expert_intermediate,
                decoder_sparse_step=1,
                mlp_only_layers=[],
            )
        return kw

    def to_dict(self) -> dict:
        return asdict(self)


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise HostgapError("dtype", f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}") from None


_LLAMA3: dict[str, Any] = dict(family="llama", vocab=128256, rope_theta=500000.0)

PRESETS: dict[str, Arch] = {
    a.name: a
    for a in [
        Arch(
            "llama-3.2-1b",
            hidden=2048,
            layers=16,
            heads=32,
            kv_heads=8,
            head_dim=64,
            intermediate=8192,
            tied_embeddings=True,
            description="Llama-3.2-1B",
            **_LLAMA3,
        ),
        Arch(
            "llama-3.2-3b",
            hidden=3072,
            layers=28,
            heads=24,
            kv_heads=8,
            head_dim=128,
            intermediate=8192,
            tied_embeddings=True,
            description="Llama-3.2-3B",
            **_LLAMA3,
        ),
        Arch(
            "llama-3.1-8b",
            hidden=4096,
            layers=32,
            heads=32,
            kv_heads=8,
            head_dim=128,
            intermediate=14336,
            tied_embeddings=False,
            description="Llama-3.1-8B",
            **_LLAMA3,
        ),
        Arch(
            "llama-3.1-70b",
            hidden=8192,
            layers=80,
            heads=64,
            kv_heads=8,
            head_dim=128,
            intermediate=28672,
            tied_embeddings=False,
            description="Llama-3.1-70B",
            **_LLAMA3,
        ),
        Arch(
            "qwen2.5-14b",
            family="qwen2",
            hidden=5120,
            layers=48,
            heads=40,
            kv_heads=8,
            head_dim=128,
            intermediate=13824,
            vocab=152064,
            tied_embeddings=False,
            qkv_bias=True,
            rope_theta=1000000.0,
            max_positions=32768,
            description="Qwen2.5-14B",
        ),
        Arch(
            "qwen2.5-32b",
            family="qwen2",
            hidden=5120,
            layers=64,
            heads=40,
            kv_heads=8,
            head_dim=128,
            intermediate=27648,
            vocab=152064,
            tied_embeddings=False,
            qkv_bias=True,
            rope_theta=1000000.0,
            max_positions=32768,
            description="Qwen2.5-32B",
        ),
        Arch(
            "olmoe-1b-7b",
            family="olmoe",
            hidden=2048,
            layers=16,
            heads=16,
            kv_heads=16,
            head_dim=128,
            intermediate=1024,
            vocab=50304,
            tied_embeddings=False,
            experts=64,
            top_k=8,
            qk_norm=True,
            rope_theta=10000.0,
            max_positions=4096,
            description="OLMoE-1B-7B (64 experts, top-8)",
        ),
        Arch(
            "qwen1.5-moe-a2.7b",
            family="qwen2_moe",
            hidden=2048,
            layers=24,
            heads=16,
            kv_heads=16,
            head_dim=128,
            intermediate=1408,
            vocab=151936,
            tied_embeddings=False,
            experts=60,
            top_k=4,
            shared_expert_intermediate=5632,
            qkv_bias=True,
            rope_theta=1000000.0,
            max_positions=8192,
            description="Qwen1.5-MoE-A2.7B (60 experts, top-4, shared expert)",
        ),
        Arch(
            "gpt2",
            family="gpt2",
            hidden=768,
            layers=12,
            heads=12,
            kv_heads=12,
            head_dim=64,
            intermediate=3072,
            vocab=50257,
            tied_embeddings=True,
            max_positions=1024,
            description="GPT-2 (124M)",
        ),
        Arch(
            "tiny",
            hidden=256,
            layers=4,
            heads=4,
            kv_heads=2,
            head_dim=64,
            intermediate=512,
            vocab=1024,
            tied_embeddings=False,
            family="llama",
            max_positions=4096,
            description="tiny Llama: overhead-bound by design",
        ),
        Arch(
            "tiny-moe",
            family="qwen2_moe",
            hidden=256,
            layers=4,
            heads=4,
            kv_heads=2,
            head_dim=64,
            intermediate=128,
            vocab=1024,
            tied_embeddings=False,
            experts=8,
            top_k=2,
            shared_expert_intermediate=256,
            qkv_bias=True,
            max_positions=4096,
            description="tiny Qwen-MoE (8 experts, top-2): MoE dispatch, overhead-bound",
        ),
    ]
}


def get_preset(name: str) -> Arch:
    """The preset called ``name``; a clear error listing the known names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise HostgapError(name, f"unknown preset; known presets: {', '.join(PRESETS)}") from None


def with_overrides(arch: Arch, **kw) -> Arch:
    return replace(arch, **kw)


def preset_rows(dtype: str = "bfloat16") -> list[dict]:
    """One row per preset (``hostgap presets``): exact parameter counts and weight bytes in
    ``dtype``; nothing is built."""
    return [
        {
            "name": a.name,
            "family": a.family,
            "params": a.param_count(),
            "active_params": a.param_count(active=True),
            "weight_bytes": a.weight_bytes(dtype),
            "dtype": dtype,
            "layers": a.layers,
            "hidden": a.hidden,
            "heads": a.heads,
            "kv_heads": a.kv_heads,
            "vocab": a.vocab,
            "experts": a.experts,
            "top_k": a.top_k,
            "kv_bytes_per_token": a.kv_bytes_per_token(dtype),
            "description": a.description,
        }
        for a in PRESETS.values()
    ]
