"""Prediction and per-request shares: a step's predicted time, each request's share of it
(adding up to the step), and the split of each share into host and device parts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.attribution.terms import (
    CLASSES,
    Model,
    _Table,
    check_finite,
    host_fraction,
    measured,
    step_features,
)
from hostgap.model.steptable.files import Steps


def predict(model: Model, steps: Steps) -> np.ndarray:
    """Predicted step time (ns) for every step."""
    return _predict(model.table, steps)


def _predict(table: _Table, steps: Steps) -> np.ndarray:
    C = _checked_rows(table, steps)
    X = step_features(steps)
    return (X[:, :5] * C[:, :5]).sum(axis=1) + _pc_term(X[:, 5], C[:, 5], steps.origin)


def _check_classes(table: _Table, steps: Steps) -> None:
    is_pre = steps.is_prefill
    missing = ~table.present[np.where(is_pre, 0, 1)]
    if missing.any():
        cls = "prefill" if is_pre[np.argmax(missing)] else "decode"
        raise HostgapError(
            steps.origin,
            f"{int(missing.sum())} {cls} step(s), but the model has no {cls} fit (its training data had none)",
        )


def _checked_rows(table: _Table, steps: Steps) -> np.ndarray:
    _check_classes(table, steps)
    return table.rows(steps.is_prefill, steps.sum_p)


def _request_cols(table: _Table, steps: Steps, si: np.ndarray) -> np.ndarray:
    """(6, n_requests) coefficients of each request's step class and segment."""
    _check_classes(table, steps)
    return table.cols[:, table.combo(steps.is_prefill, steps.sum_p)[si]]


def _pc_term(sum_pc: np.ndarray, a5: np.ndarray, origin: str) -> np.ndarray:
    need = (a5 > 0) & np.isnan(sum_pc)
    if need.any():
        raise HostgapError(
            origin, "the model uses Σq·s (a5) but these steps lack it (ctx_qs/gen_qs or per-request rows)"
        )
    return np.where(a5 > 0, a5 * np.nan_to_num(sum_pc), 0.0)


def predict_baseline(model: Model, steps: Steps) -> np.ndarray:
    """Token-count baseline: T = β + a·Σp, per class."""
    out = np.full(len(steps), np.nan)
    for name, (b, a) in model.baseline.items():
        m = steps.is_prefill if name == "prefill" else ~steps.is_prefill
        out[m] = b + a * steps.sum_p[m]
    return out


@dataclass(frozen=True)
class Shares:
    """One row per request (``step_index`` into the steps), plus per-step totals."""

    step_index: np.ndarray
    request: np.ndarray
    p: np.ndarray
    c: np.ndarray
    prefill: np.ndarray
    share_ns: np.ndarray  # sums to predicted_ns (or measured_ns with rescale) per step
    device_ns: np.ndarray
    host_ns: np.ndarray
    alone_ns: np.ndarray  # predicted time of a step holding this request only (NaN: no class)
    predicted_ns: np.ndarray  # per step
    measured_ns: np.ndarray  # per step
    host_fraction: np.ndarray  # per step, the fraction used by split="fraction"
    split: str
    rescaled: bool


def request_terms(cols: np.ndarray, p, c, n_requests) -> np.ndarray:
    """s_i = a1·p + a2·c + a3·p² + a4 + a5·p·c + β/|B|; ``cols`` is (6, n): one row per term."""
    b, a1, a2, a3, a4, a5 = cols
    return (a1 + a3 * p + a5 * c) * p + a2 * c + a4 + b / n_requests


