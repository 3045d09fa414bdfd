"""One trace analysed: loaded once, linked once, its step anatomy and GPU overview computed on
first use, all with one :class:`~hostgap.anatomy.steps.AnalysisOptions`.

Every command and library function that analyses a trace goes through :func:`analyse_trace`
(``analyze``, ``steps``, ``kernels``, ``trim``, ``overlay``, ``report``, ``compare``, trace sets,
attach, the measuring protocol, the harvest): it is the one caller of the loader outside
:mod:`hostgap.readers`. The stages run in the order the memory profile of large traces wants
(link, then the overview, then the anatomy, the allocator's free memory released between them,
:func:`hostgap.memory.release_free_memory`), and each runs at most once per trace.

A trace file of :data:`CACHE_MIN_BYTES` or more is kept in the cache (:mod:`.trace_cache`): its decoded
table, its links, and per set of options the documents and the launch table, so the next command
on the same file reads them instead of parsing and analysing again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import fields, replace
from functools import cached_property
from typing import Any

import numpy as np

from hostgap.analysis import trace_cache as C
from hostgap.anatomy.link import Enclosing, Launches, Links, Nesting, enclosing_links, launch_links
from hostgap.anatomy.steps import AnalysisOptions, Anatomy, analyze
from hostgap.events import Trace
from hostgap.memory import available_bytes, release_free_memory
from hostgap.parallel.beside import Beside

Progress = Callable[[str], None]
BytesProgress = Callable[[int, "int | None"], None]

LOAD_PROGRESS: ContextVar[BytesProgress | None] = ContextVar("hostgap_load_progress", default=None)
"""``progress(bytes_read, file_size)`` for every trace this context decodes (the command line's
progress bar, :func:`hostgap.api.reporting_loads`); a load given its own callback uses that."""

CACHE_MIN_BYTES = 1 << 20
"""Files smaller than this are analysed from scratch every time (``HOSTGAP_CACHE_MIN``
overrides): decoding them costs less than reading an entry."""

BESIDE_MIN_EVENTS = 1_000_000
"""Traces of at least this many events have their enclosures linked in a child process beside
the GPU timeline and the steps' split (``HOSTGAP_BESIDE_MIN_EVENTS`` overrides; ``HOSTGAP_JOBS=1``
turns it off): below it, forking and sending the arrays back cost about what they save."""

BESIDE_BYTES_PER_EVENT = 95
"""The child's own memory per event of the trace (its arrays and temporaries, and the pages the
command changes while it runs; the trace itself is shared): 0.54-0.61 GB measured on a 6.6 M-event
trace (bench/ingest_memory.py). A child is forked only where the system has twice that available
(``MemAvailable``), so that it never pushes the machine into swap."""


class TraceAnalysis:
    """A trace and what has been computed of it (lazily, once each; from the cache entry
    ``entry`` when it holds it). Made from a loaded trace, or from a file path whose trace is
    loaded only when a part needs it: a document the cache holds is read without it."""

    def __init__(
        self,
        trace: Trace | None = None,
        options: AnalysisOptions = AnalysisOptions(),
        entry: C.Entry | None = None,
        *,
        path: str | None = None,
        progress: Progress | None = None,
        jobs: int | None = None,
        on_bytes: BytesProgress | None = None,
    ):
        if trace is None and path is None:
            raise ValueError("a trace or a path")
        if trace is not None:
            self.__dict__["trace"] = trace
        self._path = path if path is not None else trace.meta.path  # type: ignore[union-attr]
        self.options = options
        self.entry = entry
        self._progress = progress
        self._jobs = jobs
        self._on_bytes = on_bytes
        self._anatomies: dict[int, Anatomy] = {}
        self._want_enclosing = False  # the caller reads the enclosures: a child may link them
        self._want_overview_beside = False  # ... and the overview: the child computes it too
        self._overview_beside = False  # the child computes the overview
        self._beside: Beside[tuple[Enclosing, dict | None]] | None = None
        self._links_unsaved = False

    @property
    def path(self) -> str:
        return self._path

    @cached_property
    def trace(self) -> Trace:
        """The loaded trace: from the cache entry, else decoded (and then kept in the entry)."""
        from hostgap.readers import load_trace

        progress, path, entry = self._progress, self._path, self.entry
        trace = entry.trace() if entry else None
        if trace is None:
            if progress is not None:
                progress(f"loading {path}")
            trace = load_trace(path, jobs=self._jobs, progress=self._on_bytes or LOAD_PROGRESS.get())
            if entry:
                entry.put_trace(trace)
        elif progress is not None:
            progress(f"loading {path} (cached)")
        return trace

    @cached_property
    def links(self) -> Links:
        cached = self.entry.arrays("links") if self.entry else None
        if cached is not None:
            return _links_from(cached)
        trace = self.trace
        launches = launch_links(trace)
        # the temporaries freed so far, before the next stage stacks on them; and before a fork,
        # so that neither process copies those pages when it writes there (copy-on-write)
        release_free_memory()
        beside = self._beside = self._start_beside(trace, launches)
        if beside is not None:
            links = Links(launches, lambda: beside.result()[0])
        else:
            links = Links(launches, enclosing_links(trace))
            release_free_memory()  # the enclosures' temporaries
        if self.entry:
            self._links_unsaved = True
            if beside is None:
                self._settle_links(links)
        return links

    def _start_beside(self, trace: Trace, launches: Launches) -> Beside[tuple[Enclosing, dict | None]] | None:
        """A child process that computes the enclosures (and the overview, when ``document``
        asks for both) while this one computes the steps' split, which needs only the launch
        join: where the caller will read the enclosures (``_want_enclosing``), the trace has at
        least :data:`BESIDE_MIN_EVENTS` events, more than one worker is allowed and the system has
        the memory (:data:`BESIDE_BYTES_PER_EVENT`). None where no child was started."""
        if not self._want_enclosing or len(trace.events) < _beside_min_events():
            return None
        free = available_bytes()
        if free is not None and free < 2 * BESIDE_BYTES_PER_EVENT * len(trace.events):
            return None
        from hostgap.readers import default_jobs

        if (self._jobs if self._jobs is not None else default_jobs()) < 2:
            return None
        o, with_overview = self.options, self._want_overview_beside

        def share() -> tuple[Enclosing, dict | None]:
            from hostgap.anatomy.overview import overview

            enclosing = enclosing_links(trace)
            if not with_overview:
                return enclosing, None
            doc = overview(trace, Links(launches, enclosing), gap_threshold_ns=o.gap_threshold_ns, top=o.top)
            return enclosing, doc

        beside = Beside(share)
        if not beside.forked:
            return None
        self._overview_beside = with_overview
        return beside

    def _settle_links(self, links: Links | None = None) -> None:
        """Keep the links in the cache entry once they are all known (the enclosures from the
        child when it computed them): written once, from what was computed."""
        if self._links_unsaved and self.entry:
            self._links_unsaved = False
            self.entry.put_arrays("links", _links_arrays(links if links is not None else self.links))

    def _key(self, top: int | None = None) -> str:
        return C.options_key(self.options if top is None else replace(self.options, top=top))

    def _cached(self, name: str, top: int | None = None) -> dict | None:
        return self.entry.document(f"{self._key(top)}-{name}", name) if self.entry else None

    def _keep(self, name: str, doc: dict, top: int | None = None) -> None:
        if self.entry:
            try:
                self.entry.put_documents(f"{self._key(top)}-{name}", {name: doc})
            except (TypeError, ValueError):  # not JSON as it is: computed again next time
                pass

    @cached_property
    def _overview(self) -> dict:
        doc = self._cached("overview")
        if doc is None:
            from hostgap.anatomy.overview import overview

            o = self.options
            links = self.links
            if self._overview_beside:  # computed by the child beside the anatomy
                doc = self._beside.result()[1]  # type: ignore[union-attr]
            if doc is None:
                doc = overview(self.trace, links, gap_threshold_ns=o.gap_threshold_ns, top=o.top)
                release_free_memory()
            self._keep("overview", doc)
        return doc

    def overview(self) -> dict:
        """The GPU timeline of every device and window (:func:`hostgap.anatomy.overview.overview`);
        a fresh copy of its top level each call, so a caller may add keys."""
        return dict(self._overview)

    def anatomy(self, top: int | None = None) -> Anatomy:
        """The step anatomy (:func:`hostgap.anatomy.steps.analyze`); ``top`` overrides how many
        ops and frames its rankings keep (the report keeps a large pool and merges frames first)."""
        top = self.options.top if top is None else top
        if top not in self._anatomies:
            opts = self.options if top == self.options.top else replace(self.options, top=top)
            self._want_enclosing = True
            self._anatomies[top] = analyze(self.trace, opts, self.links)
            self._settle_links()
        return self._anatomies[top]

    def anatomy_dict(self, top: int | None = None) -> dict:
        """``anatomy(top).to_dict()`` (the ``steps --json`` document), from the cache when it has it."""
        doc = self._cached("anatomy", top)
        if doc is None:
            doc = self.anatomy(top).to_dict()
            self._keep("anatomy", doc, top)
        return doc

    def document(self) -> dict:
        """The single-trace ``hostgap analyze --json`` document (docs/json.md): the overview,
        then the anatomy's parts."""
        self._want_enclosing = True  # the anatomy reads them: they may be linked in a child
        anatomy = None
        if "_overview" not in self.__dict__:
            cached = self._cached("overview")
            if cached is not None:
                self.__dict__["_overview"] = cached
            elif "links" not in self.__dict__:
                self._want_overview_beside = True
                self.links  # noqa: B018 - linked now: a child may take the enclosures and the overview
                if self._overview_beside:
                    anatomy = self.anatomy_dict()  # this process's share, while the child works
        doc = self.overview()
        parts = anatomy if anatomy is not None else self.anatomy_dict()
        doc.update({k: v for k, v in parts.items() if k not in ("schema_version", "trace")})
        if "links" in self.__dict__:
            self._settle_links()
        return doc

    def rank_facts(self) -> dict:
        """What a trace set needs of this trace beyond its document: the clock offset, the span of
        its events and its communication ops per step (``analysis.traceset``)."""
        group = f"{self._key()}-comm"
        cached = self.entry.arrays(group) if self.entry else None
        if cached is None:
            comm = self.anatomy().comm
            cached = {
                k: np.asarray(getattr(comm, f"coll_{k}")) for k in ("step", "type", "ordinal", "start_ns", "dur_ns")
            }
            if self.entry:
                self.entry.put_arrays(group, cached)
        ev = self.trace.events
        return {
            "meta_rank": self.trace.meta.rank,
            "meta_world_size": self.trace.meta.world_size,
            "offset_ns": int(self.trace.meta.base_time_ns or 0),
            "span_ns": [int(ev.start_ns.min()), int(ev.end_ns.max())] if len(ev) else None,
            "coll": {k: np.asarray(v) for k, v in cached.items()},
        }

    def kernel_rows(self) -> list[dict]:
        """One row per launch with its TaxBreak intervals (``hostgap kernels``)."""
        from hostgap.anatomy.kernels import kernel_rows_of
        from hostgap.anatomy.taxbreak import KernelTaxes

        group = f"{self._key()}-kernels"
        cached = self.entry.arrays(group) if self.entry else None
        if cached is not None and "launch_row" in cached:
            launch_class = cached.pop("launch_class")
            parts: dict[str, Any] = dict(cached)
            parts.update({k: float(cached[k]) for k in ("dispatch_base_ns", "floor_ns")})
            return kernel_rows_of(self.trace, KernelTaxes(**parts), launch_class)
        a = self.anatomy()
        if a.kernels is None:  # a CPU trace: no launches (launch_class is set with kernels)
            return []
        launch_class = np.asarray(a.launch_class)
        if self.entry:
            arrays = {f.name: np.asarray(getattr(a.kernels, f.name)) for f in fields(a.kernels)}
            self.entry.put_arrays(group, {**arrays, "launch_class": launch_class})
        return kernel_rows_of(self.trace, a.kernels, launch_class)


