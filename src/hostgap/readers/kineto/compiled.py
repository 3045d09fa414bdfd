"""The compiled path of the Kineto loader: chunks of ``traceEvents`` decoded into raw columns by
the C extension :mod:`hostgap.readers._kcolumns` (vendored yyjson), then batches of those columns
turned into the loader's columns by :func:`batch_columns_raw`, which gives exactly what
:func:`hostgap.readers.kineto.schema.batch_columns` gives for the same events (a test compares them
on every trace of the corpus and every fixture, and the fuzz suite on generated ones).

Raw columns (a dict of numpy arrays, one row per event of the chunk, every ``ph``):

- ``ph``, ``cat``, ``name``, ``aname`` (``args.name`` when a string): ids in a
  :class:`Strings` table shared by the whole load; -1 for absent or null;
- ``ts``, ``dur``: int64 ns and a :mod:`~hostgap.readers.decimal_ns` status each
  (``ts_st``, ``dur_st``). The extension converts a number text only when it can do so
  exactly (``-?D{1,16}(.D{1,3})?`` below 2^62 ns); every other text comes back as raw bytes and
  goes through :func:`~hostgap.readers.decimal_ns.ns_from_text`, so rounding is today's;
- ``pid``, ``tid``: int64 (strings of digits converted, as the msgspec path does), ``pid_k`` /
  ``tid_k`` (0 an integer or absent, 1 null, 2 a string) and ``pid_map`` / ``tid_map``: the
  string's id when it must be mapped to a negative code per batch (else -1);
- ``args``: the six arg columns (rows of :data:`~hostgap.readers.kineto.schema._ARG_NAMES`), NONE
  where absent, null or not an integer; ``args_bad``: malformed arg strings per event.

A chunk the extension does not take (see ``_kcolumns.c``: anything but plain events) is decoded by
the msgspec path into events, converted by :func:`raw_from_events`: every document gets the same
columns, skip counts and errors whichever route a chunk took.

:func:`native` returns the extension, or None (with one note on stderr) when it is not built or
``HOSTGAP_PURE_PYTHON=1``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import ModuleType

import numpy as np

from hostgap.events import NONE, Kind, SkipCounter
from hostgap.readers.decimal_ns import MALFORMED, MISSING, OUT_OF_RANGE, ns_from_text
from hostgap.readers.kineto.schema import (
    _ARG_NAMES,
    _CATEGORY_KIND,
    _EMPTY_ARGS,
    MALFORMED_ARGS,
    Event,
    _category_reason,
    int_text,
)

try:
    from hostgap.readers import _kcolumns as _NATIVE  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install): the pure-Python path
    _NATIVE = None

PURE_PYTHON_ENV = "HOSTGAP_PURE_PYTHON"
FLAGGED = 4
"""Status of a ts/dur number text the extension leaves to the exact decimal path."""
_K_NULL, _K_STR = 1, 2
_noted: set[str] = set()

RawColumns = dict[str, np.ndarray]


def native() -> ModuleType | None:
    """The compiled decoder, or None (then one note per process on stderr, naming why)."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        why = f"{PURE_PYTHON_ENV} is set"
    elif _NATIVE is None:
        why = "the compiled decoder is not built (no C compiler at install?)"
    else:
        return _NATIVE
    if why not in _noted:
        _noted.add(why)
        print(
            f"hostgap: note: {why}; Kineto JSON is read by the pure-Python decoder (same results, slower)",
            file=sys.stderr,
        )
    return None


