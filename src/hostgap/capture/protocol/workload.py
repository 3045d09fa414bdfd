"""Build the model a workload runs: a preset with random weights, or a local checkpoint.

Presets are built from their :class:`~hostgap.model.arch.Arch` through
``transformers.AutoConfig.for_model(arch.family, **arch.hf_config())``, directly in the
requested dtype and on the requested device (no full-precision detour: a Llama-3.2-1B shape
peaks at 3.3 GB in bf16 this way, 6.2 GB when built in fp32 and cast). No network is used.

Before anything is allocated, :func:`check_fits` compares the weights plus KV cache with the
memory the device has free and fails early with one clear line.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from hostgap.capture.protocol.engine import Workload
from hostgap.errors import HostgapError
from hostgap.memory import available_bytes as host_available_bytes
from hostgap.model.arch import Arch, dtype_bytes

HEADROOM = 1.15
"""Memory needed = HEADROOM x (weights + KV cache) + activation allowance."""

TORCH_DTYPES = ("float32", "bfloat16", "float16")


def import_torch():
    """torch, or a one-line error saying how to get it."""
    try:
        import torch
    except ImportError:
        raise HostgapError(
            "torch", "not installed; install the capture extra: pip install 'hostgap[capture]'"
        ) from None
    return torch


def import_transformers():
    try:
        import transformers
    except ImportError:
        raise HostgapError(
            "transformers",
            "not installed; install the capture extra: pip install 'hostgap[capture]'",
        ) from None
    return transformers


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` without one fails."""
    torch = import_torch()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise HostgapError("--device cuda", "no CUDA device is available (torch.cuda.is_available() is False)")
        return device
    if device == "cpu":
        return device
    raise HostgapError(f"--device {device}", "unknown device; use auto, cpu or cuda")


def resolve_dtype(dtype: str, device: str) -> str:
    """``auto`` -> float32 on CPU, bfloat16 on CUDA."""
    if dtype == "auto":
        return "float32" if device == "cpu" else "bfloat16"
    if dtype not in TORCH_DTYPES:
        raise HostgapError(f"--dtype {dtype}", f"unsupported; use one of auto, {', '.join(TORCH_DTYPES)}")
    return dtype


def needed_bytes(arch: Arch, dtype: str, batch: int, max_tokens: int) -> int:
    """Bytes the model, its KV cache and a working allowance take (an estimate, on purpose
    generous): weights + KV for ``batch`` x ``max_tokens`` + logits and activations."""
    weights = arch.weight_bytes(dtype)
    kv = arch.kv_bytes_per_token(dtype) * batch * max_tokens
    act = 4 * batch * max_tokens * max(arch.hidden, arch.intermediate) * dtype_bytes(dtype)
    logits = 4 * batch * arch.vocab * 4
    return int(HEADROOM * (weights + kv) + act + logits)


def available_bytes(device: str) -> int:
    """Free memory on ``device``: GPU free memory, or MemAvailable on the host."""
    if device == "cuda":
        torch = import_torch()
        free, _total = torch.cuda.mem_get_info()
        return int(free)
    free = host_available_bytes()
    if free is not None:
        return free
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 1 << 62


def check_fits(
    arch: Arch,
    dtype: str,
    batch: int,
    max_tokens: int,
    device: str,
    source: str | None = None,
    resident_bytes: int = 0,
    freeable_bytes: int = 0,
) -> int:
    """Fail early (HostgapError) when the workload cannot fit; return the bytes needed.

    ``resident_bytes``: this workload's weights already in memory (a model reused by a sweep);
    ``freeable_bytes``: memory held by a model that is released before this one is built."""
    need = needed_bytes(arch, dtype, batch, max_tokens) - int(HEADROOM * resident_bytes)
    have = available_bytes(device) + freeable_bytes
    if need > have:
        where = "GPU memory free" if device == "cuda" else "host memory available"
        raise HostgapError(
            source or f"preset {arch.name}",
            f"cannot fit in memory: needs ~{need / 2**30:.1f} GiB in {dtype} "
            f"(weights {arch.weight_bytes(dtype) / 2**30:.1f} GiB + KV cache), "
            f"{have / 2**30:.1f} GiB {where}",
        )
    return need


def hf_config(arch: Arch):
    """A transformers config for ``arch`` (no network)."""
    transformers = import_transformers()
    cfg = transformers.AutoConfig.for_model(arch.family, **arch.hf_config())
    cfg.use_cache = True
    # sdpa is the default attention on both transformers 5.17 and 5.24; say so explicitly.
    try:
        cfg._attn_implementation = "sdpa"
    except Exception:  # pragma: no cover - read-only on some versions
        pass
    return cfg


