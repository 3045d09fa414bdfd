"""PyTorch profiler / Kineto Chrome-trace JSON (``.json`` or gzip) → :class:`Trace`.

Also what vLLM and SGLang write. Handles the current category names and the 2021 legacy ones
(``Kernel``, ``Runtime``, ``Memcpy``, ``async_gpu``, lowercase ``external id``), float-µs
timestamps with ns precision and integer-µs ones, ``baseTimeNanoseconds``,
``deviceProperties``, ``distributedInfo`` and flow events, for CUDA and HIP.

Speed and memory: the text is read and (gzip) inflated chunk by chunk and never held whole
(:mod:`hostgap.readers.kineto.stream`): each chunk of complete events is decoded in one msgspec
pass straight into typed structs holding only the fields hostgap uses, and batches of
:data:`BATCH` events become numpy columns (:mod:`hostgap.readers.kineto.schema`: the schema and
the columns), kept as pieces and joined once at the end. So the
peak memory is the columns plus a few chunks, whatever the size of the text. A chunk whose
events do not all fit the typed schema (a string where a number belongs, ...) is split into raw
spans and decoded again leniently, event by event; the misfits are skipped and counted by
reason. A document the stream cannot split (docs/input.md: text that must be fenced, a
duplicated ``traceEvents``, an unusual layout) is loaded whole, with the same results.

Timestamps: ``ts`` and ``dur`` are kept as their JSON text and converted to int64 ns exactly
(:mod:`hostgap.readers.decimal_ns`): epoch-µs integers and fractional µs alike, no binary float on
the way; a fourth decimal and beyond is rounded half to even.

Hostile input (docs/input.md): the inflated text is bounded (:mod:`hostgap.readers.text`: 200x
the compressed size and 16 GiB in all, ``HOSTGAP_MAX_TRACE_BYTES`` overrides the latter), JSON nesting is bounded by msgspec's recursion limit, and an event whose
text does not decode (a number beyond any range, invalid UTF-8, a lone surrogate escape, a raw
control character in a string) is skipped and counted with its index in ``traceEvents``
(``meta.extra["skipped_at"]``: the first few per reason); only whole-file problems reject the
file.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import msgspec
import numpy as np

from hostgap.errors import HostgapError
from hostgap.events import CopyKind, DeviceInfo, EventTable, Kind, SkipCounter, Trace, TraceMeta, distinct
from hostgap.readers.kineto.compiled import (
    Batches,
    RawColumns,
    Strings,
    concat,
    native,
    raw_from_events,
    raw_from_native,
    rows,
    take,
)
from hostgap.readers.kineto.schema import (
    ABSENT,
    MALFORMED_ARGS,
    Args,
    Event,
    EventLooseArgs,
    batch_columns,
    int_or_none,
    refine,
)
from hostgap.readers.kineto.stream import EventStream, NotStreamable
from hostgap.readers.text import fence_control_char, fence_lone_surrogates, read_trace_text


class _RawDoc(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None
    baseTimeNanoseconds: msgspec.Raw = ABSENT  # metadata is decoded leniently (_meta_value)
    deviceProperties: msgspec.Raw = ABSENT
    distributedInfo: msgspec.Raw = ABSENT


BATCH = 4096
"""Events decoded into structs at a time (bounds the memory beyond the JSON text itself)."""

_EVENTS = msgspec.json.Decoder(list[Event])
_EVENT = msgspec.json.Decoder(Event)
_EVENT_LOOSE_ARGS = msgspec.json.Decoder(EventLooseArgs)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
SKIPPED_AT_KEEP = 5
"""Indices (in ``traceEvents``) kept per skip reason for malformed events."""


class _LooseDoc(msgspec.Struct):
    traceEvents: msgspec.Raw = ABSENT


STREAMING = True
"""Load Kineto JSON chunk by chunk (:mod:`hostgap.readers.kineto.stream`); False loads the text
whole first (the path every document the stream cannot split takes anyway)."""


PARALLEL_MIN_BYTES = 16 << 20
"""Text (an estimate for gzip) below which a trace is decoded on one thread whatever ``jobs``
says: a few chunks gain less than the worker threads cost (bench/results/ingest-parallel.md)."""

PARALLEL_FINISH_ROWS = 1 << 20
"""Events below which the loaded columns are joined and sorted on one thread."""

Progress = Callable[[int, "int | None"], None]


def load_kineto(path: str, *, jobs: int = 1, progress: Progress | None = None) -> Trace:
    """Load a Kineto JSON trace. Whole-file problems raise :class:`HostgapError`; events that
    do not fit are skipped and counted by reason in ``meta.skipped``, and the kept ones plus
    the skipped ones (reasons not marked "event kept") add up to ``len(traceEvents)``.

    ``jobs`` > 1 decodes chunks of the text on that many threads (compiled decoder only; the
    result is the same). ``progress(bytes_read, file_size)`` is called on this thread after
    each chunk and once at the end (bytes of the file: compressed bytes for gzip)."""
    if STREAMING:
        try:
            return _load_streaming(path, jobs, progress)
        except NotStreamable:
            pass  # an unusual document: loaded whole, where odd text is fenced or reported
    trace = _load_whole(path)
    if progress is not None:
        size = os.path.getsize(path)
        progress(size, size)
    return trace


def _load_streaming(path: str, jobs: int, progress: Progress | None) -> Trace:
    ext = native()
    builder = _Builder() if ext is None else _NativeBuilder(ext)
    if ext is not None and jobs > 1 and text_size_hint(path) >= PARALLEL_MIN_BYTES:
        stream = EventStream(path, builder.decode_list, speculate=_speculator(ext), jobs=jobs)
    else:
        stream = EventStream(path, builder.decode_list)
    size = os.path.getsize(path) if progress is not None else None
    for events in stream:
        builder.add(events)
        if progress is not None:
            progress(stream.bytes_read[0], size)
    trace = _trace(path, builder, {k: _meta_value(v) for k, v in stream.meta.items()}, jobs)
    if progress is not None:
        progress(stream.bytes_read[0], size)
    return trace


def _speculator(ext) -> Callable[[bytearray], object]:
    """``ext.decode`` with memory each thread reuses from chunk to chunk (``ext.scratch()``)."""
    local = threading.local()

    def speculate(text: bytearray) -> object:
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = ext.scratch()
        return ext.decode(text, scratch)

    return speculate


def text_size_hint(path: str) -> int:
    """The size of a file's JSON text, for choosing a decoding path only: the file's size, or
    for gzip the size its trailer gives (mod 2^32) or 8x the compressed size, the larger."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b" or size < 18:
            return size
        f.seek(size - 4)
        return max(int.from_bytes(f.read(4), "little"), 8 * size)


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


