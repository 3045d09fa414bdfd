"""PyTorch profiler / Kineto Chrome-trace JSON (``.json`` or gzip) → :class:`Trace`.

Also what vLLM and SGLang write. Handles the current category names and the 2021 legacy ones
(``Kernel``, ``Runtime``, ``Memcpy``, ``async_gpu``, lowercase ``external id``), float-µs
timestamps with ns precision and integer-µs ones, ``baseTimeNanoseconds``,
``deviceProperties``, ``distributedInfo`` and flow events, for CUDA and HIP.

Speed and memory: gzip is inflated into one preallocated buffer (no second copy); one msgspec
pass splits ``traceEvents`` into raw byte spans without building objects; the events are then
decoded in batches of :data:`BATCH` straight into typed structs holding only the fields hostgap
uses, and each batch becomes numpy columns before the next is decoded. So the peak memory is the
JSON text plus one batch, and the load takes about as long as a bare ``orjson.loads`` of the
text. A batch whose events do not fit the typed schema (a string where a number belongs, ...)
is decoded again leniently, event by event, and the misfits are skipped and counted by reason.

Timestamps: ``ns = round(ts_us * 1000)``, never truncated to whole µs. The float64 that a
3-decimal µs timestamp parses to gives the exact ns below 2**41 µs (~25 days of uptime on the
monotonic clock Kineto uses) and is within 1 ns up to 2**43 µs (~100 days); the file's decimal
text is the limit there, not the conversion.
"""

from __future__ import annotations

import zlib
from collections import Counter
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

I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
"""An integer that fits the int64 columns (JSON allows any size; a larger one is a misfit)."""
Num = I64 | float

MAX_ABS_NS = 2**62
"""Timestamps and durations beyond this (in ns) are skipped as out of range: start + dur then
always fits in int64, and no real clock is within orders of magnitude of it."""


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
    ts: Num | None = None
    dur: Num | None = None
    pid: I64 | str | None = NONE
    tid: I64 | str | None = NONE
    args: _Args | None = None


class _RawDoc(msgspec.Struct):
    traceEvents: list[msgspec.Raw] | None = None
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None


BATCH = 4096
"""Events decoded into structs at a time (bounds the memory beyond the JSON text itself)."""

_EVENTS = msgspec.json.Decoder(list[_Event])


class _LooseDoc(msgspec.Struct):
    traceEvents: Any = None
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None


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


def load_kineto(path: str) -> Trace:
    """Load a Kineto JSON trace. Whole-file problems raise :class:`HostgapError`."""
    raw = _read_bytes(path)
    try:
        doc = msgspec.json.decode(raw, type=_RawDoc)
    except msgspec.ValidationError:
        doc = _decode_loose(path, raw)  # raises: traceEvents is not a list, or not an object
    except msgspec.DecodeError as e:
        raise HostgapError(path, f"invalid JSON ({_short(e)})") from None
    if doc.traceEvents is None:
        raise HostgapError(path, "JSON has no traceEvents: not a PyTorch profiler / Kineto trace")
    skipped = SkipCounter()
    try:
        columns, names, processes, flows = _decode_events(doc.traceEvents, skipped)
    except msgspec.DecodeError as e:  # the first pass checks structure, not string encoding
        raise HostgapError(path, f"invalid JSON ({_short(e)})") from None
    del raw, doc.traceEvents
    table = EventTable.from_columns(columns)
    meta = TraceMeta(
        path=path,
        format="kineto",
        base_time_ns=_int_or_none(doc.baseTimeNanoseconds),
        devices=_devices(doc.deviceProperties, table),
        rank=_dist(doc.distributedInfo, "rank"),
        world_size=_dist(doc.distributedInfo, "world_size"),
        skipped=dict(skipped),
        flows=flows,
        processes=processes,
    )
    return Trace(table, names, meta)


def _decode_events(raws: list[msgspec.Raw], skipped: SkipCounter):
    """Decode the raw events batch by batch into columns (see the module docstring). Consumes
    ``raws``: each batch's spans are dropped once decoded, and its columns are copied into
    arrays sized for every event, so the peak stays near the JSON text itself."""
    codes: dict[str, int] = {}
    columns: dict[str, np.ndarray] = {}
    processes, flows, n, capacity = {}, 0, 0, len(raws)
    while raws:
        chunk = b"[" + b",".join(raws[:BATCH]) + b"]"
        del raws[:BATCH]
        try:
            events = _EVENTS.decode(chunk)
        except msgspec.ValidationError:
            events = _coerce_events(msgspec.json.decode(chunk), skipped)
        del chunk
        cols, procs, n_flows = _columns(events, skipped, codes)
        del events
        m = len(cols["kind"])
        for c, v in cols.items():
            if c not in columns:
                columns[c] = np.empty(capacity, dtype=v.dtype)
            columns[c][n : n + m] = v
        n += m
        processes.update(procs)
        flows += n_flows
    if not columns:
        columns = _columns([], skipped, codes)[0]
    names = tuple("" if n is None else n for n in codes)
    return _finish({c: v[:n] for c, v in columns.items()}, names), names, processes, flows


