"""What one ``hostgap attach`` was asked (:class:`AttachConfig`, written to the run directory as
config.json) and what happened during it (:class:`Session`), shared by the orchestration
(:mod:`hostgap.server.attach.profile`) and the result (:mod:`hostgap.server.attach.record`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hostgap.errors import HostgapError
from hostgap.server.attach.client import ProfileClient
from hostgap.server.attach.loadgen import LoadSpec
from hostgap.server.attach.tracefiles import Found
from hostgap.server.httpcall import check_url


@dataclass(frozen=True)
class AttachConfig:
    """One ``hostgap attach`` (written to the run directory as config.json)."""

    url: str
    steps: int = 16
    skip: int = 4
    load: LoadSpec | None = None
    trace_dir: str | None = None
    wait_s: float = 120.0  # longest wait for the steps (no traffic: ends early, see idle_s)
    idle_s: float = 20.0  # no step seen for this long (with a step counter): the server is idle
    files_s: float = 120.0  # longest wait for the files after the stop
    output: str = "runs"
    db: str | None = None
    step_marker: str | None = None
    store: bool = True
    baseline_s: float = 3.0  # each metrics window before and after the profile (0: not measured)

    def __post_init__(self) -> None:
        check_url(self.url)
        if not isinstance(self.steps, int) or self.steps < 1:
            raise HostgapError("--steps", f"must be a whole number >= 1, got {self.steps!r}")
        if not isinstance(self.skip, int) or self.skip < 0:
            raise HostgapError("--skip", f"must be a whole number >= 0, got {self.skip!r}")
        if self.baseline_s < 0:
            raise HostgapError("--baseline", "must be >= 0 seconds")
        for name in ("wait_s", "idle_s", "files_s"):
            if getattr(self, name) <= 0:
                raise HostgapError(f"--{name.replace('_s', '')}", "must be > 0 seconds")


@dataclass
class Session:
    """What happened during one attach (for the result and for error messages)."""

    run_id: str
    client: ProfileClient | None = None
    trace_dir: str | None = None
    trace_dir_source: str = ""
    started_at: float = 0.0
    stopped_at: float = 0.0
    stop_problem: str | None = None
    steps_counted: int | None = None
    files: Found = field(default_factory=Found)
    before: set[str] = field(default_factory=set)  # the trace directory's names before the start
    notes: list[str] = field(default_factory=list)
    overhead: Any = None  # hostgap.server.attach.overhead.Overhead: the metrics windows, when measured
    load_stats: dict | None = None  # LoadStats.to_dict() of hostgap's load, when it drove one
    cancel: Any = None  # threading.Event: the caller ends the wait (a watch that ends); None: never


def config_dict(cfg: AttachConfig) -> dict:
    d = asdict(cfg)
    return d
