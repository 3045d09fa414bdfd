"""More accounting numbers a wrong operator would change (mutation audit, bench/mutation.sh),
each derived by hand from docs/models.md's conventions."""

from __future__ import annotations

from hostgap.model.accounting import QUANT_KERNELS_PER_MATMUL, Cell, account
from hostgap.model.arch import Arch


def test_w8a8_quant_kernels_follow_the_matmul_kernel_count():
    """hf eager runs q, k and v as three GEMMs (LAUNCH_TABLES["hf"]["qkv_proj"] = 3): three
    activation-quantisation kernels (one per matmul), three launches; gate/up two, down one."""
    arch = Arch(
        "toy",
        "llama",
        hidden=64,
        layers=3,
        heads=8,
        kv_heads=2,
        head_dim=8,
        intermediate=96,
        vocab=50,
        tied_embeddings=False,
    )
    acc = account(arch, Cell(batch=2, context=5, dtype="fp8", engine="hf"))
    assert QUANT_KERNELS_PER_MATMUL == 1
    for name, n in (("qkv_proj", 3), ("gate_up_proj", 2), ("down_proj", 1)):
        q = acc.op(name + "_quant")
        assert (q.kernels, q.launches, q.count) == (n, n, 3)
        assert acc.op(name).kernels == n
    q = acc.op("qkv_proj_quant")
    assert q.act_bytes == 2 * 64 * (2 + 1) and q.flops == 2 * 2 * 64
