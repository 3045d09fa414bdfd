"""The launch floor T_floor (METHOD.md §5): the cheapest possible kernel launch on this machine.

CUDA: an empty kernel launched ``<<<1,1>>>`` on the current stream, then a device sync; after a
warm-up, ``samples`` iterations run under torch.profiler with CUDA activity and each sample is
``kernel.start - launch.start`` from the CUPTI trace (launch and kernel joined by correlation id,
:func:`hostgap.anatomy.link.link`). The empty kernel is ATen's ``spin_kernel<<<1, 1>>>`` behind
``torch.cuda._sleep(0)`` (zero cycles: it returns at once), launched through
``cudaLaunchKernel`` like any eager op, so no compiler is needed. Paper: H100 4.707 µs mean
(p50 4.578, p95 5.396); H200 4.503 µs (p50 4.452, p95 4.909).

CPU: there is no launch; the analogue is the dispatch floor of a minimal torch op
(``torch.add(a, b, out=c)`` on one-element tensors): the wall time of one call, timer overhead
subtracted, over ``samples`` calls after a warm-up.

The result file (``kind: "launch_floor"``) is what ``hostgap analyze --floor-file`` reads
(``mean_ns``).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hostgap.capture.protocol.workload import import_torch, resolve_device
from hostgap.errors import HostgapError
from hostgap.store.manifest import utc_now

SCHEMA_VERSION = 1
MIN_SAMPLES = 50


@dataclass(frozen=True)
class Floor:
    schema_version: int
    kind: str
    device: str
    device_name: str
    samples: int
    mean_ns: float
    p50_ns: float
    p95_ns: float
    min_ns: float
    method: str
    created: str
    torch: str

    def to_dict(self) -> dict:
        return asdict(self)


def summarise(samples_ns) -> dict:
    """mean / p50 / p95 / min of the samples (ns).

    >>> summarise([4000, 4500, 5000])["p50_ns"]
    4500.0
    """
    x = np.asarray(samples_ns, dtype=np.float64)
    return {
        "samples": int(len(x)),
        "mean_ns": float(x.mean()),
        "p50_ns": float(np.percentile(x, 50)),
        "p95_ns": float(np.percentile(x, 95)),
        "min_ns": float(x.min()),
    }


def measure_floor(device: str = "auto", samples: int = 200, warmup: int = 50) -> Floor:
    """Measure the floor on ``device`` (``auto``: CUDA when present)."""
    if samples < MIN_SAMPLES:
        raise HostgapError("--samples", f"need at least {MIN_SAMPLES} samples, got {samples}")
    torch = import_torch()
    device = resolve_device(device)
    if device == "cuda":
        xs, name, method = _cuda_samples(torch, samples, warmup)
    else:
        xs, name, method = _cpu_samples(torch, samples, warmup)
    return Floor(
        SCHEMA_VERSION,
        "launch_floor",
        device,
        name,
        method=method,
        created=utc_now(),
        torch=torch.__version__,
        **summarise(xs),
    )


def _cpu_samples(torch, samples: int, warmup: int):
    from hostgap.store.manifest import cpu_model

    torch.set_num_threads(1)
    a, b, c = torch.ones(1), torch.ones(1), torch.empty(1)
    clock = time.perf_counter_ns
    for _ in range(warmup):
        torch.add(a, b, out=c)
    empty = np.empty(samples, dtype=np.int64)
    for i in range(samples):
        t0 = clock()
        empty[i] = clock() - t0
    xs = np.empty(samples, dtype=np.int64)
    for i in range(samples):
        t0 = clock()
        torch.add(a, b, out=c)
        xs[i] = clock() - t0
    xs = np.maximum(xs - int(np.median(empty)), 0)
    method = (
        "CPU dispatch floor: wall of one torch.add(a, b, out=c) on 1-element float32 "
        "tensors, 1 thread, minus the median timer overhead"
    )
    return xs, cpu_model(), method


def null_kernel_delays(trace, kernel_substring: str = "spin_kernel") -> np.ndarray:
    """``kernel.start - launch.start`` (ns) of every kernel whose name contains
    ``kernel_substring`` and whose launch call is in the trace (joined by correlation id)."""
    from hostgap.anatomy.link import link
    from hostgap.events import Kind

    ev = trace.events
    links = link(trace)
    kern = np.flatnonzero((ev.kind == Kind.KERNEL) & trace.name_mask(lambda s: kernel_substring in s))
    kern = kern[links.launch_of[kern] >= 0]
    return ev.start_ns[kern] - ev.start_ns[links.launch_of[kern]]


def _cuda_samples(torch, samples: int, warmup: int):
    from hostgap.analysis.trace import analyse_trace

    if not hasattr(torch.cuda, "_sleep"):
        raise HostgapError("hostgap floor", "this torch has no torch.cuda._sleep (empty-kernel launcher)")
    for _ in range(warmup):
        torch.cuda._sleep(0)
        torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    from hostgap.capture.protocol.torch_profiler import without_usdt_lines

    with without_usdt_lines(), torch.profiler.profile(activities=acts) as prof:
        for _ in range(samples):
            torch.cuda._sleep(0)
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="hostgap-floor-") as tmp:
        path = Path(tmp) / "floor.json"
        prof.export_chrome_trace(str(path))
        trace = analyse_trace(path).trace
    xs = null_kernel_delays(trace)
    if len(xs) < MIN_SAMPLES:
        raise HostgapError("hostgap floor", f"only {len(xs)} empty-kernel launches linked in the trace")
    method = (
        "CUDA null-kernel floor: spin_kernel<<<1,1>>> (torch.cuda._sleep(0)) then "
        "cudaDeviceSynchronize; kernel.start - cudaLaunchKernel.start from a CUPTI trace"
    )
    return xs, torch.cuda.get_device_name(), method


def write_floor(floor: Floor, path: Path) -> Path:
    from hostgap.store.rundir import check_writable, write_json

    path = Path(path)
    check_writable(path.parent if str(path.parent) else Path("."))
    return write_json(path, floor.to_dict())


def measure_to_file(
    device: str = "auto", samples: int = 200, warmup: int = 50, out: str | None = None
) -> tuple[Floor, Path]:
    """``hostgap floor``: the floor measured and written to ``out`` (default
    ``floor-<device>.json``; its folder checked before the measurement)."""
    from hostgap.store.rundir import check_writable

    if out:
        check_writable(Path(out).parent if str(Path(out).parent) else Path("."))
    f = measure_floor(device, samples, warmup)
    return f, write_floor(f, Path(out or f"floor-{f.device}.json"))
