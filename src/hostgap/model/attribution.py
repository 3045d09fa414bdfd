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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np
from scipy.optimize import nnls

from hostgap.anatomy.verdict import classify
from hostgap.errors import HostgapError
from hostgap.model.steps_table import Steps

TERMS = ("beta_ns", "a1_ns_per_token", "a2_ns_per_kv_token", "a3_ns_per_token2",
         "a4_ns_per_request", "a5_ns_per_token_kv_token")
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
    def table(self) -> "_Table":
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
    def build(classes: dict) -> "_Table":
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
        return tuple((float(self.brk[k]), tuple(map(float, self.coef[k, 0])),
                      tuple(map(float, self.coef[k, 1]))) for k in range(2))

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
    return np.column_stack([np.ones(len(steps)), steps.sum_p, steps.sum_c, steps.sum_pp,
                            steps.n_requests, steps.sum_pc])


def check_finite(steps: Steps) -> None:
    """Refuse (HostgapError naming the column and the first bad step) any infinite value, and a
    NaN where a number is required (composition, wall time, per-request q and s); an unmeasured
    time may be NaN, never ±inf. A single inf would otherwise collapse the fit or leak into
    the output as invalid JSON."""
    checks = [("wall_ns", steps.wall_ns, False), ("gpu_active_ns", steps.gpu_active_ns, True),
              ("host_exposed_ns", steps.host_exposed_ns, True), ("host_wait_ns", steps.host_wait_ns, True),
              ("requests", steps.n_requests, False), ("Σq", steps.sum_p, False), ("Σs", steps.sum_c, False),
              ("Σq²", steps.sum_pp, False), ("Σq·s", steps.sum_pc, True)]
    for name, v, nan_ok in checks:
        bad = np.isinf(v) if nan_ok else ~np.isfinite(v)
        if bad.any():
            i = int(np.argmax(bad))
            raise HostgapError(steps.origin, f"{name} is {v[i]} at step {int(steps.step[i])} of "
                               f"{steps.sources[steps.source_idx[i]]}: every value must be finite")
    if steps.requests is not None:
        r = steps.requests
        for name, v in (("q", r.p), ("s", r.c)):
            bad = ~np.isfinite(v)
            if bad.any():
                k = int(np.argmax(bad))
                si = int(r.step_index[k])
                raise HostgapError(steps.origin, f"request {r.request[k]!s} has {name} = {v[k]} at step "
                                   f"{int(steps.step[si])}: every value must be finite")


def measured(steps: Steps, target: str) -> np.ndarray:
    """The measured step time the model is fitted to (``wall_ns`` or ``gpu_active_ns``)."""
    check_finite(steps)
    y = steps.wall_ns if target == "wall_ns" else steps.gpu_active_ns
    if target == "gpu_active_ns" and (np.isnan(y).any() or (y <= 0).any()):
        raise HostgapError(steps.origin, "--target gpu_active needs a positive gpu_active_ns "
                           "for every step (this data has none or zeros: CPU runs have no GPU)")
    return y