class Strings:
    """Every distinct string of a load, by id (names, categories, phases, string ids)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.items: list[str] = []

    def id(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            i = self.ids[s] = len(self.items)
            self.items.append(s)
        return i

    def lut(self, strings: Sequence[str]) -> np.ndarray:
        """Chunk string codes → ids; its last entry maps the code -1 (absent) to -1."""
        out = np.empty(len(strings) + 1, dtype=np.int32)
        for k, s in enumerate(strings):
            out[k] = self.id(s)
        out[-1] = -1
        return out


def raw_from_native(t: tuple, strings: Strings) -> RawColumns:
    """Raw columns from the extension's tuple (see ``build_result`` in ``_kcolumns.c``)."""
    (n, table, ph, cat, name, aname, ts, ts_st, ts_raw, dur, dur_st, dur_raw, pid, pid_k, tid, tid_k, args, args_k) = t
    lut = strings.lut(table)

    def codes(b: bytes) -> np.ndarray:
        return lut[np.frombuffer(b, dtype=np.int32)]

    out: RawColumns = {"ph": codes(ph), "cat": codes(cat), "name": codes(name), "aname": codes(aname)}
    # ts, dur, their statuses, pid, tid and args arrive as bytearrays: writable, not copied
    for key, val, st, raw in (("ts", ts, ts_st, ts_raw), ("dur", dur, dur_st, dur_raw)):
        v = np.frombuffer(val, dtype=np.int64)
        s = np.frombuffer(st, dtype=np.int8)
        if raw:  # texts the fast path does not convert exactly: the exact decimal path
            at = np.flatnonzero(s == FLAGGED)
            v[at], s[at] = ns_from_text(raw)
        out[key], out[key + "_st"] = v, s
    for key, val, kind in (("pid", pid, pid_k), ("tid", tid, tid_k)):
        v = np.frombuffer(val, dtype=np.int64)
        k = np.frombuffer(kind, dtype=np.int8)
        m = np.full(n, -1, dtype=np.int32)
        for i in np.flatnonzero(k == _K_STR).tolist():
            v[i], m[i] = _id_value(table[v[i]], strings)
        out[key], out[key + "_k"], out[key + "_map"] = v, k, m
    a = np.frombuffer(args, dtype=np.int64).reshape(len(_ARG_NAMES), n)
    ak = np.frombuffer(args_k, dtype=np.int8).reshape(len(_ARG_NAMES), n)
    bad = np.zeros(n, dtype=np.int8)
    for j, i in zip(*np.nonzero(ak == _K_STR)):  # strings that are not numbers (int_text)
        arg = int_text(table[a[j, i]])
        if arg is None:
            bad[i] += 1
        a[j, i] = NONE if arg is None else arg
    out["args"], out["args_bad"] = a, bad
    return out


def _id_value(s: str, strings: Strings) -> tuple[int, int]:
    """A string pid/tid: (its value, -1) when it is a number (:func:`int_text`), else (0, its
    string id) for the per-batch mapping (:func:`hostgap.readers.kineto.schema._ids`)."""
    n = int_text(s)
    return (n, -1) if n is not None else (0, strings.id(s))


def raw_from_events(events: list[Event], strings: Strings) -> RawColumns:
    """Raw columns from decoded events (a chunk the extension did not take)."""
    n = len(events)

    def sid(s: str | None) -> int:
        return -1 if s is None else strings.id(s)

    out: RawColumns = {
        "ph": np.fromiter((strings.id(e.ph) for e in events), dtype=np.int32, count=n),
        "cat": np.fromiter((sid(e.cat) for e in events), dtype=np.int32, count=n),
        "name": np.fromiter((sid(e.name) for e in events), dtype=np.int32, count=n),
        "aname": np.fromiter(
            (strings.id(e.args.name) if e.args is not None and isinstance(e.args.name, str) else -1 for e in events),
            dtype=np.int32,
            count=n,
        ),
    }
    out["ts"], out["ts_st"] = ns_from_text([e.ts for e in events])
    out["dur"], out["dur_st"] = ns_from_text([e.dur for e in events])
    for key in ("pid", "tid"):
        v = np.empty(n, dtype=np.int64)
        k = np.zeros(n, dtype=np.int8)
        m = np.full(n, -1, dtype=np.int32)
        for i, x in enumerate(getattr(e, key) for e in events):
            if x is None:
                v[i], k[i] = NONE, _K_NULL
            elif isinstance(x, str):
                k[i] = _K_STR
                v[i], m[i] = _id_value(x, strings)
            else:
                v[i] = x
        out[key], out[key + "_k"], out[key + "_map"] = v, k, m
    a = np.empty((len(_ARG_NAMES), n), dtype=np.int64)
    bad = np.zeros(n, dtype=np.int8)
    for i, e in enumerate(events):
        args = e.args if e.args is not None else _EMPTY_ARGS
        for j, f in enumerate(_ARG_NAMES):
            x = getattr(args, f)
            if x is None:
                x = NONE
            elif isinstance(x, str):
                y = int_text(x)
                if y is None:
                    bad[i] += 1
                x = NONE if y is None else y
            a[j, i] = x
    out["args"], out["args_bad"] = a, bad
    return out


