"""Which steps a model trained on (content hashes, so a step is the same step whatever file it
is read from), the seeded held-out split, and the training range a model extrapolates beyond."""

from __future__ import annotations

import math

import numpy as np

from hostgap.model.attribution.terms import CLASSES, Model
from hostgap.model.steptable.files import Steps

_ROW_FIELDS = (
    "step",
    "wall_ns",
    "gpu_active_ns",
    "host_exposed_ns",
    "host_wait_ns",
    "queued",
    "n_requests",
    "n_prefill",
    "sum_p",
    "sum_c",
    "sum_pp",
    "sum_pc",
)
"""What a step *is* for the held-out split: its id and measured content, never its file name."""
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (a bijection of uint64 with full avalanche)."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def row_hashes(steps: Steps, seed: int = 0) -> np.ndarray:
    """A 64-bit hash of every step's content (:data:`_ROW_FIELDS`, NaN canonical): the same
    step hashes alike whatever file, format, source name or row order it comes in."""
    h = np.full(len(steps), np.uint64(seed) & _M64, dtype=np.uint64) ^ np.uint64(0x9E3779B97F4A7C15)
    for f in _ROW_FIELDS:
        v = np.asarray(getattr(steps, f), dtype=np.float64)
        v = np.where(np.isnan(v), np.nan, v + 0.0)  # one NaN bit pattern, -0.0 → 0.0
        with np.errstate(over="ignore"):
            h = _mix(h ^ v.view(np.uint64)) + np.uint64(0x9E3779B97F4A7C15)
    return _mix(h)


def split_mask(steps: Steps, test_fraction: float, seed: int = 0) -> np.ndarray:
    """True for held-out steps: a deterministic hash of (step content, seed), so the split
    does not depend on the file's name, format or row order."""
    if test_fraction <= 0:
        return np.zeros(len(steps), bool)
    return (row_hashes(steps, seed) / np.float64(2**64)) < test_fraction


def held_out(model: Model, steps: Steps) -> np.ndarray:
    """Steps ``model`` did not train on, by content: a step whose content hash is among the
    model's training rows (``provenance["train_rows"]``) trained it, whatever file it is read
    from. Models saved before that field fall back to the file-content rule."""
    trained = _train_rows(model)
    if trained is not None:
        return ~np.isin(row_hashes(steps), trained)
    split = model.provenance.get("split") or {}
    keep = np.ones(len(steps), bool)
    src = model.provenance.get("fit_source")
    if src is None:
        part = keep.copy()
    elif src in steps.sources:
        part = steps.source_idx == steps.sources.index(src)
    else:
        return keep
    sub = steps.subset(part) if src is not None else steps
    if model.provenance.get("data_sha256_all") != sub.data_sha256():
        return keep
    keep[part] = split_mask(sub, float(split.get("test_fraction", 0)), int(split.get("seed", 0)))
    return keep


def _encode_rows(h: np.ndarray) -> str:
    import base64

    return base64.b64encode(np.unique(h).astype("<u8").tobytes()).decode("ascii")


def _train_rows(model: Model) -> np.ndarray | None:
    import base64
    import binascii

    text = model.provenance.get("train_rows")
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return np.frombuffer(raw[: len(raw) // 8 * 8], dtype="<u8")


# ------------------------------------------------------------------ training range

_RANGE_FIELDS = (("batch size", "n_requests"), ("Σq", "sum_p"), ("Σs", "sum_c"))


def _train_range(steps: Steps) -> dict:
    """Per class, [min, max] of batch size, Σq and Σs over the training steps."""
    out = {}
    for name in CLASSES:
        m = steps.is_prefill if name == "prefill" else ~steps.is_prefill
        if m.any():
            out[name] = {
                label: [float(getattr(steps, f)[m].min()), float(getattr(steps, f)[m].max())]
                for label, f in _RANGE_FIELDS
            }
    return out


def range_note(model: Model, steps: Steps) -> str | None:
    """A note when steps lie outside the training range (batch size, Σq, Σs of their class):
    the model then extrapolates. None when every step is inside, or the model has no range."""
    rng = model.provenance.get("train_range")
    if not isinstance(rng, dict) or not len(steps):
        return None
    outside = np.zeros(len(steps), bool)
    parts = []
    for name in CLASSES:
        m = steps.is_prefill if name == "prefill" else ~steps.is_prefill
        r = rng.get(name)
        if not m.any() or not isinstance(r, dict):
            continue
        for label, f in _RANGE_FIELDS:
            lo, hi = r.get(label, [-math.inf, math.inf])
            v = getattr(steps, f)
            bad = m & ((v < lo) | (v > hi))
            if bad.any():
                outside |= bad
                parts.append(
                    f"{name} {label} {_num(v[bad].min())}..{_num(v[bad].max())} vs trained {_num(lo)}..{_num(hi)}"
                )
    if not outside.any():
        return None
    return (
        f"{int(outside.sum())} of {len(steps)} step(s) outside the training range ("
        + "; ".join(parts)
        + "): the model extrapolates there"
    )


def _num(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.3g}"
