"""Trace sets: the traces of one multi-rank job, analysed together (docs/multirank.md).

``analyse(paths)`` takes files and directories. Each file is loaded and analysed on its own,
in parallel across the machine's cores (a process pool; ``jobs=1`` runs in this process and
gives the same result, tested), or as Ray tasks (:mod:`hostgap.parallel`). An Nsight
Systems export that holds several processes with GPU work is split into one part per process.

Ranks are recognised from the traces themselves: Kineto ``distributedInfo`` (``rank``,
``world_size``); one rank per GPU process of an nsys export (ordered by the lowest device each
uses); failing those, a rank number in the file name (``rank-3``, ``rank_3``, ``tp3``,
``worker3``) with a note; failing that, the order of the files, with a note.

Traces that do not belong together are refused with one line: two traces claiming one rank,
different world sizes, or traces whose time spans do not overlap (different runs, or clocks
far apart).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from hostgap.anatomy.steps import AnalysisOptions
from hostgap.errors import HostgapError
from hostgap.events import GPU_OP_KINDS, Trace
from hostgap.parallel import map_processes, map_tasks
from hostgap.version import SCHEMA_VERSION

if TYPE_CHECKING:
    from hostgap.analysis.trace import TraceAnalysis

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")
RANK_IN_NAME = re.compile(r"(?:rank|tp|worker)[-_.]?(\d+)", re.IGNORECASE)


def expand(paths: list[str]) -> tuple[list[str], bool]:
    """(trace files, whether a directory was given): directories contribute their ``.json``,
    ``.json.gz`` and ``.sqlite`` files, sorted by name."""
    files, had_dir = [], False
    for p in paths:
        if os.path.isdir(p):
            had_dir = True
            from pathlib import Path  # imported only here: a single file's analysis skips it

            found = sorted(str(f) for f in Path(p).iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise HostgapError(p, "directory holds no trace files (.json, .json.gz, .sqlite)")
            files.extend(found)
        else:
            files.append(p)
    return files, had_dir


# -- one file (runs in a worker) -------------------------------------------------------------


def analyse_file(path: str, opts: AnalysisOptions, cache: bool = True) -> list[dict] | tuple[str, str]:
    """The documents of one file's parts, or ``(source, problem)`` for a bad file (exceptions
    with two arguments do not cross a process boundary intact)."""
    from hostgap.analysis.trace import TraceAnalysis, analyse_trace

    try:
        analysis = analyse_trace(path, opts, cache=cache)
        parts = split_processes(analysis.trace)
        if len(parts) == 1:  # the whole trace: its cache entry serves it
            return [part_document(analysis)]
        return [part_document(TraceAnalysis(t, opts), pid) for pid, t in parts]
    except HostgapError as e:
        return (e.source, e.problem)


def split_processes(trace: Trace) -> list[tuple[int | None, Trace]]:
    """``[(pid, part)]``: one part per process with GPU work for an nsys export holding several,
    else ``[(None, trace)]``. Parts are ordered by the lowest device each process uses."""
    ev = trace.events
    gpu = ev.of_kind(*GPU_OP_KINDS)
    pids = np.unique(ev.pid[gpu])
    if trace.meta.format != "nsys" or len(pids) < 2:
        return [(None, trace)]
    first_dev = [int(ev.device[gpu & (ev.pid == p)].min()) for p in pids]
    parts: list[tuple[int | None, Trace]] = []
    for p in pids[np.argsort(first_dev, kind="stable")]:
        rows = np.flatnonzero(ev.pid == p)
        devs = set(np.unique(ev.device[rows[gpu[rows]]]).tolist())
        meta = replace(
            trace.meta,
            devices=tuple(d for d in trace.meta.devices if d.index in devs),
            processes={int(p): trace.meta.processes.get(int(p), "")},
            world_size=len(pids),
        )
        parts.append((int(p), Trace(ev.take(rows), trace.names, meta)))
    return parts


def part_document(analysis: TraceAnalysis, pid: int | None = None) -> dict:
    """The single-trace ``hostgap analyze`` document (communication split included), plus the
    private ``_rank`` facts the trace set needs (removed before output)."""
    doc = analysis.document()
    doc["_rank"] = {"pid": pid, **analysis.rank_facts()}
    return doc


# -- the set ---------------------------------------------------------------------------------


def analyse_files(
    files: list[str],
    opts: AnalysisOptions,
    jobs: int | None = None,
    backend: str = "local",
    address: str | None = None,
    cache: bool = True,
) -> list[tuple[str, list[dict]]]:
    """``[(file, its part documents)]`` in file order; raises the first bad file's error."""
    if backend == "ray":
        results = map_tasks(analyse_file, files, opts, cache, address=address)
    else:
        results = map_processes(analyse_file, files, opts, cache, jobs=jobs)
    for r in results:
        if isinstance(r, tuple):
            raise HostgapError(*r)
    return list(zip(files, results))


