"""Names of host API calls and GPU copies, classified once per distinct name.

Launch APIs (METHOD.md §2): ``cudaLaunchKernel*``, ``cuLaunchKernel*``,
``cudaLaunchKernelExC``, ``cudaLaunchCooperativeKernel*``, ``hipLaunchKernel``,
``hipExtModuleLaunchKernel``, ``hipModuleLaunchKernel`` (and their ``_ptsz``/``_v7000``
variants) enqueue one kernel; ``cudaGraphLaunch``/``hipGraphLaunch`` replay a graph (many
kernels under one correlation id). Everything else is a plain runtime/driver call.
"""

from __future__ import annotations

import re

from hostgap.events import CopyKind, Kind

LAUNCH_API_PREFIXES: tuple[str, ...] = (
    "cudaLaunchKernel",  # also cudaLaunchKernelExC
    "cudaLaunchCooperativeKernel",
    "cuLaunchKernel",  # also cuLaunchKernelEx
    "cuLaunchCooperativeKernel",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
    "hipModuleLaunchCooperativeKernel",
)
"""Host APIs that enqueue one kernel (METHOD.md §2), matched on the base name's prefix."""

GRAPH_LAUNCH_API_PREFIXES: tuple[str, ...] = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
"""Host APIs that replay a graph: one correlation id shared by every replayed kernel."""

_SUFFIX = re.compile(r"(?:_pt(?:sz|ds))?(?:_v\d{4,})?(?:_pt(?:sz|ds))?$")
# nsys tags API names with the CUDA version that introduced them (``_v7000``, ``_v11060``,
# 4+ digits) and per-thread-default-stream variants with ``_ptsz``/``_ptds``. Short
# ``_v2``-style suffixes are part of the API's own name (``cuMemAlloc_v2``) and stay.


def api_base_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` → ``cudaLaunchKernel``; ``cuLaunchKernel_ptsz`` →
    ``cuLaunchKernel``; ``cudaStreamGetCaptureInfo_v2_v11030`` → ``cudaStreamGetCaptureInfo_v2``."""
    return _SUFFIX.sub("", name, count=1) or name


def classify_api(name: str) -> Kind:
    """``Kind.LAUNCH``, ``Kind.GRAPH_LAUNCH`` or ``Kind.RUNTIME`` for a runtime/driver API
    name, with or without nsys suffixes. Pure; call it once per distinct name."""
    base = api_base_name(name)
    if base.startswith(GRAPH_LAUNCH_API_PREFIXES):
        return Kind.GRAPH_LAUNCH
    if base.startswith(LAUNCH_API_PREFIXES):
        return Kind.LAUNCH
    return Kind.RUNTIME


def base_api_name(name: str) -> str:
    """Alias of :func:`api_base_name`."""
    return api_base_name(name)


_COPY_PATTERNS = (
    (re.compile(r"HtoD|H2D|host\s*to\s*device", re.I), CopyKind.H2D),
    (re.compile(r"DtoH|D2H|device\s*to\s*host", re.I), CopyKind.D2H),
    (re.compile(r"PtoP|P2P|peer", re.I), CopyKind.P2P),
    (re.compile(r"DtoD|D2D|device\s*to\s*device", re.I), CopyKind.D2D),
)


def copy_kind_from_name(name: str) -> CopyKind:
    """Direction of a Kineto memcpy from its name, e.g. ``Memcpy HtoD (Pageable -> Device)``."""
    for pattern, kind in _COPY_PATTERNS:
        if pattern.search(name):
            return kind
    return CopyKind.OTHER
