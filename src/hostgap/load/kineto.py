"""PyTorch profiler / Kineto Chrome-trace JSON (``.json`` or gzip) → :class:`Trace`.

Also what vLLM and SGLang write. Handles the current category names and the 2021 legacy ones
(``Kernel``, ``Runtime``, ``Memcpy``, ``async_gpu``, lowercase ``external id``), float-µs
timestamps with ns precision and integer-µs ones, ``baseTimeNanoseconds``,
``deviceProperties``, ``distributedInfo`` and flow events, for CUDA and HIP.

Speed and memory: the text is read and (gzip) inflated chunk by chunk and never held whole
(:mod:`hostgap.load.kineto_stream`): each chunk of complete events is decoded in one msgspec
pass straight into typed structs holding only the fields hostgap uses, and batches of
:data:`BATCH` events become numpy columns, kept as pieces and joined once at the end. So the
peak memory is the columns plus a few chunks, whatever the size of the text. A chunk whose
events do not all fit the typed schema (a string where a number belongs, ...) is split into raw
spans and decoded again leniently, event by event; the misfits are skipped and counted by
reason. A document the stream cannot split (docs/input.md: text that must be fenced, a
duplicated ``traceEvents``, an unusual layout) is loaded whole, with the same results.

Timestamps: ``ts`` and ``dur`` are kept as their JSON text and converted to int64 ns exactly
(:mod:`hostgap.load.decimal_ns`): epoch-µs integers and fractional µs alike, no binary float on
the way; a fourth decimal and beyond is rounded half to even.

Hostile input (docs/input.md): the inflated text is bounded (:mod:`hostgap.load.text`: 200x
the compressed size and 16 GiB in all, ``HOSTGAP_MAX_TRACE_BYTES`` overrides the latter), JSON nesting is bounded by msgspec's recursion limit, and an event whose
text does not decode (a number beyond any range, invalid UTF-8, a lone surrogate escape, a raw
control character in a string) is skipped and counted with its index in ``traceEvents``
(``meta.extra["skipped_at"]``: the first few per reason); only whole-file problems reject the
file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from itertools import compress, repeat
from operator import attrgetter, eq
from typing import Annotated, Any

import msgspec
import numpy as np

from hostgap.errors import HostgapError
from hostgap.events import (
    NONE,
    CopyKind,
    DeviceInfo,
    EventTable,
    Kind,
    SkipCounter,
    Trace,
    TraceMeta,
)
from hostgap.load.apis import classify_api, copy_kind_from_name
from hostgap.load.kineto_stream import EventStream, NotStreamable
from hostgap.load.decimal_ns import MALFORMED, MISSING, OUT_OF_RANGE, ns_from_text
from hostgap.load.text import fence_control_char, fence_lone_surrogates, read_trace_text

I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
"""An integer that fits the int64 columns (JSON allows any size; a larger one is a misfit)."""
_ABSENT = msgspec.Raw(b"")


# Numeric args may arrive as strings (ROCm writes ``"bytes": "9216"`` on hipMemcpyAsync): they are
# accepted here and converted in :func:`_arg`, so such files keep the fast typed path.
IntArg = I64 | str | None


class _Args(msgspec.Struct, gc=False):
    # absent args default to NONE (not None) so the six columns convert to int64 in one call
    correlation: IntArg = NONE
    external_id: IntArg = msgspec.field(default=NONE, name="External id")
    external_id_legacy: IntArg = msgspec.field(default=NONE, name="external id")
    device: IntArg = NONE
    stream: IntArg = NONE
    bytes: IntArg = NONE
    name: Any = None  # metadata events: {"name": "<process name>"}


_ARG_NAMES = ("correlation", "external_id", "external_id_legacy", "device", "stream", "bytes")
_EMPTY_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str | None = None
    name: str | None = None
    ts: msgspec.Raw = _ABSENT  # JSON text: converted to ns exactly (decimal_ns)
    dur: msgspec.Raw = _ABSENT
    pid: I64 | str | None = NONE
    tid: I64 | str | None = NONE
    args: _Args | None = None


class _EventLooseArgs(_Event, gc=False):
    """An event whose args did not fit :class:`_Args`: they are salvaged one by one."""

    args: msgspec.Raw = _ABSENT  # type: ignore[assignment]


class _RawDoc(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None
    baseTimeNanoseconds: msgspec.Raw = _ABSENT  # metadata is decoded leniently (_meta_value)
    deviceProperties: msgspec.Raw = _ABSENT
    distributedInfo: msgspec.Raw = _ABSENT


BATCH = 4096
"""Events decoded into structs at a time (bounds the memory beyond the JSON text itself)."""

_EVENTS = msgspec.json.Decoder(list[_Event])
_EVENT = msgspec.json.Decoder(_Event)
_EVENT_LOOSE_ARGS = msgspec.json.Decoder(_EventLooseArgs)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
SKIPPED_AT_KEEP = 5
"""Indices (in ``traceEvents``) kept per skip reason for malformed events."""
MAX_REASON_TEXT = 80
"""A category or name quoted in a skip reason is cut to this many characters."""


class _LooseDoc(msgspec.Struct):
    traceEvents: msgspec.Raw = _ABSENT


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


STREAMING = True
"""Load Kineto JSON chunk by chunk (:mod:`hostgap.load.kineto_stream`); False loads the text
whole first (the path every document the stream cannot split takes anyway)."""


def load_kineto(path: str) -> Trace:
    """Load a Kineto JSON trace. Whole-file problems raise :class:`HostgapError`; events that
    do not fit are skipped and counted by reason in ``meta.skipped``, and the kept ones plus
    the skipped ones (reasons not marked "event kept") add up to ``len(traceEvents)``."""
    if STREAMING:
        try:
            return _load_streaming(path)
        except NotStreamable:
            pass  # an unusual document: loaded whole, where odd text is fenced or reported
    return _load_whole(path)


def _load_streaming(path: str) -> Trace:
    builder = _Builder()
    stream = EventStream(path, builder.decode_list)
    for events in stream:
        builder.add(events)
    return _trace(path, builder, {k: _meta_value(v) for k, v in stream.meta.items()})


def _load_whole(path: str) -> Trace:
    raw = read_trace_text(path)
    doc = _decode_doc(path, raw)
    if doc.traceEvents is None:
        raise HostgapError(path, "JSON has no traceEvents: not a PyTorch profiler / Kineto trace")
    builder = _Builder()
    raws = doc.traceEvents
    for i in range(0, len(raws), BATCH):
        builder.add(builder.decode_spans(raws[i : i + BATCH]))
    del raw, raws, doc.traceEvents
    meta = {k: _meta_value(getattr(doc, k)) for k in ("baseTimeNanoseconds", "deviceProperties", "distributedInfo")}
    return _trace(path, builder, meta)


def _trace(path: str, builder: _Builder, top: dict) -> Trace:
    """The trace from the decoded events and the top-level metadata values."""
    columns, names = builder.finish()
    if not builder.n_input:
        raise HostgapError(path, "traceEvents is empty: the trace holds no events")
    table = EventTable.from_columns(columns)
    skipped, skipped_at, n_input = builder.skipped, builder.skipped_at, builder.n_input
    if not len(table):
        top3 = ", ".join(f"{r}: {n}" for r, n in sorted(skipped.items(), key=lambda rn: (-rn[1], rn[0]))[:3])
        raise HostgapError(path, f"none of the {n_input} events is a timed trace event ({top3})")
    meta = TraceMeta(
        path=path,
        format="kineto",
        base_time_ns=_int_or_none(top["baseTimeNanoseconds"]),
        devices=_devices(top["deviceProperties"], table),
        rank=_dist(top["distributedInfo"], "rank"),
        world_size=_dist(top["distributedInfo"], "world_size"),
        # sorted: the order reasons were first met in depends on how the text was split
        skipped={_located(r, skipped_at.get(r), n): n for r, n in sorted(skipped.items())},
        flows=builder.flows,
        processes=builder.processes,
        extra={"events_in_file": n_input, "metadata_events": builder.metadata,
               **({"skipped_at": skipped_at} if skipped_at else {})},
    )
    return Trace(table, names, meta)


def _decode_doc(path: str, raw) -> _RawDoc:
    """The top level with ``traceEvents`` split into raw spans. Text that would fail the whole
    decode for one value's sake (lone surrogate escapes, raw control characters) is fenced
    into that value first (:mod:`hostgap.load.text`); anything else is a whole-file error."""
    fences = 0
    while True:
        try:
            return msgspec.json.decode(raw, type=_RawDoc)
        except msgspec.ValidationError:
            return _decode_loose(path, raw)  # raises: traceEvents is not a list, or not an object
        except RecursionError:
            raise HostgapError(path, "JSON nested too deeply (more levels than the decoder's limit)") from None
        except msgspec.DecodeError as e:
            fixed = fence_lone_surrogates(raw) if fences == 0 else None
            if fixed is None:
                if not isinstance(raw, bytearray):
                    raw = bytearray(raw)
                if fences >= MAX_FENCES or not fence_control_char(raw, str(e)):
                    raise HostgapError(path, f"invalid JSON ({_short(e)})") from None
            else:
                raw = fixed
            fences += 1


MAX_FENCES = 64
"""Decode attempts that may each fence one bad character before the file is refused."""


def _meta_value(raw: msgspec.Raw):
    """A top-level metadata value decoded on its own; None when absent or undecodable (it is
    metadata: the events do not depend on it)."""
    if not len(raw):
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


class _Builder:
    """Events in, numpy columns out (see the module docstring). Events are classified into
    columns in batches of :data:`BATCH` whatever lists they arrive in; each batch's columns are
    kept as pieces and joined column by column at the end, sorted by start, so the peak is the
    columns plus one column."""

    def __init__(self):
        self.skipped = SkipCounter()
        self.skipped_at: dict[str, list[int]] = {}
        self.codes: dict[str, int] = {}
        self.pieces: dict[str, list[np.ndarray]] = {}
        self.processes: dict[int, str] = {}
        self.flows = self.metadata = self.n_input = 0
        self.carry: list[_Event] = []

    def decode_list(self, text: bytes) -> list[_Event]:
        """The events of ``text``, a JSON list of events, in one pass when they all fit the
        typed schema; else span by span (misfits skipped and counted at their index). Raises
        msgspec's errors when ``text`` is not a JSON list (the stream then cuts elsewhere)."""
        try:
            events = _EVENTS.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            spans = _RAWS.decode(text)
            return [e for i in range(0, len(spans), BATCH) for e in self.decode_spans(spans[i : i + BATCH])]
        self.n_input += len(events)
        return events

    def decode_spans(self, batch: list[msgspec.Raw]) -> list[_Event]:
        """The events of one batch of raw spans (the lenient path for those that fail)."""
        try:
            events = _EVENTS.decode(b"[" + b",".join(batch) + b"]")
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            events = _events_one_by_one(batch, self.n_input, self.skipped, self.skipped_at)
        self.n_input += len(batch)
        return events

    def add(self, events: list[_Event]) -> None:
        if self.carry:
            need = BATCH - len(self.carry)
            self.carry.extend(events[:need])
            events = events[need:]
            if len(self.carry) < BATCH:
                return
            self._columns(self.carry)
        full = len(events) - len(events) % BATCH
        for i in range(0, full, BATCH):
            self._columns(events[i : i + BATCH])
        self.carry = events[full:]

    def _columns(self, events: list[_Event]) -> None:
        cols, procs, n_flows, n_meta = _columns(events, self.skipped, self.codes)
        for c, v in cols.items():
            self.pieces.setdefault(c, []).append(v)
        self.processes.update(procs)
        self.flows += n_flows
        self.metadata += n_meta

    def finish(self) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
        """The columns (sorted by start, stable) and the name table."""
        self._columns(self.carry)
        self.carry = []
        names = tuple("" if n is None else n for n in self.codes)
        start = _join(self.pieces.pop("start_ns"))
        order = np.argsort(start, kind="stable")
        columns = {"start_ns": start[order]}
        del start
        for c in list(self.pieces):
            columns[c] = _join(self.pieces.pop(c))[order]
            _release_freed_memory()  # the pieces' memory, before the next column is built
        return _finish(columns, names), names


