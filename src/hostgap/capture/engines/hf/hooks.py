"""How the ``hf-cb`` engines drive transformers' continuous-batching loop: its configuration
(transformers 5.17 and 5.24 name things differently), the asynchronous mode on a CPU, and the
per-step annotations.

**Annotations.** transformers' loop has no profiler ranges of its own. The loop thread calls
its parts through instance attributes (``batch_processor.prepare_next_batch()``, ...), so an
instance attribute that shadows the bound method wraps it without editing transformers:
:class:`LoopAnnotations` wraps ``_generation_step`` in hostgap's step annotation
(:func:`hostgap.capture.protocol.engine.step_name`) and the loop's parts in ``hostgap.cb.*``
sub-annotations (the names :mod:`hostgap.analysis.cb_split` reads). Untraced, a wrapper costs
one flag test. ``build_attention_mask`` is a module global called by name: its wrapper is
installed once per process and annotates only on a loop thread that is being traced.

**Async on a CPU.** transformers 5.24 refuses ``use_async_batching`` on a CPU ("Async batching
requires a device type in ('cuda', 'xpu')"), and ``torch.cpu.Stream`` lacks the stream methods
it calls. :func:`cpu_async_allowed` lifts the device check and gives the async IOs a stream that
does nothing while the loop's IOs are built; on a CPU every op runs synchronously on the
calling thread, so there is nothing to order. The loop runs transformers' own async code path
otherwise unchanged (same tokens as the sync loop, one extra forward step per call).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from hostgap.capture.protocol.engine import step_name
from hostgap.errors import HostgapError

PAGE_SIZE = 256
"""Tokens per KV page (transformers' default; ``page_size``, ``block_size`` in 5.17)."""

_TRACED_THREADS: set[int] = set()
"""Loop threads being traced (the module-global mask wrapper annotates only there)."""


def config_kwargs(
    fields: set[str],
    batch: int,
    prompt_len: int,
    max_new_tokens: int,
    *,
    use_async: bool,
    graphs: bool,
    seed: int,
) -> dict:
    """``ContinuousBatchingConfig`` keywords for B requests of L prompt tokens and up to
    ``max_new_tokens`` new ones, among the ``fields`` the installed transformers has.

    Explicit sizes skip transformers' memory-based sizing (on a CPU 14-30 s and a 12 GiB
    attention mask on the first call): the whole prefill in one step (``max_batch_tokens`` >=
    B·L), every request admitted at once (``max_requests_per_batch`` >= B, enough blocks for
    each request's prompt and tokens, plus one). Block sharing is off: the same prompts every
    call would otherwise hit the prefix cache, and state must not carry over between calls.

    >>> kw = config_kwargs({"page_size", "num_blocks", "max_batch_tokens", "max_requests_per_batch",
    ...     "allow_block_sharing", "use_async_batching", "use_cuda_graph", "auto_switch_to_flash", "seed"},
    ...     4, 128, 128, use_async=False, graphs=False, seed=0)
    >>> kw["num_blocks"], kw["max_batch_tokens"], kw["page_size"], kw["auto_switch_to_flash"]
    (9, 512, 256, False)
    >>> sorted(config_kwargs({"block_size", "num_blocks"}, 1, 8, 8, use_async=False, graphs=False, seed=0))
    ['block_size', 'num_blocks']
    """
    per_request = -(-(prompt_len + max_new_tokens + 1) // PAGE_SIZE)
    kw: dict[str, Any] = {
        "page_size" if "page_size" in fields else "block_size": PAGE_SIZE,
        "num_blocks": batch * per_request + 1,
        "max_batch_tokens": max(batch * prompt_len, 64),
        "max_requests_per_batch": batch,
        "allow_block_sharing": False,
        "use_async_batching": use_async,
        "use_cuda_graph": graphs,
        "auto_switch_to_flash": False,  # 5.24: keep sdpa (5.17 has no such field)
        "seed": seed,
    }
    return {k: v for k, v in kw.items() if k in fields}


def config_fields(config_cls) -> set[str]:
    """The keyword names ``config_cls`` accepts."""
    return set(inspect.signature(config_cls).parameters)


def resolved_config(cfg) -> dict:
    """The manager's resolved configuration as plain values (for the manifest)."""
    keys = (
        "page_size",
        "block_size",
        "num_blocks",
        "max_batch_tokens",
        "max_requests_per_batch",
        "allow_block_sharing",
        "use_async_batching",
        "use_cuda_graph",
        "auto_switch_to_flash",
        "scheduler_type",
        "max_memory_percent",
    )
    out = {}
    for k in keys:
        v = getattr(cfg, k, None)
        if v is not None:
            out[k] = list(v) if isinstance(v, tuple) else v
    return out


class _NoStream:
    """A device stream on a CPU: ops run synchronously on the calling thread, so there is
    nothing to record, wait for or synchronise."""

    def record_event(self, event=None) -> None:
        return None

    def wait_event(self, event=None) -> None:
        return None

    def wait_stream(self, stream=None) -> None:
        return None

    def synchronize(self) -> None:
        return None


@contextlib.contextmanager
def cpu_async_allowed(io_module):
    """While the loop's IOs are built: let transformers' async IOs run on a CPU (its device
    check lifted, a stream that does nothing). Restored on exit; the IOs keep their streams.
    A transformers without 5.24's device check (5.17 checks ``torch.cuda.is_available()``)
    cannot be forced: one line."""
    cls = getattr(io_module, "ContinuousBatchingAsyncIOs", None)
    saved_types = getattr(cls, "_supported_device_types", None)
    saved_stream = getattr(io_module, "create_device_stream", None)
    if cls is None or saved_types is None or saved_stream is None:
        raise HostgapError(
            "--engine hf-cb-async",
            "this transformers refuses async batching on a CPU and hostgap knows no way around it "
            "(5.24's device check): run it on CUDA",
        )

    def stream(device):
        return _NoStream() if getattr(device, "type", device) == "cpu" else saved_stream(device)

    cls._supported_device_types = (*saved_types, "cpu")
    io_module.create_device_stream = stream
    try:
        yield
    finally:
        cls._supported_device_types = saved_types
        io_module.create_device_stream = saved_stream


def install_mask_wrapper(io_module, record_function) -> bool:
    """Wrap the module-global ``build_attention_mask`` once per process (annotates only on a
    traced loop thread); False when this transformers has none."""
    orig = getattr(io_module, "build_attention_mask", None)
    if orig is None:
        return False
    if getattr(orig, "_hostgap", False):
        return True

    @functools.wraps(orig)
    def build_attention_mask(*a, **k):
        if threading.get_ident() not in _TRACED_THREADS:
            return orig(*a, **k)
        with record_function("hostgap.cb.inputs.mask"):
            return orig(*a, **k)

    build_attention_mask._hostgap = True  # type: ignore[attr-defined]
    io_module.build_attention_mask = build_attention_mask
    return True


def step_label(io, index: int) -> str:
    """The step annotation of the batch about to run, from the IOs' requests (``io``:
    the batch processor's ``inputs_and_outputs``; async: the pair being launched).
    q = largest query length, s = largest KV length after the step; ``prefill`` while any
    request is still prefilling."""
    if hasattr(io, "io_pairs"):
        io = io.io_pairs[io.current_pair].host_io
    reqs = list(getattr(io, "requests_in_batch", None) or [])
    q = max((int(r.query_length) for r in reqs), default=0)
    s = max((int(r.state.position_offset) for r in reqs), default=0)
    prefilling = any(getattr(getattr(r.state, "status", None), "name", "") == "PREFILLING" for r in reqs)
    return step_name(index, "prefill" if prefilling or q > 1 else "decode", len(reqs), q, s)


class LoopAnnotations:
    """The wrappers on one batch processor. ``active``: annotate (a traced call); ``steps``:
    forward steps since :meth:`reset` (counted traced or not); ``wrapped`` / ``missing``:
    which methods were found."""

    def __init__(self, record_function: Callable):
        self.rf = record_function
        self.active = False
        self.steps = 0
        self.wrapped: list[str] = []
        self.missing: list[str] = []
        self.thread_ident: int | None = None

    def reset(self) -> None:
        self.steps = 0

    def trace(self, on: bool) -> None:
        """Start or stop annotating (the loop thread's mask wrapper follows)."""
        self.active = on
        if self.thread_ident is not None:
            (_TRACED_THREADS.add if on else _TRACED_THREADS.discard)(self.thread_ident)

    def wrap(self, obj, attr: str, label: str | Callable[[], str], before: Callable[[], None] | None = None) -> None:
        orig = getattr(obj, attr, None) if obj is not None else None
        where = f"{type(obj).__name__}.{attr}"
        if not callable(orig):
            self.missing.append(where)
            return
        hooks, rf = self, self.rf

        @functools.wraps(orig)
        def wrapper(*a, **k):
            if before is not None:
                before()
            if not hooks.active:
                return orig(*a, **k)
            with rf(label if isinstance(label, str) else label()):
                return orig(*a, **k)

        setattr(obj, attr, wrapper)
        self.wrapped.append(where)

    def _on_step(self) -> None:
        if self.thread_ident is None:
            self.thread_ident = threading.get_ident()
            if self.active:
                _TRACED_THREADS.add(self.thread_ident)

    def install(self, bp, io_module) -> None:
        """Wrap the loop's methods on batch processor ``bp`` (after ``warmup()``, before
        ``start()``)."""
        io = bp.inputs_and_outputs

        def count():
            self._on_step()
            self.steps += 1

        self.wrap(bp, "_generation_step", lambda: step_label(io, self.steps - 1), before=count)
        self.wrap(bp, "prepare_next_batch", "hostgap.cb.prepare")
        self.wrap(bp, "_update_tp_group_state", "hostgap.cb.admit")
        self.wrap(getattr(bp, "scheduler", None), "schedule_batch", "hostgap.cb.schedule")
        om = getattr(bp, "offloading_manager", None)
        self.wrap(om, "offload_requests", "hostgap.cb.evict")
        self.wrap(om, "restore_scheduled_requests", "hostgap.cb.evict")
        self.wrap(io, "prepare_batch_tensors", "hostgap.cb.inputs")
        pairs = getattr(io, "io_pairs", None)
        for host_io in [p.host_io for p in pairs] if pairs else [io]:
            self.wrap(host_io, "_reset_static_tensors", "hostgap.cb.inputs.reset")
        if pairs:
            self.wrap(io, "infer_carry_over_ids", "hostgap.cb.inputs.carry_over")
            self.wrap(io, "prepare_batch_update", "hostgap.cb.update.wait_outputs")
        self.wrap(getattr(bp, "cache", None), "extend_read_and_write_indices", "hostgap.cb.inputs.kv_indices")
        if not install_mask_wrapper(io_module, self.rf):
            self.missing.append("build_attention_mask")
        self.wrap(io, "get_model_kwargs", "hostgap.cb.kwargs")
        runner = getattr(bp, "model_runner", None)
        self.wrap(runner, "_forward_process_and_sample", "hostgap.cb.forward_sample")
        self.wrap(runner, "_sample", "hostgap.cb.sample")
        self.wrap(io, "retrieve_device_outputs", "hostgap.cb.d2h")
        self.wrap(bp, "update_batch", "hostgap.cb.update")
        self.wrap(getattr(bp, "output_router", None), "deliver_batch", "hostgap.cb.deliver")
        if not any(w.endswith("._generation_step") for w in self.wrapped):
            raise HostgapError("--engine hf-cb", "this transformers' loop has no _generation_step to annotate")
