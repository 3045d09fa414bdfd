"""Per-request attribution of a co-batched step (LLMVisor form, METHOD.md §8), host term included.

Step model, fitted separately for prefill-containing and decode-only steps, each in two
segments split at a breakpoint on Σp found by search (LLMVisor, arXiv 2608.08382)::

    T(B) = β + a1·Σp + a2·Σc + a3·Σp² + a4·|B| + a5·Σp·c

with p = tokens processed this step, c = KV tokens read (s), |B| = requests; a5 is hostgap's
addition for chunked prefill. Coefficients are non-negative (NNLS), so every share is >= 0::

    s_i = a1·p_i + a2·c_i + a3·p_i² + a4 + a5·p_i·c_i + β/|B|       Σ_i s_i = T̂(B)

In decode-only steps p_i = 1, so a1, a3 and a4 are one per-request constant: the decode model
fits (β, a4, a2) and stores that constant as a4.

>>> from hostgap.model.synth import synth_steps
>>> from hostgap.model.attribution import fit, attribute, evaluate
>>> data = synth_steps(600, seed=0).steps
>>> model = fit(data)
>>> shares = attribute(model, data)      # one row per request, adds up per step

The model lives in one module per stage: :mod:`~hostgap.model.attribution.terms` (terms, types,
step features), :mod:`~hostgap.model.attribution.fit` (fitting),
:mod:`~hostgap.model.attribution.shares` (prediction, per-request shares and their host / device
split), :mod:`~hostgap.model.attribution.heldout` (held-out split, training range),
:mod:`~hostgap.model.attribution.evaluate` (validation),
:mod:`~hostgap.model.attribution.json_io` (JSON) and :mod:`~hostgap.model.attribution.workflow`
(what each ``hostgap attribute`` command does, as one call: :func:`fit_held_out`,
:func:`evaluate_held_out`, :func:`explain`, :func:`write_synthetic`); every name is importable
from here, and so is :func:`~hostgap.model.steptable.files.load_steps`, which reads STEPS.
"""

from __future__ import annotations

from hostgap.model.attribution.evaluate import (
    GroupMetrics,
    Metrics,
    evaluate,
)
from hostgap.model.attribution.fit import (
    _nnls_fit,
    _SplitSearch,
    fit,
    fit_class,
)
from hostgap.model.attribution.heldout import (
    _ROW_FIELDS,
    held_out,
    range_note,
    row_hashes,
    split_mask,
)
from hostgap.model.attribution.joule_shares import energy_shares, explain_energy
from hostgap.model.attribution.json_io import (
    MODEL_KIND,
    from_json,
    load_model,
    save_model,
    to_json,
)
from hostgap.model.attribution.shares import (
    Shares,
    StepShares,
    alone,
    attribute,
    attribute_step,
    predict,
    predict_baseline,
    request_terms,
)
from hostgap.model.attribution.terms import (
    CLASSES,
    FEATURES,
    HOST_DOMINATED_MIN,
    MIN_STEPS,
    MIN_STEPS_PER_TERM,
    TERMS,
    ClassModel,
    Model,
    Segment,
    check_finite,
    host_fraction,
    measured,
    step_features,
)
from hostgap.model.attribution.workflow import (
    Explanation,
    HeldOutFit,
    evaluate_held_out,
    explain,
    fit_held_out,
    fitted_class_mask,
    select_source,
    select_step,
    write_synthetic,
)
from hostgap.model.steptable.files import load_steps

__all__ = [
    "CLASSES",
    "ClassModel",
    "Explanation",
    "FEATURES",
    "GroupMetrics",
    "HOST_DOMINATED_MIN",
    "HeldOutFit",
    "MIN_STEPS",
    "MIN_STEPS_PER_TERM",
    "MODEL_KIND",
    "Metrics",
    "Model",
    "Segment",
    "Shares",
    "StepShares",
    "TERMS",
    "_ROW_FIELDS",
    "_SplitSearch",
    "_nnls_fit",
    "alone",
    "attribute",
    "attribute_step",
    "check_finite",
    "evaluate",
    "energy_shares",
    "evaluate_held_out",
    "explain",
    "explain_energy",
    "fit",
    "fit_class",
    "fit_held_out",
    "fitted_class_mask",
    "from_json",
    "held_out",
    "host_fraction",
    "load_model",
    "load_steps",
    "measured",
    "predict",
    "predict_baseline",
    "range_note",
    "request_terms",
    "row_hashes",
    "save_model",
    "select_source",
    "select_step",
    "split_mask",
    "step_features",
    "to_json",
    "write_synthetic",
]
