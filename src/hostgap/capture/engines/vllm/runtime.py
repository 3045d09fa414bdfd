"""One started vLLM engine under hostgap's watch: :class:`VllmRuntime`.

Start, generate, profile, record and close one offline ``LLM`` over a preset. Every wait on
the engine runs under :class:`~hostgap.capture.engines.vllm.watchdog.Watchdog` with a deadline derived
from the work waited for (:func:`startup_deadline_s`, :func:`work_deadline_s`); a failed or
interrupted engine is ended at once and its log kept in the failure directory. The measure
protocol's engine over it is :class:`hostgap.capture.engines.vllm.adapter.VllmEngine`; the inputs,
environment and process helpers are in :mod:`hostgap.capture.engines.vllm.common`.

This module imports vLLM only inside functions.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from hostgap.capture.engines.vllm import watchdog as vw
from hostgap.capture.engines.vllm.common import (
    _ENGINE_PROC_PREFIX,
    CALL_TIMEOUT_S,
    GRAPH_EXTRA_S,
    MIN_FLOPS,
    MIN_INIT_BYTES_S,
    SHUTDOWN_TIMEOUT_S,
    STARTUP_BASE_S,
    VLLM_TESTED,
    VllmOptions,
    _mapped_anywhere,
    engine_env,
    engine_processes,
    last_error_line,
    output_to,
    patched_env,
    quiet_frontend_noise,
    shm_entries,
    vllm_version,
    write_model_dir,
)
from hostgap.capture.engines.vllm.watchdog import EngineFailure
from hostgap.errors import HostgapError
from hostgap.model.arch import Arch

STEP_RECORDER = "hostgap.capture.engines.vllm.StepRecorder"
"""The Worker extension (``worker_extension_cls``) that records every step's requests."""


# -- one engine ------------------------------------------------------------------------------