# -- reading ---------------------------------------------------------------------------


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise HostgapError(path, f"cannot read ({e.strerror})") from None
    if not raw:
        raise HostgapError(path, "empty file")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = _gunzip(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise HostgapError(path, f"truncated or corrupt gzip ({_short(e)})") from None
        if not raw:
            raise HostgapError(path, "empty file inside gzip")
    return raw


MAX_GZIP_RATIO = 128
"""Preallocate at most this many times the compressed size (JSON traces inflate ~10-30x);
a larger text still loads, growing the buffer."""


def _gunzip(data: bytes) -> bytearray:
    """Every member of a gzip stream, inflated into one buffer sized from the gzip trailer
    (``bytes.join`` or ``gzip.decompress`` would hold the text twice at their peak). Input is
    fed in small slices and output taken in bounded chunks, so nothing else is ever large."""
    # the trailer's size (mod 2**32) is trusted only up to a plausible ratio: a truncated or
    # corrupt file ends in arbitrary bytes and must not allocate gigabytes
    size_hint = int.from_bytes(data[-4:], "little") if len(data) >= 18 else 0
    out = bytearray(min(size_hint, MAX_GZIP_RATIO * len(data)))
    pos = 0
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    view, off = memoryview(data), 0
    while True:
        pending = view[off : off + (1 << 16)]
        off += len(pending)
        while True:
            chunk = d.decompress(pending, 1 << 20)
            if chunk:
                end = pos + len(chunk)
                if end > len(out):  # the trailer holds the size mod 2**32, or more members follow
                    out.extend(bytes(max(end - len(out), len(out) // 2)))
                out[pos:end] = chunk
                pos = end
            pending = d.unconsumed_tail
            if not pending or d.eof:
                break
        if d.eof:
            rest = bytes(d.unused_data) + bytes(view[off:])
            rest = rest.lstrip(b"\x00")  # members may be followed by zero padding
            if not rest:
                break
            view, off = memoryview(rest), 0
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        elif off >= len(view):
            raise EOFError("compressed stream ended before the end-of-stream marker")
    del out[pos:]
    return out


def _decode_loose(path: str, raw: bytes) -> _LooseDoc:
    try:
        doc = msgspec.json.decode(raw, type=_LooseDoc)
    except msgspec.ValidationError:
        raise HostgapError(path, "JSON is not an object with traceEvents: not a Kineto trace") from None
    except msgspec.DecodeError as e:
        raise HostgapError(path, f"invalid JSON ({_short(e)})") from None
    if doc.traceEvents is not None and not isinstance(doc.traceEvents, list):
        raise HostgapError(path, "traceEvents is not a list")
    return doc


def _coerce_events(events: list, skipped: SkipCounter) -> list[_Event]:
    """Slow path: convert events one by one, skipping those that do not fit."""
    out = []
    for e in events:
        if not isinstance(e, dict):
            skipped.add("not an object")
            continue
        try:
            out.append(msgspec.convert(e, _Event))
            continue
        except msgspec.ValidationError:
            pass
        # salvage: drop malformed args rather than the event, when the core fields are fine
        args = e.get("args")
        try:
            ev = msgspec.convert({k: v for k, v in e.items() if k != "args"}, _Event)
        except msgspec.ValidationError:
            skipped.add("malformed fields")
            continue
        skipped.add(MALFORMED_ARGS)
        if isinstance(args, dict):
            clean = {}
            for k in ("correlation", "External id", "external id", "device", "stream", "bytes"):
                v = args.get(k)
                if isinstance(v, str):
                    v = _int_or_none(v)
                if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63:
                    clean[k] = v
            ev.args = _Args(**{_ARG_FIELDS[k]: v for k, v in clean.items()})
        out.append(ev)
    return out


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
    processes = _process_names(events) if phases["M"] else {}
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
            reason = f"ignored category: {c}" if c in _IGNORED_CATEGORIES else f"unknown category: {c}"
            skipped.add(reason, n)

    # typed decode guarantees int | float | None; None becomes NaN
    ts = _floats(ev, "ts")
    dur = _floats(ev, "dur")
    bad_time = ~unknown & (np.isnan(ts) | np.isnan(dur))
    skipped.add("missing ts or dur", int(bad_time.sum()))
    neg = ~unknown & ~bad_time & (dur < 0)
    skipped.add("negative duration", int(neg.sum()))
    with np.errstate(invalid="ignore", over="ignore"):
        huge = ~unknown & ~bad_time & ~neg & ((np.abs(ts) * 1000.0 >= MAX_ABS_NS) | (dur * 1000.0 >= MAX_ABS_NS))
    skipped.add("timestamp out of range", int(huge.sum()))
    ok = ~(unknown | bad_time | neg | huge)
    sel = np.flatnonzero(ok)
    if len(sel) < len(ev):  # the kept events only, so skipped ones cannot add malformed-arg counts
        ev = [ev[i] for i in sel]
    kind = kind[sel].astype(np.int8)
    with np.errstate(invalid="ignore"):
        start_ns = np.rint(ts[sel] * 1000.0).astype(np.int64)
        dur_ns = np.rint(dur[sel] * 1000.0).astype(np.int64)

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
    return columns, processes, flows


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


def _floats(ev: list[_Event], field: str) -> np.ndarray:
    try:
        return np.fromiter(map(attrgetter(field), ev), dtype=np.float64, count=len(ev))
    except TypeError:  # a None among them: numpy turns it into NaN
        return np.array([getattr(e, field) for e in ev], dtype=np.float64)


def _intern(ev: list[_Event], codes: dict) -> np.ndarray:
    """Name codes (int32) into ``codes`` (new names appended in order of first appearance; a
    missing name is the key None, read back as "")."""
    names = list(map(_NAME, ev))
    for n in dict.fromkeys(names):
        if n not in codes:
            codes[n] = len(codes)
    return np.fromiter(map(codes.__getitem__, names), dtype=np.int32, count=len(names))


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
    n = int(s)
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


def _process_names(events: list[_Event]) -> dict[int, str]:
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
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v.strip()) if v.strip().isascii() else None
        except ValueError:
            return None
    return None


def _short(e: Exception) -> str:
    s = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return s[:160]


__all__ = ["load_kineto", "CopyKind"]
