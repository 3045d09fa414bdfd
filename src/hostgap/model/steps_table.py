"""STEPS input for attribution: harvested step tables and generic request/step tables.

Two layouts are accepted (``docs/attribution.md`` documents them with examples):

1. **Harvest table** (what ``hostgap harvest`` writes): one row per step with
   ``schema_version, source, step, kind, wall_ns, gpu_active_ns, host_exposed_ns, host_wait_ns,
   ctx_requests, ctx_q, ctx_s, ctx_qq, ctx_qs, gen_requests, gen_q, gen_s, gen_qq, gen_qs``
   (METHOD.md §3 names), optionally with a companion requests table
   (``<stem>.requests.parquet`` / ``<stem>.requests.csv``) holding one row per request:
   ``source, step, request, phase, q, s``.
2. **Generic table**: rows with ``step, q, s`` (one per request) and rows with ``step`` and a
   measured time, ``wall_ns`` or ``time_ms`` (one per step); a request row may carry its step's
   time too. Optional: ``source``, ``request``, ``phase``, ``gpu_active_ns``,
   ``host_exposed_ns``, ``host_wait_ns``.

Either becomes a :class:`Steps`: per-step aggregates (Σp, Σc, Σp², |B|, Σp·c — all the §8 model
needs) and, where the input has them, per-request (p, c) in step order.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, replace

import numpy as np

from hostgap.errors import HostgapError

STEP_COLUMNS = (
    "schema_version", "source", "step", "kind", "wall_ns", "gpu_active_ns", "host_exposed_ns",
    "host_wait_ns", "ctx_requests", "ctx_q", "ctx_s", "ctx_qq", "ctx_qs",
    "gen_requests", "gen_q", "gen_s", "gen_qq", "gen_qs",
)
"""Columns of the harvest layout (``queued`` is read too when present)."""

REQUEST_COLUMNS = ("source", "step", "request", "phase", "q", "s")
"""Columns of the companion requests table."""

_COMPOSITION = ("ctx_requests", "ctx_q", "ctx_s", "ctx_qq", "gen_requests", "gen_q", "gen_s",
                "gen_qq")


@dataclass(frozen=True)
class Requests:
    """Per-request composition, grouped by step: rows ``offsets[k]:offsets[k+1]`` are step k's."""

    offsets: np.ndarray  # int64, n_steps + 1
    request: np.ndarray  # object (str ids, as given)
    p: np.ndarray  # float64 tokens processed this step (q)
    c: np.ndarray  # float64 KV tokens read (s = cached + scheduled)
    prefill: np.ndarray  # bool: phase == "prefill"

    @property
    def step_index(self) -> np.ndarray:
        """Step index (into :class:`Steps`) of every request row."""
        return np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))