def _release_freed_memory() -> None:
    """Hand freed heap memory back to the OS (glibc's ``malloc_trim``; elsewhere a no-op).
    The batch pieces are small allocations scattered through the heap: without this, the memory
    they held stays counted in the process while the joined columns are allocated anew."""
    if _TRIM is not None:
        _TRIM(0)


def _malloc_trim():
    try:
        import ctypes

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def _join(pieces: list[np.ndarray]) -> np.ndarray:
    """One array from ``pieces``, each freed as soon as it is copied."""
    out = np.empty(sum(map(len, pieces)), dtype=pieces[0].dtype)
    pos = 0
    while pieces:
        p = pieces.pop(0)
        out[pos : pos + len(p)] = p
        pos += len(p)
    return out


# -- lenient path ----------------------------------------------------------------------


def _decode_loose(path: str, raw) -> _RawDoc:
    """The top level did not fit :class:`_RawDoc`: not an object, ``traceEvents`` not a list,
    or ``traceEvents`` given twice with a non-list first (the last one counts, as in Python's
    json)."""
    try:
        loose = msgspec.json.decode(raw, type=_LooseDoc)
    except msgspec.ValidationError:
        raise HostgapError(path, "JSON is not an object with traceEvents: not a Kineto trace") from None
    except msgspec.DecodeError as e:
        raise HostgapError(path, f"invalid JSON ({_short(e)})") from None
    except RecursionError:
        raise HostgapError(path, "JSON nested too deeply (more levels than the decoder's limit)") from None
    text = bytes(loose.traceEvents).lstrip()
    if not text or text == b"null":
        return _RawDoc(traceEvents=None)
    if text[:1] != b"[":
        raise HostgapError(path, "traceEvents is not a list")
    doc = msgspec.json.decode(raw, type=_LooseMeta)
    return _RawDoc(_RAWS.decode(text), doc.baseTimeNanoseconds, doc.deviceProperties, doc.distributedInfo)


