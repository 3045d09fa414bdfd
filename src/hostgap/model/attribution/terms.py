"""The attribution model's terms and types, and the step features it is fitted on (the
model itself: :mod:`hostgap.model.attribution`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.steptable.files import Steps

TERMS = (
    "beta_ns",
    "a1_ns_per_token",
    "a2_ns_per_kv_token",
    "a3_ns_per_token2",
    "a4_ns_per_request",
    "a5_ns_per_token_kv_token",
)
"""Coefficient names (JSON keys), in feature order: 1, Σp, Σc, Σp², |B|, Σp·c."""
FEATURES = ("1", "Σp", "Σc", "Σp²", "|B|", "Σp·c")
CLASSES = ("prefill", "decode")
_CANDIDATES = {"prefill": (0, 1, 2, 3, 4, 5), "decode": (0, 4, 2)}
MIN_STEPS_PER_TERM = 3  # a class needs >= 3 steps per fitted term, and >= MIN_STEPS
MIN_STEPS = 12
_COARSE_BREAKS = 64  # breakpoint candidates per round of the coarse-to-fine search
HOST_DOMINATED_MIN = 0.5
"""Median host fraction from which evaluation calls a data source host-dominated: most of each
step is host work, so the device-side (roofline) segments are a minority of what is fitted and
cannot show. Stricter than the verdict's host-bound threshold (0.25), which is also reported."""


# ------------------------------------------------------------------ model types


@dataclass(frozen=True)
class Segment:
    """Coefficients (TERMS order, ns units) for steps with Σp <= ``sum_p_max``."""

    sum_p_max: float
    coef: tuple[float, ...]


@dataclass(frozen=True)
class ClassModel:
    """The piecewise model of one step class (``prefill`` or ``decode``)."""

    name: str
    terms: tuple[int, ...]  # indices into TERMS that were fitted (others fixed at 0)
    segments: tuple[Segment, ...]  # one or two, increasing sum_p_max, last is +inf
    n_train: int
    train_rel_err_p90: float
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Model:
    """A fitted attribution model; ``to_json``/``from_json`` round-trip it."""

    target: str  # "wall_ns" or "gpu_active_ns"
    loss: str  # "relative" or "absolute"
    classes: dict  # class name -> ClassModel
    baseline: dict  # class name -> (beta_ns, a_ns_per_token)
    components: dict = field(default_factory=dict)  # "device"/"host" -> {class -> ClassModel}
    host_fraction: dict = field(default_factory=dict)  # class -> training median host fraction
    provenance: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @cached_property
    def table(self) -> _Table:
        return _Table.build(self.classes)

    @cached_property
    def component_tables(self) -> dict:
        return {k: _Table.build(v) for k, v in self.components.items()}


@dataclass(frozen=True)
class _Table:
    """Dense lookup: ``coef[class, segment]`` (class 0 prefill, 1 decode), ``brk[class]``."""

    coef: np.ndarray  # (2, 2, 6)
    brk: np.ndarray  # (2,)
    present: np.ndarray  # (2,) bool

    @staticmethod
    def build(classes: dict) -> _Table:
        coef = np.full((2, 2, 6), np.nan)
        brk = np.full(2, np.inf)
        present = np.zeros(2, bool)
        for k, name in enumerate(CLASSES):
            cm = classes.get(name)
            if cm is None:
                continue
            present[k] = True
            segs = cm.segments
            coef[k, 0] = segs[0].coef
            coef[k, 1] = segs[-1].coef
            brk[k] = segs[0].sum_p_max if len(segs) > 1 else np.inf
        return _Table(coef, brk, present)

    @cached_property
    def fast(self) -> tuple:
        """Per class: (break, low-segment coefs, high-segment coefs) as Python floats."""
        return tuple(
            (float(self.brk[k]), tuple(map(float, self.coef[k, 0])), tuple(map(float, self.coef[k, 1])))
            for k in range(2)
        )

    @cached_property
    def cols(self) -> np.ndarray:
        """(6, 4) coefficients by (class, segment) combo: gathering ``cols[:, combo]`` gives
        one contiguous row per term, which keeps per-request arithmetic streaming."""
        return np.ascontiguousarray(self.coef.reshape(4, 6).T)

    def combo(self, is_prefill: np.ndarray, sum_p: np.ndarray) -> np.ndarray:
        cls = np.where(is_prefill, 0, 1)
        return cls * 2 + (sum_p > self.brk[cls])

    def rows(self, is_prefill: np.ndarray, sum_p: np.ndarray) -> np.ndarray:
        cls = np.where(is_prefill, 0, 1)
        seg = (sum_p > self.brk[cls]).astype(np.int64)
        return self.coef[cls, seg]


