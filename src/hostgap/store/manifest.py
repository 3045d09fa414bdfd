"""Environment facts for a run's ``manifest.json``: what ran, where, with which versions.

Everything here is best effort: a fact that cannot be read is recorded as ``None``, never an
error (a missing ``nvidia-smi`` must not stop a measurement).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata

from hostgap.memory import meminfo

SCHEMA_VERSION = 1

PACKAGES = ("hostgap", "torch", "transformers", "numpy", "scipy", "msgspec", "vllm", "triton")


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def package_versions(names=PACKAGES) -> dict:
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            mod = sys.modules.get(n)
            out[n] = getattr(mod, "__version__", None) if mod else None
    return out


def _cpuinfo() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read().splitlines()
    except OSError:
        return []


def cpu_model() -> str:
    for line in _cpuinfo():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def cpu_facts() -> dict:
    mhz = [float(l.split(":", 1)[1]) for l in _cpuinfo() if l.lower().startswith("cpu mhz")]
    base = "/sys/devices/system/cpu/cpu0/cpufreq/"
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        affinity = None
    return {
        "model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": affinity,
        "mhz_now_mean": round(sum(mhz) / len(mhz), 1) if mhz else None,
        "khz_cur": _read_int(base + "scaling_cur_freq"),
        "khz_max": _read_int(base + "cpuinfo_max_freq"),
        "governor": _read_text(base + "scaling_governor"),
        "mem_total_bytes": meminfo("MemTotal"),
        "mem_available_bytes": meminfo("MemAvailable"),
    }


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


NVSMI_FIELDS = (
    "name",
    "memory.total",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "driver_version",
    "power.limit",
    "pstate",
)


def gpu_facts() -> list[dict]:
    """One dict per visible GPU (torch properties + nvidia-smi when present)."""
    torch = sys.modules.get("torch")
    gpus: list[dict] = []
    if torch is not None and torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append(
                {
                    "index": i,
                    "name": p.name,
                    "memory_bytes": int(p.total_memory),
                    "capability": f"{p.major}.{p.minor}",
                    "sms": p.multi_processor_count,
                    "cuda_runtime": torch.version.cuda,
                }
            )
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, f"--query-gpu={','.join(NVSMI_FIELDS)}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
            for i, line in enumerate(l for l in out.splitlines() if l.strip()):
                vals = [v.strip() for v in line.split(",")]
                facts = dict(zip((f.replace(".", "_") for f in NVSMI_FIELDS), vals))
                if i < len(gpus):
                    gpus[i]["nvidia_smi"] = facts
                else:
                    gpus.append({"index": i, "nvidia_smi": facts})
        except (OSError, subprocess.SubprocessError):
            pass
    return gpus


ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "CUDA_LAUNCH_BLOCKING",
    "HOSTGAP_DB",
)


def manifest(argv: list[str] | None = None, extra: dict | None = None) -> dict:
    """The manifest of a run started now."""
    m = {
        "schema_version": SCHEMA_VERSION,
        "created": utc_now(),
        "command": [os.path.basename(sys.argv[0])] + list(sys.argv[1:] if argv is None else argv),
        "cwd": os.getcwd(),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "cpu": cpu_facts(),
        "gpus": gpu_facts(),
        "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
    }
    if extra:
        m.update(extra)
    return m