class _LooseMeta(msgspec.Struct):
    baseTimeNanoseconds: msgspec.Raw = _ABSENT
    deviceProperties: msgspec.Raw = _ABSENT
    distributedInfo: msgspec.Raw = _ABSENT


def _located(reason: str, at: list[int] | None, n: int) -> str:
    """A malformed-event reason with the positions (in ``traceEvents``) of its first events,
    so the user can find them: ``undecodable event (...) at traceEvents[5000]``."""
    if not at or reason == MALFORMED_ARGS:  # the event is kept: nothing to find
        return reason
    return f"{reason} at traceEvents[{', '.join(map(str, at))}{', ...' if n > len(at) else ''}]"


def _skip(reason: str, index: int, skipped: SkipCounter, skipped_at: dict[str, list[int]]) -> None:
    skipped.add(reason)
    at = skipped_at.setdefault(reason, [])
    if len(at) < SKIPPED_AT_KEEP:
        at.append(index)


NOT_AN_OBJECT = "not an object"
MALFORMED_FIELDS = "malformed fields"
UNDECODABLE = "undecodable event (invalid UTF-8, lone surrogate, control character, too deep)"


def _events_one_by_one(batch: list[msgspec.Raw], base: int, skipped: SkipCounter,
                       skipped_at: dict[str, list[int]]) -> list[_Event]:
    """Slow path for a batch that did not decode as a whole: each event on its own; those
    that do not fit are skipped and counted with their index in ``traceEvents``."""
    out = []
    for k, r in enumerate(batch):
        try:
            out.append(_EVENT.decode(r))
            continue
        except msgspec.ValidationError:
            pass
        except (msgspec.DecodeError, RecursionError):
            _skip(UNDECODABLE, base + k, skipped, skipped_at)
            continue
        if memoryview(r)[:1].tobytes() != b"{":
            _skip(NOT_AN_OBJECT, base + k, skipped, skipped_at)
            continue
        # salvage: drop malformed args rather than the event, when the core fields are fine
        try:
            loose = _EVENT_LOOSE_ARGS.decode(r)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            _skip(MALFORMED_FIELDS, base + k, skipped, skipped_at)
            continue
        skipped.add(MALFORMED_ARGS)
        out.append(_Event(loose.ph, loose.cat, loose.name, loose.ts, loose.dur, loose.pid, loose.tid,
                          _salvage_args(loose.args)))
    return out