def host_fraction(steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    """Measured host fraction per step and whether it rests on host_wait (queued steps)."""
    wall = steps.wall_ns
    use_wait = steps.queued & ~np.isnan(steps.host_wait_ns)
    host = np.where(use_wait, steps.host_wait_ns, steps.host_exposed_ns)
    return np.clip(host / wall, 0.0, 1.0), use_wait


# ------------------------------------------------------------------ fitting

def fit(steps: Steps, *, target: str = "wall_ns", classes=CLASSES, use_pc: bool = True,
        loss: str = "relative", provenance: dict | None = None) -> Model:
    """Fit the piecewise NNLS model, the token-count baseline and (when the data has
    gpu_active_ns and host_exposed_ns) device and host component models.

    ``loss="relative"`` minimises Σ((T̂ − T)/T)², matching the relative-error metrics and the
    roughly multiplicative noise of step timings; ``"absolute"`` minimises Σ(T̂ − T)².
    Refuses (HostgapError) on too few steps, one batch size only, or no steps at all.
    """
    if target not in ("wall_ns", "gpu_active_ns"):
        raise HostgapError("target", f"{target!r}: use wall_ns or gpu_active_ns")
    if loss not in ("relative", "absolute"):
        raise HostgapError("loss", f"{loss!r}: use relative or absolute")
    y = measured(steps, target)
    X = step_features(steps)
    is_pre = steps.is_prefill
    fitted, baseline, notes = {}, {}, []
    for name in classes:
        mask = is_pre if name == "prefill" else ~is_pre
        if not mask.any():
            notes.append(f"no {name} steps in the training data: {name} class not fitted")
            continue
        Xc, yc = X[mask], y[mask]
        wden = yc if loss == "relative" else np.full(len(yc), np.median(yc))
        other = "decode" if name == "prefill" else "prefill"
        hint = (f"fit the other class only (--classes {other})"
                if (~mask).any() and other in classes else "")
        fitted[name] = fit_class(name, Xc, yc, wden, use_pc=use_pc, origin=steps.origin,
                                 hint=hint)
        baseline[name] = _fit_baseline(Xc, yc, wden)
    if not fitted:
        raise HostgapError(steps.origin, "no steps of the requested classes to fit")
    hf, _ = host_fraction(steps)
    hfrac = {n: _nanmedian(hf[is_pre if n == "prefill" else ~is_pre]) for n in fitted}
    comps, cnotes = _fit_components(steps, X, fitted, use_pc) if target == "wall_ns" else ({}, [])
    prov = dict(provenance or {})
    prov.update(_provenance(steps))
    prov["train_rows"] = _encode_rows(row_hashes(steps))
    prov["train_range"] = _train_range(steps)
    return Model(target=target, loss=loss, classes=fitted, baseline=baseline, components=comps,
                 host_fraction=hfrac, provenance=prov, notes=tuple(notes + cnotes))


def fit_class(name: str, X: np.ndarray, y: np.ndarray, wden: np.ndarray, *,
              use_pc: bool = True, origin: str = "STEPS", hint: str = "") -> ClassModel:
    """Fit one class: refuse degenerate data, merge unidentifiable terms, search the break."""
    cand = [j for j in _CANDIDATES[name] if j != 5 or (use_pc and not np.isnan(X[:, 5]).any())]
    need = max(MIN_STEPS, MIN_STEPS_PER_TERM * len(cand))
    if len(y) < need:
        raise HostgapError(origin, f"{len(y)} {name} step(s) are too few to fit the {name} "
                           f"model (need >= {need}); collect more steps"
                           + (f", or {hint}" if hint else ""))
    batches = np.unique(X[:, 4])
    if len(batches) < 2:
        raise HostgapError(origin, f"every {name} step has the same batch size "
                           f"(|B| = {int(batches[0])}): the per-request cost cannot be told from "
                           "the per-step constant β; include steps with other batch sizes")
    notes = [] if 5 in cand or name == "decode" else ["Σp·c not in the data: a5 not fitted"]
    kept, merged = _identifiable(X, cand)
    notes += merged
    segs, snotes = _fit_segments(X, y, wden, kept)
    pred = _predict_rows(X, segs)
    rel = np.abs(pred - y) / y
    return ClassModel(name, tuple(kept), segs, len(y), float(np.percentile(rel, 90)),
                      tuple(notes + snotes))


def _identifiable(X: np.ndarray, cand: list[int]) -> tuple[list[int], list[str]]:
    """Keep candidate columns in order while each adds rank; report the rest as merged."""
    Xn = np.nan_to_num(X[:, cand])
    norms = np.linalg.norm(Xn, axis=0)
    kept, notes, cols = [], [], []
    for j, col, nrm in zip(cand, Xn.T, norms):
        if nrm == 0:
            notes.append(f"{TERMS[j]}: {FEATURES[j]} is zero in every step; not fitted")
            continue
        trial = np.column_stack(cols + [col / nrm])
        if np.linalg.matrix_rank(trial, tol=1e-8 * math.sqrt(len(X))) > len(cols):
            kept.append(j)
            cols.append(col / nrm)
        else:
            notes.append(f"{TERMS[j]}: {FEATURES[j]} is a linear combination of the other "
                         "features in this training set (e.g. s = q when nothing is cached); "
                         "fixed at 0, its cost is carried by the other terms")
    return kept, notes


def _nnls_fit(X: np.ndarray, y: np.ndarray, wden: np.ndarray, kept: list[int]):
    A = X[:, kept] / wden[:, None]
    b = y / wden
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    x, rnorm = nnls(A / norms, b, maxiter=50 * A.shape[1])
    coef = np.zeros(6)
    coef[kept] = x / norms
    return coef, float(rnorm ** 2)


def _full_rank(X: np.ndarray, kept: list[int]) -> bool:
    A = X[:, kept]
    A = A / np.maximum(np.linalg.norm(A, axis=0), 1e-300)
    return np.linalg.matrix_rank(A, tol=1e-8 * math.sqrt(len(A))) == len(kept)


class _SplitSearch:
    """SSE of both segments for any split of rows sorted by Σp, in O(k³) per candidate.

    Prefix (and suffix) sums of the per-row Gram matrices A_iA_iᵀ, A_i·b_i and b_i² give each
    segment's normal equations directly; NNLS then runs on the k×k Cholesky factor
    (‖Ax − b‖² = ‖Lᵀx − L⁻¹h‖² + b·b − ‖L⁻¹h‖²), so the search touches the rows once. The
    chosen split is refitted on the rows themselves.
    """

    def __init__(self, A: np.ndarray, b: np.ndarray):
        outer = A[:, :, None] * A[:, None, :]
        z = np.zeros((1,) + outer.shape[1:])
        self.G = np.concatenate([z, np.cumsum(outer, axis=0)])  # rows [0, m)
        self.Gs = np.concatenate([np.cumsum(outer[::-1], axis=0)[::-1], z])  # rows [m, n)
        ab = A * b[:, None]
        zk = np.zeros((1, A.shape[1]))
        self.h = np.concatenate([zk, np.cumsum(ab, axis=0)])
        self.hs = np.concatenate([np.cumsum(ab[::-1], axis=0)[::-1], zk])
        bb = b * b
        self.bb = np.concatenate([[0.0], np.cumsum(bb)])
        self.bbs = np.concatenate([np.cumsum(bb[::-1])[::-1], [0.0]])

    def sse(self, m: int) -> float | None:
        """Total SSE of the fits on rows [0, m) and [m, n); None if either is rank-deficient."""
        lo = _gram_nnls(self.G[m], self.h[m], self.bb[m])
        hi = _gram_nnls(self.Gs[m], self.hs[m], self.bbs[m])
        return None if lo is None or hi is None else lo + hi


def _gram_nnls(G: np.ndarray, h: np.ndarray, bb: float) -> float | None:
    d = np.sqrt(np.diag(G))
    if (d == 0).any():
        return None
    Gn = G / np.outer(d, d)
    ev = np.linalg.eigvalsh(Gn)
    if ev[0] <= 1e-12 * ev[-1]:
        return None
    L = np.linalg.cholesky(Gn)
    z = np.linalg.solve(L, h / d)
    _, rnorm = nnls(L.T, z)
    return max(rnorm ** 2 + bb - float(z @ z), 0.0)


def _fit_segments(X, y, wden, kept) -> tuple[tuple[Segment, ...], list[str]]:
    """One segment or two split on Σp; two only where BIC prefers the split."""
    n, k = len(y), len(kept)
    coef1, sse1 = _nnls_fit(X, y, wden, kept)
    single = (Segment(math.inf, tuple(coef1)),)
    seg_min = max(MIN_STEPS_PER_TERM * k, 8)
    order = np.argsort(X[:, 1], kind="stable")
    sp = X[order, 1]
    # split positions m (rows [0, m) low) where Σp changes, >= seg_min rows on each side
    cuts = np.flatnonzero(sp[1:] != sp[:-1]) + 1
    cuts = cuts[(cuts >= seg_min) & (n - cuts >= seg_min)]
    if not len(cuts):
        return single, ["no breakpoint: too few steps on either side of any split"]
    A = X[order][:, kept] / wden[order, None]
    search = _SplitSearch(A / np.linalg.norm(A, axis=0), y[order] / wden[order])
    best = _search_cuts(search, cuts)
    if best is None:
        return single, ["no breakpoint: no split leaves both sides identifiable"]
    m = cuts[best]
    brk = float((sp[m - 1] + sp[m]) / 2)
    lo = X[:, 1] <= brk
    c_lo, s_lo = _nnls_fit(X[lo], y[lo], wden[lo], kept)
    c_hi, s_hi = _nnls_fit(X[~lo], y[~lo], wden[~lo], kept)
    floor = 1e-18 * n
    bic1 = n * math.log(max(sse1, floor) / n) + k * math.log(n)
    bic2 = n * math.log(max(s_lo + s_hi, floor) / n) + (2 * k + 1) * math.log(n)
    if bic2 < bic1:
        return (Segment(brk, tuple(c_lo)), Segment(math.inf, tuple(c_hi))), []
    return single, ["one segment: a split on Σp did not improve the fit enough (BIC)"]


def _search_cuts(search: _SplitSearch, cuts: np.ndarray) -> int | None:
    """Index into ``cuts`` of the lowest-SSE split: every cut when there are few, else a
    coarse grid refined between the best point's neighbours until every cut there is tried."""
    lo, hi = 0, len(cuts) - 1
    best, best_sse, tried = None, math.inf, {}
    while True:
        idx = np.unique(np.linspace(lo, hi, min(_COARSE_BREAKS, hi - lo + 1)).round()
                        .astype(int))
        for i in idx:
            if i not in tried:
                tried[i] = search.sse(int(cuts[i]))
            if tried[i] is not None and tried[i] < best_sse:
                best, best_sse = int(i), tried[i]
        if len(idx) == hi - lo + 1 or best is None:
            return best
        below, above = idx[idx < best], idx[idx > best]
        lo = int(below[-1]) if len(below) else lo
        hi = int(above[0]) if len(above) else hi


def _predict_rows(X: np.ndarray, segs) -> np.ndarray:
    table = _Table.build({"prefill": ClassModel("prefill", (), tuple(segs), 0, 0.0)})
    C = table.rows(np.ones(len(X), bool), X[:, 1])
    return (np.nan_to_num(X) * C).sum(axis=1)


def _fit_baseline(X, y, wden) -> tuple[float, float]:
    coef, _ = _nnls_fit(X, y, wden, [0, 1])
    return float(coef[0]), float(coef[1])


def _fit_components(steps: Steps, X, fitted: dict, use_pc: bool) -> tuple[dict, list[str]]:
    """Device (gpu_active) and host (host_exposed) models with the main model's terms."""
    ok = ~steps.queued & ~np.isnan(steps.gpu_active_ns) & ~np.isnan(steps.host_exposed_ns)
    if not ok.any():
        return {}, ["no gpu_active_ns/host_exposed_ns: only the measured-fraction split is "
                    "available"]
    out: dict = {"device": {}, "host": {}}
    is_pre = steps.is_prefill
    for name, cm in fitted.items():
        m = ok & (is_pre if name == "prefill" else ~is_pre)
        if m.sum() < max(MIN_STEPS, MIN_STEPS_PER_TERM * len(cm.terms)):
            return {}, [f"too few unqueued {name} steps with gpu_active_ns for the "
                        "device/host component models"]
        wall = steps.wall_ns[m]
        for comp, yv in (("device", steps.gpu_active_ns[m]),
                         ("host", np.clip(steps.host_exposed_ns[m], 0, None))):
            segs, notes = _fit_segments(X[m], yv, wall, list(cm.terms))
            out[comp][name] = ClassModel(name, cm.terms, segs, int(m.sum()), float("nan"),
                                         tuple(notes))
    return out, []


def _nanmedian(v: np.ndarray) -> float | None:
    v = v[~np.isnan(v)]
    return float(np.median(v)) if len(v) else None


def _provenance(steps: Steps) -> dict:
    import platform

    import scipy

    from hostgap import __version__

    return {"hostgap_version": __version__, "data_sha256": steps.data_sha256(),
            "steps": steps.origin, "n_steps": len(steps), "sources": list(steps.sources),
            "python": platform.python_version(), "numpy": np.__version__,
            "scipy": scipy.__version__, "machine": platform.machine()}


# ------------------------------------------------------------------ prediction and shares

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
        raise HostgapError(steps.origin, f"{int(missing.sum())} {cls} step(s), but the model "
                           f"has no {cls} fit (its training data had none)")


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
        raise HostgapError(origin, "the model uses Σq·s (a5) but these steps lack it "
                           "(ctx_qs/gen_qs or per-request rows)")
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


def attribute(model: Model, steps: Steps, *, rescale: bool = False,
              split: str = "fraction") -> Shares:
    """Shares of every request in every step (vectorised over all requests).

    ``rescale`` scales each step's shares to its measured time instead of T̂. ``split``:
    ``"fraction"`` applies the step's measured host fraction (host_exposed/wall; host_wait/wall
    for queued steps) to every share; ``"model"`` splits each share in the ratio of the
    request's device-model and host-model shares (needs component models, see docs).
    """
    check_finite(steps)
    if steps.requests is None:
        raise HostgapError(steps.origin, "per-request shares need per-request q and s (a "
                           "requests table); these steps only carry per-step sums, which are "
                           "enough to fit and evaluate but not to attribute")
    r = steps.requests
    si = r.step_index
    share = request_terms(_request_cols(model.table, steps, si), r.p, r.c,
                          steps.n_requests[si])
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
    return Shares(si, r.request, r.p, r.c, r.prefill, share, share - host, host,
                  alone(model, r.p, r.c, r.prefill), pred, meas, hf, split, rescale)


def _fill_fraction(model: Model, steps: Steps, hf: np.ndarray) -> np.ndarray:
    """Steps without a measured host fraction use the class's training median; where that is
    unknown too, the fraction stays NaN (unknown: the host part is not known, not zero)."""
    miss = np.isnan(hf)
    if miss.any():
        fill = np.array([np.nan if model.host_fraction.get(n) is None else model.host_fraction[n]
                         for n in CLASSES], dtype=float)
        hf = np.where(miss, fill[np.where(steps.is_prefill, 0, 1)], hf)
    return hf


def _model_host_ratio(model: Model, steps: Steps, si, r) -> np.ndarray:
    tabs = model.component_tables
    if not tabs:
        raise HostgapError("--split", "model split needs device/host component models; this "
                           "model has none (training data lacked gpu_active_ns)")
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


def attribute_step(model: Model, p: np.ndarray, c: np.ndarray, *, prefill: bool | None = None,
                   host_fraction: float | None = None) -> StepShares:
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


# ------------------------------------------------------------------ evaluation

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
        return {"source": self.source, "class": self.step_class, "n_steps": self.n_steps,
                "r2": self.r2, **{f"rel_err_{k}": v for k, v in zip(q, self.rel_err)},
                "baseline_r2": self.baseline_r2,
                **{f"baseline_rel_err_{k}": v for k, v in zip(q, self.baseline_rel_err)},
                **{f"improvement_{k}": v for k, v in zip(q, self.improvement)},
                "host_fraction_median": self.host_fraction_median, "regime": self.regime,
                "note": self.note}


@dataclass(frozen=True)
class Metrics:
    groups: tuple[GroupMetrics, ...]
    n_steps: int
    n_excluded: int  # training steps left out of the evaluation
    note: str = ""

    def to_dict(self) -> dict:
        from hostgap import SCHEMA_VERSION

        return {"schema_version": SCHEMA_VERSION, "n_steps": self.n_steps,
                "n_excluded_training_steps": self.n_excluded, "note": self.note,
                "groups": [g.to_dict() for g in self.groups]}


def _r2(pred, y) -> float | None:
    if len(y) < 2:
        return None
    ss = float(((y - y.mean()) ** 2).sum())
    return None if ss == 0 else 1.0 - float(((pred - y) ** 2).sum()) / ss


def _pcts(rel) -> tuple[float, float, float]:
    return tuple(float(x) for x in np.percentile(rel, [50, 90, 99]))


def _group(source, cls, pred, base, y, hf) -> GroupMetrics:
    rel, brel = _pcts(np.abs(pred - y) / y), _pcts(np.abs(base - y) / y)
    imp = tuple((b / m if m > 0 else None) for b, m in zip(brel, rel))
    hmed = _nanmedian(hf)
    note = ""
    if hmed is None:
        note = "host fraction unknown (no host_exposed_ns)"
    elif hmed >= HOST_DOMINATED_MIN:
        note = (f"host-dominated (median host fraction {hmed:.0%}): mostly host work, so "
                "memory-/compute-bound segments cannot show")
    return GroupMetrics(source, cls, len(y), _r2(pred, y), rel, _r2(base, y), brel, imp, hmed,
                        classify(hmed), note)


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
        for cname, cm in (("prefill", steps.is_prefill), ("decode", ~steps.is_prefill),
                          ("all", np.ones(len(steps), bool))):
            m = sm & cm
            both = (sm & steps.is_prefill).any() and (sm & ~steps.is_prefill).any()
            if m.any() and (cname != "all" or both):
                groups.append(_group(sname, cname, pred[m], base[m], y[m], hf[m]))
    return Metrics(tuple(groups), len(steps), 0)


# ------------------------------------------------------------------ held-out split

_ROW_FIELDS = ("step", "wall_ns", "gpu_active_ns", "host_exposed_ns", "host_wait_ns", "queued",
               "n_requests", "n_prefill", "sum_p", "sum_c", "sum_pp", "sum_pc")
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
    return (row_hashes(steps, seed) / np.float64(2 ** 64)) < test_fraction


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
            out[name] = {label: [float(getattr(steps, f)[m].min()), float(getattr(steps, f)[m].max())]
                         for label, f in _RANGE_FIELDS}
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
                parts.append(f"{name} {label} {_num(v[bad].min())}..{_num(v[bad].max())} vs trained "
                             f"{_num(lo)}..{_num(hi)}")
    if not outside.any():
        return None
    return (f"{int(outside.sum())} of {len(steps)} step(s) outside the training range ("
            + "; ".join(parts) + "): the model extrapolates there")


def _num(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.3g}"


# ------------------------------------------------------------------ JSON

MODEL_KIND = "hostgap.attribution_model"


def _class_json(cm: ClassModel) -> dict:
    return {"terms": [TERMS[j] for j in cm.terms], "n_train_steps": cm.n_train,
            "train_rel_err_p90": None if math.isnan(cm.train_rel_err_p90)
            else cm.train_rel_err_p90,
            "segments": [{"sum_p_max": None if math.isinf(s.sum_p_max) else s.sum_p_max,
                          **dict(zip(TERMS, s.coef))} for s in cm.segments],
            "notes": list(cm.notes)}


def _class_from_json(name: str, d: dict) -> ClassModel:
    segs = tuple(Segment(math.inf if s["sum_p_max"] is None else float(s["sum_p_max"]),
                         tuple(float(s[t]) for t in TERMS)) for s in d["segments"])
    if not segs or any(min(s.coef) < 0 for s in segs):
        raise ValueError(f"class {name}: no segments or a negative coefficient")
    tp90 = d.get("train_rel_err_p90")
    return ClassModel(name, tuple(TERMS.index(t) for t in d["terms"]), segs,
                      int(d.get("n_train_steps", 0)), float("nan") if tp90 is None else tp90,
                      tuple(d.get("notes", ())))


def to_json(model: Model) -> dict:
    """The model as a JSON-ready dict (``schema_version``, provenance, no pickle)."""
    from hostgap import SCHEMA_VERSION

    return {
        "schema_version": SCHEMA_VERSION, "kind": MODEL_KIND,
        "form": "T = beta + a1*sum_p + a2*sum_c + a3*sum_p2 + a4*n_requests + a5*sum_pc; "
                "two segments on sum_p per class; NNLS",
        "target": model.target, "loss": model.loss,
        "classes": {n: _class_json(cm) for n, cm in model.classes.items()},
        "decode_note": "decode: p = 1, so a4 holds the per-request constant a1 + a3 + a4",
        "baseline": {n: {"beta_ns": b, "a_ns_per_token": a}
                     for n, (b, a) in model.baseline.items()},
        "components": {k: {n: _class_json(cm) for n, cm in v.items()}
                       for k, v in model.components.items()},
        "host_fraction_train_median": model.host_fraction,
        "provenance": model.provenance, "notes": list(model.notes),
    }


def from_json(d: dict, source: str = "model") -> Model:
    """Inverse of :func:`to_json`; HostgapError on anything that is not such a model."""
    from hostgap import SCHEMA_VERSION

    if not isinstance(d, dict) or d.get("kind") != MODEL_KIND:
        raise HostgapError(source, f"not a hostgap attribution model (kind != {MODEL_KIND})")
    if d.get("schema_version") != SCHEMA_VERSION:
        raise HostgapError(source, f"schema_version {d.get('schema_version')} is not "
                           f"{SCHEMA_VERSION}: refit the model with this hostgap")
    try:
        return Model(
            target=d["target"], loss=d["loss"],
            classes={n: _class_from_json(n, c) for n, c in d["classes"].items()},
            baseline={n: (float(b["beta_ns"]), float(b["a_ns_per_token"]))
                      for n, b in d["baseline"].items()},
            components={k: {n: _class_from_json(n, c) for n, c in v.items()}
                        for k, v in d.get("components", {}).items()},
            host_fraction=dict(d.get("host_fraction_train_median", {})),
            provenance=dict(d.get("provenance", {})), notes=tuple(d.get("notes", ())))
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
