"""Every CPU-second of one ``hostgap analyze --json`` accounted to a stage, in one process.

    .venv/bin/python bench/ingest_stages.py TRACE [--cache DIR] [-- more CLI arguments]

Runs the command in this process (``hostgap.cli.cli``, stdout to /dev/null) with its functions
wrapped by timers, and prints one JSON line: per stage its CPU seconds and wall seconds, and the
process's own CPU (``getrusage``) when the command has returned. Run it as a child of
``bench/ingest.py --stages``, which also takes the child's CPU from ``wait4`` and checks that the
stages add up to it.

How the CPU is counted, so that nothing is counted twice and nothing is left out:

- Timers nest: a stage's time excludes the stages timed inside it on the same thread (a
  per-thread stack). Stages that run work on other threads (the load, the join and sort) are
  timed with the process's CPU clock (all threads); the work those threads do is timed with
  their own thread's clock where it happens (the compiled decoder's calls on the decoding
  threads, the gzip inflater on its thread) and subtracted from the stage that ran them.
- The analysis may run part of its work in a child process (``hostgap.parallel.beside``: the
  enclosures and the overview beside the steps' split); its CPU is the process's
  ``RUSAGE_CHILDREN`` once it is reaped, its own row (the timers inside it count in its memory,
  not here), and the parent's time reading its result is ``receive from the child``.
- ``start`` is the CPU the interpreter had used when this script began (start-up, site);
  ``other`` is the process's CPU at the end less every stage: click's parsing, the cache's
  lookup and fingerprint, thread start-up and shutdown, the allocator's trims.
"""

from __future__ import annotations

import time

START_CPU = time.process_time()
START_WALL = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections import defaultdict  # noqa: E402

STAGES = (
    "start",
    "import",
    "read + buffer",
    "inflate (own thread)",
    "cut",
    "parse",
    "columns",
    "join/sort",
    "load: table, devices",
    "link",
    "child process (enclosures, overview)",
    "receive from the child",
    "overview",
    "steps",
    "TaxBreak",
    "kernels table",
    "document",
    "cache write",
    "output",
    "other",
)

cpu: dict[str, float] = defaultdict(float)
wall: dict[str, float] = defaultdict(float)
calls: dict[str, int] = defaultdict(int)
lock = threading.Lock()
local = threading.local()


def timed(name: str, fn, clock=time.thread_time):
    """``fn`` with its CPU (``clock``) and wall time, less those of timers nested in it on this
    thread, added to stage ``name``."""

    def run(*a, **k):
        stack = local.__dict__.setdefault("stack", [])
        frame = [0.0, 0.0]  # CPU and wall of nested timers
        stack.append(frame)
        c0, w0 = clock(), time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            c, w = clock() - c0, time.perf_counter() - w0
            stack.pop()
            with lock:
                cpu[name] += c - frame[0]
                wall[name] += w - frame[1]
                calls[name] += 1
            if stack:
                stack[-1][0] += c
                stack[-1][1] += w

    return run


def timed_gen(name: str, gen_fn):
    """A generator function whose every step's thread CPU is added to ``name`` (it runs on the
    inflating thread, where nothing else is timed)."""

    def run(*a, **k):
        it = gen_fn(*a, **k)
        while True:
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                with lock:
                    cpu[name] += time.thread_time() - c0
                    wall[name] += time.perf_counter() - w0
            yield item

    return run


def patch(obj, attr: str, name: str, clock=time.thread_time) -> None:
    setattr(obj, attr, timed(name, getattr(obj, attr), clock))


