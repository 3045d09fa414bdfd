"""One trace analysed: loaded once, linked once, its step anatomy and GPU overview computed on
first use, all with one :class:`~hostgap.anatomy.steps.AnalysisOptions`.

Every command and library function that analyses a trace goes through :func:`analyse_trace`
(``analyze``, ``steps``, ``kernels``, ``trim``, ``overlay``, ``report``, ``compare``, trace sets,
attach, the measuring protocol, the harvest): it is the one caller of the loader outside
:mod:`hostgap.readers`. The stages run in the order the memory profile of large traces wants
(link, then the overview, then the anatomy, the allocator's free memory released between them,
:func:`hostgap.memory.release_free_memory`), and each runs at most once per trace.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cached_property

from hostgap.anatomy.link import Links, link
from hostgap.anatomy.steps import AnalysisOptions, Anatomy, analyze
from hostgap.events import Trace
from hostgap.memory import release_free_memory

Progress = Callable[[str], None]


class TraceAnalysis:
    """A loaded trace and what has been computed of it (lazily, once each)."""

    def __init__(self, trace: Trace, options: AnalysisOptions = AnalysisOptions()):
        self.trace = trace
        self.options = options
        self._anatomies: dict[int, Anatomy] = {}

    @property
    def path(self) -> str:
        return self.trace.meta.path

    @cached_property
    def links(self) -> Links:
        links = link(self.trace)
        release_free_memory()  # the linker's temporaries, before the next stage stacks on them
        return links

    @cached_property
    def _overview(self) -> dict:
        o = self.options
        doc = _overview(self.trace, self.links, o.gap_threshold_ns, o.top)
        release_free_memory()
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
            opts = self.options if top == self.options.top else _with_top(self.options, top)
            self._anatomies[top] = analyze(self.trace, opts, self.links)
        return self._anatomies[top]

    def document(self) -> dict:
        """The single-trace ``hostgap analyze --json`` document (docs/json.md): the overview,
        then the anatomy's parts."""
        doc = self.overview()
        doc.update({k: v for k, v in self.anatomy().to_dict().items() if k not in ("schema_version", "trace")})
        return doc

    def kernel_rows(self) -> list[dict]:
        """One row per launch with its TaxBreak intervals (``hostgap kernels``)."""
        from hostgap.anatomy.kernels import kernel_rows

        return kernel_rows(self.trace, self.anatomy())


def analyse_trace(
    source: str | os.PathLike | Trace,
    options: AnalysisOptions = AnalysisOptions(),
    progress: Progress | None = None,
) -> TraceAnalysis:
    """Load ``source`` (a Kineto JSON or Nsight Systems SQLite file; format from content) or take
    an already loaded trace, and return its analysis, computed as it is asked for."""
    if isinstance(source, Trace):
        return TraceAnalysis(source, options)
    from hostgap.readers import load_trace

    path = os.fspath(source)
    if progress is not None:
        progress(f"loading {path}")
    return TraceAnalysis(load_trace(path), options)


def _overview(trace: Trace, links: Links, gap_threshold_ns: int, top: int) -> dict:
    from hostgap.anatomy.overview import overview

    return overview(trace, links, gap_threshold_ns=gap_threshold_ns, top=top)


def _with_top(options: AnalysisOptions, top: int) -> AnalysisOptions:
    from dataclasses import replace

    return replace(options, top=top)