def _salvage_args(raw: msgspec.Raw) -> _Args:
    """The integer args that are well-formed; the rest dropped."""
    try:
        args = msgspec.json.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return _Args()
    clean = {}
    if isinstance(args, dict):
        for k, field_name in _ARG_FIELDS.items():
            v = args.get(k)
            if isinstance(v, str):
                v = _int_or_none(v)
            if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63:
                clean[field_name] = v
    return _Args(**clean)


MALFORMED_ARGS = "malformed args (event kept)"

_ARG_FIELDS = {
    "correlation": "correlation",
    "External id": "external_id",
    "external id": "external_id_legacy",
    "device": "device",
    "stream": "stream",
    "bytes": "bytes",
}


# -- columns ---------------------------------------------------------------------------


def _columns(events: list[_Event], skipped: SkipCounter, codes: dict[str, int]):
    """Classify one batch of events and build its columns (one pass per field); name codes
    index ``codes``, shared by every batch. Name-based refinements wait for :func:`_finish`."""
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


def _finish(columns: dict[str, np.ndarray], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Refinements decided once per distinct name: runtime calls → LAUNCH / GRAPH_LAUNCH /
    RUNTIME, memcpy → direction."""
    kind, name = columns["kind"], columns["name"]
    runtime = kind == Kind.RUNTIME
    if runtime.any():
        api_kind = np.array([int(classify_api(s)) for s in names], dtype=np.int8)
        kind[runtime] = api_kind[name[runtime]]
    is_copy = kind == Kind.MEMCPY
    if is_copy.any():
        ck = np.array([int(copy_kind_from_name(s)) for s in names], dtype=np.int8)
        columns["copy_kind"][is_copy] = ck[name[is_copy]]
    return columns


def _category_reason(cat) -> str:
    """Skip reason for an unmapped category, quoting at most :data:`MAX_REASON_TEXT` characters
    of it (a hostile 100 kB category must not become a 100 kB reason)."""
    c = str(cat)
    c = c if len(c) <= MAX_REASON_TEXT else c[:MAX_REASON_TEXT] + f"... ({len(c)} characters)"
    return f"ignored category: {c}" if cat in _IGNORED_CATEGORIES else f"unknown category: {c}"


def _intern(ev: list[_Event], codes: dict) -> np.ndarray:
    """Name codes (int32) into ``codes`` (new names appended in order of first appearance; a
    missing name is the key None, read back as "")."""
    names = list(map(_NAME, ev))
    out = np.fromiter(map(codes.get, names, repeat(-1)), dtype=np.int32, count=len(names))
    for i in np.flatnonzero(out < 0).tolist():  # names not seen before, in order
        out[i] = codes.setdefault(names[i], len(codes))
    return out


def _ids(ev: list[_Event], field: str) -> np.ndarray:
    """pid/tid column: ints kept; strings ("Spans", "stream 7 ...") mapped to stable negatives
    below -1 so they never collide with a real id or with NONE."""
    try:
        return np.fromiter(map(attrgetter(field), ev), dtype=np.int64, count=len(ev))  # all ints
    except (ValueError, TypeError, OverflowError):
        pass
    mapping: dict[str, int] = {}

    def code(v) -> int:
        if v is None:
            return NONE
        s = str(v)
        n = _small_int(s) if s.isascii() and s.isdigit() else None
        return n if n is not None else mapping.setdefault(s, -2 - len(mapping))

    return np.array([v if type(v) is int else code(v) for v in map(attrgetter(field), ev)], dtype=np.int64)


def _small_int(s: str) -> int | None:
    # 19 digits at most: int() of a long digit string is slow and, past 4300 digits, refused
    n = int(s) if len(s) <= 19 else 2**63
    return n if n < 2**63 else None


def _args_columns(ev: list[_Event], skipped: SkipCounter) -> list[np.ndarray]:
    """The six int64 arg columns (rows of :data:`_ARG_NAMES`); NONE where absent. Strings that
    hold an integer are converted; other strings and nulls count as malformed args (the event is
    kept, the arg ignored)."""
    args = [a if a is not None else _EMPTY_ARGS for a in map(attrgetter("args"), ev)]
    try:
        return [np.fromiter(map(attrgetter(f), args), dtype=np.int64, count=len(args)) for f in _ARG_NAMES]
    except (ValueError, OverflowError, TypeError):  # strings or nulls among them
        pass
    rows = [attrgetter(*_ARG_NAMES)(a) for a in args]
    out = np.empty((len(_ARG_NAMES), len(rows)), dtype=np.int64)
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            if v is None:  # an explicit JSON null
                v = NONE
            elif isinstance(v, str):
                n = _int_or_none(v)
                if n is None or not -(2**63) <= n < 2**63:
                    skipped.add(MALFORMED_ARGS)
                    n = NONE
                v = n
            out[j, i] = v
    return out


def _process_names(events: Iterable[_Event]) -> dict[int, str]:
    out = {}
    for e in events:
        if e.ph == "M" and e.name == "process_name" and isinstance(e.pid, int) and e.args is not None:
            if isinstance(e.args.name, str):
                out[e.pid] = e.args.name
    return out


def _devices(props: list | None, table: EventTable) -> tuple[DeviceInfo, ...]:
    gpu = table.kind <= Kind.GPU_ANNOTATION
    seen = sorted(int(d) for d in np.unique(table.device[gpu]) if d >= 0)
    known: dict[int, dict] = {}
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict) and isinstance(p.get("id"), int):
            known[p["id"]] = p
    out = []
    # deviceProperties lists every GPU of the machine; a trace's devices are those with activity
    for idx in seen:
        p = known.get(idx, {})
        name = p.get("name") if isinstance(p.get("name"), str) else ""
        cc = None
        if isinstance(p.get("computeMajor"), int):
            cc = f"{p['computeMajor']}.{p.get('computeMinor', 0)}"
        out.append(
            DeviceInfo(
                index=idx,
                name=name or f"GPU {idx} (name not in trace)",
                name_source="trace" if name else "missing",
                memory_bytes=p.get("totalGlobalMem") if isinstance(p.get("totalGlobalMem"), int) else None,
                sm_count=p.get("numSms") if isinstance(p.get("numSms"), int) else None,
                compute_capability=cc,
            )
        )
    return tuple(out)


def _dist(info, key: str) -> int | None:
    if isinstance(info, dict):
        v = info.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _int_or_none(v) -> int | None:
    """An int64 from an int or a decimal string; None otherwise (bools, floats, out of range)."""
    if isinstance(v, str):
        t = v.strip()
        v = int(t) if t.isascii() and 0 < len(t) <= 20 and t.lstrip("+-").isdigit() else None
    if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63:
        return v
    return None


def _short(e: Exception) -> str:
    s = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return s[:160]


__all__ = ["load_kineto", "CopyKind"]
