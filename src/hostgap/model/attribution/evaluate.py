"""Evaluation of an attribution model on held-out steps: R², relative error percentiles and
the improvement over the token-count baseline, per source and class."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hostgap.anatomy.verdict import classify
from hostgap.model.attribution.shares import predict, predict_baseline
from hostgap.model.attribution.terms import (
    HOST_DOMINATED_MIN,
    Model,
    _nanmedian,
    host_fraction,
    measured,
)
from hostgap.model.steptable.files import Steps


@dataclass(frozen=True)
class GroupMetrics:
    """Held-out accuracy of the model and the baseline on one group of steps."""

    source: str
    step_class: str
    n_steps: int
    r2: float | None
    rel_err: tuple[float, float, float]  # p50, p90, p99 of |T̂ − T| / T
    baseline_r2: float | None
    baseline_rel_err: tuple[float, float, float]
    improvement: tuple[float | None, float | None, float | None]  # baseline / model error
    host_fraction_median: float | None
    regime: str | None
    note: str = ""

    def to_dict(self) -> dict:
        q = ("p50", "p90", "p99")
        return {
            "source": self.source,
            "class": self.step_class,
            "n_steps": self.n_steps,
            "r2": self.r2,
            **{f"rel_err_{k}": v for k, v in zip(q, self.rel_err)},
            "baseline_r2": self.baseline_r2,
            **{f"baseline_rel_err_{k}": v for k, v in zip(q, self.baseline_rel_err)},
            **{f"improvement_{k}": v for k, v in zip(q, self.improvement)},
            "host_fraction_median": self.host_fraction_median,
            "regime": self.regime,
            "note": self.note,
        }


@dataclass(frozen=True)
class Metrics:
    groups: tuple[GroupMetrics, ...]
    n_steps: int
    n_excluded: int  # training steps left out of the evaluation
    note: str = ""

    def to_dict(self) -> dict:
        from hostgap.version import SCHEMA_VERSION

        return {
            "schema_version": SCHEMA_VERSION,
            "n_steps": self.n_steps,
            "n_excluded_training_steps": self.n_excluded,
            "note": self.note,
            "groups": [g.to_dict() for g in self.groups],
        }


def _r2(pred, y) -> float | None:
    if len(y) < 2:
        return None
    ss = float(((y - y.mean()) ** 2).sum())
    return None if ss == 0 else 1.0 - float(((pred - y) ** 2).sum()) / ss


def _pcts(rel) -> tuple[float, float, float]:
    p50, p90, p99 = (float(x) for x in np.percentile(rel, [50, 90, 99]))
    return p50, p90, p99


def _group(source, cls, pred, base, y, hf) -> GroupMetrics:
    rel, brel = _pcts(np.abs(pred - y) / y), _pcts(np.abs(base - y) / y)
    i50, i90, i99 = ((b / m if m > 0 else None) for b, m in zip(brel, rel))
    imp = (i50, i90, i99)
    hmed = _nanmedian(hf)
    note = ""
    if hmed is None:
        note = "host fraction unknown (no host_exposed_ns)"
    elif hmed >= HOST_DOMINATED_MIN:
        note = (
            f"host-dominated (median host fraction {hmed:.0%}): mostly host work, so "
            "memory-/compute-bound segments cannot show"
        )
    return GroupMetrics(source, cls, len(y), _r2(pred, y), rel, _r2(base, y), brel, imp, hmed, classify(hmed), note)


def evaluate(model: Model, steps: Steps) -> Metrics:
    """R², median/p90/p99 relative error and improvement over the baseline, per source and
    class (and over all sources when there are several)."""
    y = measured(steps, model.target)
    pred, base = predict(model, steps), predict_baseline(model, steps)
    hf, _ = host_fraction(steps)
    groups = []
    srcs = [(s, steps.source_idx == i) for i, s in enumerate(steps.sources)]
    if len(srcs) > 1:
        srcs.append(("all", np.ones(len(steps), bool)))
    for sname, sm in srcs:
        for cname, cm in (
            ("prefill", steps.is_prefill),
            ("decode", ~steps.is_prefill),
            ("all", np.ones(len(steps), bool)),
        ):
            m = sm & cm
            both = (sm & steps.is_prefill).any() and (sm & ~steps.is_prefill).any()
            if m.any() and (cname != "all" or both):
                groups.append(_group(sname, cname, pred[m], base[m], y[m], hf[m]))
    return Metrics(tuple(groups), len(steps), 0)