def main() -> None:
    args = sys.argv[1:]
    cache = None
    if "--cache" in args:
        i = args.index("--cache")
        cache = args[i + 1]
        del args[i : i + 2]
    extra = args[args.index("--") + 1 :] if "--" in args else []
    trace = args[0]
    if cache:
        os.environ.pop("HOSTGAP_NO_CACHE", None)
        os.environ["HOSTGAP_CACHE_DIR"] = cache
    else:
        os.environ["HOSTGAP_NO_CACHE"] = "1"
    cpu["start"], wall["start"] = START_CPU, 0.0

    c0, w0 = time.process_time(), time.perf_counter()
    import hostgap.cli

    hostgap.cli.no_huge_pages()  # as the command does, before numpy is imported
    import click

    from hostgap import readers
    from hostgap.analysis import trace as analysis_trace
    from hostgap.analysis import trace_cache
    from hostgap.anatomy import overview, steps, taxbreak
    from hostgap.api import _results
    from hostgap.readers import kineto, text
    from hostgap.readers.kineto import compiled as kineto_columns
    from hostgap.readers.kineto import stream as kineto_stream

    cpu["import"], wall["import"] = time.process_time() - c0, time.perf_counter() - w0

    P = time.process_time
    # the load and its parts
    patch(readers, "load_trace", "load: table, devices", P)
    text.inflate = timed_gen("inflate (own thread)", text.inflate)
    patch(kineto_stream.EventStream, "_read", "read + buffer")
    for m in ("_cut", "_prefix", "_confirm"):  # (_tail, a generator, cuts the last chunk: in the load's row)
        patch(kineto_stream.EventStream, m, "cut")
    kineto_stream.EventStream._split = staticmethod(timed("cut", kineto_stream.EventStream._split))
    patch(kineto._Builder, "finish", "join/sort", P)
    patch(kineto._NativeBuilder, "add", "columns")
    patch(kineto._Builder, "add", "columns")
    nat = kineto_columns._NATIVE
    if nat is not None:
        on_main, on_worker = timed("parse", nat.decode), timed("parse on workers", nat.decode)

        def parse(*a):
            return (on_main if threading.current_thread() is threading.main_thread() else on_worker)(*a)

        class Timed:
            scratch, number_ns = staticmethod(nat.scratch), staticmethod(nat.number_ns)
            decode = staticmethod(parse)

        kineto_columns._NATIVE = Timed
    patch(kineto._Builder, "decode_list", "parse")  # the msgspec path (chunks the extension leaves)
    # the analysis
    patch(analysis_trace, "launch_links", "link", P)
    patch(analysis_trace, "enclosing_links", "link", P)
    from hostgap.parallel import beside

    patch(beside.Beside, "_collect", "receive from the child", P)
    patch(overview, "overview", "overview", P)
    patch(analysis_trace, "analyze", "steps", P)
    patch(taxbreak, "kernel_taxes", "TaxBreak", P)
    for f in ("trace_taxbreak", "launch_classes", "top_host", "_per_step_taxes", "_unattributed"):
        patch(steps, f, "TaxBreak", P)
    patch(analysis_trace.TraceAnalysis, "kernel_rows", "kernels table", P)
    patch(steps.Anatomy, "to_dict", "document", P)
    patch(analysis_trace.TraceAnalysis, "document", "document", P)
    for f in ("put_trace", "put_arrays", "put_documents"):
        patch(trace_cache.Entry, f, "cache write", P)
    patch(_results.Result, "to_json", "output", P)
    click.echo = timed("output", click.echo, P)

    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1)
    os.dup2(devnull, 1)
    try:
        hostgap.cli.cli.main(
            args=["analyze", "--json", "--quiet", trace, *extra], prog_name="hostgap", standalone_mode=False
        )
        sys.stdout.flush()
    finally:
        os.dup2(saved, 1)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rc = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu["child process (enclosures, overview)"] = rc.ru_utime + rc.ru_stime
    total = ru.ru_utime + ru.ru_stime + rc.ru_utime + rc.ru_stime
    end_wall = time.perf_counter()
    # the work of other threads, counted in the process clock of the stage that ran them
    # (the load) and on their own clocks in their stages: taken out of the load's row
    cpu["load: table, devices"] -= cpu["inflate (own thread)"] + cpu["parse on workers"]
    cpu["parse"] += cpu.pop("parse on workers")
    wall.pop("parse on workers", None)
    cpu["other"] = total - sum(cpu[s] for s in STAGES if s != "other")
    wall["other"] = (end_wall - START_WALL) - sum(
        wall[s] for s in STAGES if s not in ("other", "inflate (own thread)", "child process (enclosures, overview)")
    )
    print(
        json.dumps(
            {
                "trace": trace,
                "cache": bool(cache),
                "stages": {s: {"cpu_s": cpu[s], "wall_s": wall[s], "calls": calls[s]} for s in STAGES},
                "process_cpu_s": total,
                "user_s": ru.ru_utime + rc.ru_utime,
                "system_s": ru.ru_stime + rc.ru_stime,
                "child_peak_rss_bytes": rc.ru_maxrss * 1024,
                "wall_s": end_wall - START_WALL,
                "peak_rss_bytes": ru.ru_maxrss * 1024,
            }
        )
    )