def attribute(model: Model, steps: Steps, *, rescale: bool = False, split: str = "fraction") -> Shares:
    """Shares of every request in every step (vectorised over all requests).

    ``rescale`` scales each step's shares to its measured time instead of T̂. ``split``:
    ``"fraction"`` applies the step's measured host fraction (host_exposed/wall; host_wait/wall
    for queued steps) to every share; ``"model"`` splits each share in the ratio of the
    request's device-model and host-model shares (needs component models, see docs).
    """
    check_finite(steps)
    if steps.requests is None:
        raise HostgapError(
            steps.origin,
            "per-request shares need per-request q and s (a "
            "requests table); these steps only carry per-step sums, which are "
            "enough to fit and evaluate but not to attribute",
        )
    r = steps.requests
    si = r.step_index
    share = request_terms(_request_cols(model.table, steps, si), r.p, r.c, steps.n_requests[si])
    pred = np.bincount(si, weights=share, minlength=len(steps))
    meas = measured(steps, model.target)
    if rescale:
        share = share * (meas / pred)[si]
    hf, _ = host_fraction(steps)
    hf = _fill_fraction(model, steps, hf)
    if model.target != "wall_ns":
        host = np.zeros_like(share)
    elif split == "model":
        host = share * _model_host_ratio(model, steps, si, r)
    elif split == "fraction":
        host = share * hf[si]
    else:
        raise HostgapError("--split", f"unknown split {split!r}: use fraction or model")
    return Shares(
        si,
        r.request,
        r.p,
        r.c,
        r.prefill,
        share,
        share - host,
        host,
        alone(model, r.p, r.c, r.prefill),
        pred,
        meas,
        hf,
        split,
        rescale,
    )


def _fill_fraction(model: Model, steps: Steps, hf: np.ndarray) -> np.ndarray:
    """Steps without a measured host fraction use the class's training median; where that is
    unknown too, the fraction stays NaN (unknown: the host part is not known, not zero)."""
    miss = np.isnan(hf)
    if miss.any():
        fill = np.array(
            [np.nan if model.host_fraction.get(n) is None else model.host_fraction[n] for n in CLASSES], dtype=float
        )
        hf = np.where(miss, fill[np.where(steps.is_prefill, 0, 1)], hf)
    return hf


def _model_host_ratio(model: Model, steps: Steps, si, r) -> np.ndarray:
    tabs = model.component_tables
    if not tabs:
        raise HostgapError(
            "--split",
            "model split needs device/host component models; this model has none (training data lacked gpu_active_ns)",
        )
    n = steps.n_requests[si]
    d = request_terms(_request_cols(tabs["device"], steps, si), r.p, r.c, n)
    h = request_terms(_request_cols(tabs["host"], steps, si), r.p, r.c, n)
    tot = d + h
    return np.where(tot > 0, h / np.where(tot > 0, tot, 1.0), 0.0)


def alone(model: Model, p, c, prefill) -> np.ndarray:
    """Predicted time of a step holding only this request (NaN where the class is unfitted)."""
    t = model.table
    is_pre = np.asarray(prefill) | (np.asarray(p) > 1)
    return request_terms(t.cols[:, t.combo(is_pre, np.asarray(p, dtype=float))], p, c, 1.0)


class StepShares(NamedTuple):
    """Shares of one step's requests (ns). A NamedTuple: immutable and cheap to build in a
    scheduler loop (a frozen dataclass costs ~1 µs more per step)."""

    share_ns: np.ndarray
    device_ns: np.ndarray
    host_ns: np.ndarray
    predicted_ns: float


def attribute_step(
    model: Model, p: np.ndarray, c: np.ndarray, *, prefill: bool | None = None, host_fraction: float | None = None
) -> StepShares:
    """Per-step call for a scheduler loop: shares of one batch from its (p, c) arrays.

    ``prefill`` says whether the step is prefill-containing (default: any p > 1).
    ``host_fraction`` defaults to the class's training median.
    """
    t = model.table
    k = 0 if (prefill if prefill is not None else bool((p > 1).any())) else 1
    if not t.present[k]:
        raise HostgapError("step", f"the model has no {CLASSES[k]} fit")
    brk, lo, hi = t.fast[k]
    b, a1, a2, a3, a4, a5 = hi if (brk < math.inf and p.sum() > brk) else lo
    # Python floats and only the non-zero terms: a decode step costs two array operations.
    const = a4 + b / len(p)
    share = a2 * c + const if a2 else np.full(len(p), const)
    if a1 or a3 or a5:
        share += (a1 + a3 * p + a5 * c) * p if (a3 or a5) else a1 * p
    f = host_fraction if host_fraction is not None else model.host_fraction.get(CLASSES[k])
    host = share * (f or 0.0)
    return StepShares(share, share - host, host, float(share.sum()))
