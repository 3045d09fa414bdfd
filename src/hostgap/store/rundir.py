"""A run directory: one measurement's files, written atomically.

Layout::

    runs/<run_id>/
      config.json     resolved configuration (MeasureConfig + workload + arch)
      manifest.json   command line, package versions, CPU/GPU facts
      timings.json    raw timings: every untraced and traced wall, per-trace totals
      results.json    the results (schema_version; read by fit/regimes/report)
      traces/         Kineto traces kept (trace_n{N}_r{r}.json.gz)
      stacks/         py-spy samples (with --stacks)

Files are written to a temporary name and renamed, so a crash or Ctrl-C never leaves a
half-written JSON behind. A run directory holds ``.incomplete`` (the creating process's pid and
host) until ``results.json`` is written; a run killed before that (even by SIGKILL, which no
handler sees) is removed by the next run created beside it (:func:`remove_stale`), which says
what it removed on stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hostgap.errors import HostgapError


def file_mode() -> int:
    """The mode a new file gets here: 0o666 less the process umask, read without changing it
    (``os.umask`` can only be read by setting it, which for that instant would make files
    other threads create world-writable). Linux reports it in /proc/self/status; elsewhere a
    probe file created with mode 0o666 shows it."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    folder = tempfile.mkdtemp(prefix=".hostgap-umask-")
    try:
        probe = os.path.join(folder, "probe")
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        return os.stat(probe).st_mode & 0o777
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_writable(parent: Path) -> None:
    """Fail early unless ``parent`` exists-or-can-be-created and accepts files."""
    parent = Path(parent)
    probe_dir = parent
    while not probe_dir.exists():
        if probe_dir.parent == probe_dir:
            break
        probe_dir = probe_dir.parent
    if probe_dir.exists() and not probe_dir.is_dir():
        what = "is a file, not a directory" if probe_dir == parent else f"lies under a file ({probe_dir})"
        raise HostgapError(str(parent), f"output path {what}")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".hostgap-probe-", dir=parent)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise HostgapError(str(parent), f"output directory is not writable ({e.strerror or e})") from None


def dumps(obj) -> bytes:
    return json.dumps(obj, indent=2, default=_default, allow_nan=True).encode()


def _default(o):
    if hasattr(o, "tolist"):  # numpy arrays and scalars
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_atomic(path: Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, file_mode())  # mkstemp creates 0600; files should look like any other
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


INCOMPLETE = ".incomplete"
"""Marker file of a run directory whose results are not written yet."""


def remove_stale(parent: Path) -> list[Path]:
    """Remove the run directories under ``parent`` that are marked incomplete by a process of
    this host that no longer runs; return them. Directories of live processes, of other hosts
    and without the marker are left alone."""
    removed: list[Path] = []
    try:
        marked = sorted(Path(parent).glob(f"*/{INCOMPLETE}"))
    except OSError:
        return removed
    host = socket.gethostname()
    for marker in marked:
        try:
            info = json.loads(marker.read_bytes())
            pid, owner = int(info["pid"]), str(info["host"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable marker: not ours to judge
        if owner != host or pid == os.getpid() or _alive(pid) or (marker.parent / "results.json").exists():
            continue
        shutil.rmtree(marker.parent, ignore_errors=True)
        removed.append(marker.parent)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # exists (another user's) or unknowable: keep
    return True


def write_json(path: Path, obj) -> Path:
    return write_atomic(path, dumps(obj) + b"\n")


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise HostgapError(str(path), "no such file") from None
    except ValueError as e:
        raise HostgapError(str(path), f"not valid JSON ({e})") from None


@dataclass(frozen=True)
class RunDir:
    path: Path

    @staticmethod
    def create(path: Path) -> RunDir:
        """A new, empty run directory marked incomplete; stale incomplete siblings (their
        process is gone) are removed first and named on stderr."""
        path = Path(path)
        removed = remove_stale(path.parent)
        if removed:
            print(
                f"hostgap: removed {len(removed)} incomplete run director{'y' if len(removed) == 1 else 'ies'} "
                f"left by interrupted runs: {', '.join(p.name for p in removed)}",
                file=sys.stderr,
            )
        if path.exists() and any(path.iterdir()):
            raise HostgapError(str(path), "run directory already exists and is not empty")
        try:
            (path / "traces").mkdir(parents=True, exist_ok=True)
            write_json(path / INCOMPLETE, {"pid": os.getpid(), "host": socket.gethostname()})
        except OSError as e:
            raise HostgapError(str(path), f"cannot create the run directory ({e.strerror or e})") from None
        return RunDir(path)

    def write_json(self, name: str, obj) -> Path:
        out = write_json(self.path / name, obj)
        if name == "results.json":  # complete from here on
            (self.path / INCOMPLETE).unlink(missing_ok=True)
        return out

    def remove_traces(self) -> None:
        shutil.rmtree(self.path / "traces", ignore_errors=True)

    def remove_if_incomplete(self) -> bool:
        """Delete this run directory when it has no results.json (an aborted run)."""
        if self.path.is_dir() and not (self.path / "results.json").exists():
            shutil.rmtree(self.path, ignore_errors=True)
            return True
        return False

    def rel(self, p: Path | None) -> str | None:
        if p is None:
            return None
        try:
            return str(Path(p).relative_to(self.path))
        except ValueError:
            return str(p)

    def rename_trace(self, src: Path, stem: str) -> Path:
        """Move a trace the engine wrote to ``traces/<stem>.json[.gz]``."""
        src = Path(src)
        dst = self.path / "traces" / (stem + (".json.gz" if src.name.endswith(".gz") else ".json"))
        if src != dst:
            shutil.move(src, dst)
        return dst