@dataclass(frozen=True)
class Steps:
    """One row per step. Times in ns as float64 (NaN = not measured)."""

    sources: tuple[str, ...]
    source_idx: np.ndarray  # int32 into ``sources``
    step: np.ndarray  # int64 step id, unique within a source
    wall_ns: np.ndarray
    gpu_active_ns: np.ndarray
    host_exposed_ns: np.ndarray
    host_wait_ns: np.ndarray
    queued: np.ndarray  # bool: host ran ahead, wall - gpu_active is not host time
    n_requests: np.ndarray  # float64 |B|
    n_prefill: np.ndarray  # float64 context (prefill) requests
    sum_p: np.ndarray
    sum_c: np.ndarray
    sum_pp: np.ndarray
    sum_pc: np.ndarray  # NaN where the input lacks Σq·s
    requests: Requests | None = None
    origin: str = ""
    notes: tuple[str, ...] = ()  # what reading left out, for the user

    def __len__(self) -> int:
        return len(self.step)

    @property
    def is_prefill(self) -> np.ndarray:
        """Prefill-containing steps: a context request, or any request processing > 1 token."""
        return (self.n_prefill > 0) | (self.sum_p > self.n_requests + 0.5)

    def subset(self, mask: np.ndarray) -> "Steps":
        """The steps where ``mask`` is true (requests follow their steps)."""
        idx = np.flatnonzero(mask)
        cols = {f: getattr(self, f)[idx] for f in _STEP_ARRAYS}
        req = None
        if self.requests is not None:
            r = self.requests
            counts = np.diff(r.offsets)[idx]
            keep = np.repeat(mask, np.diff(r.offsets)).astype(bool)
            req = Requests(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                           r.request[keep], r.p[keep], r.c[keep], r.prefill[keep])
        return Steps(sources=self.sources, requests=req, origin=self.origin, notes=self.notes,
                     **cols)

    def data_sha256(self) -> str:
        """Hash of the content (not the file): the same steps as CSV or Parquet hash alike."""
        h = hashlib.sha256()
        h.update("\n".join(self.sources).encode())
        for f in _STEP_ARRAYS:
            h.update(np.ascontiguousarray(getattr(self, f)).tobytes())
        if self.requests is not None:
            for a in (self.requests.offsets, self.requests.p, self.requests.c):
                h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()


_STEP_ARRAYS = ("source_idx", "step", "wall_ns", "gpu_active_ns", "host_exposed_ns",
                "host_wait_ns", "queued", "n_requests", "n_prefill", "sum_p", "sum_c", "sum_pp",
                "sum_pc")


# ---------------------------------------------------------------- file reading

def read_columns(path: str) -> dict[str, np.ndarray]:
    """Columns of a Parquet or CSV file (``.csv.gz`` too) as numpy arrays; strings as objects."""
    import pyarrow as pa

    if not os.path.exists(path):
        raise HostgapError(path, "no such file")
    lower = path.lower()
    try:
        if lower.endswith(".parquet") or lower.endswith(".pq"):
            import pyarrow.parquet as pq

            table = pq.read_table(path)
        elif lower.endswith(".csv") or lower.endswith(".csv.gz"):
            import pyarrow.csv as pcsv

            table = pcsv.read_csv(path)
        else:
            raise HostgapError(path, "unknown table format: expected .parquet, .csv or .csv.gz")
    except (pa.ArrowInvalid, OSError) as e:
        raise HostgapError(path, f"cannot read table: {str(e).splitlines()[0]}") from None
    out = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            out[name] = np.array([("" if v is None else v) for v in col.to_pylist()], dtype=object)
        elif pa.types.is_boolean(col.type):
            out[name] = np.array([bool(v) for v in col.to_pylist()])
        elif pa.types.is_null(col.type):
            out[name] = np.full(len(col), np.nan)
        else:
            try:
                out[name] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
            except pa.ArrowInvalid:
                out[name] = np.array([("" if v is None else str(v)) for v in col.to_pylist()],
                                     dtype=object)
    return out


def companion_requests_path(path: str) -> str | None:
    """``run.parquet`` → ``run.requests.parquet`` (or ``.csv``) when that file exists."""
    stem = re.sub(r"(\.csv\.gz|\.csv|\.parquet|\.pq)$", "", path, flags=re.I)
    for ext in (".requests.parquet", ".requests.csv", ".requests.csv.gz"):
        if os.path.exists(stem + ext):
            return stem + ext
    return None


def load_steps(path: str, requests_path: str | None = None) -> Steps:
    """Read STEPS (either layout); HostgapError naming the file on anything malformed."""
    cols = read_columns(path)
    if not cols or len(next(iter(cols.values()))) == 0:
        raise HostgapError(path, "table has no rows")
    if "ctx_requests" in cols or "gen_requests" in cols or "kind" in cols:
        req_path = requests_path or companion_requests_path(path)
        req_cols = read_columns(req_path) if req_path else None
        return steps_from_harvest(cols, req_cols, origin=path, req_origin=req_path or "")
    if "q" in cols and "s" in cols and "step" in cols:
        return steps_from_generic(cols, origin=path)
    raise HostgapError(path, "not a STEPS table: expected the harvest columns (ctx_requests, "
                             "gen_requests, ...) or a generic table with step, q, s and wall_ns "
                             "or time_ms (see docs/attribution.md)")


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


