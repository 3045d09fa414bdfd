"""The vLLM OpenAI server's profile routes, in the two protocols its versions speak.

- **Bounded** (vLLM >= 0.32): ``POST /start_profile`` takes an optional JSON body
  ``{"profile_prefix", "delay_iterations", "max_iterations"}``; the Worker skips
  ``delay_iterations`` steps, records ``max_iterations`` and stops itself, writing its file; the
  frontend's profiler runs until ``POST /stop_profile``, which returns once the files are
  written. A second start answers 409.
- **Timed** (older vLLM): ``POST /start_profile`` without a body starts every profiler,
  ``POST /stop_profile`` stops them; attach counts the steps itself and stops after them.

Both exist only when the server was started with ``--profiler-config`` (vLLM >= 0.13; before
0.16 the ``VLLM_TORCH_PROFILER_DIR`` variable did the same); otherwise the routes answer 404.
Python stacks and shapes are server flags (``torch_profiler_with_stack`` defaults to true,
``torch_profiler_record_shapes`` to false): a client cannot turn them off per request, so
attach reads from the trace which were on and says so.

Files: one per Worker rank, ``[PREFIX_]dp0_pp0_tp0_dcp0_ep0_rank0.<ns>.pt.trace.json.gz`` (on the
CPU backend ``[PREFIX_]rank0.<ns>...``), and the API server's own
``[PREFIX_]<host>_<pid>.async_llm.<ns>.pt.trace.json.gz``.
"""

from __future__ import annotations

import json
import re

from hostgap.server.attach.client import LOW_OVERHEAD, NO_ROUTES, AttachError, ProfileClient, ProfileRequest

BOUNDED_SINCE = (0, 32)
"""First vLLM version whose /start_profile takes the iteration bounds in its body."""

PROFILER_FLAG = (
    '--profiler-config \'{"profiler": "torch", "torch_profiler_dir": "/abs/dir", "torch_profiler_with_stack": false}\''
)


def version_tuple(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a version string (``"0.32.0+cpu"`` -> ``(0, 32)``); (0, 0) when
    unreadable."""
    m = re.match(r"\s*v?(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


class VllmClient(ProfileClient):
    """vLLM >= 0.32: the Worker records exactly the requested steps."""

    engine = "vllm"
    protocol = "vllm-bounded"
    worker_file = re.compile(r"rank(\d+)\.\d+\.pt\.trace\.json(\.gz)?$")
    frontend_file = re.compile(r"\.async_llm\.\d+\.pt\.trace\.json(\.gz)?$")

    def start_request(self, req: ProfileRequest) -> tuple[str, dict | None]:
        self.settings.requested = {
            "profile_prefix": req.prefix,
            "delay_iterations": req.skip,
            "max_iterations": req.steps,
            **LOW_OVERHEAD,
        }
        self.settings.notes.append(
            "Python stacks, shapes and memory are server flags in vLLM "
            "(--profiler-config torch_profiler_with_stack / _record_shapes / _with_memory); "
            "what the trace shows is reported"
        )
        return "/start_profile", {
            "profile_prefix": req.prefix,
            "delay_iterations": req.skip,
            "max_iterations": req.steps,
        }

    def explain_start_failure(self, status: int, text: str) -> AttachError:
        if status == 404:
            return AttachError(
                self.url,
                f"vLLM {self.version} serves no /start_profile (HTTP 404): restart the server with {PROFILER_FLAG}",
                reason=NO_ROUTES,
            )
        return super().explain_start_failure(status, text)

    def server_trace_dir(self) -> str | None:
        return trace_dir_of_config(self.info.get("vllm_config"))


class VllmTimedClient(VllmClient):
    """vLLM before 0.32: start and stop only; attach counts the steps."""

    protocol = "vllm-timed"
    counts_steps = False
    names_with_prefix = False

    def start_request(self, req: ProfileRequest) -> tuple[str, dict | None]:
        super().start_request(req)
        self.settings.requested = {"profile_prefix": None, **LOW_OVERHEAD}
        self.settings.notes.append(
            f"vLLM {self.version} takes no step bounds: hostgap stops the profile after "
            "counting the steps, so a few more may be recorded"
        )
        return "/start_profile", None


def trace_dir_of_config(config: object) -> str | None:
    """``torch_profiler_dir`` from a vLLM configuration as ``/server_info`` reports it (a dict,
    or its text form)."""
    if isinstance(config, str):
        m = re.search(r"torch_profiler_dir['\"]?\s*[:=]\s*['\"]([^'\"]+)['\"]", config)
        return m.group(1) if m else None
    if isinstance(config, dict):
        prof = config.get("profiler_config") or {}
        if isinstance(prof, str):
            try:
                prof = json.loads(prof)
            except ValueError:
                return trace_dir_of_config(prof)
        d = prof.get("torch_profiler_dir") if isinstance(prof, dict) else None
        return str(d) if d else None
    return None


def client_for_version(url: str, version: str, info: dict | None = None) -> VllmClient:
    cls = VllmClient if version_tuple(version) >= BOUNDED_SINCE else VllmTimedClient
    return cls(url, version, info)
