"""transformers in process: a greedy decode loop with a KV cache (transformers 5.17 and 5.24).

Each generate call runs one prefill over B prompts of length L, then N - 1 decode steps, greedy,
EOS ignored. Every step ends the way a serving loop does: the sampled token ids are copied to
the host (D2H, which waits for the device) and fed back as the next input (H2D). So the host
waits for the device once per step, and host-exposed time per step is the wall time the device
is idle (METHOD.md §3).

Modes:

``eager``
    ``DynamicCache`` (the transformers default); every op is dispatched from Python.
``static``
    ``StaticCache`` preallocated for L + max_new_tokens, explicit 4-D mask and positions kept in
    device buffers: exactly the decode step ``graph`` captures, run eagerly (any device). It
    separates what the cache layout costs from what graph replay saves.
``graph`` (CUDA)
    ``static`` with the decode step captured once as a CUDA graph by hand and replayed
    (``torch.cuda.CUDAGraph``; far cheaper than torch.compile). The captured step reads the
    position from a device buffer and advances it, so replays need no host-side arguments.

transformers 5.24 names the cache argument ``cache=``; 5.17 names it ``past_key_values=``. The
keyword is chosen once from the model's ``forward`` signature.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from pathlib import Path
from typing import Any

from hostgap.capture.protocol.engine import Engine, Workload, step_name
from hostgap.capture.protocol.torch_profiler import export_trace, trace_profiler, without_usdt_lines
from hostgap.capture.protocol.workload import (
    build_model,
    cached_bytes,
    check_fits,
    import_torch,
    import_transformers,
    model_cache_key,
)
from hostgap.errors import HostgapError

MODES = ("eager", "static", "graph")


def cache_keyword(model) -> str:
    """``cache`` (transformers >= 5.24) or ``past_key_values`` (earlier)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class HFEngine(Engine):
    """transformers model, greedy decode loop in this process."""

    name = "hf"

    def __init__(self, workload: Workload, model_cache: dict | None = None):
        super().__init__(workload)
        self._model_cache = model_cache  # reuse one built model across cells of a sweep
        if workload.mode not in MODES:
            raise HostgapError(f"--mode {workload.mode}", f"unknown mode; use one of {', '.join(MODES)}")
        if workload.mode == "graph" and workload.device != "cuda":
            raise HostgapError("--mode graph", "CUDA graphs need --device cuda (use --mode static on CPU)")
        self.torch = import_torch()
        # torch and transformers objects, once built (neither library is typed here)
        self.model: Any = None
        self._kw = "cache"
        self._graph: Any = None
        self._static: Any = None  # buffers of the static/graph step
        self._prompt: Any = None
        self._cache: Any = None
        self.last_thread_ns = 0

    # -- setup ------------------------------------------------------------------------
    def prepare(self) -> None:
        torch, w = self.torch, self.workload
        if w.device == "cpu":
            torch.set_num_threads(max(1, int(w.threads)))
        max_tokens = w.prompt_len + w.max_new_tokens
        check_fits(
            w.arch,
            w.dtype,
            w.batch,
            max_tokens,
            w.device,
            source=f"--model {w.model_path}" if w.model_path else None,
            **cached_bytes(self._model_cache, w),
        )
        try:
            self.model = self._cached_model()
        except (RuntimeError, MemoryError) as e:
            if "out of memory" in str(e).lower() or isinstance(e, MemoryError):
                raise HostgapError(
                    f"preset {w.preset}", f"out of memory while building the model: {str(e).splitlines()[0]}"
                ) from None
            raise
        self._kw = cache_keyword(self.model)
        gen = torch.Generator(device="cpu").manual_seed(w.seed)
        vocab = int(self.model.config.vocab_size)
        self._prompt = torch.randint(0, vocab, (w.batch, w.prompt_len), generator=gen).to(w.device)
        if w.mode in ("static", "graph"):
            self._setup_static(max_tokens)
        if w.mode == "graph":
            self._capture()

    def _cached_model(self):
        w = self.workload
        if self._model_cache is None:
            return build_model(w)
        key = model_cache_key(w)
        if key not in self._model_cache:
            self._model_cache.clear()  # one model at a time: free the last before building
            if w.device == "cuda":
                self.torch.cuda.empty_cache()
            self._model_cache[key] = build_model(w)
        return self._model_cache[key]

    def describe(self) -> dict:
        torch = self.torch
        transformers = import_transformers()
        d = {
            "engine": self.name,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "cache_keyword": self._kw,
            "attn_implementation": getattr(getattr(self.model, "config", None), "_attn_implementation", None),
            "threads": torch.get_num_threads(),
            "device_name": self._device_name(),
        }
        return d

    def _device_name(self) -> str:
        torch = self.torch
        if self.workload.device == "cuda":
            return torch.cuda.get_device_name()
        from hostgap.store.manifest import cpu_model

        return cpu_model()

    def close(self) -> None:
        self._graph = None
        self._static = None
        self._cache = None
        self.model = None
        if self.workload.device == "cuda":
            self.torch.cuda.empty_cache()

    # -- generate ---------------------------------------------------------------------
    def generate(self, n_tokens: int) -> int:
        wall_ns = self._run(n_tokens, annotate=False)
        self._check_positions(n_tokens)
        return wall_ns

    def generate_traced(self, n_tokens: int, trace_dir: Path) -> tuple[int, Path]:
        torch = self.torch
        trace_dir = Path(trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        prof = trace_profiler(torch, self.workload.device)
        with without_usdt_lines(), prof:
            wall_ns = self._run(n_tokens, annotate=True)
        self._check_positions(n_tokens)  # outside the trace
        suffix = ".json.gz" if self.workload.extra.get("trace_gzip", True) else ".json"
        path = trace_dir / f"trace_n{n_tokens}_{time.time_ns()}{suffix}"
        export_trace(prof, path)
        return wall_ns, path

    def _sync(self) -> None:
        if self.workload.device == "cuda":
            self.torch.cuda.synchronize()

    def _run(self, n_tokens: int, annotate: bool) -> int:
        """One generate call; wall ns from before the prefill to the last token on the host."""
        torch, w = self.torch, self.workload
        if n_tokens < 1 or n_tokens > w.max_new_tokens:
            raise HostgapError("n_tokens", f"{n_tokens} outside 1..{w.max_new_tokens}")
        rf = torch.profiler.record_function if annotate else None
        self._sync()
        t0_thread = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        with torch.inference_mode():
            ids_host = self._prefill(rf)
            for i in range(1, n_tokens):
                ids_host = self._decode(i, ids_host, rf)
        t1 = time.perf_counter_ns()
        self.last_thread_ns = time.thread_time_ns() - t0_thread
        self.last_tokens = ids_host
        return t1 - t0

    def _check_positions(self, n_tokens: int) -> None:
        """After the timed call: every decode step (replayed or not) advanced the position
        buffer once, so a capture that froze or skipped work is caught, not measured."""
        if self._static is None:
            return
        w = self.workload
        got = int(self._static["pos"].item())
        want = w.prompt_len + n_tokens - 1
        if got != want:
            raise HostgapError(
                f"--mode {w.mode}",
                f"decode steps did not advance the KV position ({got} != {want}); "
                "the captured step is not replaying correctly",
            )

    def _annotation(self, rf, index: int, kind: str, q: int, s: int):
        if rf is None:
            return contextlib.nullcontext()
        return rf(step_name(index, kind, self.workload.batch, q, s))

    def _prefill(self, rf):
        w = self.workload
        L = w.prompt_len
        with self._annotation(rf, 0, "prefill", L, L):
            if w.mode == "eager":
                self._cache = self._dynamic_cache()
                out = self.model(self._prompt, use_cache=True, logits_to_keep=1, **{self._kw: self._cache})
                ids = out.logits[:, -1, :].argmax(-1)
            else:
                ids = self._static_prefill()
            ids_host = ids.to("cpu", copy=True)  # D2H: the engine returns the token; waits for the device
        return ids_host

    def _decode(self, index: int, ids_host, rf):
        w = self.workload
        s = w.prompt_len + index
        with self._annotation(rf, index, "decode", 1, s):
            if w.mode == "eager":
                ids_dev = ids_host.to(w.device).view(w.batch, 1)  # H2D: one token id per request
                out = self.model(ids_dev, use_cache=True, logits_to_keep=1, **{self._kw: self._cache})
                ids = out.logits[:, -1, :].argmax(-1)
            else:
                st = self._static
                st["ids"].copy_(ids_host.view(w.batch, 1))  # H2D into the static input buffer
                if self._graph is not None:
                    self._graph.replay()
                else:
                    self._static_step()
                ids = st["out"]
            ids_host = ids.to("cpu", copy=True)
        return ids_host

    def _dynamic_cache(self):
        transformers = import_transformers()
        return transformers.DynamicCache(config=self.model.config)

    # -- static cache and graph -------------------------------------------------------
    def _setup_static(self, max_tokens: int) -> None:
        torch, w = self.torch, self.workload
        transformers = import_transformers()
        dev = w.device
        cache = transformers.StaticCache(config=self.model.config, max_cache_len=max_tokens)
        self._cache = cache
        self._static = {
            "ids": torch.zeros((w.batch, 1), dtype=torch.long, device=dev),
            "pos": torch.zeros((1, 1), dtype=torch.long, device=dev),  # position of the next token
            "slots": torch.arange(max_tokens, dtype=torch.long, device=dev),
            "out": torch.zeros((w.batch,), dtype=torch.long, device=dev),
            "max_tokens": max_tokens,
        }

    def _static_prefill(self):
        """Reset the cache and buffers, run the prompt with an explicit mask."""
        torch, w, st = self.torch, self.workload, self._static
        self._cache.reset()
        L = w.prompt_len
        pos = torch.arange(L, device=w.device).view(1, L)
        # mask[b, 0, i, j]: query i (position i) may read slot j <= i
        mask = (st["slots"].view(1, 1, 1, -1) <= pos.view(1, 1, L, 1)).expand(w.batch, 1, L, -1)
        out = self.model(
            self._prompt,
            attention_mask=mask,
            position_ids=pos.expand(w.batch, L),
            use_cache=True,
            logits_to_keep=1,
            **{self._kw: self._cache},
        )
        st["pos"].fill_(L)
        return out.logits[:, -1, :].argmax(-1)

    def _static_step(self) -> None:
        """One decode step reading only device buffers (capturable): ids, pos -> out; pos += 1."""
        w, st = self.workload, self._static
        pos = st["pos"]
        mask = (st["slots"].view(1, 1, 1, -1) <= pos.view(1, 1, 1, 1)).expand(w.batch, 1, 1, -1)
        out = self.model(
            st["ids"],
            attention_mask=mask,
            position_ids=pos.expand(w.batch, 1),
            use_cache=True,
            logits_to_keep=1,
            **{self._kw: self._cache},
        )
        st["out"].copy_(out.logits[:, -1, :].argmax(-1))
        pos.add_(1)

    def _capture(self) -> None:
        """Capture ``_static_step`` as a CUDA graph after warm-up on a side stream."""
        torch = self.torch
        with torch.inference_mode():
            self._static_prefill()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._static_step()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    self._static_step()
            except RuntimeError as e:
                raise HostgapError("--mode graph", f"CUDA graph capture failed: {str(e).splitlines()[0]}") from None
            torch.cuda.synchronize()
        self._graph = graph