def steps_from_harvest(cols: dict, req_cols: dict | None, origin: str = "STEPS",
                       req_origin: str = "requests") -> Steps:
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
            notes.append(f"{int(lost.sum())} step(s) without composition or request rows "
                         "left out")
            steps = steps.subset(~lost)
    _validate(steps, origin)
    return replace(steps, notes=tuple(notes))


def _truthy(v: np.ndarray) -> np.ndarray:
    return np.array([str(x).lower() in ("1", "1.0", "true") for x in v])


def _drop_unusable(cols: dict, has_requests: bool, origin: str):
    """Rows to leave out: partial steps; steps without composition (when no requests table)."""
    n = len(cols["step"])
    drop = _truthy(cols["partial"]) if "partial" in cols else np.zeros(n, bool)
    notes = [f"{int(drop.sum())} partial step(s) (first/last of a capture) left out"] \
        if drop.any() else []
    incomplete = np.zeros(n, bool)
    for k in _COMPOSITION:
        incomplete |= np.isnan(_num(cols, k, n))
    if not has_requests:
        if incomplete[~drop].all():
            raise HostgapError(origin, "steps carry no batch composition (ctx_*/gen_* are "
                               "blank) and there is no requests table: attribution needs q and "
                               "s per request or their per-step sums (the short vLLM annotation "
                               "has no s)")
        if incomplete[~drop].any():
            notes.append(f"{int((incomplete & ~drop).sum())} step(s) without composition "
                         "left out")
        drop |= incomplete
    src = cols.get("source")
    dropped = {(str(src[i]) if src is not None else None, int(float(cols["step"][i])))
               for i in np.flatnonzero(drop)}
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
    agg = agg or {k: empty for k in ("n_requests", "n_prefill", "sum_p", "sum_c", "sum_pp",
                                     "sum_pc")}
    return Steps(sources=sources, source_idx=sidx, step=step, wall_ns=wall, gpu_active_ns=gpu,
                 host_exposed_ns=host, host_wait_ns=_num(cols, "host_wait_ns", n), queued=queued,
                 origin=origin, **agg)


def _step_keys(sidx: np.ndarray, step: np.ndarray) -> np.ndarray:
    return sidx.astype(np.int64) * (1 << 40) + step


def _attach_requests(steps: Steps, rc: dict, origin: str, dropped=frozenset()) -> Steps:
    """Group request rows onto their steps; fill or cross-check the aggregates. Rows of
    ``dropped`` (source, step) pairs are left out with their steps."""
    _need(rc, ("step", "q", "s"), origin, "requests table")
    if dropped:
        src = rc.get("source")
        gone = np.array([((str(src[i]) if src is not None else None), int(float(st)))
                         in dropped or (None, int(float(st))) in dropped
                         for i, st in enumerate(rc["step"])])
        rc = {k: v[~gone] for k, v in rc.items()}
    m = len(rc["step"])
    fallback = steps.sources[0] if len(steps.sources) == 1 else _default_source(steps.origin)
    names = np.array([str(x) if str(x) not in ("", "nan") else fallback
                      for x in rc.get("source", np.full(m, "", dtype=object))], dtype=object)
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
        raise HostgapError(origin, f"{int((~hit).sum())} request row(s) name a step the step "
                           f"table lacks (first: step {int(rkey[bad] % (1 << 40))})")
    owner = order[pos]
    p, c = _num(rc, "q", m), _num(rc, "s", m)
    phase = rc.get("phase")
    prefill = (np.array([str(x) == "prefill" for x in phase]) if phase is not None
               else p > 1)
    return _with_requests(steps, owner, p, c, prefill, _ids(rc.get("request"), m), origin,
                          check=True)


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
    req = Requests(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                   req_ids[o], p[o], c[o], prefill[o])
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
                raise HostgapError(origin, f"requests disagree with the step table: step "
                                   f"{int(steps.step[i])} has {k} {given[i]:g} in the steps, "
                                   f"{v[i]:g} from its requests")
        sums["sum_pc"] = np.where(np.isnan(steps.sum_pc), sums["sum_pc"], steps.sum_pc)
    cols = {f: getattr(steps, f) for f in _STEP_ARRAYS}
    cols.update(sums)
    return Steps(sources=steps.sources, requests=req, origin=steps.origin, **cols)