def is_trace_set(analysed: list[tuple[str, list[dict]]], had_dir: bool) -> bool:
    """A directory, a file holding several GPU processes, or several files that carry ranks."""
    parts = [d for _, docs in analysed for d in docs]
    if had_dir or any(len(docs) > 1 for _, docs in analysed):
        return True
    return len(parts) > 1 and all(
        d["_rank"]["meta_rank"] is not None or RANK_IN_NAME.search(os.path.basename(f))
        for f, docs in analysed
        for d in docs
    )


def assign_ranks(analysed: list[tuple[str, list[dict]]]) -> tuple[list[tuple[int, str, dict]], int, list[str]]:
    """(``[(rank, source, doc)]`` sorted by rank, world size, notes). Raises on a set that does
    not belong together (module docstring)."""
    parts = [(f, d) for f, docs in analysed for d in docs]
    notes: list[str] = []
    meta = [d["_rank"]["meta_rank"] for _, d in parts]
    named = [m for f, _ in parts if (m := RANK_IN_NAME.search(os.path.basename(f))) is not None]
    if any(len(docs) > 1 for _, docs in analysed):
        ranks, source = list(range(len(parts))), "process"
    elif all(m is not None for m in meta):
        ranks, source = meta, "metadata"
    elif len(named) == len(parts) and len({int(m.group(1)) for m in named}) == len(parts):
        ranks, source = [int(m.group(1)) for m in named], "file name"
        notes.append("ranks taken from the file names (the traces carry no distributedInfo)")
    else:
        ranks, source = list(range(len(parts))), "file order"
        notes.append("ranks are the order of the files (no distributedInfo, no rank in the file names)")
    seen: dict[int, str] = {}
    for r, (f, _) in zip(ranks, parts):
        if r in seen:
            raise HostgapError(f, f"rank {r} is also claimed by {seen[r]}: not one trace set")
        seen[r] = f
    sizes = {d["_rank"]["meta_world_size"] for _, d in parts} - {None}
    if len(sizes) > 1:
        raise HostgapError(
            parts[0][0],
            f"traces of different world sizes ({', '.join(map(str, sorted(sizes)))}): "
            "not one trace set; analyse them apart",
        )
    world = sizes.pop() if sizes else max(len(parts), max(ranks) + 1)  # unstated: at least the highest rank
    if max(ranks) >= world:
        raise HostgapError(parts[ranks.index(max(ranks))][0], f"rank {max(ranks)} outside world size {world}")
    _check_overlap(parts)
    out = sorted(((r, source, d) for r, (_, d) in zip(ranks, parts)), key=lambda x: x[0])
    if len(out) < world:
        notes.append(f"{len(out)} of {world} ranks present: cross-rank figures cover those ranks only")
    return out, world, notes


def _check_overlap(parts: list[tuple[str, dict]]) -> None:
    """Refuse traces whose time spans (on their aligned clocks) have no instant in common."""
    spans = [(f, d["_rank"]["span_ns"], d["_rank"]["offset_ns"]) for f, d in parts if d["_rank"]["span_ns"]]
    if len(spans) < 2:
        return
    starts = [s[0] + o for _, s, o in spans]
    ends = [s[1] + o for _, s, o in spans]
    late, early = int(np.argmax(starts)), int(np.argmin(ends))
    if starts[late] > ends[early]:
        gap_s = (starts[late] - ends[early]) / 1e9
        raise HostgapError(
            spans[late][0],
            f"starts {gap_s:.3f} s after {spans[early][0]} ends: clocks far apart "
            "or different runs, not one trace set; analyse them apart",
        )


def trace_set_document(analysed: list[tuple[str, list[dict]]]) -> dict:
    """The trace-set JSON object (docs/json.md): ``ranks`` and ``cross_rank``."""
    from hostgap.analysis.align import RankSteps, cross_rank

    ranked, world, notes = assign_ranks(analysed)
    ranks, aligned = [], []
    for r, source, d in ranked:
        priv = d["_rank"]
        c = priv["coll"]
        aligned.append(
            RankSteps(r, d["steps"], priv["offset_ns"], c["step"], c["type"], c["ordinal"], c["start_ns"], c["dur_ns"])
        )
        ranks.append(
            {
                "rank": r,
                "rank_source": source,
                "process": priv["pid"],
                **{k: v for k, v in public(d).items() if k != "rank"},
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "trace_set",
        "notes": notes,
        "ranks": ranks,
        "cross_rank": cross_rank(aligned, world),
    }


def public(doc: dict) -> dict:
    """A part document without its private keys."""
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def analyse(
    paths: list[str],
    opts: AnalysisOptions = AnalysisOptions(),
    jobs: int | None = None,
    backend: str = "local",
    address: str | None = None,
    cache: bool = True,
) -> dict | list[dict]:
    """The trace-set object when ``paths`` form one (:func:`is_trace_set`), else the
    single-trace document (one file) or the list of them (unrelated files)."""
    files, had_dir = expand(paths)
    analysed = analyse_files(files, opts, jobs, backend, address, cache)
    if is_trace_set(analysed, had_dir):
        return trace_set_document(analysed)
    docs = [public(d) for _, ds in analysed for d in ds]
    return docs[0] if len(docs) == 1 else docs
