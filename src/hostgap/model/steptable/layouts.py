"""Building :class:`~hostgap.model.steptable.rows.Steps` from the columns of a STEPS table, in either
layout (:mod:`hostgap.model.steptable.files` documents both and reads the files): the harvest layout
with its optional requests table (:func:`steps_from_harvest`) and the generic request/step
layout (:func:`steps_from_generic`). Rows that attribution cannot use are left out with a note;
anything inconsistent (requests that disagree with their step, s < q, duplicate steps, a step
without a positive time) is a HostgapError naming the input.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model.steptable.rows import STEP_ARRAYS, Requests, Steps

_COMPOSITION = ("ctx_requests", "ctx_q", "ctx_s", "ctx_qq", "gen_requests", "gen_q", "gen_s", "gen_qq")


def _need(cols: dict, names, origin: str, what: str) -> None:
    missing = [n for n in names if n not in cols]
    if missing:
        raise HostgapError(origin, f"{what}: missing column(s) {', '.join(missing)}")


def _num(cols: dict, name: str, n: int) -> np.ndarray:
    v = cols.get(name)
    if v is None:
        return np.full(n, np.nan)
    if v.dtype == object:
        try:
            return np.array([float(x) if x != "" else np.nan for x in v])
        except ValueError:
            raise HostgapError(name, "column is not numeric") from None
    return v.astype(np.float64)


def _source_codes(cols: dict, n: int, default: str) -> tuple[tuple[str, ...], np.ndarray]:
    raw = cols.get("source")
    if raw is None:
        raw = np.full(n, default, dtype=object)
    raw = np.array([str(x) if str(x) not in ("", "nan") else default for x in raw], dtype=object)
    names, idx = np.unique(raw, return_inverse=True)
    return tuple(str(x) for x in names), idx.astype(np.int32)


def _default_source(origin: str) -> str:
    base = os.path.basename(origin)
    stem = re.sub(r"(\.requests)?(\.csv\.gz|\.csv|\.parquet|\.pq)$", "", base, flags=re.I)
    return stem or "steps"


def steps_from_harvest(cols: dict, req_cols: dict | None, origin: str = "STEPS", req_origin: str = "requests") -> Steps:
    """Build :class:`Steps` from the harvest layout (plus its requests table when given).

    Steps flagged ``partial`` (first/last of a capture) are left out, and so are steps without
    composition when other steps have it (a trace's short-form annotations); each with a note.
    """
    _need(cols, ("step", "wall_ns"), origin, "harvest table")
    cols, dropped, notes = _drop_unusable(cols, req_cols is not None, origin)
    n = len(cols["step"])
    sources, sidx = _source_codes(cols, n, _default_source(origin))
    step = _int_ids(cols["step"], origin, "step")
    comp = {k: _num(cols, k, n) for k in _COMPOSITION + ("ctx_qs", "gen_qs")}
    steps = _make_steps(cols, n, sources, sidx, step, _aggregates_from_columns(comp), origin)
    if req_cols is not None:
        steps = _attach_requests(steps, req_cols, req_origin, dropped)
    _check_kind(cols.get("kind"), steps, origin)
    if req_cols is not None:
        lost = np.isnan(comp["ctx_requests"]) & (steps.n_requests == 0)
        if lost.any():
            notes.append(f"{int(lost.sum())} step(s) without composition or request rows left out")
            steps = steps.subset(~lost)
    _validate(steps, origin)
    return replace(steps, notes=tuple(notes))


def _truthy(v: np.ndarray) -> np.ndarray:
    return np.array([str(x).lower() in ("1", "1.0", "true") for x in v])


def _drop_unusable(cols: dict, has_requests: bool, origin: str):
    """Rows to leave out: partial steps; steps without composition (when no requests table)."""
    n = len(cols["step"])
    drop = _truthy(cols["partial"]) if "partial" in cols else np.zeros(n, bool)
    notes = [f"{int(drop.sum())} partial step(s) (first/last of a capture) left out"] if drop.any() else []
    incomplete = np.zeros(n, bool)
    for k in _COMPOSITION:
        incomplete |= np.isnan(_num(cols, k, n))
    if not has_requests:
        if incomplete[~drop].all():
            raise HostgapError(
                origin,
                "steps carry no batch composition (ctx_*/gen_* are "
                "blank) and there is no requests table: attribution needs q and "
                "s per request or their per-step sums (the short vLLM annotation "
                "has no s)",
            )
        if incomplete[~drop].any():
            notes.append(f"{int((incomplete & ~drop).sum())} step(s) without composition left out")
        drop |= incomplete
    src = cols.get("source")
    dropped = {(str(src[i]) if src is not None else None, int(float(cols["step"][i]))) for i in np.flatnonzero(drop)}
    if drop.any():
        cols = {k: v[~drop] for k, v in cols.items()}
        if len(cols["step"]) == 0:
            raise HostgapError(origin, "no usable steps (all partial or without composition)")
    return cols, dropped, notes


def _aggregates_from_columns(comp: dict) -> dict:
    """Per-step sums from the ctx_/gen_ columns (NaN where a step lacks them)."""
    qs = comp["ctx_qs"] + comp["gen_qs"]
    return {
        "n_requests": comp["ctx_requests"] + comp["gen_requests"],
        "n_prefill": comp["ctx_requests"],
        "sum_p": comp["ctx_q"] + comp["gen_q"],
        "sum_c": comp["ctx_s"] + comp["gen_s"],
        "sum_pp": comp["ctx_qq"] + comp["gen_qq"],
        "sum_pc": qs,  # NaN where either part lacks Σq·s
    }


def _int_ids(v: np.ndarray, origin: str, name: str) -> np.ndarray:
    try:
        f = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise HostgapError(origin, f"column {name} must hold integers") from None
    if np.isnan(f).any() or (f != np.round(f)).any():
        raise HostgapError(origin, f"column {name} must hold integers (found blanks or fractions)")
    return f.astype(np.int64)


def _make_steps(cols, n, sources, sidx, step, agg, origin) -> Steps:
    wall = _num(cols, "wall_ns", n)
    gpu = _num(cols, "gpu_active_ns", n)
    host = _num(cols, "host_exposed_ns", n)
    host = np.where(np.isnan(host) & ~np.isnan(gpu), wall - gpu, host)
    queued = cols.get("queued")
    queued = np.zeros(n, bool) if queued is None else _truthy(queued)
    empty = np.full(n, np.nan)
    agg = agg or {k: empty for k in ("n_requests", "n_prefill", "sum_p", "sum_c", "sum_pp", "sum_pc")}
    return Steps(
        sources=sources,
        source_idx=sidx,
        step=step,
        wall_ns=wall,
        gpu_active_ns=gpu,
        host_exposed_ns=host,
        host_wait_ns=_num(cols, "host_wait_ns", n),
        queued=queued,
        origin=origin,
        **agg,
    )


def _step_keys(sidx: np.ndarray, step: np.ndarray) -> np.ndarray:
    return sidx.astype(np.int64) * (1 << 40) + step


def _attach_requests(steps: Steps, rc: dict, origin: str, dropped=frozenset()) -> Steps:
    """Group request rows onto their steps; fill or cross-check the aggregates. Rows of
    ``dropped`` (source, step) pairs are left out with their steps."""
    _need(rc, ("step", "q", "s"), origin, "requests table")
    if dropped:
        src = rc.get("source")
        gone = np.array(
            [
                ((str(src[i]) if src is not None else None), int(float(st))) in dropped
                or (None, int(float(st))) in dropped
                for i, st in enumerate(rc["step"])
            ]
        )
        rc = {k: v[~gone] for k, v in rc.items()}
    m = len(rc["step"])
    fallback = steps.sources[0] if len(steps.sources) == 1 else _default_source(steps.origin)
    names = np.array(
        [str(x) if str(x) not in ("", "nan") else fallback for x in rc.get("source", np.full(m, "", dtype=object))],
        dtype=object,
    )
    lookup = {s: i for i, s in enumerate(steps.sources)}
    unknown = sorted({s for s in names if s not in lookup})
    if unknown:
        raise HostgapError(origin, f"requests of unknown source(s): {', '.join(unknown[:3])}")
    sidx = np.array([lookup[s] for s in names], dtype=np.int64)
    rkey = _step_keys(sidx, _int_ids(rc["step"], origin, "step"))
    skey = _step_keys(steps.source_idx, steps.step)
    order = np.argsort(skey, kind="stable")
    pos = np.searchsorted(skey[order], rkey)
    pos = np.clip(pos, 0, len(skey) - 1)
    hit = skey[order][pos] == rkey
    if not hit.all():
        bad = int(np.argmax(~hit))
        raise HostgapError(
            origin,
            f"{int((~hit).sum())} request row(s) name a step the step "
            f"table lacks (first: step {int(rkey[bad] % (1 << 40))})",
        )
    owner = order[pos]
    p, c = _num(rc, "q", m), _num(rc, "s", m)
    phase = rc.get("phase")
    prefill = np.array([str(x) == "prefill" for x in phase]) if phase is not None else p > 1
    return _with_requests(steps, owner, p, c, prefill, _ids(rc.get("request"), m), origin, check=True)


def _ids(v, m: int) -> np.ndarray:
    """Request ids as text; numeric ids without a trailing '.0'."""
    if v is None:
        return np.array([str(i) for i in range(m)], dtype=object)
    if v.dtype != object and np.all(np.isfinite(v)) and np.all(v == np.round(v)):
        return np.array([str(int(x)) for x in v], dtype=object)
    return np.array([str(x) for x in v], dtype=object)


def _with_requests(steps, owner, p, c, prefill, req_ids, origin, check) -> Steps:
    _check_requests(p, c, origin)
    n = len(steps)
    o = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=n)
    req = Requests(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), req_ids[o], p[o], c[o], prefill[o])
    sums = {
        "n_requests": counts.astype(np.float64),
        "n_prefill": np.bincount(owner, weights=prefill.astype(float), minlength=n),
        "sum_p": np.bincount(owner, weights=p, minlength=n),
        "sum_c": np.bincount(owner, weights=c, minlength=n),
        "sum_pp": np.bincount(owner, weights=p * p, minlength=n),
        "sum_pc": np.bincount(owner, weights=p * c, minlength=n),
    }
    if check:
        for k, v in sums.items():
            given = getattr(steps, k)
            ok = np.isnan(given) | np.isclose(given, v, rtol=1e-9, atol=0.5)
            if not ok.all():
                i = int(np.argmax(~ok))
                raise HostgapError(
                    origin,
                    f"requests disagree with the step table: step "
                    f"{int(steps.step[i])} has {k} {given[i]:g} in the steps, "
                    f"{v[i]:g} from its requests",
                )
        sums["sum_pc"] = np.where(np.isnan(steps.sum_pc), sums["sum_pc"], steps.sum_pc)
    cols = {f: getattr(steps, f) for f in STEP_ARRAYS}
    cols.update(sums)
    return Steps(sources=steps.sources, requests=req, origin=steps.origin, **cols)


def _check_requests(p: np.ndarray, c: np.ndarray, origin: str) -> None:
    for name, v in (("q", p), ("s", c)):
        bad = np.isnan(v) | (v < 0) | (v != np.round(v))
        if bad.any():
            raise HostgapError(
                origin,
                f"column {name}: {int(bad.sum())} value(s) blank, "
                f"negative or fractional (first at row {int(np.argmax(bad))})",
            )
    if (p < 1).any():
        raise HostgapError(origin, f"column q: {int((p < 1).sum())} request(s) process no token (q must be >= 1)")
    if (c < p).any():
        raise HostgapError(
            origin,
            f"column s: {int((c < p).sum())} request(s) have s < q (s counts cached + scheduled tokens, so s >= q)",
        )


def steps_from_generic(cols: dict, origin: str = "STEPS") -> Steps:
    """Build :class:`Steps` from the generic layout (request rows and step-time rows)."""
    m = len(cols["step"])
    if "wall_ns" in cols:
        t = _num(cols, "wall_ns", m)
    elif "time_ms" in cols:
        t = _num(cols, "time_ms", m) * 1e6
    else:
        raise HostgapError(origin, "generic table: needs a step time column, wall_ns or time_ms")
    sources, sidx = _source_codes(cols, m, _default_source(origin))
    key = _step_keys(sidx, _int_ids(cols["step"], origin, "step"))
    ukey, owner = np.unique(key, return_inverse=True)
    n = len(ukey)
    per_step = {}
    for name, v in (
        ("wall_ns", t),
        ("gpu_active_ns", _num(cols, "gpu_active_ns", m)),
        ("host_exposed_ns", _num(cols, "host_exposed_ns", m)),
        ("host_wait_ns", _num(cols, "host_wait_ns", m)),
    ):
        per_step[name] = _one_value_per_step(v, owner, n, name, origin)
    is_req = ~np.isnan(_num(cols, "q", m))
    step_cols = {
        "source": np.array([sources[k >> 40] for k in ukey], dtype=object),
        "step": (ukey & ((1 << 40) - 1)).astype(np.float64),
        **per_step,
    }
    steps = _make_steps(
        step_cols, n, sources, (ukey >> 40).astype(np.int32), (ukey & ((1 << 40) - 1)).astype(np.int64), None, origin
    )
    req_ids = cols.get("request")
    req_ids = _ids(req_ids[is_req] if req_ids is not None else None, int(is_req.sum()))
    p, c = _num(cols, "q", m)[is_req], _num(cols, "s", m)[is_req]
    phase = cols.get("phase")
    prefill = np.array([str(x) == "prefill" for x in phase[is_req]]) if phase is not None else p > 1
    steps = _with_requests(steps, owner[is_req], p, c, prefill, req_ids, origin, check=False)
    _validate(steps, origin)
    return steps


def _one_value_per_step(v, owner, n, name, origin) -> np.ndarray:
    out = np.full(n, np.nan)
    ok = ~np.isnan(v)
    out[owner[ok]] = v[ok]
    lo = np.full(n, np.inf)
    np.minimum.at(lo, owner[ok], v[ok])
    clash = ~np.isnan(out) & ~np.isclose(lo, out, rtol=1e-9)
    if clash.any():
        raise HostgapError(origin, f"column {name}: step rows disagree on the value for {int(clash.sum())} step(s)")
    return out


def _validate(steps: Steps, origin: str) -> None:
    def where(bad):
        idx = np.flatnonzero(bad)[:5]
        return ", ".join(f"{steps.sources[steps.source_idx[i]]}:{steps.step[i]}" for i in idx)

    bad = np.isnan(steps.wall_ns) | (steps.wall_ns <= 0)
    if bad.any():
        raise HostgapError(
            origin, f"{int(bad.sum())} step(s) have no positive measured time (wall_ns/time_ms): {where(bad)}"
        )
    if np.isnan(steps.n_requests).any():
        raise HostgapError(origin, "steps carry no batch composition")
    empty = steps.n_requests < 1
    if empty.any():
        raise HostgapError(
            origin,
            f"{int(empty.sum())} step(s) have no requests ({where(empty)}): remove idle steps before attribution",
        )
    key = _step_keys(steps.source_idx, steps.step)
    if len(np.unique(key)) != len(key):
        raise HostgapError(origin, "duplicate (source, step) rows")
    if (steps.sum_p < steps.n_requests - 1e-9).any():
        raise HostgapError(origin, "some steps have fewer tokens than requests (Σq < |B|)")
    if (steps.sum_c < steps.sum_p - 1e-9).any():
        raise HostgapError(origin, "some steps have Σs < Σq (s counts cached + scheduled tokens)")


def _check_kind(kind, steps: Steps, origin: str) -> None:
    if kind is None:
        return
    kind = np.array([str(k) for k in kind])  # informational; other values are ignored
    # A decode step may process several tokens per request (speculative verification); it is
    # only inconsistent when it holds context (prefill) requests.
    wrong = (kind == "decode") & (steps.n_prefill > 0)
    if wrong.any():
        raise HostgapError(origin, f"{int(wrong.sum())} step(s) of kind 'decode' hold context (prefill) requests")
