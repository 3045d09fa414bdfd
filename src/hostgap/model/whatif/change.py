"""What a what-if returns (:class:`WhatIf`: the baseline and the changed cell's predicted steps,
the assumptions, tokens per step) and how its parameters are read (:func:`num`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hostgap.errors import HostgapError
from hostgap.model.stepmodel import StepPrediction


@dataclass(frozen=True)
class WhatIf:
    name: str
    assumptions: tuple
    baseline: StepPrediction
    scenario: StepPrediction
    tokens_per_step: float = 1.0  # tokens per sequence the scenario's step emits
    baseline_tokens: float = 1.0
    extra: dict = field(default_factory=dict)
    scenario_extra: dict = field(default_factory=dict)  # keys added to the scenario's JSON

    @property
    def step_change(self) -> float:
        """Relative change of the step (cycle) time: scenario / baseline - 1."""
        return self.scenario.total_ns / self.baseline.total_ns - 1

    @property
    def per_token_speedup(self) -> float:
        return (self.baseline.total_ns / self.baseline_tokens) / (self.scenario.total_ns / self.tokens_per_step)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "assumptions": list(self.assumptions),
            "baseline": self.baseline.to_dict(),
            "scenario": {**self.scenario.to_dict(), **self.scenario_extra},
            "tokens_per_step": self.tokens_per_step,
            "step_change": self.step_change,
            "per_token_speedup": self.per_token_speedup,
            **self.extra,
        }


def _float(kw: dict, key: str, default: float | None, spec: str, lo: float, hi: float) -> float:
    if key not in kw:
        if default is None:
            raise HostgapError("--what-if", f"{spec}: needs {key}=...")
        return default
    try:
        v = float(kw[key])
    except ValueError:
        raise HostgapError("--what-if", f"{spec}: {key} must be a number, got {kw[key]!r}") from None
    if not lo <= v <= hi:
        raise HostgapError("--what-if", f"{spec}: {key} must be in [{lo}, {hi}], got {v}")
    return v


num = _float
"""Public name of the what-ifs' number parser (the what-if modules beside this one use it)."""
