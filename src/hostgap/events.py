"""The event table: one representation of every trace hostgap reads.

Every loader (``hostgap.readers.kineto``, ``hostgap.readers.nsys``) turns a file into a
:class:`Trace`: an :class:`EventTable` of columns (numpy arrays, one row per event), the
event names, and :class:`TraceMeta`. Events are classified once, at load, into a
:class:`Kind`; nothing downstream looks at category strings again.

Units: every time is an int64 count of nanoseconds on the trace's own clock (``start_ns``,
``dur_ns``); byte counts are int64 (``bytes``). Columns that do not apply to an event hold
:data:`NONE` (-1): the event's kind, not the value, says what the row is.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from hostgap.errors import HostgapError

NONE = -1
"""Value of an integer column that does not apply to an event (e.g. ``stream`` of a CPU op)."""


class Kind(enum.IntEnum):
    """What an event is. GPU-side kinds first."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    GPU_ANNOTATION = 3  # a range on a GPU stream (Kineto gpu_user_annotation)
    LAUNCH = 4  # host API call that enqueues one kernel (cudaLaunchKernel*, cuLaunchKernel, hip*)
    GRAPH_LAUNCH = 5  # host API call that replays a graph (cudaGraphLaunch, hipGraphLaunch)
    RUNTIME = 6  # any other runtime/driver API call (sync, memcpy API, attribute queries ...)
    CPU_OP = 7  # framework operator (aten::*, custom ops)
    PYTHON = 8  # Python frame (python_function)
    ANNOTATION = 9  # host-side range: record_function / user_annotation / NVTX
    LIBRARY = 10  # vendor-library API call (cuBLAS, cuDNN ...), when the trace records them


GPU_OP_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
"""Kinds whose union is GPU-active ("busy") time."""

HOST_API_KINDS = (Kind.LAUNCH, Kind.GRAPH_LAUNCH, Kind.RUNTIME)


class CopyKind(enum.IntEnum):
    """Direction of a memcpy; ``OTHER`` for memsets and unknown directions."""

    OTHER = 0
    H2D = 1
    D2H = 2
    D2D = 3
    P2P = 4


COLUMNS: dict[str, np.dtype] = {
    "kind": np.dtype(np.int8),  # Kind
    "start_ns": np.dtype(np.int64),
    "dur_ns": np.dtype(np.int64),
    "pid": np.dtype(np.int64),  # host process id; for GPU ops the process that owns them when known
    "tid": np.dtype(np.int64),  # host thread id; for GPU ops the stream id
    "device": np.dtype(np.int32),  # GPU index for GPU-side events, NONE for host events
    "stream": np.dtype(np.int64),  # stream for GPU-side events, NONE for host events
    "correlation": np.dtype(np.int64),  # launch <-> GPU op link (unique within link_key)
    "link_key": np.dtype(np.int64),  # scope of ``correlation``: the process of the launch
    "external_id": np.dtype(np.int64),  # Kineto "External id": op <-> launch <-> GPU op
    "name": np.dtype(np.int32),  # index into Trace.names
    "bytes": np.dtype(np.int64),  # memcpy/memset bytes, 0 otherwise
    "copy_kind": np.dtype(np.int8),  # CopyKind
}
"""Every column of an :class:`EventTable`, with its dtype. Declared once; validated at load."""


@dataclass(frozen=True)
class EventTable:
    """Columns of equal length, rows sorted by ``start_ns`` (stable)."""

    kind: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    link_key: np.ndarray
    external_id: np.ndarray
    name: np.ndarray
    bytes: np.ndarray
    copy_kind: np.ndarray

    def __len__(self) -> int:
        return len(self.kind)

    @cached_property
    def end_ns(self) -> np.ndarray:
        """``start_ns + dur_ns``, computed once per table (the analysis asks for it dozens of
        times) and read-only, so no caller can change what the next one reads."""
        end = self.start_ns + self.dur_ns
        end.flags.writeable = False
        return end

    def take(self, index: np.ndarray) -> EventTable:
        """Rows selected by an index array or boolean mask (order kept)."""
        return EventTable(**{c: getattr(self, c)[index] for c in COLUMNS})

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        """Boolean mask of the rows whose kind is one of ``kinds``: one comparison per kind
        (a handful at most), 5-10x faster than ``np.isin``'s sort on a large table."""
        out = np.zeros(len(self.kind), dtype=bool)
        same = np.empty(len(self.kind), dtype=bool)
        for k in {int(k) for k in kinds}:
            np.equal(self.kind, k, out=same)
            out |= same
        return out

    @staticmethod
    def from_columns(columns: dict[str, np.ndarray]) -> EventTable:
        """Build a table from column arrays, casting to the declared dtypes and sorting rows
        by start time. Raises ``ValueError`` on missing columns or unequal lengths. Columns that
        already have their dtype and order are used as they are (no copy: traces are large)."""
        missing = set(COLUMNS) - set(columns)
        if missing:
            raise ValueError(f"missing event columns: {sorted(missing)}")
        cast = {c: np.asarray(columns[c]).astype(dt, copy=False) for c, dt in COLUMNS.items()}
        lengths = {len(v) for v in cast.values()}
        if len(lengths) > 1:
            raise ValueError(f"event columns have unequal lengths: {sorted(lengths)}")
        order = np.argsort(cast["start_ns"], kind="stable")
        if not np.all(order[1:] > order[:-1]):  # (True when empty)
            cast = {c: v[order] for c, v in cast.items()}
        return EventTable(**cast)

    @staticmethod
    def empty() -> EventTable:
        return EventTable(**{c: np.zeros(0, dtype=dt) for c, dt in COLUMNS.items()})

    def validate(self) -> None:
        """Check dtypes, lengths, ordering and non-negative durations."""
        n = len(self.kind)
        for c, dt in COLUMNS.items():
            col = getattr(self, c)
            if col.dtype != dt or col.shape != (n,):
                raise ValueError(f"column {c}: dtype {col.dtype} shape {col.shape}, want {dt} ({n},)")
        if n and np.any(np.diff(self.start_ns) < 0):
            raise ValueError("events are not sorted by start_ns")
        if n and np.any(self.dur_ns < 0):
            raise ValueError("negative durations in event table")