def concat(parts: list[RawColumns]) -> RawColumns:
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts], axis=-1) for k in parts[0]}


def take(raw: RawColumns, lo: int, hi: int) -> RawColumns:
    return {k: v[..., lo:hi] for k, v in raw.items()}


def rows(raw: RawColumns) -> int:
    return len(raw["ph"])


_X, _M, _FLOW = 1, 2, 3
_PHASE_CLASS = {"X": _X, "M": _M, "s": _FLOW, "f": _FLOW, "t": _FLOW}
"""Phases the columns tell apart (any other phase: 0, counted as a non-duration event)."""


class Batches:
    """State shared by the batches of one load: the string table, the name codes (as
    ``batch_columns``' ``codes``) and the id → name-code and id → kind lookups."""

    def __init__(self, strings: Strings, codes: dict) -> None:
        self.strings = strings
        self.codes = codes
        self.name_lut = np.full(1, -1, dtype=np.int32)  # index: id + 1 (0: no name)
        self.kind_lut = np.full(1, -1, dtype=np.int16)  # index: id + 1 (0: no category)
        self.phase_lut = np.zeros(1, dtype=np.int8)  # index: id + 1 (0: no phase): _PHASE_CLASS

    def _grow(self) -> None:
        n = len(self.strings.items) + 1
        if len(self.kind_lut) < n:
            old = len(self.kind_lut)
            self.name_lut = np.concatenate([self.name_lut, np.full(n - old, -1, dtype=np.int32)])
            added = self.strings.items[old - 1 :]
            new = [_CATEGORY_KIND.get(s, -1) for s in added]
            self.kind_lut = np.concatenate([self.kind_lut, np.array(new, dtype=np.int16)])
            phases = np.array([_PHASE_CLASS.get(s, 0) for s in added], dtype=np.int8)
            self.phase_lut = np.concatenate([self.phase_lut, phases])

    def _sid(self, s: str) -> int:
        return self.strings.ids.get(s, -2)  # -2 matches no id

    def columns(self, raw: RawColumns, skipped: SkipCounter):
        """What :func:`~hostgap.readers.kineto.schema.batch_columns` returns for these events."""
        self._grow()
        n = rows(raw)
        phase = self.phase_lut[raw["ph"] + 1]
        is_x, is_m = phase == _X, phase == _M
        n_x, n_m = int(is_x.sum()), int(is_m.sum())
        flows = int(np.count_nonzero(phase == _FLOW))
        processes = self._process_names(raw, is_m) if n_m else {}
        skipped.add("instant or other non-duration events", n - n_x - flows - n_m)
        xs = np.flatnonzero(is_x)

        cats = raw["cat"][xs]
        kind = self.kind_lut[cats + 1]
        unknown = kind < 0
        if unknown.any():
            u, counts = np.unique(cats[unknown], return_counts=True)
            for c, k in zip(u.tolist(), counts.tolist()):
                skipped.add(_category_reason(None if c < 0 else self.strings.items[c]), k)

        ts, ts_st = raw["ts"][xs], raw["ts_st"][xs]
        dur, dur_st = raw["dur"][xs], raw["dur_st"][xs]
        known = ~unknown
        missing = known & ((ts_st == MISSING) | (dur_st == MISSING))
        skipped.add("missing ts or dur", int(missing.sum()))
        malformed = known & ~missing & ((ts_st == MALFORMED) | (dur_st == MALFORMED))
        skipped.add("ts or dur not a number", int(malformed.sum()))
        huge = known & ~missing & ~malformed & ((ts_st == OUT_OF_RANGE) | (dur_st == OUT_OF_RANGE))
        skipped.add("timestamp out of range", int(huge.sum()))
        neg = known & ~missing & ~malformed & ~huge & (dur < 0)
        skipped.add("negative duration", int(neg.sum()))
        sel = np.flatnonzero(~(unknown | missing | malformed | huge | neg))
        rows_kept = xs[sel]
        kind = kind[sel].astype(np.int8)
        start_ns, dur_ns = ts[sel], dur[sel]

        name = self._intern(raw["name"][rows_kept])
        pid = self._ids(raw["pid"][rows_kept], raw["pid_map"][rows_kept])
        tid = self._ids(raw["tid"][rows_kept], raw["tid_map"][rows_kept])
        args = raw["args"][:, rows_kept]
        skipped.add(MALFORMED_ARGS, int(raw["args_bad"][rows_kept].sum()))
        correlation, ext, ext_legacy, arg_device, arg_stream, nbytes = args
        external_id = np.where(ext != NONE, ext, ext_legacy)
        gpu_side = kind <= Kind.GPU_ANNOTATION
        device = np.where(gpu_side, np.where(arg_device != NONE, arg_device, pid), NONE)
        stream = np.where(gpu_side, np.where(arg_stream != NONE, arg_stream, tid), NONE)
        is_copy = kind == Kind.MEMCPY
        k = len(rows_kept)
        columns = {
            "kind": kind,
            "start_ns": start_ns,
            "dur_ns": dur_ns,
            "pid": pid,
            "tid": tid,
            "device": device,
            "stream": stream,
            "correlation": correlation.copy(),
            "link_key": np.zeros(k, dtype=np.int64),
            "external_id": external_id,
            "name": name,
            "bytes": np.where(is_copy | (kind == Kind.MEMSET), np.maximum(nbytes, 0), 0),
            "copy_kind": np.zeros(k, dtype=np.int8),
        }
        return columns, processes, flows, n_m

    def _process_names(self, raw: RawColumns, is_m: np.ndarray) -> dict[int, str]:
        want = is_m & (raw["name"] == self._sid("process_name")) & (raw["pid_k"] == 0) & (raw["aname"] >= 0)
        return {int(raw["pid"][i]): self.strings.items[raw["aname"][i]] for i in np.flatnonzero(want).tolist()}

    def _intern(self, ids: np.ndarray) -> np.ndarray:
        """Name codes into ``codes``, new names in order of first appearance (None: no name)."""
        idx = ids + 1
        out = self.name_lut[idx]
        new = out < 0
        if new.any():
            u, first = np.unique(idx[new], return_index=True)
            for j in u[np.argsort(first)].tolist():
                self.name_lut[j] = self.codes.setdefault(None if j == 0 else self.strings.items[j - 1], len(self.codes))
            out = self.name_lut[idx]
        return out.astype(np.int32)

    def _ids(self, values: np.ndarray, mapped: np.ndarray) -> np.ndarray:
        """pid/tid: strings that are not small integers get stable negatives below -1, per
        batch, in order of first appearance (as :func:`hostgap.readers.kineto.schema._ids`)."""
        at = np.flatnonzero(mapped >= 0)
        if len(at):
            mapping: dict[str, int] = {}
            for i in at.tolist():
                values[i] = mapping.setdefault(self.strings.items[mapped[i]], -2 - len(mapping))
        return values