def _dtype_kw(transformers, torch_dtype) -> dict:
    """``dtype=`` on newer transformers, ``torch_dtype=`` on older ones."""
    import inspect

    params = inspect.signature(transformers.AutoModelForCausalLM.from_config).parameters
    if "dtype" in params or "torch_dtype" not in params:
        return {"dtype": torch_dtype}
    return {"torch_dtype": torch_dtype}


def build_model(workload: Workload):
    """The model for ``workload``, in eval mode on its device, in its dtype."""
    torch = import_torch()
    transformers = import_transformers()
    torch_dtype = getattr(torch, workload.dtype)
    torch.manual_seed(workload.seed)
    if workload.model_path:
        return _load_local(workload, torch, transformers, torch_dtype)
    cfg = hf_config(workload.arch)
    # Build in the target dtype on the target device: no fp32 copy, no host round trip.
    prev = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch_dtype)
        with torch.device(workload.device):
            model = transformers.AutoModelForCausalLM.from_config(cfg, **_dtype_kw(transformers, torch_dtype))
    finally:
        torch.set_default_dtype(prev)
    return model.eval()


def _load_local(workload: Workload, torch, transformers, torch_dtype):
    import importlib.util

    path = workload.model_path
    # device_map loads straight onto the GPU but needs accelerate; without it load, then move.
    direct = workload.device != "cpu" and importlib.util.find_spec("accelerate") is not None
    kw = {"device_map": workload.device} if direct else {}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path,
            local_files_only=True,
            **kw,
            **_dtype_kw(transformers, torch_dtype),
        )
    except (OSError, ValueError) as e:
        raise HostgapError(f"--model {path}", f"cannot load checkpoint: {str(e).splitlines()[0]}") from None
    if not direct:
        model = model.to(workload.device)
    return model.eval()


def arch_from_checkpoint(path: str) -> Arch:
    """An :class:`Arch` read from a local checkpoint's ``config.json`` (for the memory check
    and the results JSON)."""
    p = Path(path)
    cfg_file = p / "config.json"
    if not p.is_dir():
        raise HostgapError(f"--model {path}", "not a directory")
    if not cfg_file.is_file():
        raise HostgapError(f"--model {path}", "no config.json in the checkpoint directory")
    try:
        c = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        raise HostgapError(str(cfg_file), f"unreadable: {e}") from None
    family = c.get("model_type", "llama")
    hidden = int(c.get("hidden_size", c.get("n_embd", 0)))
    heads = int(c.get("num_attention_heads", c.get("n_head", 1)))
    return Arch(
        name=p.name or "local",
        family=family,
        hidden=hidden,
        layers=int(c.get("num_hidden_layers", c.get("n_layer", 0))),
        heads=heads,
        kv_heads=int(c.get("num_key_value_heads", heads)),
        head_dim=int(c.get("head_dim") or (hidden // max(heads, 1))),
        intermediate=int(
            c.get("moe_intermediate_size") or c.get("intermediate_size") or c.get("n_inner") or 4 * hidden
        ),
        vocab=int(c.get("vocab_size", 0)),
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        max_positions=int(c.get("max_position_embeddings", c.get("n_positions", 4096))),
        experts=int(c.get("num_experts", 0) or 0),
        top_k=int(c.get("num_experts_per_tok", 0) or 0),
        shared_expert_intermediate=int(c.get("shared_expert_intermediate_size", 0) or 0),
        description=f"local checkpoint {path}",
    )


def with_context(arch: Arch, max_tokens: int) -> Arch:
    """``arch`` with room for ``max_tokens`` positions (tiny presets cap positions low)."""
    if max_tokens > arch.max_positions and arch.family != "gpt2":
        return replace(arch, max_positions=max_tokens)
    return arch


def model_cache_key(w: Workload) -> tuple:
    """Workloads with equal keys can share one built model."""
    return (w.preset, w.model_path, w.arch, w.dtype, w.device, w.seed)


def cached_bytes(model_cache: dict | None, w: Workload) -> dict:
    """``check_fits`` arguments for a sweep's model cache: the weights of ``w`` when its model
    is already built (resident), else those of the model that will be released (freeable)."""
    if not model_cache:
        return {}
    key = model_cache_key(w)
    if key in model_cache:
        return {"resident_bytes": w.arch.weight_bytes(w.dtype)}
    (other,) = list(model_cache)[:1]
    if other[4] != w.device:
        return {}
    return {"freeable_bytes": other[2].weight_bytes(other[3])}
