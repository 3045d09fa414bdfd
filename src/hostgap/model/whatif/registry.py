"""Every what-if by name (paper.py's and the operators' modules beside it) and the one way to
build the setup of a cell (:func:`build_setup`, with or without a fitted model): what
``hostgap predict``, ``regimes --predict`` and ``regimes --published`` call."""

from __future__ import annotations

from pathlib import Path

from hostgap.model.accounting import Cell
from hostgap.model.arch import get_preset
from hostgap.model.cell import Setup
from hostgap.model.devices import find_device, launch_floor_ns, load_device_file
from hostgap.model.fitting import measured as fitting
from hostgap.model.roofline import RooflineModel, default_model
from hostgap.model.stepmodel import DEFAULT_DEVICE_SCALE, DEFAULT_HOST, for_device
from hostgap.model.whatif.change import WhatIf
from hostgap.model.whatif.cpu import cpu
from hostgap.model.whatif.megakernel import megakernel
from hostgap.model.whatif.overlap import overlap
from hostgap.model.whatif.paper import WHATIFS as BASE
from hostgap.model.whatif.paper import parse as _parse

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
    """The setup ``hostgap predict`` uses without a fitted model (default efficiencies and host
    term): :func:`build_setup`'s without a model or device file."""
    return build_setup(
        preset, device=device, batch=batch, context=context, tp=tp, mode=mode, engine=engine, capture=capture
    )[0]


def build_setup(
    preset: str,
    *,
    device: str = "h100-sxm",
    batch: int = 1,
    context: int = 2048,
    tp: int = 1,
    dtype: str = "bfloat16",
    mode: str = "eager",
    engine: str = "vllm",
    device_file: str | Path | None = None,
    model: str | Path | None = None,
    kernels_per_step: float | None = None,
    capture: str | None = None,
) -> tuple[Setup, str]:
    """The setup of one decode cell and the sentence saying what it rests on (``basis:``).

    With ``model`` (a ``hostgap fit`` JSON): its group for this device, engine and TP degree,
    else its efficiencies fitted on this device (or on another, applied to this one's peaks)
    with the default host term; without: the default efficiencies, scaled to the device's level
    (:data:`~hostgap.model.stepmodel.DEFAULT_DEVICE_SCALE`), and host term. ``device_file`` adds
    devices to the built-in table. Errors name the preset, device, file or model at fault, in
    that order."""
    arch = get_preset(preset)
    dev = find_device(device, load_device_file(device_file) if device_file else None)
    cell = Cell(batch=batch, q_tokens=1, context=context, tp=tp, dtype=dtype, engine=engine)
    fitted = fitting.load_model(model) if model else None
    group = fitted.group_for(dev.name, engine, tp) if fitted else None
    if group is not None:
        assert fitted is not None  # a group comes from a fitted model
        basis = (
            f"fitted model {model} ({group.device_name}/{group.engine}/TP-{group.tp}, {group.n_cells} cells, "
            f"held-out MAPE {group.heldout.mape * 100:.1f} %, max {group.heldout.max_error * 100:.1f} %)"
        )
        parts = (group.roofline, group.device_scale, group.host, fitted.all_reduce, fitted.tp_form)
        return Setup(arch, cell, dev, mode, *parts, kernels_per_step, capture=capture), basis
    floor, floor_src = launch_floor_ns(dev)
    rl, basis = _efficiencies(fitted, model, dev.name, engine, tp)
    scale = 1.0 if rl is not None else DEFAULT_DEVICE_SCALE.get(dev.name, 1.0)
    if scale != 1.0:
        basis += f"; default efficiencies x {scale:g} ({dev.name} level from the published 8B step)"
    basis += f"; launch floor {floor / 1e3:.3f} us ({floor_src})"
    host = for_device(DEFAULT_HOST[engine], floor, dev.name)
    ar, form = (fitted.all_reduce, fitted.tp_form) if fitted else (None, "overlap")
    rl = rl or default_model(dev.name)
    return Setup(arch, cell, dev, mode, rl, scale, host, ar, form, kernels_per_step, capture=capture), basis


def _efficiencies(fitted, model, device: str, engine: str, tp: int) -> tuple[RooflineModel | None, str]:
    """A fitted model's efficiencies for ``device`` where it has no group for the cell (its
    own, else those of the first device it has any for), and the basis sentence saying so."""
    if fitted is None:
        return None, "no fitted model: default efficiencies and host term (docs/models.md)"
    rl = fitted.roofline_for(device)
    if rl is not None:
        return rl, (
            f"{model}: efficiencies fitted for {device} ({rl.source}); "
            f"no measured runs for {device}/{engine}/TP-{tp}: default host term"
        )
    if fitted.rooflines:
        other = fitted.rooflines[0]
        return other, (
            f"{model}: efficiencies fitted on {other.device} applied to {device} "
            f"(same fractions of {device}'s datasheet peaks and bandwidth, same t_min); default host term"
        )
    return None, f"{model} has no group for {device}/{engine}/TP-{tp}: default efficiencies and host term"