def analyse_trace(
    source: str | os.PathLike | Trace,
    options: AnalysisOptions = AnalysisOptions(),
    progress: Progress | None = None,
    *,
    cache: bool = True,
    jobs: int | None = None,
    on_bytes: BytesProgress | None = None,
) -> TraceAnalysis:
    """Load ``source`` (a Kineto JSON or Nsight Systems SQLite file; format from content) or take
    an already loaded trace, and return its analysis, computed as it is asked for. ``cache``:
    read and fill the cache (:mod:`.trace_cache`; off with ``--no-cache`` or ``HOSTGAP_NO_CACHE=1``).
    ``jobs``: threads that decode the file (None: every core this process may use, or
    ``HOSTGAP_JOBS``); ``on_bytes(bytes_read, file_size)``: the decode's progress (else
    :data:`LOAD_PROGRESS`'s)."""
    if isinstance(source, Trace):
        return TraceAnalysis(source, options)
    from hostgap.readers import sniff

    path = os.fspath(source)
    sniff(path)  # a file that is not a trace is refused here, not when a part first needs it
    entry = _entry(path, progress) if cache else None
    analysis = TraceAnalysis(None, options, entry, path=path, progress=progress, jobs=jobs, on_bytes=on_bytes)
    if entry is None or entry.trace_cached() is False:
        analysis.trace  # noqa: B018 - decoded now: its errors belong to this call
    return analysis