if __name__ == "__main__":
    main()


# -- the parent's side: run as a child, check the sum, print the table --------------------------


def run_child(trace: str, env: dict, cache: str | None = None) -> dict:
    """This script on ``trace`` as a child process; the child's CPU from ``wait4`` beside its own
    accounting (``sum_cpu_s``: the stages; ``wait4_cpu_s``: the whole process, its exit included)."""
    import subprocess
    import tempfile

    cmd = [sys.executable, os.path.abspath(__file__), trace, *(["--cache", cache] if cache else [])]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
        out = p.stdout.read()  # type: ignore[union-attr]
        p.stdout.close()  # type: ignore[union-attr]
        _, status, ru = os.wait4(p.pid, 0)
        wall_s = time.perf_counter() - t0
        p.returncode = code = os.waitstatus_to_exitcode(status)
        if code:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed ({code}):\n{err.read().decode(errors='replace')[-2000:]}")
    res = json.loads(out.decode().strip().splitlines()[-1])
    res["sum_cpu_s"] = sum(v["cpu_s"] for v in res["stages"].values())
    res["child_wall_s"] = wall_s
    res["wait4_cpu_s"] = ru.ru_utime + ru.ru_stime
    return res


def table(res: dict, json_bytes: int | None = None) -> str:
    """The stage table: CPU and wall per stage, each stage's share of the process's CPU."""
    total = res.get("wait4_cpu_s") or res["process_cpu_s"]
    lines = [f"{'stage':<24} {'CPU s':>8} {'wall s':>8} {'CPU %':>6}"]
    for name, v in res["stages"].items():
        lines.append(f"{name:<24} {v['cpu_s']:8.3f} {v['wall_s']:8.3f} {100 * v['cpu_s'] / total:6.1f}")
    exit_cpu = total - res["process_cpu_s"]
    lines.append(
        f"{'exit (after the command)':<24} {exit_cpu:8.3f} {res['child_wall_s'] - res['wall_s']:8.3f} {100 * exit_cpu / total:6.1f}"
    )
    named = res["sum_cpu_s"] - res["stages"]["other"]["cpu_s"]
    lines.append(
        f"{'the process (wait4)':<24} {total:8.3f} {res['child_wall_s']:8.3f}   "
        f"(user {res['user_s']:.2f} + system {res['system_s']:.2f} at return)"
    )
    lines.append(
        f"named stages (all but other and exit) {named:.3f} CPU-s = {100 * named / total:.1f} % of the process "
        f"({'within' if named >= 0.95 * total else 'NOT within'} 5 %)"
    )
    if json_bytes:
        lines.append(
            f"{json_bytes / 1e6:.1f} MB of JSON: {json_bytes / 1e6 / total:.0f} MB/CPU-s, "
            f"peak RSS {res['peak_rss_bytes'] / 1e9:.2f} GB = {res['peak_rss_bytes'] / json_bytes:.2f}x the JSON"
            + (
                f" (the child's {res['child_peak_rss_bytes'] / 1e9:.2f} GB, most of it the parent's pages it shares)"
                if res.get("child_peak_rss_bytes")
                else ""
            )
        )
    return "\n".join(lines)
