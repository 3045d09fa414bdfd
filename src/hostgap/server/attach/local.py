"""What this machine can tell about a server that runs on it: the process listening on the
URL's port, and the trace directory on its command line (``--profiler-config``'s
``torch_profiler_dir``) or in its environment (``VLLM_TORCH_PROFILER_DIR``, older vLLM;
``SGLANG_TORCH_PROFILER_DIR``). Linux ``/proc`` only; anything unreadable gives None.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path

LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1")


def listening_inodes(port: int) -> set[str]:
    """Socket inodes of TCP sockets listening on ``port`` (state 0A)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                out.add(f[9])
    return out


def server_pid(url: str) -> int | None:
    """The pid of the local process listening on the URL's port, or None."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in LOCAL_HOSTS:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    inodes = listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in targets:
                    return int(entry.name)
        except OSError:
            continue
    return None


def trace_dir_of_process(pid: int) -> str | None:
    """The profiler directory on a server process's command line or in its environment."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    args = [a.decode("utf-8", "replace") for a in argv]
    for i, a in enumerate(args):
        value = None
        if a == "--profiler-config" and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--profiler-config="):
            value = a.split("=", 1)[1]
        elif a.startswith("--profiler-config.torch_profiler_dir"):
            return a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else None)
        if value:
            try:
                d = json.loads(value).get("torch_profiler_dir")
            except (ValueError, AttributeError):
                d = None
            if d:
                return str(d)
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        k, _, v = item.decode("utf-8", "replace").partition("=")
        if k in ("VLLM_TORCH_PROFILER_DIR", "SGLANG_TORCH_PROFILER_DIR") and v:
            return v
    return None


def local_trace_dir(url: str) -> str | None:
    pid = server_pid(url)
    return trace_dir_of_process(pid) if pid is not None else None