def _check_requests(p: np.ndarray, c: np.ndarray, origin: str) -> None:
    for name, v in (("q", p), ("s", c)):
        bad = np.isnan(v) | (v < 0) | (v != np.round(v))
        if bad.any():
            raise HostgapError(origin, f"column {name}: {int(bad.sum())} value(s) blank, "
                               f"negative or fractional (first at row {int(np.argmax(bad))})")
    if (p < 1).any():
        raise HostgapError(origin, f"column q: {int((p < 1).sum())} request(s) process no "
                           "token (q must be >= 1)")
    if (c < p).any():
        raise HostgapError(origin, f"column s: {int((c < p).sum())} request(s) have s < q "
                           "(s counts cached + scheduled tokens, so s >= q)")


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
    for name, v in (("wall_ns", t), ("gpu_active_ns", _num(cols, "gpu_active_ns", m)),
                    ("host_exposed_ns", _num(cols, "host_exposed_ns", m)),
                    ("host_wait_ns", _num(cols, "host_wait_ns", m))):
        per_step[name] = _one_value_per_step(v, owner, n, name, origin)
    is_req = ~np.isnan(_num(cols, "q", m))
    step_cols = {"source": np.array([sources[k >> 40] for k in ukey], dtype=object),
                 "step": (ukey & ((1 << 40) - 1)).astype(np.float64), **per_step}
    steps = _make_steps(step_cols, n, sources, (ukey >> 40).astype(np.int32),
                        (ukey & ((1 << 40) - 1)).astype(np.int64), None, origin)
    req_ids = cols.get("request")
    req_ids = _ids(req_ids[is_req] if req_ids is not None else None, int(is_req.sum()))
    p, c = _num(cols, "q", m)[is_req], _num(cols, "s", m)[is_req]
    phase = cols.get("phase")
    prefill = (np.array([str(x) == "prefill" for x in phase[is_req]]) if phase is not None
               else p > 1)
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
        raise HostgapError(origin, f"column {name}: step rows disagree on the value for "
                           f"{int(clash.sum())} step(s)")
    return out


def _validate(steps: Steps, origin: str) -> None:
    def where(bad):
        idx = np.flatnonzero(bad)[:5]
        return ", ".join(f"{steps.sources[steps.source_idx[i]]}:{steps.step[i]}" for i in idx)

    bad = np.isnan(steps.wall_ns) | (steps.wall_ns <= 0)
    if bad.any():
        raise HostgapError(origin, f"{int(bad.sum())} step(s) have no positive measured time "
                           f"(wall_ns/time_ms): {where(bad)}")
    if np.isnan(steps.n_requests).any():
        raise HostgapError(origin, "steps carry no batch composition")
    empty = steps.n_requests < 1
    if empty.any():
        raise HostgapError(origin, f"{int(empty.sum())} step(s) have no requests "
                           f"({where(empty)}): remove idle steps before attribution")
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
        raise HostgapError(origin, f"{int(wrong.sum())} step(s) of kind 'decode' hold context "
                           "(prefill) requests")


# ------------------------------------------------------- vLLM step annotations