def _trace(path: str, builder: _Builder, top: dict, jobs: int = 1) -> Trace:
    """The trace from the decoded events and the top-level metadata values."""
    columns, names = builder.finish(jobs)
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
        base_time_ns=int_or_none(top["baseTimeNanoseconds"]),
        devices=_devices(top["deviceProperties"], table),
        rank=_dist(top["distributedInfo"], "rank"),
        world_size=_dist(top["distributedInfo"], "world_size"),
        # sorted: the order reasons were first met in depends on how the text was split
        skipped={_located(r, skipped_at.get(r), n): n for r, n in sorted(skipped.items())},
        flows=builder.flows,
        processes=builder.processes,
        extra={
            "events_in_file": n_input,
            "metadata_events": builder.metadata,
            **({"skipped_at": skipped_at} if skipped_at else {}),
        },
    )
    return Trace(table, names, meta)


def _decode_doc(path: str, raw) -> _RawDoc:
    """The top level with ``traceEvents`` split into raw spans. Text that would fail the whole
    decode for one value's sake (lone surrogate escapes, raw control characters) is fenced
    into that value first (:mod:`hostgap.readers.text`); anything else is a whole-file error."""
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
        self.carry: list[Event] = []

    def decode_list(self, text: bytes) -> list[Event]:
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

    def decode_spans(self, batch: list[msgspec.Raw]) -> list[Event]:
        """The events of one batch of raw spans (the lenient path for those that fail)."""
        try:
            events = _EVENTS.decode(b"[" + b",".join(batch) + b"]")
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            events = _events_one_by_one(batch, self.n_input, self.skipped, self.skipped_at)
        self.n_input += len(batch)
        return events

    def add(self, events: list[Event]) -> None:
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

    def _columns(self, events: list[Event]) -> None:
        cols, procs, n_flows, n_meta = batch_columns(events, self.skipped, self.codes)
        for c, v in cols.items():
            self.pieces.setdefault(c, []).append(v)
        self.processes.update(procs)
        self.flows += n_flows
        self.metadata += n_meta

    def _flush(self) -> None:
        """The last (partial) batch."""
        self._columns(self.carry)
        self.carry = []

    def finish(self, jobs: int = 1) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
        """The columns (sorted by start, stable) and the name table; on ``jobs`` threads when
        there are at least :data:`PARALLEL_FINISH_ROWS` rows (numpy copies without the GIL)."""
        self._flush()
        names = tuple("" if n is None else n for n in self.codes)
        start = _join(self.pieces.pop("start_ns"))
        order = np.argsort(start, kind="stable")
        columns = {"start_ns": start[order]}
        del start

        def column(c: str) -> np.ndarray:
            out = _join(self.pieces.pop(c))[order]
            _release_freed_memory()  # the pieces' memory, before the next column is built
            return out

        rest = list(self.pieces)
        if jobs > 1 and len(order) >= PARALLEL_FINISH_ROWS:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(jobs, len(rest)), thread_name_prefix="hostgap-columns") as pool:
                columns.update(zip(rest, pool.map(column, rest)))
        else:
            columns.update((c, column(c)) for c in rest)
        return refine(columns, names), names