@dataclass(frozen=True)
class DeviceInfo:
    """What the trace says about one GPU. ``name`` is never empty: when the trace has no
    device name it says so (``name_source == "missing"``)."""

    index: int
    name: str
    name_source: str = "trace"  # "trace" or "missing"
    memory_bytes: int | None = None
    sm_count: int | None = None
    compute_capability: str | None = None


@dataclass(frozen=True)
class TraceMeta:
    """Facts about the trace beyond its events."""

    path: str
    format: str  # "kineto" or "nsys"
    base_time_ns: int | None = None  # add to start_ns for wall-clock (Unix) ns, when known
    devices: tuple[DeviceInfo, ...] = ()
    rank: int | None = None
    world_size: int | None = None
    skipped: dict[str, int] = field(default_factory=dict)  # event-level problems, by reason
    flows: int = 0  # flow events (Kineto ac2g/async_gpu) seen
    processes: dict[int, str] = field(default_factory=dict)  # pid -> process name
    extra: dict[str, object] = field(default_factory=dict)  # format-specific facts


@dataclass(frozen=True)
class Trace:
    """One loaded trace: the event table, the name strings it indexes, and metadata."""

    events: EventTable
    names: tuple[str, ...]
    meta: TraceMeta

    def name_of(self, row: int) -> str:
        return self.names[int(self.events.name[row])]

    def names_of(self, rows: np.ndarray) -> list[str]:
        names = self.names
        return [names[i] for i in self.events.name[rows]]

    def name_mask(self, predicate) -> np.ndarray:
        """Boolean mask over rows whose name satisfies ``predicate(str) -> bool``.

        Evaluated once per distinct name, not per event."""
        hit = np.fromiter((bool(predicate(s)) for s in self.names), dtype=bool, count=len(self.names))
        return hit[self.events.name] if len(self.names) else np.zeros(len(self.events), dtype=bool)

    @property
    def has_device_activity(self) -> bool:
        return bool(np.any(self.events.of_kind(*GPU_OP_KINDS)))


class NameTable:
    """Interns strings into dense integer codes while a loader builds a trace."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}

    def code(self, s: str) -> int:
        c = self._codes.get(s)
        if c is None:
            c = self._codes[s] = len(self._codes)
        return c

    def codes(self, strings) -> np.ndarray:
        get = self._codes.setdefault
        out = [get(s, len(self._codes)) for s in strings]
        return np.asarray(out, dtype=np.int32)

    def names(self) -> tuple[str, ...]:
        return tuple(self._codes)


class SkipCounter(Counter):
    """Counts skipped events by reason (what ``TraceMeta.skipped`` holds)."""

    def add(self, reason: str, n: int = 1) -> None:
        if n:
            self[reason] += int(n)


def require(condition: bool, path: str, problem: str) -> None:
    """Raise a one-line :class:`HostgapError` about ``path`` unless ``condition`` holds."""
    if not condition:
        raise HostgapError(path, problem)


def distinct(values) -> np.ndarray:
    """``np.unique(values)``: the sorted distinct values. A 1-D integer array's are found by
    sorting: numpy 2.3+ finds them by hashing, which measured 10-17x slower than a sort on the
    hundreds of thousands of rows of a large trace (bench/results/ingest-stages.md). Any other
    array is given to ``np.unique`` itself."""
    a = np.asarray(values)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        return np.unique(a)
    s = np.sort(a)
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
