"""Kineto events: the typed schema one msgspec pass decodes into, and a batch of decoded events
turned into numpy columns (:func:`batch_columns`: classified by category, ts/dur exact in ns, names
coded, ids and args as int64; skipped events counted by reason). Used by
:mod:`hostgap.readers.kineto`, which reads the text and joins the batches' columns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from itertools import compress, repeat
from operator import attrgetter, eq
from typing import Annotated, Any

import msgspec
import numpy as np

from hostgap.events import NONE, Kind, SkipCounter
from hostgap.readers.apis import classify_api, copy_kind_from_name
from hostgap.readers.decimal_ns import MALFORMED, MISSING, OUT_OF_RANGE, ns_from_text

I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
"""An integer that fits the int64 columns (JSON allows any size; a larger one is a misfit)."""
ABSENT = msgspec.Raw(b"")
"""The value of a Raw field whose key is absent."""


# Numeric args may arrive as strings (ROCm writes ``"bytes": "9216"`` on hipMemcpyAsync): they are
# accepted here and converted in :func:`_args_columns`, so such files keep the fast typed path.
IntArg = I64 | str | None


class Args(msgspec.Struct, gc=False):
    # absent args default to NONE (not None) so the six columns convert to int64 in one call
    correlation: IntArg = NONE
    external_id: IntArg = msgspec.field(default=NONE, name="External id")
    external_id_legacy: IntArg = msgspec.field(default=NONE, name="external id")
    device: IntArg = NONE
    stream: IntArg = NONE
    bytes: IntArg = NONE
    name: Any = None  # metadata events: {"name": "<process name>"}


_ARG_NAMES = ("correlation", "external_id", "external_id_legacy", "device", "stream", "bytes")
_EMPTY_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | None = None
    ts: msgspec.Raw = ABSENT  # JSON text: converted to ns exactly (decimal_ns)
    dur: msgspec.Raw = ABSENT
    pid: I64 | str | None = NONE
    tid: I64 | str | None = NONE
    args: Args | None = None


class EventLooseArgs(Event, gc=False):
    """An event whose args did not fit :class:`Args`: they are salvaged one by one."""

    args: msgspec.Raw = ABSENT  # type: ignore[assignment]


# Category (current and legacy) → kind. Runtime/driver categories are refined by API name.
_CATEGORY_KIND: dict[str, Kind | None] = {
    "kernel": Kind.KERNEL,
    "Kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "Memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "Memset": Kind.MEMSET,
    "cuda_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "Runtime": Kind.RUNTIME,
    "Driver": Kind.RUNTIME,
    "cpu_op": Kind.CPU_OP,
    "Operator": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "python_function": Kind.PYTHON,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
}
# Categories that are known but not timeline work: skipped, counted under "ignored: <cat>".
_IGNORED_CATEGORIES = {"Trace", "cuda_sync", "cpu_instant_event", "overhead", "Overhead"}
_FLOW_PHASES = {"s", "f", "t"}
_PH, _CAT, _NAME = attrgetter("ph"), attrgetter("cat"), attrgetter("name")
_TS, _DUR = attrgetter("ts"), attrgetter("dur")

MAX_REASON_TEXT = 80
"""A category or name quoted in a skip reason is cut to this many characters."""
MALFORMED_ARGS = "malformed args (event kept)"


def batch_columns(events: list[Event], skipped: SkipCounter, codes: dict[str, int]):
    """Classify one batch of events and build its columns (one pass per field); name codes
    index ``codes``, shared by every batch. Name-based refinements wait for :func:`refine`,
    on the joined columns."""
    # map/attrgetter/compress keep the per-event loops in C
    ph = list(map(_PH, events))
    phases = Counter(ph)
    flows = sum(phases[p] for p in _FLOW_PHASES)
    processes = _process_names(compress(events, map(eq, ph, repeat("M")))) if phases["M"] else {}
    skipped.add("instant or other non-duration events", len(events) - phases["X"] - flows - phases["M"])
    if phases["X"] != len(events):
        ev = list(compress(events, map(eq, ph, repeat("X"))))
    else:
        ev = events
    del ph

    cats = list(map(_CAT, ev))
    kind = np.fromiter(map(_CATEGORY_KIND.get, cats, repeat(-1)), dtype=np.int16, count=len(cats))
    unknown = kind < 0
    if unknown.any():
        for c, n in Counter(cats[i] for i in np.flatnonzero(unknown)).items():
            skipped.add(_category_reason(c), n)

    # ts/dur arrive as JSON text: exact ns, and a status per value (decimal_ns)
    ts, ts_st = ns_from_text(list(map(_TS, ev)))
    dur, dur_st = ns_from_text(list(map(_DUR, ev)))
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
    if len(sel) < len(ev):  # the kept events only, so skipped ones cannot add malformed-arg counts
        ev = [ev[i] for i in sel]
    kind = kind[sel].astype(np.int8)
    start_ns, dur_ns = ts[sel], dur[sel]

    name = _intern(ev, codes)

    pid = _ids(ev, "pid")
    tid = _ids(ev, "tid")
    correlation, ext, ext_legacy, arg_device, arg_stream, nbytes = _args_columns(ev, skipped)
    external_id = np.where(ext != NONE, ext, ext_legacy)
    gpu_side = kind <= Kind.GPU_ANNOTATION
    # Kineto puts a GPU op on pid = device, tid = stream; args say so too when present.
    device = np.where(gpu_side, np.where(arg_device != NONE, arg_device, pid), NONE)
    stream = np.where(gpu_side, np.where(arg_stream != NONE, arg_stream, tid), NONE)
    is_copy = kind == Kind.MEMCPY
    columns = {
        "kind": kind,
        "start_ns": start_ns,
        "dur_ns": dur_ns,
        "pid": pid,
        "tid": tid,
        "device": device,
        "stream": stream,
        "correlation": correlation,
        # one Kineto file is one process's CUPTI session: correlation ids are unique in it
        "link_key": np.zeros(len(ev), dtype=np.int64),
        "external_id": external_id,
        "name": name,
        "bytes": np.where(is_copy | (kind == Kind.MEMSET), np.maximum(nbytes, 0), 0),
        "copy_kind": np.zeros(len(ev), dtype=np.int8),
    }
    return columns, processes, flows, phases["M"]


def refine(columns: dict[str, np.ndarray], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Refinements decided once per distinct name: runtime calls → LAUNCH / GRAPH_LAUNCH /
    RUNTIME, memcpy → direction."""
    kind, name = columns["kind"], columns["name"]
    runtime = kind == Kind.RUNTIME
    if runtime.any():
        kind[runtime] = _per_name(classify_api, names, name[runtime])
    is_copy = kind == Kind.MEMCPY
    if is_copy.any():
        columns["copy_kind"][is_copy] = _per_name(copy_kind_from_name, names, name[is_copy])
    return columns