_UNSET = object()


class _NativeChunk:
    """A chunk decoded by the compiled decoder (its raw tuple, see kineto_columns)."""

    __slots__ = ("t",)

    def __init__(self, t: tuple) -> None:
        self.t = t


class _NativeBuilder(_Builder):
    """The compiled path (:mod:`hostgap.readers.kineto.compiled`): a chunk the extension takes
    becomes raw columns without a Python object per event; any other chunk takes the msgspec
    path of :class:`_Builder` and is converted. Batches of :data:`BATCH` events are cut from the
    raw columns exactly where :class:`_Builder` cuts its event lists, so every batch-level
    result (string pid codes, name order) is the same."""

    def __init__(self, ext) -> None:
        super().__init__()
        self.ext = ext
        self.scratch = ext.scratch()
        self.strings = Strings()
        self.batches = Batches(self.strings, self.codes)
        self.raw_carry: RawColumns | None = None

    def decode_list(self, text, speculated=_UNSET) -> list[Event] | _NativeChunk:  # type: ignore[override]
        """:meth:`_Builder.decode_list` by the compiled decoder; ``speculated``: its result for
        ``text``, computed on a worker thread (:class:`~hostgap.readers.kineto.stream.EventStream`)."""
        t = self.ext.decode(text, self.scratch) if speculated is _UNSET else speculated
        if t is None:  # not plain: the msgspec path decides, exactly as without the extension
            return super().decode_list(text)
        self.n_input += t[0]
        return _NativeChunk(t)

    def add(self, events) -> None:
        if isinstance(events, _NativeChunk):
            raw = raw_from_native(events.t, self.strings)
        else:
            raw = raw_from_events(events, self.strings)
        carry = self.raw_carry
        if carry is not None and rows(carry):
            # the carry and the head of this chunk make the next batch: only they are copied
            # together, the rest of the chunk is cut where it lies (the batches are the same)
            need = BATCH - rows(carry)
            if rows(raw) < need:
                self.raw_carry = concat([carry, raw])
                return
            self._raw_columns(concat([carry, take(raw, 0, need)]))
            raw = take(raw, need, rows(raw))
        n = rows(raw)
        full = n - n % BATCH
        if full and not ((raw["pid_map"][:full] >= 0).any() or (raw["tid_map"][:full] >= 0).any()):
            # the only per-batch result is the code of a string pid/tid: without one, the full
            # batches of this chunk give the same columns as one batch (names are coded in order
            # of first appearance, counts add up, pieces join in order), at a fraction of the calls
            self._raw_columns(take(raw, 0, full))
        else:
            for i in range(0, full, BATCH):
                self._raw_columns(take(raw, i, i + BATCH))
        self.raw_carry = take(raw, full, n)

    def _raw_columns(self, raw: RawColumns) -> None:
        cols, procs, n_flows, n_meta = self.batches.columns(raw, self.skipped)
        for c, v in cols.items():
            self.pieces.setdefault(c, []).append(v)
        self.processes.update(procs)
        self.flows += n_flows
        self.metadata += n_meta

    def _flush(self) -> None:
        if self.raw_carry is None:
            self.raw_carry = raw_from_events([], self.strings)
        self._raw_columns(self.raw_carry)
        self.raw_carry = None


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
    baseTimeNanoseconds: msgspec.Raw = ABSENT
    deviceProperties: msgspec.Raw = ABSENT
    distributedInfo: msgspec.Raw = ABSENT


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


def _events_one_by_one(
    batch: list[msgspec.Raw], base: int, skipped: SkipCounter, skipped_at: dict[str, list[int]]
) -> list[Event]:
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
        out.append(
            Event(loose.ph, loose.cat, loose.name, loose.ts, loose.dur, loose.pid, loose.tid, _salvage_args(loose.args))
        )
    return out


def _salvage_args(raw: msgspec.Raw) -> Args:
    """The integer args that are well-formed; the rest dropped."""
    try:
        args = msgspec.json.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return Args()
    clean = {}
    if isinstance(args, dict):
        for k, field_name in _ARG_FIELDS.items():
            v = args.get(k)
            if isinstance(v, str):
                v = int_or_none(v)
            if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63:
                clean[field_name] = v
    return Args(**clean)


_ARG_FIELDS = {
    "correlation": "correlation",
    "External id": "external_id",
    "external id": "external_id_legacy",
    "device": "device",
    "stream": "stream",
    "bytes": "bytes",
}


def _devices(props: list | None, table: EventTable) -> tuple[DeviceInfo, ...]:
    gpu = table.kind <= Kind.GPU_ANNOTATION
    seen = sorted(int(d) for d in distinct(table.device[gpu]) if d >= 0)
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


def _short(e: Exception) -> str:
    s = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return s[:160]


__all__ = ["load_kineto", "CopyKind"]
