"""``hostgap report`` over any mix of inputs: trace sets (a directory of rank traces), watched
runs, and the rest (traces, measured and attached runs) resolved by :mod:`hostgap.report.inputs`;
one HTML page (:func:`hostgap.report.html.render`) and its document."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hostgap.anatomy.steps import AnalysisOptions
from hostgap.report.inputs import Input


@dataclass(frozen=True)
class Page:
    """A report: the HTML text, the numbers it shows (``report --json``) and the resolved inputs
    (each with the notes on what it lacks)."""

    html: str
    data: dict
    inputs: tuple[Input, ...]


def compose(
    args: Sequence[str],
    options: AnalysisOptions = AnalysisOptions(),
    *,
    title: str | None = None,
    max_bars: int = 300,
    db: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Page:
    """One report page of ``args`` (run directories, results files, traces, run ids, trace-set
    directories)."""
    from hostgap.report.html import render
    from hostgap.report.inputs import resolve_all
    from hostgap.report.traceset_view import report_trace_sets, split_trace_sets
    from hostgap.report.watch_section import split_watch_runs, watch_sections

    sets, rest = split_trace_sets(list(args))
    watched, rest = split_watch_runs(rest, db)
    floor_us = options.launch_floor_ns / 1000 if options.launch_floor_ns else None
    extra = report_trace_sets(sets, options.step_marker, floor_us, options.floor_file, progress)
    extra += watch_sections(watched)
    inputs = resolve_all(rest, options, progress, db)
    from hostgap.report.advise_section import levers_sections

    extra += levers_sections(inputs)  # "What would help", one section per input (docs/advise.md)
    others = sets + [a for a, _ in watched]
    text, data = render(
        inputs,
        title or (f"hostgap report: {', '.join(others)}" if others and not inputs else None),
        max_bars,
        progress,
        extra,
    )
    return Page(text, data, tuple(inputs))