def _per_name(f, names: tuple[str, ...], codes: np.ndarray) -> np.ndarray:
    """``int(f(name))`` for each code, computed once per distinct name among ``codes`` (the
    rows' names only: a trace's other names, often long, are never scanned)."""
    if not len(codes) or codes.min() < 0 or codes.max() >= len(names):
        used, inverse = np.unique(codes, return_inverse=True)
        return np.array([int(f(names[i])) for i in used.tolist()], dtype=np.int8)[inverse.reshape(-1)]
    # codes index the name table: a table of the names' values, looked up per row, in O(rows)
    # (np.unique's sort of millions of rows took most of this function on a large trace)
    present = np.zeros(len(names), dtype=bool)
    present[codes] = True
    used = np.flatnonzero(present)
    table = np.zeros(len(names), dtype=np.int8)
    table[used] = [int(f(names[i])) for i in used.tolist()]
    return table[codes]


def _category_reason(cat) -> str:
    """Skip reason for an unmapped category, quoting at most :data:`MAX_REASON_TEXT` characters
    of it (a hostile 100 kB category must not become a 100 kB reason)."""
    c = str(cat)
    c = c if len(c) <= MAX_REASON_TEXT else c[:MAX_REASON_TEXT] + f"... ({len(c)} characters)"
    return f"ignored category: {c}" if cat in _IGNORED_CATEGORIES else f"unknown category: {c}"