_DETAILED = re.compile(
    r"execute_(?:\d+_)?context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
    r"_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)")


def composition_from_vllm_annotation(name: str) -> dict[str, int] | None:
    """METHOD.md §3 composition fields from a detailed vLLM step annotation; None otherwise.

    >>> composition_from_vllm_annotation(
    ...     "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)")
    ... # doctest: +NORMALIZE_WHITESPACE
    {'ctx_requests': 0, 'ctx_q': 0, 'ctx_s': 0, 'ctx_qq': 0, 'ctx_qs': 0,
     'gen_requests': 32, 'gen_q': 32, 'gen_s': 55086, 'gen_qq': 32, 'gen_qs': 55086}

    The short form (``execute_context_1(7)_generation_3(3)``) lacks s and is not enough for
    attribution, so it gives None.
    """
    m = _DETAILED.search(name)
    if m is None:
        return None
    keys = ("ctx_requests", "ctx_q", "ctx_s", "ctx_qq", "ctx_qs",
            "gen_requests", "gen_q", "gen_s", "gen_qq", "gen_qs")
    return dict(zip(keys, (int(g) for g in m.groups())))


# ---------------------------------------------------------------- writing

def write_steps(steps: Steps, path: str, kind_names: bool = True) -> list[str]:
    """Write ``steps`` in the harvest layout (plus ``<stem>.requests.<ext>``); returns paths.

    Files are written to a temporary name and renamed, so a failure leaves nothing half-written.
    """
    import pyarrow as pa

    from hostgap import SCHEMA_VERSION

    n = len(steps)
    kind = np.where(~steps.is_prefill, "decode",
                    np.where(steps.n_prefill >= steps.n_requests, "prefill", "mixed"))
    parts = _split_parts(steps)
    table = pa.table({
        "schema_version": np.full(n, SCHEMA_VERSION, np.int64),
        "source": [steps.sources[i] for i in steps.source_idx],
        "step": steps.step, "kind": kind.tolist(),
        "wall_ns": steps.wall_ns, "gpu_active_ns": steps.gpu_active_ns,
        "host_exposed_ns": steps.host_exposed_ns, "host_wait_ns": steps.host_wait_ns,
        **parts,
    })
    written = [_write_table(table, path)]
    if steps.requests is not None:
        r = steps.requests
        si = r.step_index
        rt = pa.table({
            "source": [steps.sources[steps.source_idx[i]] for i in si],
            "step": steps.step[si], "request": r.request.tolist(),
            "phase": np.where(r.prefill, "prefill", "decode").tolist(),
            "q": r.p.astype(np.int64), "s": r.c.astype(np.int64),
        })
        stem = re.sub(r"(\.csv|\.parquet)$", "", path)
        ext = ".csv" if path.endswith(".csv") else ".parquet"
        written.append(_write_table(rt, stem + ".requests" + ext))
    return written


def _split_parts(steps: Steps) -> dict:
    """ctx_*/gen_* columns; needs per-request rows unless every step is one phase only."""
    n = len(steps)
    if steps.requests is None:
        raise HostgapError(steps.origin, "writing the harvest layout needs per-request rows")
    r = steps.requests
    si = r.step_index
    out = {}
    for pre, mask in (("ctx", r.prefill), ("gen", ~r.prefill)):
        w = mask.astype(float)
        out[f"{pre}_requests"] = np.bincount(si, weights=w, minlength=n).astype(np.int64)
        for name, v in (("q", r.p), ("s", r.c), ("qq", r.p * r.p), ("qs", r.p * r.c)):
            out[f"{pre}_{name}"] = np.bincount(si, weights=w * v, minlength=n).astype(np.int64)
    return out


def _write_table(table, path: str) -> str:
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        if path.endswith(".csv"):
            pcsv.write_csv(table, tmp)
        else:
            pq.write_table(table, tmp)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise HostgapError(path, f"cannot write: {e.strerror or e}") from None
    return path
