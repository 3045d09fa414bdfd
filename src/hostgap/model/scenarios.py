"""Every what-if by name (whatif.py's and the operators' modules beside it) and the default
setup of a cell: what ``hostgap predict --what-if`` and ``regimes --published`` call."""

from __future__ import annotations

from hostgap.model.accounting import Cell
from hostgap.model.arch import get_preset
from hostgap.model.devices import find_device, launch_floor_ns
from hostgap.model.roofline import default_model
from hostgap.model.stepmodel import DEFAULT_DEVICE_SCALE, DEFAULT_HOST, for_device
from hostgap.model.whatif import WHATIFS as BASE
from hostgap.model.whatif import Setup, WhatIf
from hostgap.model.whatif import parse as _parse
from hostgap.model.whatif_cpu import cpu
from hostgap.model.whatif_megakernel import megakernel
from hostgap.model.whatif_overlap import overlap

WHATIFS = {**BASE, "overlap": overlap, "cpu": cpu, "megakernel": megakernel}


def parse(spec: str) -> tuple[str, dict]:
    """``"cpu:cores=2,load=1"`` -> ("cpu", {...}); an unknown name is one clear error."""
    return _parse(spec, WHATIFS)


def run(s: Setup, spec: str) -> WhatIf:
    name, kw = parse(spec)
    return WHATIFS[name](s, kw)


def default_setup(
    preset: str,
    device: str = "h100-sxm",
    batch: int = 1,
    context: int = 2048,
    tp: int = 1,
    mode: str = "eager",
    engine: str = "vllm",
    capture: str | None = None,
) -> Setup:
    """The setup ``hostgap predict`` uses without a fitted model (default efficiencies and host term)."""
    dev = find_device(device)
    host = for_device(DEFAULT_HOST[engine], launch_floor_ns(dev)[0], dev.name)
    return Setup(
        get_preset(preset),
        Cell(batch=batch, context=context, tp=tp, engine=engine),
        dev,
        mode,
        default_model(dev.name),
        DEFAULT_DEVICE_SCALE.get(dev.name, 1.0),
        host,
        capture=capture,
    )
