"""Architecture presets (model/arch.py): the transformers config each family gets and the
MoE preset's parameter counts, worked out by hand (mutation audit, bench/mutation.sh)."""

from __future__ import annotations

import pytest

from hostgap.errors import HostgapError
from hostgap.model.arch import get_preset, with_overrides

BASE = dict(
    vocab_size=1024,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)


def test_llama_config_by_hand():
    assert get_preset("tiny").hf_config() == {
        **BASE,
        "intermediate_size": 512,
        "rope_theta": 500000.0,
        "head_dim": 64,
        "attention_bias": False,
        "mlp_bias": False,
    }


def test_qwen_moe_config_by_hand():
    assert get_preset("tiny-moe").hf_config() == {
        **BASE,
        "intermediate_size": 128,
        "rope_theta": 500000.0,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 256,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }


def test_olmoe_and_qwen2_and_gpt2_configs_by_hand():
    o = get_preset("olmoe-1b-7b").hf_config()
    assert (o["num_experts"], o["num_experts_per_tok"]) == (64, 8)
    assert "head_dim" not in o and "moe_intermediate_size" not in o
    q = get_preset("qwen2.5-14b").hf_config()
    assert set(q) == set(BASE) | {"intermediate_size", "rope_theta"}  # qkv bias is built into qwen2
    assert q["rope_theta"] == 1000000.0
    assert get_preset("gpt2").hf_config() == dict(
        vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_inner=3072, n_positions=1024, tie_word_embeddings=True
    )
    with pytest.raises(HostgapError, match="non-gated"):
        with_overrides(get_preset("tiny"), gated_mlp=False).hf_config()


def test_tiny_moe_parameter_counts_by_hand():
    a = get_preset("tiny-moe")
    # attention: 256x256 (q) + 2 x 256x128 (k, v) + 256x256 (o) + biases 256 + 2 x 128 = 197,120
    # experts 8 x 3 x 256 x 128 + router 256 x 8 = 788,480; shared expert 3 x 256 x 256 + gate 256
    # = 196,864; norms 2 x 256 -> per layer 1,182,976, x 4 layers = 4,731,904
    # embedding and an untied LM head 2 x 1024 x 256 = 524,288; final norm 256
    assert a.param_count() == 4_731_904 + 524_288 + 256
    # one token: 2 experts of 8: 2 x 98,304 + 2,048 + 196,864 = 395,520 per layer
    assert a.param_count(active=True) == 4 * (197_120 + 395_520 + 512) + 524_288 + 256


def test_gpt2_parameter_count_by_hand():
    # per layer: attention 4 x 768^2 + biases 4 x 768 = 2,362,368; MLP 2 x 768 x 3072 + 3072 + 768
    # = 4,722,432; two norms with bias 4 x 768 = 3,072 -> 7,087,872 x 12 = 85,054,464
    # token + position embeddings (50257 + 1024) x 768 = 39,383,808; the LM head is the tied
    # embedding (no parameters); final norm 2 x 768: 124,439,808, GPT-2 small's published count
    assert get_preset("gpt2").param_count() == 85_054_464 + 39_383_808 + 1_536 == 124_439_808


def test_qwen2_5_14b_counts_its_qkv_biases():
    # per layer: q and o 2 x 5120^2 = 52,428,800; k and v 2 x 5120 x 1024 = 10,485,760; q, k, v
    # biases 5120 + 2 x 1024 = 7,168; MLP 3 x 5120 x 13824 = 212,336,640; norms 10,240
    # -> 275,268,608 x 48 = 13,212,893,184; embedding + untied head 2 x 152064 x 5120; final norm
    a = get_preset("qwen2.5-14b")
    assert a.param_count() == 13_212_893_184 + 1_557_135_360 + 5_120 == 14_770_033_664
    assert a.weight_bytes("bfloat16") == 2 * 14_770_033_664
    assert a.weight_bytes("fp8") == 14_770_033_664


def test_olmoe_parameter_counts_include_its_qk_norms():
    """OLMoE-1B-7B's checkpoint: 6,919,161,856 parameters, 1,282,017,280 active per token; its
    q and k RMSNorms (hidden + kv_heads x head_dim weights per layer) are part of both."""
    a = get_preset("olmoe-1b-7b")
    assert a.qk_norm
    assert a.param_count() == 6_919_161_856
    assert a.param_count(active=True) == 1_282_017_280
    assert a.attention_params() - a.hidden * (a.heads + 2 * a.kv_heads + a.heads) * a.head_dim == 2048 + 2048
