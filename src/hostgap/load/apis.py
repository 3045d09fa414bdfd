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

_VERSION_SUFFIX = re.compile(r"(_v\d+)+$|(_ptsz|_ptds)$")
_GRAPH_LAUNCH = re.compile(r"^(cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch)")
_KERNEL_LAUNCH = re.compile(
    r"^(cudaLaunchKernel|cuLaunchKernel|cudaLaunchCooperativeKernel|cuLaunchCooperativeKernel"
    r"|cudaLaunchKernelExC|cuLaunchKernelEx|hipLaunchKernel|hipExtModuleLaunchKernel"
    r"|hipModuleLaunchKernel|hipExtLaunchKernel|hipLaunchCooperativeKernel"
    r"|hipModuleLaunchCooperativeKernel|hipExtLaunchMultiKernelMultiDevice)"
)


def base_api_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` → ``cudaLaunchKernel``; ``cuLaunchKernel_ptsz`` → ``cuLaunchKernel``."""
    prev = None
    while prev != name:
        prev, name = name, _VERSION_SUFFIX.sub("", name)
    return name


def classify_api(name: str) -> Kind:
    """LAUNCH, GRAPH_LAUNCH or RUNTIME for a runtime/driver API name."""
    base = base_api_name(name)
    if _GRAPH_LAUNCH.match(base):
        return Kind.GRAPH_LAUNCH
    if _KERNEL_LAUNCH.match(base):
        return Kind.LAUNCH
    return Kind.RUNTIME


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
