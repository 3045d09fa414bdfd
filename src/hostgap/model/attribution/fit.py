"""Fitting the attribution model: per class, NNLS over the identifiable terms, two segments
split at a breakpoint on Σp found by a coarse-to-fine search; the token-count baseline; the
device and host component models."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import nnls

from hostgap.errors import HostgapError
from hostgap.model.attribution.heldout import _encode_rows, _train_range, row_hashes
from hostgap.model.attribution.terms import (
    _CANDIDATES,
    _COARSE_BREAKS,
    CLASSES,
    FEATURES,
    MIN_STEPS,
    MIN_STEPS_PER_TERM,
    TERMS,
    ClassModel,
    Model,
    Segment,
    _nanmedian,
    _Table,
    host_fraction,
    measured,
    step_features,
)
from hostgap.model.steptable.files import Steps


def fit(
    steps: Steps,
    *,
    target: str = "wall_ns",
    classes=CLASSES,
    use_pc: bool = True,
    loss: str = "relative",
    provenance: dict | None = None,
) -> Model:
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
        hint = f"fit the other class only (--classes {other})" if (~mask).any() and other in classes else ""
        fitted[name] = fit_class(name, Xc, yc, wden, use_pc=use_pc, origin=steps.origin, hint=hint)
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
    return Model(
        target=target,
        loss=loss,
        classes=fitted,
        baseline=baseline,
        components=comps,
        host_fraction=hfrac,
        provenance=prov,
        notes=tuple(notes + cnotes),
    )


def fit_class(
    name: str,
    X: np.ndarray,
    y: np.ndarray,
    wden: np.ndarray,
    *,
    use_pc: bool = True,
    origin: str = "STEPS",
    hint: str = "",
) -> ClassModel:
    """Fit one class: refuse degenerate data, merge unidentifiable terms, search the break."""
    cand = [j for j in _CANDIDATES[name] if j != 5 or (use_pc and not np.isnan(X[:, 5]).any())]
    need = max(MIN_STEPS, MIN_STEPS_PER_TERM * len(cand))
    if len(y) < need:
        raise HostgapError(
            origin,
            f"{len(y)} {name} step(s) are too few to fit the {name} "
            f"model (need >= {need}); collect more steps" + (f", or {hint}" if hint else ""),
        )
    batches = np.unique(X[:, 4])
    if len(batches) < 2:
        raise HostgapError(
            origin,
            f"every {name} step has the same batch size "
            f"(|B| = {int(batches[0])}): the per-request cost cannot be told from "
            "the per-step constant β; include steps with other batch sizes",
        )
    notes = [] if 5 in cand or name == "decode" else ["Σp·c not in the data: a5 not fitted"]
    kept, merged = _identifiable(X, cand)
    notes += merged
    segs, snotes = _fit_segments(X, y, wden, kept)
    pred = _predict_rows(X, segs)
    rel = np.abs(pred - y) / y
    return ClassModel(name, tuple(kept), segs, len(y), float(np.percentile(rel, 90)), tuple(notes + snotes))


def _identifiable(X: np.ndarray, cand: list[int]) -> tuple[list[int], list[str]]:
    """Keep candidate columns in order while each adds rank; report the rest as merged."""
    Xn = np.nan_to_num(X[:, cand])
    norms = np.linalg.norm(Xn, axis=0)
    kept: list[int] = []
    notes: list[str] = []
    cols: list[np.ndarray] = []
    for j, col, nrm in zip(cand, Xn.T, norms):
        if nrm == 0:
            notes.append(f"{TERMS[j]}: {FEATURES[j]} is zero in every step; not fitted")
            continue
        trial = np.column_stack(cols + [col / nrm])
        if np.linalg.matrix_rank(trial, tol=1e-8 * math.sqrt(len(X))) > len(cols):
            kept.append(j)
            cols.append(col / nrm)
        else:
            notes.append(
                f"{TERMS[j]}: {FEATURES[j]} is a linear combination of the other "
                "features in this training set (e.g. s = q when nothing is cached); "
                "fixed at 0, its cost is carried by the other terms"
            )
    return kept, notes


def _nnls_fit(X: np.ndarray, y: np.ndarray, wden: np.ndarray, kept: list[int]):
    A = X[:, kept] / wden[:, None]
    b = y / wden
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    x, rnorm = nnls(A / norms, b, maxiter=50 * A.shape[1])
    coef = np.zeros(6)
    coef[kept] = x / norms
    return coef, float(rnorm**2)


class _SplitSearch:
    """SSE of both segments for any split of rows sorted by Σp, in O(k³) per candidate.

    Prefix (and suffix) sums of the per-row Gram matrices A_iA_iᵀ, A_i·b_i and b_i² give each
    segment's normal equations directly; NNLS then runs on the k×k Cholesky factor
    (‖Ax − b‖² = ‖Lᵀx − L⁻¹h‖² + b·b − ‖L⁻¹h‖²), so the search touches the rows once. The
    chosen split is refitted on the rows themselves.

    The columns of ``A`` need no scaling: each side's Gram matrix is scaled by its own diagonal
    before the factorisation, and a positive column scaling D gives the same NNLS minimum
    (x ≥ 0 ⇔ Dx ≥ 0): scaling A changes every SSE by rounding only.
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
    return max(rnorm**2 + bb - float(z @ z), 0.0)


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
    search = _SplitSearch(A, y[order] / wden[order])
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
        idx = np.unique(np.linspace(lo, hi, min(_COARSE_BREAKS, hi - lo + 1)).round().astype(int))
        for i in idx:
            if i not in tried:
                tried[i] = search.sse(int(cuts[i]))
            sse = tried[i]
            if sse is not None and sse < best_sse:
                best, best_sse = int(i), sse
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
        return {}, ["no gpu_active_ns/host_exposed_ns: only the measured-fraction split is available"]
    out: dict = {"device": {}, "host": {}}
    is_pre = steps.is_prefill
    for name, cm in fitted.items():
        m = ok & (is_pre if name == "prefill" else ~is_pre)
        if m.sum() < max(MIN_STEPS, MIN_STEPS_PER_TERM * len(cm.terms)):
            return {}, [f"too few unqueued {name} steps with gpu_active_ns for the device/host component models"]
        wall = steps.wall_ns[m]
        for comp, yv in (("device", steps.gpu_active_ns[m]), ("host", np.clip(steps.host_exposed_ns[m], 0, None))):
            segs, notes = _fit_segments(X[m], yv, wall, list(cm.terms))
            out[comp][name] = ClassModel(name, cm.terms, segs, int(m.sum()), float("nan"), tuple(notes))
    return out, []


def _provenance(steps: Steps) -> dict:
    import platform

    import scipy

    from hostgap.version import __version__

    return {
        "hostgap_version": __version__,
        "data_sha256": steps.data_sha256(),
        "steps": steps.origin,
        "n_steps": len(steps),
        "sources": list(steps.sources),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "machine": platform.machine(),
    }
