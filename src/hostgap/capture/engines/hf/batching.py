"""transformers' continuous batching as measure engines: ``hf-cb`` (the synchronous loop) and
``hf-cb-async`` (``use_async_batching=True``: batch N+1 is prepared while batch N computes).

One ``ContinuousBatchingManager`` per engine is built, warmed up (CUDA graphs captured in
``graph`` mode) and started once in :meth:`HFCBEngine.prepare`, and kept alive across calls:
its loop thread idles between them. A generate call submits the workload's B prompts of
length L (``add_requests``, EOS disabled with ``eos_token_id=-1``, greedy) and waits until all
B finished with exactly N tokens: one prefill step, N - 1 decode steps (the async loop runs
one more forward step, wasted, per call). Wall is from the submission to the last result.

The loop runs on its own thread. On a CPU with one intra-op thread that thread does all the
decode work, so the contention check reads its CPU time (``last_thread_ns``, the thread's
CPU clock) as it reads the ``hf`` engine's measuring thread; the caller only waits. Traced
calls use the profiler's ``profile_all_threads`` (a profiler started after the loop thread
sees no event of it otherwise) and annotate each forward step and the loop's parts
(:mod:`hostgap.capture.engines.hf.hooks`); the per-step split of the traced N2 run
(:mod:`hostgap.analysis.cb_split`) lands in the engine's facts (``engine_facts.cb_split``).

Modes: ``eager``; ``graph`` (CUDA): the manager's own CUDA graphs (``use_cuda_graph=True``),
captured at warm-up. On a CPU ``graph`` is refused (transformers would silently turn graphs
off); ``static`` does not exist here (the cache is always paged).

transformers 5.24 (checked on CPU) and 5.17 (the GPU machine; the differences are handled
from the installed API, not tested here): 5.17 names ``page_size`` ``block_size``, has no
``auto_switch_to_flash`` (its loop keeps sdpa only for ``paged|sdpa``), and checks for CUDA
itself in async mode.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from hostgap.capture.engines.hf.hooks import (
    LoopAnnotations,
    config_fields,
    config_kwargs,
    cpu_async_allowed,
    resolved_config,
)
from hostgap.capture.protocol.engine import Engine, Workload
from hostgap.capture.protocol.torch_profiler import export_trace, trace_profiler, without_usdt_lines
from hostgap.capture.protocol.workload import build_model, check_fits, import_torch, import_transformers
from hostgap.errors import HostgapError

MODES = ("eager", "graph")
CALL_TIMEOUT_S = 600.0
"""Longest wait for one generate call's results (the loop is watched meanwhile)."""
ASYNC_ON_CPU = (
    "forced on CPU: transformers refuses async batching on a CPU; hostgap lifts its device check and gives it "
    "a stream that does nothing (CPU ops run synchronously on the loop thread)"
)


