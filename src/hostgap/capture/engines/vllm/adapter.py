"""vLLM's V1 engine as the measure protocol's engine ``vllm`` (:class:`VllmEngine`).

One generate call submits the workload's prompts together; the engine's own request
timestamps, the per-process split of the traced N2 run (:mod:`hostgap.analysis.vllm_split`),
other work on the machine during each untraced call and, with ``--stacks``, thread states per
engine process land in the engine's facts (``results.json`` ``engine_facts``) and in
``vllm-engine.json`` in the run directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from hostgap.capture.engines.vllm import watchdog as vw
from hostgap.capture.engines.vllm.common import (
    DTYPES,
    VllmOptions,
    prompt_ids,
    validate_options,
    vllm_device,
    vllm_version,
)
from hostgap.capture.engines.vllm.runtime import VllmRuntime
from hostgap.capture.protocol.engine import Engine, Workload
from hostgap.errors import HostgapError

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
        ns = {
            k: int(round(getattr(m, f"{k}_ts", 0.0) * 1e9))
            for k in ("queued", "scheduled", "first_token", "last_token")
        }
        tokens = len(o.outputs[0].token_ids) if o.outputs else 0
        rows.append(
            {
                "request": str(o.request_id),
                "tokens": tokens,
                **{f"{k}_ns": v for k, v in ns.items()},
                "prefill_ns": ns["first_token"] - ns["scheduled"],
                "decode_ns": ns["last_token"] - ns["first_token"],
                "engine_ns": ns["last_token"] - ns["queued"],
            }
        )
    return rows


class VllmEngine(Engine):
    """vLLM's offline ``LLM`` over a preset; the measuring protocol's engine ``vllm``.

    One generate call submits the workload's B prompts of length L together; vLLM prefills them
    in one step (the batched-token budget is raised to B x L when needed) and decodes N - 1
    steps. ``generate`` returns the wall time of ``LLM.generate``; the engine's own request
    timestamps of the last call are in ``last_request_timing``. Traced calls profile the
    Worker and return its trace, whose steps carry vLLM's ``execute_...`` annotations.

    Options come from ``workload.extra`` (``kv_cache_gib``, ``tp``, ``max_num_seqs``,
    ``vllm_dtype``) or keyword arguments.
    """

    name = "vllm"

    def __init__(
        self, workload: Workload, run_dir: str | Path | None = None, runtime: VllmRuntime | None = None, **options
    ):
        super().__init__(workload)
        vllm_version()
        w = workload
        if w.model_path:
            raise HostgapError("--model", "the vllm engine runs presets only (use --preset)")
        platform = vllm_device()
        if w.device not in ("auto", platform):
            raise HostgapError(
                f"--device {w.device}", f"the installed vLLM runs on {platform}, not {w.device} (docs/vllm.md)"
            )
        extra = {**w.extra, **options}
        dtype = extra.get("vllm_dtype", w.dtype if w.dtype in DTYPES else "bfloat16")
        tokens = w.prompt_len + w.max_new_tokens
        self.opts = VllmOptions(
            mode=w.mode,
            dtype=dtype,
            kv_cache_gib=float(extra.get("kv_cache_gib", 1.0)),
            max_model_len=tokens + 16,
            max_num_seqs=max(int(extra.get("max_num_seqs", 0)), w.batch, 1),
            max_num_batched_tokens=max(w.batch * w.prompt_len, 2048),
            chunked_prefill=True,
            seed=w.seed,
            tensor_parallel_size=int(extra.get("tp", 1)),
        )
        validate_options(
            w.arch, self.opts, w.batch * tokens, kv_source=f"vLLM KV cache ({self.opts.kv_cache_gib:g} GiB)"
        )
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
        self.rank_traces: dict[str, Path] = {}  # tensor parallel: rank-0 trace -> its run's rank traces
        # a failed run's directory is removed: its engine log is kept beside it
        failed = self.run_dir.parent.with_name(self.run_dir.parent.name + ".failed") if run_dir else None
        self.runtime = runtime or VllmRuntime(w.arch, self.opts, self.run_dir, profile=True, failure_dir=failed)
        self.prompts = prompt_ids(w.arch.vocab, [w.prompt_len] * w.batch, w.seed)
        self.last_request_timing: list[dict] = []
        self.last_thread_ns = 0
        self.last_other_cpu_ns: int | None = None
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
        self.last_other_cpu_ns = other  # the protocol's contention check for an out-of-thread engine
        got = {len(o.outputs[0].token_ids) for o in outs}
        if got != {n_tokens}:
            raise HostgapError("vllm", f"asked for {n_tokens} tokens per request, got {sorted(got)}")
        self.last_request_timing = request_timing(outs)
        self.calls.append(
            {
                "n_tokens": n_tokens,
                "traced": traced,
                "wall_ns": wall,
                "other_cpu_ns": other,
                "engine_decode_ns": _median([r["decode_ns"] for r in self.last_request_timing]),
                "engine_ns": _median([r["engine_ns"] for r in self.last_request_timing]),
            }
        )
        return wall

    def generate(self, n_tokens: int) -> int:
        return self._run(n_tokens)

    def generate_traced(self, n_tokens: int, trace_dir: Path) -> tuple[int, Path]:
        trace_dir = Path(trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        self._trace_dirs.append(trace_dir)
        with self.runtime.profiling() as got:
            wall = self._run(n_tokens, traced=True)
        stamp = time.time_ns()
        if len(got) > 1 and not trace_dir.name.startswith("."):  # tensor parallel: every rank's trace
            ranks = trace_dir / "ranks" / f"n{n_tokens}_{stamp}"
            ranks.mkdir(parents=True)
            for r, p in enumerate(got):
                shutil.copyfile(p, ranks / f"rank{r}.json.gz")
        dst = trace_dir / f"vllm_n{n_tokens}_{stamp}.json.gz"
        if len(got) > 1 and not trace_dir.name.startswith("."):
            self.rank_traces[str(dst)] = ranks
        shutil.move(str(got[0]), dst)  # the protocol analyses rank 0
        for p in got[1:]:
            Path(p).unlink(missing_ok=True)
        return wall, dst

    def chose_anatomy_trace(self, path: Path) -> None:
        """The protocol analyses ``path`` (the first traced N2 run of the attempt it keeps): the
        per-process split comes from the same trace, so the two describe the same steps even
        when a busy machine made the protocol measure again."""
        self.split = _split_of(Path(path))

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
            from hostgap.store.rundir import write_json

            write_json(
                where / "vllm-engine.json",
                {
                    "schema_version": 1,
                    **self.runtime.describe(),
                    "engine_timing": engine_timing(self.calls),
                    "calls": self.calls,
                },
            )

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
        d.update(
            {
                "device_name": _cpu_name(),
                "mode": self.opts.mode,
                "request_timing_last": self.last_request_timing,
                "engine_timing": engine_timing(self.calls),
            }
        )
        from hostgap.analysis.vllm_split import with_frontend

        d["process_split"] = with_frontend(self.split, d["engine_timing"])
        d["contention"] = contention(self.calls)
        d["process_states"] = self._process_states()
        return d


def _states_of(raw_path: Path, roles: dict[int, str]) -> dict | None:
    """Thread states per engine process from the protocol's py-spy samples (``--stacks``)."""
    from hostgap.analysis.vllm_split import process_states

    try:
        return process_states(raw_path.read_text(errors="replace"), roles)
    except OSError:
        return None


def _split_of(trace_path: Path) -> dict | None:
    """The per-process split of a Worker trace (:mod:`hostgap.analysis.vllm_split`), or a dict
    saying why there is none (never fails the run: it is an addition to the measurement)."""
    from hostgap.analysis.trace import analyse_trace
    from hostgap.analysis.vllm_split import split_of_trace

    try:
        return split_of_trace(analyse_trace(trace_path).trace)
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
    return {
        "other_cpu_share": other / wall,
        "preempted_share": sum(c["other_cpu_ns"] > threshold * c["wall_ns"] for c in rows) / len(rows),
        "calls": len(rows),
        "threshold": threshold,
        "basis": "CPU time of other processes (/proc/stat minus the engine processes) during each untraced call",
    }


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
        problems.append(
            f"max_num_batched_tokens {o.max_num_batched_tokens} < B x L = {w.batch * w.prompt_len}"
            " (the prefill would take several steps)"
        )
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
