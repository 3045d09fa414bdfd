"""The attribution model as JSON (schema version, provenance; never pickle)."""

from __future__ import annotations

import math

from hostgap.errors import HostgapError
from hostgap.model.attribution.terms import TERMS, ClassModel, Model, Segment

MODEL_KIND = "hostgap.attribution_model"


def _class_json(cm: ClassModel) -> dict:
    return {
        "terms": [TERMS[j] for j in cm.terms],
        "n_train_steps": cm.n_train,
        "train_rel_err_p90": None if math.isnan(cm.train_rel_err_p90) else cm.train_rel_err_p90,
        "segments": [
            {"sum_p_max": None if math.isinf(s.sum_p_max) else s.sum_p_max, **dict(zip(TERMS, s.coef))}
            for s in cm.segments
        ],
        "notes": list(cm.notes),
    }


def _class_from_json(name: str, d: dict) -> ClassModel:
    segs = tuple(
        Segment(math.inf if s["sum_p_max"] is None else float(s["sum_p_max"]), tuple(float(s[t]) for t in TERMS))
        for s in d["segments"]
    )
    if not segs or any(min(s.coef) < 0 for s in segs):
        raise ValueError(f"class {name}: no segments or a negative coefficient")
    tp90 = d.get("train_rel_err_p90")
    return ClassModel(
        name,
        tuple(TERMS.index(t) for t in d["terms"]),
        segs,
        int(d.get("n_train_steps", 0)),
        float("nan") if tp90 is None else tp90,
        tuple(d.get("notes", ())),
    )


def to_json(model: Model) -> dict:
    """The model as a JSON-ready dict (``schema_version``, provenance, no pickle)."""
    from hostgap.version import SCHEMA_VERSION

    return {
        "schema_version": SCHEMA_VERSION,
        "kind": MODEL_KIND,
        "form": "T = beta + a1*sum_p + a2*sum_c + a3*sum_p2 + a4*n_requests + a5*sum_pc; "
        "two segments on sum_p per class; NNLS",
        "target": model.target,
        "loss": model.loss,
        "classes": {n: _class_json(cm) for n, cm in model.classes.items()},
        "decode_note": "decode: p = 1, so a4 holds the per-request constant a1 + a3 + a4",
        "baseline": {n: {"beta_ns": b, "a_ns_per_token": a} for n, (b, a) in model.baseline.items()},
        "components": {k: {n: _class_json(cm) for n, cm in v.items()} for k, v in model.components.items()},
        "host_fraction_train_median": model.host_fraction,
        "provenance": model.provenance,
        "notes": list(model.notes),
    }


def from_json(d: dict, source: str = "model") -> Model:
    """Inverse of :func:`to_json`; HostgapError on anything that is not such a model."""
    from hostgap.version import SCHEMA_VERSION

    if not isinstance(d, dict) or d.get("kind") != MODEL_KIND:
        raise HostgapError(source, f"not a hostgap attribution model (kind != {MODEL_KIND})")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise HostgapError(
            source,
            f"schema_version {d.get('schema_version')} is not {SCHEMA_VERSION}: refit the model with this hostgap",
        )
    try:
        return Model(
            target=d["target"],
            loss=d["loss"],
            classes={n: _class_from_json(n, c) for n, c in d["classes"].items()},
            baseline={n: (float(b["beta_ns"]), float(b["a_ns_per_token"])) for n, b in d["baseline"].items()},
            components={
                k: {n: _class_from_json(n, c) for n, c in v.items()} for k, v in d.get("components", {}).items()
            },
            host_fraction=dict(d.get("host_fraction_train_median", {})),
            provenance=dict(d.get("provenance", {})),
            notes=tuple(d.get("notes", ())),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise HostgapError(source, f"malformed attribution model: {e}") from None


def save_model(model: Model, path: str) -> None:
    """Write the model JSON via a temporary file and rename."""
    import json
    import os

    text = json.dumps(to_json(model), indent=2, allow_nan=False)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise HostgapError(path, f"cannot write: {e.strerror or e}") from None


def load_model(path: str) -> Model:
    """Read a model JSON written by :func:`save_model`."""
    import json

    try:
        with open(path) as f:
            d = json.load(f)
    except FileNotFoundError:
        raise HostgapError(path, "no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HostgapError(path, f"not JSON: {e}") from None
    return from_json(d, path)
