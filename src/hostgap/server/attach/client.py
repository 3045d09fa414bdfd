"""What every engine's profile client offers, and the errors attach reports.

A client speaks one engine protocol (:mod:`hostgap.server.attach.vllm_routes`,
:mod:`hostgap.server.attach.sglang_routes`); :func:`hostgap.server.attach.detect.client_for` picks it once
from the server's own version. The attach orchestration (:mod:`hostgap.server.attach.profile`) calls
``start`` once, then ``stop`` exactly once whatever happened in between (a ``finally``), so a
profile hostgap started is never left running on a server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hostgap.errors import HostgapError
from hostgap.server.httpcall import Unreachable, call, message

EXIT_BAD_INPUT = 2
"""Bad input, or a server that cannot be profiled as asked (nothing was started)."""
EXIT_NO_RESULT = 3
"""Profiling started but no usable result came back."""
START_TIMEOUT_S = 18.0
"""Timeout of the start request: vLLM's first start builds the Worker's profiler (~10 s measured on
a loaded 2-core CPU machine); a server silent for longer counts as hung (the stop is then owed)."""


class AttachError(HostgapError):
    """One line for the user and the documented exit status (2 or 3)."""

    def __init__(self, source: str, problem: str, exit_status: int = EXIT_BAD_INPUT, reason: str = ""):
        super().__init__(source, problem)
        self.exit_status = exit_status
        self.reason = reason  # NO_ROUTES, BUSY, CANCELLED, or "" (for callers that retry)


NO_ROUTES, BUSY, CANCELLED, NOT_VISIBLE = "no-routes", "busy", "cancelled", "not-visible"


@dataclass(frozen=True)
class ProfileRequest:
    """What attach asks of the server: ``steps`` steps after ``skip``, files named ``prefix``,
    into ``output_dir`` where the engine takes one from the request (SGLang)."""

    steps: int
    skip: int
    prefix: str
    output_dir: str | None = None


@dataclass
class Settings:
    """The profiler settings asked for, what the engine took, and what hostgap could not turn
    off from outside (a server-side flag)."""

    requested: dict = field(default_factory=dict)
    protocol: str = ""
    not_turned_off: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "protocol": self.protocol,
            "requested": self.requested,
            "not_turned_off": self.not_turned_off,
            "notes": self.notes,
        }


LOW_OVERHEAD = {"with_stack": False, "record_shapes": False, "with_memory": False}
"""The settings attach asks for: Python stacks, shapes and memory each add host time per op."""


class ProfileClient:
    """Base of the engine clients. Subclasses set ``engine``/``protocol`` and implement
    :meth:`start_request` / :meth:`stop_request`; this class owns the start/stop bookkeeping."""

    engine = ""
    protocol = ""
    self_stopping = False  # the engine ends the profile after the requested steps by itself
    counts_steps = True  # the engine records exactly the requested steps (else attach times them)
    names_with_prefix = True  # the engine puts the request's prefix in its file names
    worker_file = re.compile(r"\.pt\.trace\.json(\.gz)?$")
    frontend_file: re.Pattern[str] | None = None

    def __init__(
        self, url: str, version: str, info: dict | None = None, timeout_s: float = 10.0, stop_timeout_s: float = 20.0
    ):
        self.url = url
        self.version = version
        self.info = info or {}
        self.timeout_s = timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.started = False
        self.stopped = False
        self.settings = Settings(protocol=self.protocol)

    # -- protocol ----------------------------------------------------------------------------
    def start_request(self, req: ProfileRequest) -> tuple[str, dict | None]:
        """(path, JSON body) of the start call."""
        raise NotImplementedError

    def stop_request(self) -> tuple[str, dict | None]:
        return "/stop_profile", None

    def server_trace_dir(self) -> str | None:
        """The trace directory the server reports, where it reports one."""
        return None

    def world_size(self) -> int | None:
        """Ranks that each write one trace file, where the server says."""
        return None

    def explain_start_failure(self, status: int, text: str) -> AttachError:
        if status == 404:
            return AttachError(
                self.url, f"{self.engine} {self.version} has no /start_profile route (HTTP 404)", reason=NO_ROUTES
            )
        if status == 409 or "already" in text.lower():
            return AttachError(
                self.url,
                f"a profile is already running on this server (HTTP {status}: {text}); "
                f"wait for it to end, or end it with POST {self.url}/stop_profile",
                reason=BUSY,
            )
        return AttachError(self.url, f"/start_profile refused (HTTP {status}: {text})")

    # -- start and stop -----------------------------------------------------------------------
    def start(self, req: ProfileRequest) -> None:
        """Ask the server to profile. Raises :class:`AttachError` (exit 2) when it refuses; a
        start that got no answer may still have taken effect, so it counts as started (the
        stop is owed)."""
        path, body = self.start_request(req)
        try:
            status, text = call("POST", self.url + path, body, timeout_s=START_TIMEOUT_S)
        except Unreachable as e:
            self.started = True  # it may have reached the server: the stop is owed
            raise AttachError(self.url, f"no answer to /start_profile ({e.problem})", EXIT_NO_RESULT) from None
        if status >= 300:
            raise self.explain_start_failure(status, message(text))
        self.started = True

    def stop(self) -> str | None:
        """Send the stop request owed (once; never when nothing was started). Returns a problem
        text when the stop did not get a clean answer, else None. The timeout is short on
        purpose: a server that received the stop finishes writing without us (attach then waits
        for complete files), and a hung one must not hold attach past its 30 s fault bound."""
        if not self.started or self.stopped:
            return None
        self.stopped = True
        path, body = self.stop_request()
        try:
            status, text = call("POST", self.url + path, body, timeout_s=self.stop_timeout_s)
        except Unreachable as e:
            return f"stop request sent, no answer ({e.problem})"
        if status >= 300:
            return self.explain_stop_failure(status, message(text))
        return None

    def explain_stop_failure(self, status: int, text: str) -> str | None:
        return f"/stop_profile answered HTTP {status}: {text}"