@dataclass
class VllmRuntime:
    """One started vLLM engine over a preset: start, generate, profile, record, close.

    Every wait on the engine runs under the :class:`~hostgap.capture.engines.vllm.watchdog.Watchdog`
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
    llm: Any = None  # vllm.LLM once started (vLLM is untyped)
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
        return cast(Path, self.failure_dir) / "engine.log"  # filled by __post_init__

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
        if self.opts.tensor_parallel_size > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
            env["VLLM_CPU_OMP_THREADS_BIND"] = rank_cores(self.opts.tensor_parallel_size)
        kw = self._llm_kwargs(model_dir)
        self.shm_before = shm_entries()
        self.watch = vw.Watchdog(log_path=self.log_path)
        self.watch.where = f"vLLM engine ({self.arch.name})"
        self.watch.shown_log = self.kept_log
        self.watch.start()
        t0 = time.perf_counter_ns()
        try:
            with patched_env(env, drop=("VLLM_CPU_KVCACHE_SPACE",)), output_to(self.log_path):
                with self.watch.waiting("engine start-up", startup_deadline_s(self.arch, self.opts), convert=False):
                    from vllm import LLM

                    quiet_frontend_noise()
                    self.llm = LLM(**kw)
        except (KeyboardInterrupt, EngineFailure):
            self._abort()
            raise
        except Exception as e:  # noqa: BLE001 - vLLM's own start-up errors: one line
            self._abort()
            detail = last_error_line(self.log_path) or f"{type(e).__name__}: {_first_line(e)}"
            raise HostgapError(
                f"preset {self.arch.name}", f"vLLM could not start the engine: {detail} (log: {self.kept_log})"
            ) from None
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
        cast(vw.Watchdog, self.watch).watch(self.roles, children)  # started by start(), the caller

    def _abort(self) -> None:
        """After a failed or interrupted start: end whatever started, keep the log."""
        with vw.sigint_deferred():
            self._end_engine(fast=True)
            self.keep_failure()
            self._stop_watch()

    def _llm_kwargs(self, model_dir: Path) -> dict:
        o = self.opts
        kw = dict(
            model=str(model_dir),
            load_format="dummy",
            skip_tokenizer_init=True,
            dtype=o.dtype,
            enforce_eager=o.mode == "eager",
            disable_log_stats=False,
            enable_prefix_caching=False,
            max_model_len=o.max_model_len,
            max_num_seqs=o.max_num_seqs,
            enable_chunked_prefill=o.chunked_prefill,
            kv_cache_memory_bytes=int(o.kv_cache_gib * 2**30),
            seed=o.seed,
            worker_extension_cls=STEP_RECORDER,
        )
        if o.tensor_parallel_size > 1:
            kw.update(tensor_parallel_size=o.tensor_parallel_size, distributed_executor_backend="mp")
        if o.max_num_batched_tokens is not None:
            kw["max_num_batched_tokens"] = o.max_num_batched_tokens
        elif not o.chunked_prefill:
            kw["max_num_batched_tokens"] = max(o.max_model_len, 2048)
        if self.profile:
            kw["profiler_config"] = {
                "profiler": "torch",
                "torch_profiler_dir": str(self.profile_dir),
                "torch_profiler_with_stack": False,
                "detailed_trace_annotation": True,
                "torch_profiler_dump_cuda_time_total": False,
                "ignore_frontend": True,
            }
        return kw

    # -- waits on the engine (each under the watchdog) --------------------------------------
    def waiting(self, what: str, timeout_s: float | None):
        """A guarded wait on the engine (see :class:`~hostgap.capture.engines.vllm.watchdog.Watchdog`)."""
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
        with self.waiting(
            f"generate ({len(prompts)} requests, {max(max_tokens)} tokens)", self.work_deadline_s(tokens)
        ):
            with self.paused():
                t0 = time.perf_counter_ns()
                ids = [self.add(p, n) for p, n in zip(prompts, max_tokens)]
            done = self.drain()
            wall = time.perf_counter_ns() - t0
        assert eng is not None and not eng.has_unfinished_requests()  # (waiting() needs the engine)
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
        new = sorted(set(glob.glob(str(self.profile_dir / "*.pt.trace.json*"))) - before, key=os.path.getmtime)
        if not new:
            raise HostgapError(str(self.profile_dir), "the vLLM Worker wrote no trace")
        # one trace per Worker (rank): the newest of each, rank 0 first
        got.extend(Path(p) for p in sorted(new[-self.opts.tensor_parallel_size :], key=_rank_of))

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
        abnormal = (
            sys.exc_info()[1] is not None
            or self.watch is None
            or self.watch.failure is not None
            or self.watch.interrupted
        )
        interrupted = None
        if not abnormal and self.watch is not None:  # (not abnormal: the watchdog is there)
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
        self.leftovers = {
            "processes_ended": killed,
            "shm_removed": _remove_new_shm(self.shm_before),
            "end_processes_s": round(t1 - t0, 3),
            "vllm_cleanup_s": round(time.monotonic() - t1, 3),
        }

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
            d = cast(Path, self.failure_dir)  # filled by __post_init__
            d.mkdir(parents=True, exist_ok=True)
            if self.log_path.exists():
                shutil.copyfile(self.log_path, d / "engine.log")
            else:
                (d / "engine.log").write_text("(the engine wrote nothing)\n")
            cfg = self.run_dir / "model" / "config.json"
            if cfg.exists():
                shutil.copyfile(cfg, d / "model-config.json")
            problem = None
            exc = sys.exc_info()[1]
            if self.watch is not None and self.watch.interrupted:
                problem = "interrupted (Ctrl-C)"
            elif self.watch is not None and self.watch.failure is not None:
                problem = str(self.watch.failure)
            elif exc is not None:
                problem = f"{type(exc).__name__}: {_first_line(exc)}"
            (d / "engine.json").write_text(
                json.dumps(
                    {
                        "preset": self.arch.name,
                        "options": self.opts.to_dict(),
                        "vllm_version": self.version,
                        "engine_pids": self.roles and {str(k): v for k, v in self.roles.items()},
                        "problem": problem,
                        "leftovers": self.leftovers,
                    },
                    indent=1,
                    default=str,
                )
                + "\n"
            )
        except OSError:
            return None
        self.kept = str(d)
        return d

    def describe(self) -> dict:
        return {
            "engine": "vllm",
            "vllm_version": self.version,
            "vllm_tested": VLLM_TESTED,
            "options": self.opts.to_dict(),
            "startup_ns": self.startup_ns,
            "shutdown_ns": self.shutdown_ns,
            "engine_pids": self.pids,
            "engine_processes": {str(k): v for k, v in self.roles.items()},
            "engine_log": self.log_copy or str(self.log_path),
            "leftovers": self.leftovers,
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


def rank_cores(ranks: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``ranks`` Workers: the cores this process may use,
    dealt out in turn, one list per rank (``"0|1"`` for two ranks on two cores).

    >>> import os; cores = sorted(os.sched_getaffinity(0)); rank_cores(1) == ",".join(map(str, cores))
    True
    """
    cores = sorted(os.sched_getaffinity(0))
    return "|".join(",".join(str(c) for c in cores[r::ranks]) or str(cores[r % len(cores)]) for r in range(ranks))


def _rank_of(path: str) -> int:
    """The rank in a Worker's trace name (``rank1.<ns>.pt.trace.json.gz``); 0 when it has none."""
    m = re.match(r"rank(\d+)\.", os.path.basename(path))
    return int(m.group(1)) if m else 0


def _role(p: vw.Proc) -> str:
    """``EngineCore`` or ``Worker`` from a ``VLLM::...`` process name."""
    name = p.name.split()[0] if p.name else ""
    name = name[len(_ENGINE_PROC_PREFIX) :] if name.startswith(_ENGINE_PROC_PREFIX) else name
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