def _beside_min_events() -> int:
    try:
        return int(os.environ.get("HOSTGAP_BESIDE_MIN_EVENTS", BESIDE_MIN_EVENTS))
    except ValueError:
        return BESIDE_MIN_EVENTS


def _entry(path: str, progress: Progress | None) -> C.Entry | None:
    try:
        small = os.path.getsize(path) < int(os.environ.get("HOSTGAP_CACHE_MIN", CACHE_MIN_BYTES))
    except (OSError, ValueError):
        return None
    return None if small else C.entry_for(path, C.note_for(progress))


# -- the linker's arrays in the cache ------------------------------------------------------------


def _links_arrays(links: Links) -> dict[str, np.ndarray]:
    out = {k: getattr(links, k) for k in ("launch_of", "gpu_ops_of_launch", "op_of", "top_op_of")}
    if links.enclosing.frame_of is None:  # no Python frames: NONE everywhere, stored as its length
        out["frame_of_none"] = np.array([len(links.launch_of)], dtype=np.int64)
    else:
        out["frame_of"] = links.frame_of
    out["unlinked_gpu_ops"] = np.array([links.unlinked_gpu_ops], dtype=np.int64)
    for name in ("ops", "frames"):
        nest = getattr(links, name)
        out.update({f"{name}_{f.name}": getattr(nest, f.name) for f in fields(nest)})
    return out


def _links_from(a: dict[str, np.ndarray]) -> Links:
    frame_of = None if "frame_of_none" in a else a["frame_of"]
    nests = {name: Nesting(**{f.name: a[f"{name}_{f.name}"] for f in fields(Nesting)}) for name in ("ops", "frames")}
    return Links(
        Launches(a["launch_of"], a["gpu_ops_of_launch"], int(a["unlinked_gpu_ops"][0])),
        Enclosing(a["op_of"], a["top_op_of"], frame_of, nests["ops"], nests["frames"]),
    )


def observed_settings(trace_path: str) -> dict:
    """What the profiler recorded, read from the trace: Python stacks (``python_function``
    events) and shapes (``Input Dims`` on ops). A streaming look at the file's text (plain or
    gzip), not a parse: what attach reports of the settings a server's profiler ran with."""
    from hostgap.readers.text import text_pieces

    stacks = shapes = False
    tail = b""
    for piece in text_pieces(trace_path):  # a streaming look for the two markers, not a parse
        window = tail + bytes(piece)
        stacks = stacks or b'"python_function"' in window
        shapes = shapes or b'"Input Dims"' in window
        if stacks and shapes:
            break
        tail = window[-32:]
    return {"with_stack": stacks, "record_shapes": shapes}
