"""What each ``hostgap attribute`` command does, as one call: fit with a held-out split and score
it (``fit``), score a model on the steps it did not train on (``eval``), one step's shares
(``explain``), synthetic steps written to a file (``synth``). Keyword arguments are named as
the commands' options; errors are :class:`~hostgap.errors.HostgapError` with the commands'
messages, naming the file a :class:`Steps` was read from (``Steps.origin``).

>>> from hostgap.model.synth import synth_steps
>>> steps = synth_steps(400, seed=1).steps
>>> fitted = fit_held_out(steps, test_fraction=0.25)
>>> fitted.n_train + fitted.n_held == len(steps)
True
>>> evaluate_held_out(fitted.model, steps).n_steps == fitted.n_held
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.attribution.evaluate import Metrics, evaluate
from hostgap.model.attribution.fit import fit
from hostgap.model.attribution.heldout import held_out, range_note, split_mask
from hostgap.model.attribution.shares import Shares, attribute
from hostgap.model.attribution.terms import CLASSES, Model
from hostgap.model.steptable.files import Steps, write_steps

SPLIT_RULE = "splitmix64(step content, seed) < test_fraction (file name and order ignored)"
"""How ``fit_held_out`` holds steps out, as its models' provenance states it."""


@dataclass(frozen=True)
class HeldOutFit:
    """A model fitted on ``steps`` less the held-out ones (``test``)."""

    model: Model
    steps: Steps  # every step of the fitted source(s), held-out ones included
    test: np.ndarray  # bool per step: held out

    @property
    def n_train(self) -> int:
        return int(len(self.steps) - self.test.sum())

    @property
    def n_held(self) -> int:
        return int(self.test.sum())

    def held_out_metrics(self) -> Metrics | None:
        """The model and its baseline scored on the held-out steps of the classes it fitted
        (None when there are none)."""
        held = self.steps.subset(self.test & fitted_class_mask(self.model, self.steps))
        return evaluate(self.model, held) if len(held) else None


def fit_held_out(
    steps: Steps,
    *,
    target: str = "wall",
    test_fraction: float = 0.25,
    seed: int = 0,
    classes: str = "both",
    no_pc: bool = False,
    loss: str = "relative",
    source: str | None = None,
) -> HeldOutFit:
    """Fit on ``steps`` (of ``source`` only, if given) less a held-out ``test_fraction`` of
    them, chosen by a hash of each step's content and ``seed`` (:func:`split_mask`).
    ``target``: ``"wall"`` or ``"gpu_active"``; ``classes``: ``"both"``, ``"prefill"`` or
    ``"decode"``; ``no_pc`` leaves out the Σp·c term."""
    steps = select_source(steps, source)
    test = split_mask(steps, test_fraction, seed)
    provenance = {
        "split": {"rule": SPLIT_RULE, "test_fraction": test_fraction, "seed": seed},
        "data_sha256_all": steps.data_sha256(),
        "steps_path": steps.origin or None,
        "fit_source": source,
    }
    model = fit(
        steps.subset(~test),
        target=f"{target}_ns",
        classes=CLASSES if classes == "both" else (classes,),
        use_pc=not no_pc,
        loss=loss,
        provenance=provenance,
    )
    return HeldOutFit(model, steps, test)


def evaluate_held_out(model: Model, steps: Steps, *, include_training: bool = False) -> Metrics:
    """``model`` and its baseline scored on the ``steps`` it did not train on (every step with
    ``include_training``, labelled in-sample), of the classes it fitted; the note says what was
    left out and where the model extrapolates."""
    keep = np.ones(len(steps), bool) if include_training else held_out(model, steps)
    if not keep.any():
        raise HostgapError(
            steps.origin,
            "every step here trained the model: nothing held out to score (refit with --test-fraction > 0)",
        )
    keep &= fitted_class_mask(model, steps)
    if not keep.any():
        raise HostgapError(steps.origin, "no steps of a class the model was fitted for")
    scored = steps.subset(keep)
    metrics = evaluate(model, scored)
    n_left = int(len(steps) - keep.sum())
    note = "" if keep.all() else f"{n_left} step(s) not scored: training steps of this model or classes it lacks"
    if include_training:
        note = "in-sample: training steps included (--include-training)"
    extrapolated = range_note(model, scored)
    if extrapolated:
        note = f"{note}; {extrapolated}" if note else extrapolated
    return Metrics(metrics.groups, metrics.n_steps, n_left, note)


@dataclass(frozen=True)
class Explanation:
    """One step's per-request shares: ``steps`` holds that step only."""

    steps: Steps
    step: int
    shares: Shares
    split: str
    rescaled: bool
    range_note: str | None  # where the model extrapolates to this step


def explain(
    model: Model, steps: Steps, step: int, *, source: str | None = None, rescale: bool = False, split: str = "fraction"
) -> Explanation:
    """The shares of step ``step`` (of ``source``, needed when several sources have that id):
    :func:`attribute` on that step alone."""
    one = select_step(steps, step, source=source)
    shares = attribute(model, one, rescale=rescale, split=split)
    return Explanation(one, step, shares, split, rescale, range_note(model, one))


def select_source(steps: Steps, source: str | None) -> Steps:
    """The steps of data source ``source`` (all of them for None)."""
    if source is None:
        return steps
    return steps.subset(steps.source_idx == _source_index(steps, source))


def select_step(steps: Steps, step: int, *, source: str | None = None) -> Steps:
    """The one step with id ``step`` (of ``source``, if given)."""
    m = steps.step == step
    if source is not None:
        m &= steps.source_idx == _source_index(steps, source)
    if not m.any():
        where = f"source {source!r} of {steps.origin}" if source is not None else steps.origin
        raise HostgapError("--step", f"step {step} not in {where}")
    if m.sum() > 1:
        raise HostgapError(
            "--step", f"step {step} exists in several sources; pick one with --source ({', '.join(steps.sources)})"
        )
    return steps.subset(m)


def _source_index(steps: Steps, source: str) -> int:
    if source not in steps.sources:
        raise HostgapError("--source", f"{source!r} not in {steps.origin} (sources: {', '.join(steps.sources)})")
    return steps.sources.index(source)


def fitted_class_mask(model: Model, steps: Steps) -> np.ndarray:
    """True for steps of a class ``model`` has a fit for."""
    ok = np.zeros(len(steps), bool)
    if "prefill" in model.classes:
        ok |= steps.is_prefill
    if "decode" in model.classes:
        ok |= ~steps.is_prefill
    return ok


def write_synthetic(
    output: str, *, n_steps: int = 600, seed: int = 0, noise: float = 0.01, context: str = "varied"
) -> list[str]:
    """Synthetic steps with known ground truth (:func:`hostgap.model.synth.synth_steps`) written
    to ``output`` (``.parquet`` or ``.csv``) in the harvest layout, with their requests table;
    returns the paths written."""
    from hostgap.model.synth import synth_steps

    if not (output.endswith(".parquet") or output.endswith(".csv")):
        raise HostgapError(output, "output must end in .parquet or .csv")
    return write_steps(synth_steps(n_steps, seed=seed, noise=noise, context=context).steps, output)