def _intern(ev: list[Event], codes: dict) -> np.ndarray:
    """Name codes (int32) into ``codes`` (new names appended in order of first appearance; a
    missing name is the key None, read back as "")."""
    names = list(map(_NAME, ev))
    out = np.fromiter(map(codes.get, names, repeat(-1)), dtype=np.int32, count=len(names))
    for i in np.flatnonzero(out < 0).tolist():  # names not seen before, in order
        out[i] = codes.setdefault(names[i], len(codes))
    return out


def _ids(ev: list[Event], field: str) -> np.ndarray:
    """pid/tid column: ints kept, strings that are numbers (:func:`int_text`) converted, other
    strings ("Spans", "stream 7 ...") mapped to stable negatives below -1 so they never collide
    with a real id or with NONE."""
    values = list(map(attrgetter(field), ev))
    col = _int64_or_none(values)
    if col is not None:
        return col
    mapping: dict[str, int] = {}

    def code(v) -> int:
        if v is None:
            return NONE
        n = int_text(v)
        return n if n is not None else mapping.setdefault(v, -2 - len(mapping))

    return np.array([v if type(v) is int else code(v) for v in values], dtype=np.int64)


def _int64_or_none(values: list) -> np.ndarray | None:
    """``values`` as int64 when every one is an int (msgspec's I64: they fit); None when a string
    or a null is among them. (``np.fromiter(..., dtype=np.int64)`` would convert a string with
    Python's ``int()``, which takes spaces, ``+``, ``_`` and any script's digits.)"""
    col = np.array(values)
    if col.dtype == np.int64:
        return col
    return np.zeros(0, dtype=np.int64) if not values else None


def _args_columns(ev: list[Event], skipped: SkipCounter) -> list[np.ndarray]:
    """The six int64 arg columns (rows of :data:`_ARG_NAMES`); NONE where absent. Strings that
    hold an integer are converted; other strings and nulls count as malformed args (the event is
    kept, the arg ignored)."""
    args = [a if a is not None else _EMPTY_ARGS for a in map(attrgetter("args"), ev)]
    cols = [_int64_or_none(list(map(attrgetter(f), args))) for f in _ARG_NAMES]
    if all(c is not None for c in cols):
        return cols  # type: ignore[return-value]
    rows = [attrgetter(*_ARG_NAMES)(a) for a in args]
    out = np.empty((len(_ARG_NAMES), len(rows)), dtype=np.int64)
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            if v is None:  # an explicit JSON null
                v = NONE
            elif isinstance(v, str):
                n = int_text(v)
                if n is None:
                    skipped.add(MALFORMED_ARGS)
                    n = NONE
                v = n
            out[j, i] = v
    return list(out)


def _process_names(events: Iterable[Event]) -> dict[int, str]:
    out = {}
    for e in events:
        if e.ph == "M" and e.name == "process_name" and isinstance(e.pid, int) and e.args is not None:
            if isinstance(e.args.name, str):
                out[e.pid] = e.args.name
    return out


def int_or_none(v) -> int | None:
    """An int64 from an int or a string that is one (:func:`int_text`); None otherwise (bools,
    floats, other strings, out of range)."""
    if isinstance(v, str):
        return int_text(v)
    if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63:
        return v
    return None


def int_text(s: str) -> int | None:
    """The number a string holds where Kineto wants an integer (pid, tid, the integer args; ROCm
    writes ``"bytes": "9216"``): exactly an optional ``-`` and ASCII digits, as a JSON integer is
    written (leading zeros allowed), within int64; None for anything else: spaces, ``+``,
    ``_``, other scripts' digits (``"\u0661\u0662"``), an empty string. The compiled decoder
    applies the same rule (``int64_text`` in ``_kcolumns.c``); docs/input.md, "Numbers written as
    strings".

    >>> int_text("-0042"), int_text(" 12"), int_text("+5"), int_text("\u0661\u0662")
    (-42, None, None, None)
    """
    body = s[1:] if s[:1] == "-" else s
    if not (body.isascii() and body.isdigit()):
        return None
    body = body.lstrip("0") or "0"
    if len(body) > 19:  # past int64 (and int() of thousands of digits is slow, then refused)
        return None
    n = -int(body) if s[:1] == "-" else int(body)
    return n if -(2**63) <= n < 2**63 else None