class HFCBEngine(Engine):
    """transformers' ``ContinuousBatchingManager`` in this process, synchronous loop."""

    name = "hf-cb"
    use_async = False

    def __init__(self, workload: Workload, **_options):
        super().__init__(workload)
        w = workload
        if w.mode not in MODES:
            raise HostgapError(
                f"--mode {w.mode}", f"the {self.name} engine runs eager or graph (its KV cache is always paged)"
            )
        if w.mode == "graph" and w.device != "cuda":
            raise HostgapError("--mode graph", f"{self.name}: CUDA graphs need --device cuda")
        self.torch = import_torch()
        self.model: Any = None
        self.mgr: Any = None
        self.hooks: LoopAnnotations | None = None
        self._prompts: list[list[int]] = []
        self._cpu_clock: int | None = None
        self.last_thread_ns = 0
        self.steps_per_call: dict[str, int] = {}
        self.split: dict | None = None
        self.resolved: dict = {}
        self.async_mode = "off"
        self.attn: str | None = None  # kept: describe() runs again after close

    # -- setup ------------------------------------------------------------------------
    def prepare(self) -> None:
        torch, w = self.torch, self.workload
        if w.device == "cpu":
            torch.set_num_threads(max(1, int(w.threads)))
        check_fits(
            w.arch,
            w.dtype,
            w.batch,
            w.prompt_len + w.max_new_tokens,
            w.device,
            source=f"--model {w.model_path}" if w.model_path else None,
        )
        self.model = build_model(w)
        gen = torch.Generator(device="cpu").manual_seed(w.seed)
        vocab = int(self.model.config.vocab_size)
        self._prompts = torch.randint(0, vocab, (w.batch, w.prompt_len), generator=gen).tolist()
        try:
            with _without_psutil_notes():
                self._start()
        except (RuntimeError, ValueError, TypeError, AttributeError) as e:
            raise HostgapError(
                f"--engine {self.name}", f"transformers' continuous batching failed to start: {_first_line(e)}"
            ) from None

    def _start(self) -> None:
        transformers = import_transformers()
        from transformers.generation.continuous_batching import input_outputs as io_module

        w = self.workload
        cfg_cls = _config_class(transformers)
        fields = config_fields(cfg_cls)
        kw = config_kwargs(
            fields,
            w.batch,
            w.prompt_len,
            w.max_new_tokens,
            use_async=self.use_async,
            graphs=w.mode == "graph",
            seed=w.seed,
        )
        if "auto_switch_to_flash" not in fields:  # 5.17: only a paged| name keeps sdpa
            self.model.set_attn_implementation("paged|sdpa")
        gen = transformers.GenerationConfig(
            max_new_tokens=w.max_new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0
        )
        self.mgr = self.model.init_continuous_batching(generation_config=gen, continuous_batching_config=cfg_cls(**kw))
        forced = self.use_async and w.device == "cpu"
        if forced:
            with cpu_async_allowed(io_module):
                self.mgr.warmup()
            self.async_mode = ASYNC_ON_CPU
        else:
            self.mgr.warmup()  # builds the batch processor (cache, IOs); captures graphs
            self.async_mode = "on" if self.use_async else "off"
        self.hooks = LoopAnnotations(self.torch.profiler.record_function)
        self.hooks.install(self.mgr.batch_processor, io_module)
        self.mgr.start()
        thread = getattr(self.mgr, "_generation_thread", None)
        if thread is not None and thread.ident is not None:
            self.hooks.thread_ident = thread.ident
            self._cpu_clock = _thread_clock(thread.ident)
        self.resolved = resolved_config(self.mgr.continuous_batching_config)
        self.attn = getattr(self.model.config, "_attn_implementation", None)

    # -- generate ---------------------------------------------------------------------
    def _loop_cpu_ns(self) -> int:
        if self._cpu_clock is None:
            return 0
        try:
            return time.clock_gettime_ns(self._cpu_clock)
        except OSError:  # the thread ended
            return 0

    def _run(self, n_tokens: int) -> int:
        w, mgr = self.workload, self.mgr
        if n_tokens < 1 or n_tokens > w.max_new_tokens:
            raise HostgapError("n_tokens", f"{n_tokens} outside 1..{w.max_new_tokens}")
        assert self.hooks is not None
        self.hooks.reset()
        c0 = self._loop_cpu_ns()
        t0 = time.perf_counter_ns()
        mgr.add_requests(self._prompts, max_new_tokens=n_tokens)
        got = self._collect(t0)
        t1 = time.perf_counter_ns()
        c1 = self._loop_cpu_ns()
        self.last_thread_ns = c1 - c0 if c0 and c1 else 0
        self.steps_per_call[str(n_tokens)] = self.hooks.steps
        bad = [(len(r.generated_tokens), r.error) for r in got if r.error or len(r.generated_tokens) != n_tokens]
        if bad:
            tokens, error = bad[0]
            why = _first_line(error) if error else f"{tokens} tokens"
            raise HostgapError(f"--engine {self.name}", f"asked for {n_tokens} tokens per request, got {why}")
        return t1 - t0

    def _collect(self, t0: int) -> list:
        """Results until all B requests finished; the loop thread is watched while waiting."""
        mgr, want = self.mgr, self.workload.batch
        done: dict[str, Any] = {}
        while len(done) < want:
            r = mgr.get_result(timeout=0.5)
            if r is not None:
                if r.is_finished():
                    done[r.request_id] = r
                continue
            if not mgr.is_running():
                raise HostgapError(f"--engine {self.name}", "the continuous-batching loop thread stopped")
            if time.perf_counter_ns() - t0 > CALL_TIMEOUT_S * 1e9:
                raise HostgapError(f"--engine {self.name}", f"no result within {CALL_TIMEOUT_S:.0f} s")
        return list(done.values())

    def generate(self, n_tokens: int) -> int:
        return self._run(n_tokens)

    def generate_traced(self, n_tokens: int, trace_dir: Path) -> tuple[int, Path]:
        torch = self.torch
        trace_dir = Path(trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        prof = trace_profiler(torch, self.workload.device, experimental_config=_all_threads(torch))
        assert self.hooks is not None
        with without_usdt_lines(), prof:
            self.hooks.trace(True)
            try:
                wall_ns = self._run(n_tokens)
            finally:
                self.hooks.trace(False)
        suffix = ".json.gz" if self.workload.extra.get("trace_gzip", True) else ".json"
        path = trace_dir / f"trace_n{n_tokens}_{time.time_ns()}{suffix}"
        export_trace(prof, path)
        return wall_ns, path

    def chose_anatomy_trace(self, path: Path) -> None:
        """The loop split of the trace the protocol analyses (the first traced N2 run kept)."""
        from hostgap.analysis.cb_split import split_of_trace
        from hostgap.analysis.trace import analyse_trace

        try:
            self.split = split_of_trace(analyse_trace(Path(path)).trace)
        except HostgapError as e:
            self.split = {"unavailable": str(e)}

    def close(self) -> None:
        mgr, self.mgr = self.mgr, None
        if mgr is not None:
            try:
                mgr.stop(block=True, timeout=30)
            finally:
                mgr.destroy()
        self.model = None
        if self.workload.device == "cuda":
            self.torch.cuda.empty_cache()

    def describe(self) -> dict:
        torch = self.torch
        transformers = import_transformers()
        hooks = self.hooks
        return {
            "engine": self.name,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "attn_implementation": self.attn,
            "threads": torch.get_num_threads(),
            "device_name": _device_name(torch, self.workload.device),
            "cb_config": self.resolved,
            "async_mode": self.async_mode,
            "graphs": "captured at warm-up" if self.workload.mode == "graph" else "off",
            "forward_steps_per_call": dict(self.steps_per_call),
            "annotated": list(hooks.wrapped) if hooks else [],
            "not_annotated": list(hooks.missing) if hooks else [],
            "cb_split": self.split,
        }


class HFCBAsyncEngine(HFCBEngine):
    """The same loop with ``use_async_batching=True`` (forced on a CPU, and said so)."""

    name = "hf-cb-async"
    use_async = True


class _PsutilNotes(logging.Filter):
    """transformers' notes that psutil is missing: they concern the automatic sizing and the
    CPU-offload cap, neither of which this engine uses (explicit sizes, no offload)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "psutil" not in record.getMessage()


@contextlib.contextmanager
def _without_psutil_notes():
    log, note = logging.getLogger("ContinuousBatchingLogger"), _PsutilNotes()
    log.addFilter(note)
    try:
        yield
    finally:
        log.removeFilter(note)


def _config_class(transformers):
    cls = getattr(transformers, "ContinuousBatchingConfig", None)
    if cls is None:
        from transformers.generation.configuration_utils import ContinuousBatchingConfig as cls
    return cls


def _thread_clock(ident: int) -> int | None:
    """The CPU-time clock of thread ``ident`` (Linux), or None."""
    try:
        return time.pthread_getcpuclockid(ident)
    except (AttributeError, OSError):
        return None


def _all_threads(torch):
    """The profiler option that records threads started before it (the loop thread)."""
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):
        raise HostgapError(
            "--engine hf-cb",
            f"torch {torch.__version__}'s profiler cannot record the loop thread (profile_all_threads)",
        ) from None


def _device_name(torch, device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    from hostgap.store.manifest import cpu_model

    return cpu_model()


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
