"""Fuzz the trace loaders: generated and mutated Kineto JSON and Nsight Systems SQLite files.

Every input is loaded (and, when it loads, linked and summarised by ``overview``) and its
outcome classed:

- ``ok``: loaded, the event table valid and the accounting balanced (Kineto: kept + skipped +
  flows + metadata events = events in the file);
- ``hostgap error``: refused with hostgap's own one-line error;
- ``other exception``: anything else (a bug: the signature is printed);
- ``unbalanced``: loaded, but the accounting does not add up or the table is invalid (a bug);
- ``over time``: more than ``--time-limit`` seconds of CPU time (default 10; CPU, not wall
  time, so that other work on a shared machine does not count as a hang);
- ``over memory``: traced peak above ``MEMORY_PER_BYTE`` x the input's text size + ``MEMORY_SLACK``;
- ``decoders differ``: a Kineto input whose outcome under the compiled decoder
  (``hostgap.readers._kcolumns``) is not the pure-Python decoder's (``HOSTGAP_PURE_PYTHON=1``), or
  not the compiled decoder's on two threads with tiny chunks: not the same error, or not the same
  columns, names and metadata. Checked on every Kineto input when the extension is built
  (``--one-decoder`` skips it).

Usage::

    .venv/bin/python bench/fuzz.py                     # 10,000 inputs, seed 0
    .venv/bin/python bench/fuzz.py -n 2000 --seed 7 --no-analyze

The generators are also what ``tests/test_fuzz_loaders.py`` runs at a small fixed-seed budget.
Exit status 1 when any input lands in a failing class.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import signal
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

MEMORY_PER_BYTE = 40
"""Documented bound: traced peak memory per byte of input text (inflated JSON or SQLite file)."""
MEMORY_SLACK = 16 * 2**20
"""Fixed allowance (imports' lazy caches, numpy buffers) on top of the per-byte bound."""
FAILING = ("other exception", "unbalanced", "over time", "over memory", "decoders differ")

# ----------------------------------------------------------------------- Kineto seeds


def _ev(ph="X", cat="kernel", name="k", ts=0.0, dur=1.0, pid=0, tid=7, **args) -> dict:
    return {"ph": ph, "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kineto_seed(rng: random.Random) -> dict:
    """A small valid trace: steps, ops, launches, kernels, copies, flows, metadata."""
    events, t = [], rng.choice([0.0, 1661203462598772.0, 5234.567])
    for step in range(rng.randint(1, 4)):
        events.append(_ev(cat="user_annotation", name=f"ProfilerStep#{step}", ts=t, dur=100, pid=100, tid=1))
        for k in range(rng.randint(1, 8)):
            corr = step * 100 + k
            events.append(
                _ev(
                    cat="cpu_op",
                    name=rng.choice(["aten::mm", "aten::add", "aten::linear"]),
                    ts=t + 3 * k,
                    dur=2.5,
                    pid=100,
                    tid=1,
                    **{"External id": corr},
                )
            )
            events.append(
                _ev(
                    cat="cuda_runtime",
                    name=rng.choice(["cudaLaunchKernel", "cudaMemcpyAsync"]),
                    ts=t + 3 * k + 0.5,
                    dur=1,
                    pid=100,
                    tid=1,
                    correlation=corr,
                )
            )
            events.append(
                _ev(
                    cat=rng.choice(["kernel", "gpu_memcpy", "gpu_memset"]),
                    name=f"k{k}",
                    ts=t + 3 * k + 5.125,
                    dur=round(rng.uniform(0.001, 9), 3),
                    correlation=corr,
                    device=0,
                    stream=7,
                    bytes=64,
                )
            )
        events.append({"ph": "s", "id": step, "cat": "ac2g", "name": "ac2g", "pid": 100, "tid": 1, "ts": t})
        t += 120
    events.append({"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}})
    events.append({"ph": "i", "name": "mark", "pid": 100, "tid": 1, "ts": t})
    return {
        "traceEvents": events,
        "baseTimeNanoseconds": 1767189312000000000,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "computeMajor": 9}],
        "distributedInfo": {"rank": 0, "world_size": 1},
    }


GARBAGE = [
    None,
    True,
    False,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    2**63,
    2**64,
    10**30,
    1e308,
    -1e308,
    5e-324,
    0.0005,
    9.2e15,
    "",
    "abc",
    "12",
    "1.5",
    "NaN",
    "\ud7ff",
    "\U0001f600",
    [],
    {},
    [1, 2],
    {"a": 1},
    "9" * 5000,
    "x" * 100_000,
]
FIELDS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args", "id"]
ARG_KEYS = ["correlation", "External id", "external id", "device", "stream", "bytes", "name"]


def _deep(n: int) -> str:
    """A placeholder for a value nested ``n`` levels deep (json.dumps cannot write one; the
    text is substituted after serialising, see :func:`_dumps`)."""
    return f"__DEEP_{n}__"


_DEEP = re.compile(rb'"__DEEP_(\d+)__"')


def _dumps(doc) -> bytes:
    # one pass: a document whose deep value was duplicated thousands of times must not cost
    # markers x text size
    text = json.dumps(doc).encode()
    return _DEEP.sub(lambda m: b"[" * int(m[1]) + b"0" + b"]" * int(m[1]), text)


def mutate_structure(doc: dict, rng: random.Random) -> dict:
    """One structural mutation of a Kineto document (in place) and return it."""
    evs = doc.get("traceEvents")
    op = rng.randrange(12)
    if not isinstance(evs, list) or not evs:
        return doc
    i = rng.randrange(len(evs))
    e = evs[i]
    if op == 0 and isinstance(e, dict) and e:
        e.pop(rng.choice(list(e)))  # deleted key
    elif op == 1 and isinstance(e, dict):
        e[rng.choice(FIELDS)] = rng.choice(GARBAGE)  # wrong type / extreme value
    elif op == 2 and isinstance(e, dict):
        args = e.get("args")
        e["args"] = dict(args) if isinstance(args, dict) else {}
        e["args"][rng.choice(ARG_KEYS)] = rng.choice(GARBAGE)
    elif op == 3:
        evs.insert(rng.randrange(len(evs) + 1), dict(e) if isinstance(e, dict) else e)  # duplicated event
    elif op == 4:
        rng.shuffle(evs)  # reordered events
    elif op == 5:
        evs[i] = rng.choice(GARBAGE)  # an event that is not an object
    elif op == 6:
        where = rng.choice(["args", "event", "deviceProperties"])
        deep = _deep(rng.choice([50, 1100, 3000]))
        if where == "args" and isinstance(e, dict):
            e["args"] = {"x": deep}
        elif where == "event":
            evs[i] = deep
        else:
            doc["deviceProperties"] = deep
    elif op == 7:
        doc[rng.choice(["baseTimeNanoseconds", "deviceProperties", "distributedInfo"])] = rng.choice(GARBAGE)
    elif op == 8:
        doc["traceEvents"] = (
            rng.choice([[], None, 0, "x", {}]) if rng.random() < 0.3 else evs[: rng.randrange(len(evs) + 1)]
        )
    elif op == 9 and isinstance(e, dict):
        e["cat"] = rng.choice(["c" * 100_000, "Trace", "unknown_cat", None, "cpu_op"])
    elif op == 10:
        # one event repeated (shallow copies: a later mutation changes one event, not all)
        evs.extend(dict(e) if isinstance(e, dict) else e for _ in range(rng.choice([10, 1000, 20000])))
    elif op == 11 and isinstance(e, dict):
        e["ts"], e["dur"] = rng.choice([(1661203462598772.123, 0.877), (-5, 1), (0, -1), (4.7e15, 1), (1, 4.7e15)])
    return doc


_TEXT_SUBS = [
    (b'"ts": ', b'"ts": 1e999, "x": '),
    (b'"name": "', b'"name": "\\ud800'),
    (b'"name": "', b'"name": "\xff\xfe'),
    (b'"name": "', b'"name": "\x01'),
    (b'"name": "', b'"name": "\\udc00\\ud800'),
    (b'{"traceEvents": ', b'{"traceEvents": 0, "traceEvents": '),
    (b'"dur": ', b'"dur": 1E+3, "y": '),
    (b'"pid": ', b'"pid": 123456789012345678901234567890, "z": '),
    (b", ", b",\t\n "),
    (b'"args": {', b'"args": {"correlation": 1e999, '),
]


def mutate_text(data: bytes, rng: random.Random) -> bytes:
    """One byte-level mutation of JSON text."""
    op = rng.randrange(7)
    b = bytearray(data)
    if op == 0 and b:  # byte flips
        for _ in range(rng.randint(1, 8)):
            k = rng.randrange(len(b))
            b[k] = rng.randrange(256)
        return bytes(b)
    if op == 1:  # truncation
        return bytes(b[: rng.randrange(len(b) + 1)])
    if op == 2:
        return b"\xef\xbb\xbf" + data  # BOM
    if op == 3:  # control characters
        k = rng.randrange(len(b) + 1)
        return bytes(b[:k]) + bytes([rng.choice([0, 1, 8, 11, 27, 31])]) + bytes(b[k:])
    if op == 4:  # targeted text substitutions (bad numbers and strings)
        old, new = rng.choice(_TEXT_SUBS)
        hits, k = [], data.find(old)
        while k >= 0 and len(hits) < 50:
            hits.append(k)
            k = data.find(old, k + 1)
        if hits:
            k = rng.choice(hits)
            return data[:k] + new + data[k + len(old) :]
        return data
    if op == 5:  # non-UTF-8 anywhere
        k = rng.randrange(len(b) + 1)
        return (
            bytes(b[:k]) + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]) + bytes(b[k:])
        )
    return data


