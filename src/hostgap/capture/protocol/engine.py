"""The engine interface: what the measuring protocol needs from an inference engine.

An engine runs one fixed workload (model, batch, prompt length, device, mode) and generates
``n_tokens`` new tokens per request on demand, untraced or under the profiler. The protocol
(:mod:`hostgap.capture.protocol.orchestrate`) calls it the same way for every engine, so the differencing
method and the anatomy apply unchanged to transformers in process (``hf``) and to vLLM
(``vllm``).

Contract of one generate call with ``n_tokens`` = N:

- the same prompts every call (batch B of length L, fixed token ids), greedy, EOS ignored;
- exactly N new tokens per request: one prefill step, then N - 1 decode steps;
- state (KV cache) from earlier calls does not carry over;
- returns wall nanoseconds (``time.perf_counter_ns``) from before the prefill to after the
  last token reached the host.

Traced calls wrap every forward pass in exactly one ``torch.profiler.record_function`` named
by :func:`step_name` (the capture annotation the anatomy reads first).

Engines register by import path, so optional dependencies load only when used::

    ENGINES["vllm"] = "hostgap.capture.engines.vllm:VllmEngine"
    engine = load_engine("vllm")(workload)
"""

from __future__ import annotations

import abc
import importlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hostgap.errors import HostgapError
from hostgap.model.arch import Arch

MODES = ("eager", "static", "graph")
"""How an engine runs its decode step: eager launches, a static cache, or CUDA graph replay."""

STEP_PREFIX = "hostgap.step#"


def step_name(index: int, kind: str, batch: int, q: int, s: int) -> str:
    """Annotation of one forward pass: ``hostgap.step#{index}:{kind}:b{batch}:q{q}:s{s}``.

    ``kind`` is ``prefill`` or ``decode``; ``q`` tokens per request processed this step;
    ``s`` KV length per request after this step.

    >>> step_name(3, "decode", 1, 1, 131)
    'hostgap.step#3:decode:b1:q1:s131'
    """
    return f"{STEP_PREFIX}{index}:{kind}:b{batch}:q{q}:s{s}"


@dataclass(frozen=True)
class Workload:
    """What to run: one cell of the measurement grid."""

    preset: str  # preset name, or "local" for --model PATH
    arch: Arch
    batch: int = 1
    prompt_len: int = 128
    device: str = "cpu"  # "cpu" or "cuda" (resolved, never "auto")
    mode: str = "eager"  # "eager" or "graph"
    dtype: str = "float32"
    threads: int = 1  # CPU intra-op threads (torch.set_num_threads)
    model_path: str | None = None  # local checkpoint directory instead of a preset
    seed: int = 0
    max_new_tokens: int = 512  # largest N the engine must support (static cache size)
    extra: dict = field(default_factory=dict)  # engine-specific settings

    def to_dict(self) -> dict:
        d = asdict(self)
        d["arch"] = self.arch.to_dict()
        return d


class Engine(abc.ABC):
    """One workload, ready to generate. Subclasses set ``name``."""

    name: str = ""

    def __init__(self, workload: Workload):
        self.workload = workload

    @abc.abstractmethod
    def prepare(self) -> None:
        """Build or load the model, allocate caches, capture graphs. Not timed."""

    @abc.abstractmethod
    def generate(self, n_tokens: int) -> int:
        """Generate ``n_tokens`` per request, untraced; return wall ns."""

    @abc.abstractmethod
    def generate_traced(self, n_tokens: int, trace_dir: Path) -> tuple[int, Path]:
        """Generate under the profiler (one annotation per step); return (wall ns, trace file)."""

    def close(self) -> None:  # noqa: B027 - a default that does nothing, for engines with nothing to release
        """Release the model and any worker processes."""

    def describe(self) -> dict:
        """Facts about the engine for the manifest (versions, device name ...)."""
        return {"engine": self.name}

    @property
    def device_name(self) -> str:
        return self.describe().get("device_name", self.workload.device)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


ENGINES: dict[str, str | type[Engine]] = {
    "hf": "hostgap.capture.engines.hf.decode:HFEngine",
    "vllm": "hostgap.capture.engines.vllm:VllmEngine",
    "hf-cb": "hostgap.capture.engines.hf.batching:HFCBEngine",
    "hf-cb-async": "hostgap.capture.engines.hf.batching:HFCBAsyncEngine",
}
"""Engine name -> class, or ``"module:Class"`` imported on first use."""

ONE_THREAD = ("hf", "hf-cb", "hf-cb-async")
"""Engines whose whole decode runs on one thread of this process whose CPU time they report as
``last_thread_ns`` (``hf``: the measuring thread; ``hf-cb``: transformers' loop thread): on a
CPU with one intra-op thread, the contention check's basis
(:func:`hostgap.capture.protocol.validity.in_thread`)."""


def load_engine(name: str) -> type[Engine]:
    """The engine class registered as ``name`` (imported lazily)."""
    try:
        target = ENGINES[name]
    except KeyError:
        raise HostgapError(f"--engine {name}", f"unknown engine; known: {', '.join(ENGINES)}") from None
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            raise HostgapError(
                f"--engine {name}", f"cannot load the engine ({e.name or e}); is it installed?"
            ) from None
        target = getattr(mod, attr)
        ENGINES[name] = target
    return target
