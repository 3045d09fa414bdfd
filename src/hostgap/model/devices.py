"""Device specs: peak dense FLOP/s per dtype, memory bandwidth and size, interconnect.

Every value carries its source (``sources[field]``). Peaks are **dense** (no 2:4 sparsity)
tensor-core figures from the vendor datasheets; the roofline's efficiencies, fitted from
measurements, absorb the gap between datasheet and achievable (e.g. the H200 here measures
~4.3 TB/s copy of 4.8 and ~790 TFLOP/s bf16 GEMM of 989, docs/PLATFORM.md).

Users add or override devices from a JSON or TOML file (:func:`load_device_file`)::

    [[devices]]
    name = "rtx-4090"
    aliases = ["NVIDIA GeForce RTX 4090"]
    peak_flops = { bfloat16 = 165.2e12, float16 = 165.2e12, fp8 = 330.3e12 }
    mem_bw_bytes_per_s = 1.008e12
    mem_bytes = 24e9
    interconnect_bw_bytes_per_s = 64e9
    source = "NVIDIA Ada GPU architecture whitepaper, table 2"

``source`` applies to every value; ``sources = { mem_bw_bytes_per_s = "..." }`` per value.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hostgap.errors import HostgapError

_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM5 column; dense = half the sparse figure)"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (SXM column; dense = half the sparse figure)"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column; dense figures)"
_B200 = "NVIDIA HGX B200 datasheet (8-GPU totals / 8; dense = half the sparse figure); DGX B200: 1,440 GB / 8"
_L40S = "NVIDIA L40S datasheet (dense = half the sparse figure); PCIe Gen4 x16"
_MI300X = "AMD Instinct MI300X data sheet (dense figures); 7 Infinity Fabric links x 128 GB/s"
_CPU = (
    "nominal figures for one modern x86 server core, not a datasheet: AVX2 2 FMA x 8 fp32 lanes "
    "x 2 x 3 GHz = 96 GFLOP/s (bf16 runs at fp32 speed without AMX); ~20 GB/s per core of "
    "DRAM bandwidth. Replace with your machine's measured figures (--device-file)"
)


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator (or CPU) as the roofline sees it. Units in the names."""

    name: str
    peak_flops: dict  # dtype -> dense FLOP/s (int8: OP/s)
    mem_bw_bytes_per_s: float
    mem_bytes: float
    interconnect_bw_bytes_per_s: float
    sources: dict = field(default_factory=dict)  # field -> where the value comes from
    aliases: tuple = ()
    description: str = ""

    def peak(self, dtype: str) -> float:
        """Peak for ``dtype``; a dtype the device lacks runs at its bf16/fp16 rate."""
        if dtype in self.peak_flops:
            return float(self.peak_flops[dtype])
        for fallback in ("bfloat16", "float16", "float32"):
            if fallback in self.peak_flops:
                return float(self.peak_flops[fallback])
        raise HostgapError(self.name, f"no peak FLOP/s for {dtype}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["aliases"] = list(self.aliases)
        return d


def _spec(name, bf16, fp8, int8, fp32, bw, mem, link, src, aliases=(), description="", fp16=None):
    peaks = {"bfloat16": bf16, "float16": fp16 or bf16, "float32": fp32}
    if fp8:
        peaks["fp8"] = fp8
    if int8:
        peaks["int8"] = int8
    sources = {k: src for k in ("peak_flops", "mem_bw_bytes_per_s", "mem_bytes", "interconnect_bw_bytes_per_s")}
    return DeviceSpec(name, peaks, bw, mem, link, sources, tuple(aliases), description)


BUILTIN: dict[str, DeviceSpec] = {
    d.name: d
    for d in [
        _spec(
            "h100-sxm",
            989.4e12,
            1978.9e12,
            1978.9e12,
            494.7e12,
            3.35e12,
            80e9,
            900e9,
            _H100,
            ("h100", "NVIDIA H100", "NVIDIA H100 80GB HBM3", "H100 SXM"),
            "NVIDIA H100 SXM5 80 GB HBM3; NVLink 4 900 GB/s; float32 = TF32 tensor core",
        ),
        _spec(
            "h200",
            989.4e12,
            1978.9e12,
            1978.9e12,
            494.7e12,
            4.8e12,
            141e9,
            900e9,
            _H200,
            ("NVIDIA H200", "H200 SXM", "h200-sxm"),
            "NVIDIA H200 SXM 141 GB HBM3e; NVLink 4 900 GB/s; float32 = TF32 tensor core",
        ),
        _spec(
            "a100-80gb",
            312e12,
            None,
            624e12,
            156e12,
            2.039e12,
            80e9,
            600e9,
            _A100,
            ("a100", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "A100 80GB"),
            "NVIDIA A100 SXM4 80 GB HBM2e; NVLink 3 600 GB/s; no FP8 (runs fp8 at bf16 rate)",
        ),
        _spec(
            "b200",
            2.25e15,
            4.5e15,
            4.5e15,
            1.1e15,
            8.0e12,
            180e9,
            1.8e12,
            _B200,
            ("NVIDIA B200", "B200"),
            "NVIDIA B200 (HGX); NVLink 5 1.8 TB/s",
        ),
        _spec(
            "l40s",
            362.05e12,
            733e12,
            733e12,
            183e12,
            864e9,
            48e9,
            64e9,
            _L40S,
            ("NVIDIA L40S", "L40S"),
            "NVIDIA L40S 48 GB GDDR6; no NVLink: PCIe Gen4 x16 64 GB/s",
        ),
        _spec(
            "mi300x",
            1307.4e12,
            2614.9e12,
            2614.9e12,
            653.7e12,
            5.3e12,
            192e9,
            896e9,
            _MI300X,
            ("AMD Instinct MI300X", "MI300X"),
            "AMD Instinct MI300X 192 GB HBM3; Infinity Fabric 896 GB/s",
        ),
        _spec(
            "cpu",
            96e9,
            None,
            None,
            96e9,
            20e9,
            24e9,
            20e9,
            _CPU,
            ("cpu", "generic-cpu"),
            "generic CPU, one core's worth (order of magnitude only)",
        ),
    ]
}


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def find_device(name: str, extra: dict[str, DeviceSpec] | None = None) -> DeviceSpec:
    """The spec whose name or alias matches ``name`` (case and punctuation ignored).

    A device name reported by a run (``"NVIDIA H200"``) matches its alias; failing an exact
    match, the longest alias contained in the name wins (``"NVIDIA H100 80GB HBM3 SXM"``).
    """
    table = {**BUILTIN, **(extra or {})}
    key = _norm(name)
    for spec in table.values():
        if key in {_norm(spec.name), *(_norm(a) for a in spec.aliases)}:
            return spec
    best, best_len = None, 0
    for spec in table.values():
        for alias in (spec.name, *spec.aliases):
            n = _norm(alias)
            if len(n) >= 4 and n in key and len(n) > best_len:
                best, best_len = spec, len(n)
    if best is None:
        raise HostgapError(name, f"unknown device; known: {', '.join(table)} (add one with --device-file)")
    return best


def load_device_file(path: str | Path) -> dict[str, DeviceSpec]:
    """Devices from a JSON or TOML file (``{"devices": [...]}``); each value needs a source."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise HostgapError(str(p), f"cannot read device file: {e.strerror}") from None
    try:
        doc = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise HostgapError(str(p), f"not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {e}") from None
    entries = doc.get("devices") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise HostgapError(str(p), "expected a non-empty list under 'devices'")
    out = {}
    for i, entry in enumerate(entries):
        spec = _parse_entry(entry, f"{p}: devices[{i}]")
        out[spec.name] = spec
    return out


_REQUIRED = ("name", "peak_flops", "mem_bw_bytes_per_s", "mem_bytes", "interconnect_bw_bytes_per_s")


def _parse_entry(e, where: str) -> DeviceSpec:
    if not isinstance(e, dict):
        raise HostgapError(where, "each device must be a table/object")
    missing = [k for k in _REQUIRED if k not in e]
    if missing:
        raise HostgapError(where, f"missing {', '.join(missing)}")
    peaks = e["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise HostgapError(where, "peak_flops must map dtype -> FLOP/s")
    try:
        peaks = {str(k): float(v) for k, v in peaks.items()}
        nums = {k: float(e[k]) for k in _REQUIRED[2:]}
    except (TypeError, ValueError):
        raise HostgapError(where, "peak_flops and the bandwidth/size fields must be numbers") from None
    if any(v <= 0 for v in [*peaks.values(), *nums.values()]):
        raise HostgapError(where, "peaks, bandwidths and sizes must be > 0")
    per = e.get("sources", {}) or {}
    default = e.get("source")
    sources = {}
    for k in _REQUIRED[1:]:
        src = per.get(k, default)
        if not src:
            raise HostgapError(where, f"no source for {k} (give 'source' or 'sources.{k}')")
        sources[k] = str(src)
    return DeviceSpec(
        str(e["name"]),
        peaks,
        nums["mem_bw_bytes_per_s"],
        nums["mem_bytes"],
        nums["interconnect_bw_bytes_per_s"],
        sources,
        tuple(e.get("aliases", ())),
        str(e.get("description", "")),
    )


def launch_floor_ns(device: DeviceSpec) -> tuple[float, str]:
    """The null-kernel launch floor of ``device`` and its source: the same per-GPU table the
    trace analysis uses (:mod:`hostgap.anatomy.floor`: TaxBreak H100 4.707 us, H200 4.503 us;
    a generic 4.6 us elsewhere, labelled as such)."""
    from hostgap.anatomy.floor import launch_floor

    f = launch_floor([device.name, *device.aliases, device.description])
    return f.ns, f.source