_BOMBS: dict[int, bytes] = {}


def _bomb(n: int) -> bytes:
    if n not in _BOMBS:
        _BOMBS[n] = gzip.compress(b'{"traceEvents": [' + b" " * n + b"]}", 9)
    return _BOMBS[n]


def kineto_input(rng: random.Random) -> tuple[bytes, str, int]:
    """(file bytes, suffix, size of the JSON text) for one Kineto case."""
    doc = kineto_seed(rng)
    for _ in range(rng.choice([0, 1, 1, 2, 3, 5])):
        doc = mutate_structure(doc, rng)
    text = _dumps(doc)
    for _ in range(rng.choice([0, 0, 1, 2])):
        text = mutate_text(text, rng)
    r = rng.random()
    if r < 0.15:
        packed = gzip.compress(text, 6)
        if rng.random() < 0.3:
            packed = packed[: rng.randrange(len(packed) + 1)] or b"\x1f"
        return packed, ".json.gz", len(text)
    if r < 0.17:  # a small gzip bomb: inflates past the ratio limit
        packed = _bomb(rng.choice([4_000_000, 20_000_000]))
        return packed, ".json.gz", len(packed) * 200
    return text, ".json", len(text)


# ----------------------------------------------------------------------- nsys seeds

NSYS_SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER, graphNodeId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER, correlationId INTEGER,
    nameId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER,
    correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER, srcKind INTEGER, dstKind INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER, textId INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT);
CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT);
"""
NSYS_TABLES = [
    "StringIds",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "NVTX_EVENTS",
    "PROCESSES",
    "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_SYSTEM_ENV",
]
NSYS_BAD = [
    None,
    "abc",
    "",
    1.5,
    9e999,
    -9e999,
    2**63 - 1,
    -(2**63),
    9 * 10**18,
    -9 * 10**18,
    b"\x00\xff",
    "\udcff".encode("utf-8", "surrogatepass"),
    "[" * 5000,
]


def nsys_input(rng: random.Random, folder: str) -> tuple[bytes, str, int]:
    """(file bytes, suffix, size) of one mutated nsys export."""
    path = os.path.join(folder, f"seed{rng.random()}.sqlite")
    con = sqlite3.connect(path)
    # a scratch file read back at once: no fsync per statement (the bytes are the same)
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA journal_mode = MEMORY")
    con.executescript(NSYS_SCHEMA)
    con.execute("INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000'), (2, 'gemm'), (3, 'step')")
    pid = 100
    gpid, gtid = (1 << 48) | (pid << 24), (1 << 48) | (pid << 24) | 101
    for k in range(rng.randint(1, 40)):
        t = 1000 * k
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,1)", (t, t + 50, gtid, k))
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,0,7,?,?,2,2,NULL)",
            (t + 100, t + 900, k, gpid if rng.random() < 0.8 else None),
        )
        if k % 5 == 0:
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,0,7,?,?,64,1,0,2)", (t + 60, t + 90, k, gpid)
            )
    con.execute("INSERT INTO NVTX_EVENTS VALUES (0, 50000, 59, 'step', ?, NULL)", (gtid,))
    con.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python')", (gpid, pid))
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, 'x')")
    con.execute('INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (\'GpuInfo\', \'[{"name": "H100", "cudaId": 0}]\')')
    for _ in range(rng.choice([0, 1, 2, 3, 6])):
        op = rng.randrange(4)
        table = rng.choice(NSYS_TABLES)
        if op == 0:
            con.execute(f'DROP TABLE "{table}"')
            break
        cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
        col = rng.choice(cols)
        value = rng.choice(NSYS_BAD)
        try:
            if op in (1, 2):  # one row, or every row, of one column
                where = 'WHERE rowid = (SELECT min(rowid) FROM "%s")' % table if op == 1 else ""
                con.execute(f'UPDATE "{table}" SET "{col}" = ? {where}', (value,))
            else:
                con.execute(f'INSERT INTO "{table}" ("{col}") VALUES (?)', (value,))
        except sqlite3.Error:  # e.g. text into an INTEGER PRIMARY KEY: SQLite itself refuses
            pass
    con.commit()
    con.close()
    data = Path(path).read_bytes()
    os.unlink(path)
    r = rng.random()
    if r < 0.1:
        data = data[: rng.randrange(len(data) + 1)]  # truncated file
    elif r < 0.2:
        b = bytearray(data)
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)  # byte flips
        data = bytes(b)
    return data, ".sqlite", len(data)


# ----------------------------------------------------------------------- running


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def balanced(trace) -> bool:
    """Event accounting of a loaded trace (Kineto: every input event is kept or counted)."""
    trace.events.validate()
    if trace.meta.format != "kineto":
        return True
    dropped = sum(n for r, n in trace.meta.skipped.items() if "event kept" not in r)
    total = len(trace.events) + dropped + trace.meta.flows + trace.meta.extra["metadata_events"]
    return total == trace.meta.extra["events_in_file"]


def _load_outcome(path: str, jobs: int = 1):
    """A loaded trace, or the text of the HostgapError it raised (``jobs`` decoding threads)."""
    from hostgap.errors import HostgapError
    from hostgap.readers import load_trace

    try:
        return load_trace(path, jobs=jobs)
    except HostgapError as e:
        return f"hostgap error: {e.problem}"


def _threaded_outcome(path: str):
    """:func:`_load_outcome` on two decoding threads, whatever the file's size, with chunks of
    about 700 bytes read in 4 kB pieces: most inputs are cut many times, often inside strings."""
    import hostgap.readers.kineto as kineto
    import hostgap.readers.kineto.stream as kstream
    import hostgap.readers.text as text_mod

    saved = kineto.PARALLEL_MIN_BYTES, kineto.PARALLEL_FINISH_ROWS, kstream.CHUNK, text_mod.READ_PIECE
    kineto.PARALLEL_MIN_BYTES, kineto.PARALLEL_FINISH_ROWS, kstream.CHUNK, text_mod.READ_PIECE = 0, 0, 701, 4096
    try:
        return _load_outcome(path, jobs=2)
    finally:
        kineto.PARALLEL_MIN_BYTES, kineto.PARALLEL_FINISH_ROWS, kstream.CHUNK, text_mod.READ_PIECE = saved


def same_trace(a, b) -> bool:
    """Equal columns, names and metadata (or the same error text)."""
    import numpy as np

    from hostgap.events import COLUMNS

    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return (
        a.names == b.names
        and a.meta == b.meta
        and all(np.array_equal(getattr(a.events, c), getattr(b.events, c)) for c in COLUMNS)
    )


def decoders_differ(path: str) -> str:
    """'' when the compiled decoder on one thread, the compiled decoder on two threads and the
    pure-Python decoder give the same outcome, else what differs."""
    old = os.environ.get("HOSTGAP_PURE_PYTHON")
    try:
        os.environ.pop("HOSTGAP_PURE_PYTHON", None)
        fast = _load_outcome(path)
        threaded = _threaded_outcome(path)
        os.environ["HOSTGAP_PURE_PYTHON"] = "1"
        slow = _load_outcome(path)
    finally:
        if old is None:
            os.environ.pop("HOSTGAP_PURE_PYTHON", None)
        else:
            os.environ["HOSTGAP_PURE_PYTHON"] = old
    for other, label in ((slow, "pure"), (threaded, "2 threads")):
        if not same_trace(fast, other):
            show = [x if isinstance(x, str) else f"{len(x.events)} events" for x in (fast, other)]
            return f"compiled {show[0][:60]} / {label} {show[1][:60]}"
    return ""


def compiled_decoder_built() -> bool:
    from hostgap.readers.kineto import compiled as kineto_columns

    return kineto_columns._NATIVE is not None


def run_one(
    path: str, text_bytes: int, time_limit: float, analyze: bool, memory: bool, both: bool = False
) -> tuple[str, str]:
    """Outcome class and detail of loading one file."""
    from hostgap.errors import HostgapError
    from hostgap.readers import load_trace

    if memory:
        tracemalloc.start()
    signal.signal(signal.SIGPROF, _alarm)
    t0 = time.process_time()
    try:
        signal.setitimer(signal.ITIMER_PROF, time_limit)  # CPU time of this process
        trace = load_trace(path)
        ok = balanced(trace)
        if analyze:
            from hostgap.anatomy.link import link
            from hostgap.anatomy.overview import overview

            link(trace)
            overview(trace)
        outcome = ("ok", "") if ok else ("unbalanced", "accounting")
    except HostgapError as e:
        outcome = ("hostgap error", e.problem[:60])
    except _Timeout:
        outcome = ("over time", f"> {time_limit} s")
    except Exception as e:  # noqa: BLE001 - the point is to catch whatever a bug raises
        outcome = ("other exception", f"{type(e).__name__}: {str(e)[:80]}")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        peak = tracemalloc.get_traced_memory()[1] if memory else 0
        if memory:
            tracemalloc.stop()
    if outcome[0] in ("ok", "hostgap error") and peak > MEMORY_PER_BYTE * text_bytes + MEMORY_SLACK:
        outcome = ("over memory", f"{peak / 2**20:.0f} MiB for {text_bytes} bytes")
    if outcome[0] in ("ok", "hostgap error") and time.process_time() - t0 > time_limit:
        outcome = ("over time", f"{time.process_time() - t0:.1f} s CPU")
    if both and outcome[0] in ("ok", "hostgap error"):
        diff = decoders_differ(path)
        if diff:
            outcome = ("decoders differ", diff)
    return outcome


def cases(n: int, seed: int, folder: str, nsys_share: float = 0.12):
    """``n`` generated inputs as (kind, path, text_bytes), written under ``folder``."""
    rng = random.Random(seed)
    for i in range(n):
        if rng.random() < nsys_share:
            data, suffix, size = nsys_input(rng, folder)
            kind = "nsys"
        else:
            data, suffix, size = kineto_input(rng)
            kind = "kineto"
        path = os.path.join(folder, f"case{i}{suffix}")
        Path(path).write_bytes(data)
        yield kind, path, size


def fuzz(
    n: int,
    seed: int,
    *,
    time_limit: float = 10.0,
    analyze: bool = True,
    memory: bool = True,
    progress=None,
    partial: dict | None = None,
    both: bool = False,
) -> dict:
    """Run ``n`` inputs; return counts by (kind, class) and example details of failures
    (filled into ``partial`` as it goes, so an interrupted run can still report)."""
    out = partial if partial is not None else {"counts": Counter(), "details": {}}
    counts: Counter = out["counts"]
    details: dict[str, Counter] = out["details"]
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="hostgap-fuzz-", dir=base) as folder:
        for i, (kind, path, size) in enumerate(cases(n, seed, folder)):
            cls, detail = run_one(path, size, time_limit, analyze, memory, both and kind == "kineto")
            os.unlink(path)
            if cls in FAILING:
                detail = f"input {i}: {detail}"
            counts[(kind, cls)] += 1
            details.setdefault(cls, Counter())[f"{kind}: {detail}"] += 1
            if progress and (i + 1) % 500 == 0:
                progress(i + 1, counts)
    return out


def report(counts: Counter, details: dict, n: int, seed: int, seconds: float, time_limit: float) -> None:
    """The outcome table (by input kind and class) and the most common details per class."""
    done = sum(counts.values())
    print(
        f"{done} of {n} inputs, seed {seed}, {seconds:.0f} s (memory bound {MEMORY_PER_BYTE} x text bytes "
        f"+ {MEMORY_SLACK // 2**20} MiB, time bound {time_limit} s of CPU)"
    )
    classes = ("ok", "hostgap error", *FAILING)
    print(f"{'input':8} " + " ".join(f"{c:>16}" for c in classes))
    for kind in ("kineto", "nsys"):
        print(f"{kind:8} " + " ".join(f"{counts[(kind, c)]:>16}" for c in classes))
    print(f"{'all':8} " + " ".join(f"{sum(counts[(k, c)] for k in ('kineto', 'nsys')):>16}" for c in classes))
    for cls in ("hostgap error", *FAILING):
        if cls in details:
            top = details[cls].most_common(12 if cls in FAILING else 8)
            print(f"{cls}: " + "; ".join(f"{d} ({k})" for d, k in top))
    sys.stdout.flush()


class _Stop(BaseException):  # not caught as an input's exception
    pass


def _stop(signum, frame):
    raise _Stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10_000, help="inputs (default 10,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=10.0, help="CPU seconds per input")
    ap.add_argument("--no-analyze", action="store_true", help="load only (no link/overview)")
    ap.add_argument("--no-memory", action="store_true", help="skip tracemalloc (faster)")
    ap.add_argument(
        "--one-decoder", action="store_true", help="do not compare the compiled Kineto decoder with the pure-Python one"
    )
    args = ap.parse_args()
    both = not args.one_decoder and compiled_decoder_built()
    print(f"Kineto decoders compared on every input: {'yes' if both else 'no'}", file=sys.stderr)
    t0 = time.perf_counter()

    def progress(i, counts):
        bad = sum(v for (k, c), v in counts.items() if c in FAILING)
        print(f"  {i} inputs, {bad} failing, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)

    out = {"counts": Counter(), "details": {}}
    signal.signal(signal.SIGTERM, _stop)  # a stopped run still reports what it did
    try:
        out = fuzz(
            args.n,
            args.seed,
            time_limit=args.time_limit,
            analyze=not args.no_analyze,
            memory=not args.no_memory,
            progress=progress,
            partial=out,
            both=both,
        )
    except (_Stop, KeyboardInterrupt):
        print("stopped early: the table covers the inputs run so far", file=sys.stderr)
    counts = out["counts"]
    report(counts, out["details"], args.n, args.seed, time.perf_counter() - t0, args.time_limit)
    return 1 if any(counts[(k, c)] for k in ("kineto", "nsys") for c in FAILING) else 0


if __name__ == "__main__":
    sys.exit(main())
