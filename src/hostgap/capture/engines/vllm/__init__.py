"""vLLM's V1 engine in one place: its constants, options and helpers
(:mod:`hostgap.capture.engines.vllm.common`), the started engine (:mod:`hostgap.capture.engines.vllm.runtime`,
under the watchdog of :mod:`hostgap.capture.engines.vllm.watchdog`) and the measure protocol's engine
``vllm`` (:mod:`hostgap.capture.engines.vllm.adapter`).

Those modules import :mod:`~hostgap.capture.engines.vllm.common` and not this one; this module only
gathers their names for callers (``load_engine("vllm")`` finds
``hostgap.capture.engines.vllm:VllmEngine``). It imports vLLM only inside functions: it is also
imported by the Worker (:class:`StepRecorder`).
"""

from __future__ import annotations

from hostgap.capture.engines.vllm.adapter import VllmEngine, contention, engine_timing, request_timing
from hostgap.capture.engines.vllm.common import (
    ARCHITECTURES,
    CALL_TIMEOUT_S,
    DTYPES,
    ENGINE_OVERHEAD_BYTES,
    GRAPH_EXTRA_S,
    MIN_FLOPS,
    MIN_INIT_BYTES_S,
    MODES,
    NOISE,
    SHUTDOWN_TIMEOUT_S,
    STARTUP_BASE_S,
    VLLM_TESTED,
    StepRecorder,
    VllmOptions,
    engine_env,
    engine_processes,
    last_error_line,
    output_to,
    patched_env,
    prompt_ids,
    quiet_frontend_noise,
    shm_entries,
    validate_options,
    vllm_device,
    vllm_version,
    write_model_dir,
)
from hostgap.capture.engines.vllm.runtime import VllmRuntime, startup_deadline_s, work_deadline_s
from hostgap.capture.engines.vllm.watchdog import EngineFailure

__all__ = [
    "ARCHITECTURES",
    "CALL_TIMEOUT_S",
    "DTYPES",
    "ENGINE_OVERHEAD_BYTES",
    "GRAPH_EXTRA_S",
    "MIN_FLOPS",
    "MIN_INIT_BYTES_S",
    "MODES",
    "NOISE",
    "SHUTDOWN_TIMEOUT_S",
    "STARTUP_BASE_S",
    "VLLM_TESTED",
    "EngineFailure",
    "StepRecorder",
    "VllmEngine",
    "VllmOptions",
    "VllmRuntime",
    "contention",
    "engine_env",
    "engine_processes",
    "engine_timing",
    "last_error_line",
    "output_to",
    "patched_env",
    "prompt_ids",
    "quiet_frontend_noise",
    "request_timing",
    "shm_entries",
    "startup_deadline_s",
    "validate_options",
    "vllm_device",
    "vllm_version",
    "work_deadline_s",
    "write_model_dir",
]