# ------------------------------------------------------------------ features


def step_features(steps: Steps) -> np.ndarray:
    """(n, 6) matrix of 1, Σp, Σc, Σp², |B|, Σp·c (Σp·c NaN where the input lacks it)."""
    return np.column_stack(
        [np.ones(len(steps)), steps.sum_p, steps.sum_c, steps.sum_pp, steps.n_requests, steps.sum_pc]
    )


def check_finite(steps: Steps) -> None:
    """Refuse (HostgapError naming the column and the first bad step) any infinite value, and a
    NaN where a number is required (composition, wall time, per-request q and s); an unmeasured
    time may be NaN, never ±inf. A single inf would otherwise collapse the fit or leak into
    the output as invalid JSON."""
    checks = [
        ("wall_ns", steps.wall_ns, False),
        ("gpu_active_ns", steps.gpu_active_ns, True),
        ("host_exposed_ns", steps.host_exposed_ns, True),
        ("host_wait_ns", steps.host_wait_ns, True),
        ("requests", steps.n_requests, False),
        ("Σq", steps.sum_p, False),
        ("Σs", steps.sum_c, False),
        ("Σq²", steps.sum_pp, False),
        ("Σq·s", steps.sum_pc, True),
    ]
    for name, v, nan_ok in checks:
        bad = np.isinf(v) if nan_ok else ~np.isfinite(v)
        if bad.any():
            i = int(np.argmax(bad))
            raise HostgapError(
                steps.origin,
                f"{name} is {v[i]} at step {int(steps.step[i])} of "
                f"{steps.sources[steps.source_idx[i]]}: every value must be finite",
            )
    if steps.requests is not None:
        r = steps.requests
        for name, v in (("q", r.p), ("s", r.c)):
            bad = ~np.isfinite(v)
            if bad.any():
                k = int(np.argmax(bad))
                si = int(r.step_index[k])
                raise HostgapError(
                    steps.origin,
                    f"request {r.request[k]!s} has {name} = {v[k]} at step "
                    f"{int(steps.step[si])}: every value must be finite",
                )


def measured(steps: Steps, target: str) -> np.ndarray:
    """The measured step time the model is fitted to (``wall_ns`` or ``gpu_active_ns``)."""
    check_finite(steps)
    y = steps.wall_ns if target == "wall_ns" else steps.gpu_active_ns
    if target == "gpu_active_ns" and (np.isnan(y).any() or (y <= 0).any()):
        raise HostgapError(
            steps.origin,
            "--target gpu_active needs a positive gpu_active_ns "
            "for every step (this data has none or zeros: CPU runs have no GPU)",
        )
    return y


def host_fraction(steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    """Measured host fraction per step and whether it rests on host_wait (queued steps)."""
    wall = steps.wall_ns
    use_wait = steps.queued & ~np.isnan(steps.host_wait_ns)
    host = np.where(use_wait, steps.host_wait_ns, steps.host_exposed_ns)
    return np.clip(host / wall, 0.0, 1.0), use_wait


def _nanmedian(v: np.ndarray) -> float | None:
    v = v[~np.isnan(v)]
    return float(np.median(v)) if len(v) else None
