"""Ingest benchmark: whole-process ``hostgap analyze --json`` against HTA, a generated trace of
any size for memory and throughput, and per-stage times. Prints ratios measured in one run.

    .venv/bin/python bench/ingest.py                      # (a) and (c) on the dev trace
    .venv/bin/python bench/ingest.py --large-gb 2         # (b) too: a >= 2 GB trace, generated
    .venv/bin/python bench/ingest.py --large-gb 2 --no-hta --json

(a) ``hostgap analyze --json`` as a whole process (interpreter start and imports included)
    against a whole process that imports HTA, loads the trace (``TraceAnalysis``) and runs its
    temporal breakdown; min over ``--repeats`` of wall and of CPU time (user + system).
(b) a real trace repeated with timestamps shifted past the previous copy's end and correlation,
    External id and flow ids offset, written to a temporary folder as plain JSON (and gzip with
    ``--large-gzip``), analysed once as a whole process: peak RSS (``wait4``) over the JSON size,
    MB of JSON per CPU-second. The file is deleted afterwards; it is never kept.
(c) per-stage times in a fresh process: import, text (read + inflate only), decode + columns
    (``load_trace`` minus the text stage), link, anatomy (overview + steps); with one decoding
    worker and with two (``HOSTGAP_JOBS``), in alternation, and the ratio of their decode
    stages. The decode stage is profiled too: CPU in the compiled decoder's calls (``decode``,
    on whichever thread ran them), in joining and sorting the columns (``finish``), and the rest
    (reading, cutting, building each chunk's columns in Python).

hostgap is measured with its compiled Kineto decoder (``hostgap.readers._kcolumns``) on one worker
(``HOSTGAP_JOBS=1``) and on the default (the cores available), and with the pure-Python one
(``HOSTGAP_PURE_PYTHON=1``), in the same run.

HTA runs in ``bench/.venv-hta`` (see bench/README.md); ``--no-hta`` skips it.

Every child runs with Python's bytecode cache, as an installed package does (pip compiles
``.pyc`` files at install; HTA's venv has them): ``PYTHONDONTWRITEBYTECODE`` is dropped from the
children's environment and ``PYTHONPYCACHEPREFIX`` points at a temporary folder (removed at the
end), filled by one warm-up run, so the source tree is left as it is. (a) also reports hostgap
without the cache, where each run compiles hostgap's modules from source.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "hta" / "a100_deep_queue_rank0.json.gz"
DEFAULT_HTA_PYTHON = ROOT / "bench" / ".venv-hta" / "bin" / "python"
HOSTGAP = [sys.executable, "-m", "hostgap"]
TARGETS = {
    "speedup_vs_hta": 10.0,
    "peak_rss_per_json_byte": 0.7,
    "json_mb_per_cpu_s": 250.0,
    "decode_mb_per_cpu_s": 390.0,
    "decode_scaling_2_workers": 1.7,
    "wall_s_per_gb": 4.0,
    "later_wall_s": 1.5,
}
"""The whole first analysis of a 2 GB trace in 8 s of wall time on 2 cores is ``wall_s_per_gb``."""
PURE = {"HOSTGAP_PURE_PYTHON": "1"}
ONE = {"HOSTGAP_JOBS": "1"}
"""One decoding worker (the default is one per core available to the process)."""
"""The children's extra environment for the pure-Python Kineto decoder (the compiled one is the
default where it is built): every measurement of hostgap is made with both, side by side."""

HTA_SCRIPT = r"""
import logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
analyzer.get_temporal_breakdown(visualize=False)
"""


def child_env(cache_dir: str | None) -> dict:
    """The children's environment: with a bytecode cache in ``cache_dir``, or none at all. The
    analysis cache is off (``HOSTGAP_NO_CACHE``): a first look is measured as a first look;
    :func:`second_look` turns it on in a folder of its own."""
    env = dict(os.environ)
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.pop("HOSTGAP_CACHE_DIR", None)
    env["HOSTGAP_NO_CACHE"] = "1"
    if cache_dir is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache_dir
    return env


ENV = child_env(None)
"""Set by :func:`main` (a bytecode cache in a temporary folder)."""


def run_process(cmd: list[str], **kw) -> dict:
    """Wall, CPU (user + sys) and peak RSS of one child process, from ``wait4``."""
    t0 = time.perf_counter()
    kw.setdefault("env", ENV)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{err[-2000:]}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_bytes": ru.ru_maxrss * 1024}


def best_of(cmd: list[str], repeats: int, **kw) -> dict:
    run_process(cmd, **kw)  # warm-up: fills the bytecode cache and the page cache
    runs = [run_process(cmd, **kw) for _ in range(repeats)]
    return {
        "wall_min_s": min(r["wall_s"] for r in runs),
        "cpu_min_s": min(r["cpu_s"] for r in runs),
        "peak_rss_bytes": max(r["peak_rss_bytes"] for r in runs),
        "repeats": repeats,
    }


def json_size(path: Path) -> int:
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return sum(len(b) for b in iter(lambda: f.read(1 << 24), b""))
    return path.stat().st_size


# -- (a) whole process against HTA ---------------------------------------------------------------


def whole_process_vs_hta(trace: Path, repeats: int, hta_python: str | None) -> dict:
    cmd = [*HOSTGAP, "analyze", "--json", "--quiet", str(trace)]
    out: dict = {
        "trace": str(trace),
        "json_bytes": json_size(trace),
        "hostgap": best_of(cmd, repeats),
        "hostgap_one_worker": best_of(cmd, repeats, env={**ENV, **ONE}),
        "hostgap_pure_python": best_of(cmd, repeats, env={**ENV, **PURE}),
        "hostgap_no_bytecode_cache": best_of(cmd, repeats, env=child_env(None)),
    }
    if hta_python:
        with tempfile.TemporaryDirectory() as d:
            # HTA reads every trace file of a folder: give it a folder holding only this one
            os.symlink(trace.resolve(), os.path.join(d, trace.name))
            out["hta"] = best_of([hta_python, "-c", HTA_SCRIPT, d], max(1, repeats // 2))
        out["speedup_wall"] = out["hta"]["wall_min_s"] / out["hostgap"]["wall_min_s"]
        out["speedup_cpu"] = out["hta"]["cpu_min_s"] / out["hostgap"]["cpu_min_s"]
        out["speedup_cpu_pure_python"] = out["hta"]["cpu_min_s"] / out["hostgap_pure_python"]["cpu_min_s"]
    return out


# -- the second look: the analysis cache -------------------------------------------------------

LATER = (("analyze", "--json"), ("steps", "--csv"), ("kernels", "--json"), ("steps", "--json"))
"""Later commands on the same file, each a whole process reading the cache entry the first
analysis left."""


def second_look(trace: str, repeats: int, json_bytes: int) -> dict:
    """The first analysis with the cache on (it decodes and fills the entry), then each of
    :data:`LATER` as a whole process (min of ``repeats`` after one warm-up, the entry already
    there); the entry's size on disk."""
    d = tempfile.mkdtemp(prefix="hostgap-ingest-cache-")
    env = {**ENV, "HOSTGAP_CACHE_DIR": d}
    env.pop("HOSTGAP_NO_CACHE")
    try:
        first = run_process([*HOSTGAP, "analyze", "--json", "--quiet", trace], env=env)
        first["peak_rss_per_json_byte"] = first["peak_rss_bytes"] / json_bytes
        entry = sum(f.stat().st_size for f in Path(d).rglob("*") if f.is_file())
        later = {}
        for cmd in LATER:
            r = best_of([*HOSTGAP, *cmd, "--quiet", trace], repeats, env=env)
            r["peak_rss_per_json_byte"] = r["peak_rss_bytes"] / json_bytes
            later[" ".join(cmd)] = r
        return {"first_with_cache": first, "entry_bytes": entry, "later": later}
    finally:
        shutil.rmtree(d, ignore_errors=True)


HEAVY = ("rich", "matplotlib", "scipy", "pandas", "pyarrow", "torch")


def import_time(trace: str) -> dict:
    """``python -X importtime`` of ``analyze --json`` and ``steps --csv``: the imports' total,
    the ten costliest top-level packages, and which heavy packages were imported at all."""
    out = {}
    for cmd in (("analyze", "--json"), ("steps", "--csv")):
        full = [sys.executable, "-X", "importtime", "-m", "hostgap", *cmd, "--quiet", trace]
        subprocess.run(full, capture_output=True, env=ENV, check=True)  # warm-up
        p = subprocess.run(full, capture_output=True, text=True, env=ENV, check=True)
        top: dict[str, int] = {}
        seen = set()
        for line in p.stderr.splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            _, cum, raw = line[len("import time:") :].split("|")
            cum, name = cum.strip(), raw.strip()
            if not cum.isdigit():
                continue
            seen.add(name.split(".")[0])
            if len(raw) - len(raw.lstrip()) == 1:  # a top-level import: its cumulative time
                root = name.split(".")[0]
                top[root] = top.get(root, 0) + int(cum)
        out[" ".join(cmd)] = {
            "total_ms": sum(top.values()) / 1e3,
            "top": sorted(((k, v / 1e3) for k, v in top.items()), key=lambda kv: -kv[1])[:10],
            "heavy_imported": sorted(h for h in HEAVY if h in seen),
        }
    return out


# -- (b) a generated large trace -----------------------------------------------------------------


def generate(src: Path, dest: Path, min_bytes: int) -> dict:
    """``src`` repeated until the JSON passes ``min_bytes``: each copy shifted in time past the
    previous one's end, its correlation, External id and flow ids offset past the previous
    copy's largest, so the copies never link to one another."""
    import msgspec

    with gzip.open(src, "rb") if src.name.endswith(".gz") else open(src, "rb") as f:
        doc = msgspec.json.decode(f.read())
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    span = int(max(e["ts"] + e.get("dur", 0) for e in timed) - t0) + 1000
    ids = [0]
    for e in events:
        a = e.get("args") if isinstance(e, dict) else None
        if isinstance(a, dict):
            ids += [v for k in ("correlation", "External id") if isinstance(v := a.get(k), int)]
        if isinstance(e, dict) and isinstance(e.get("id"), int):
            ids.append(e["id"])
    id_step = max(ids) + 1
    head = msgspec.json.encode(doc)[:-1] + (b',"traceEvents":[' if doc else b'{"traceEvents":[')
    n = written = copies = 0
    with open(dest, "wb") as f:
        f.write(head)
        written = len(head)
        while written < min_bytes:
            if copies:
                for e in events:
                    if not isinstance(e, dict):
                        continue
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] += span
                    if isinstance(e.get("id"), int):
                        e["id"] += id_step
                    a = e.get("args")
                    if isinstance(a, dict):
                        for k in ("correlation", "External id"):
                            if isinstance(a.get(k), int):
                                a[k] += id_step
            body = msgspec.json.encode(events)[1:-1]
            f.write(b"," + body if copies else body)
            written += len(body) + (1 if copies else 0)
            copies += 1
            n += len(events)
        f.write(b"]}")
        written += 2
    return {"path": str(dest), "json_bytes": written, "events": n, "copies": copies}


def large_trace(
    src: Path, gb: float, tmp_root: str | None, with_gzip: bool, with_stages: bool, repeats: int = 1
) -> dict:
    d = tempfile.mkdtemp(prefix="hostgap-ingest-", dir=tmp_root)
    try:
        t0 = time.perf_counter()
        gen = generate(src, Path(d) / "large.json", int(gb * 1e9))
        gen["generate_s"] = time.perf_counter() - t0
        out = {"generated": gen, "runs": {}}
        paths = {"json": gen["path"]}
        if with_gzip:
            t0 = time.perf_counter()
            subprocess.run(["gzip", "-1", "-k", gen["path"]], check=True)
            paths["json.gz"] = gen["path"] + ".gz"
            gen["gzip_s"] = time.perf_counter() - t0
            gen["gzip_bytes"] = os.path.getsize(paths["json.gz"])
        for kind, p in paths.items():
            for decoder, env in (("", ENV), (" one worker", {**ENV, **ONE}), (" pure-Python", {**ENV, **PURE})):
                r = run_process([*HOSTGAP, "analyze", "--json", "--quiet", p], env=env)
                r["peak_rss_per_json_byte"] = r["peak_rss_bytes"] / gen["json_bytes"]
                r["json_mb_per_cpu_s"] = gen["json_bytes"] / 1e6 / r["cpu_s"]
                r["json_mb_per_wall_s"] = gen["json_bytes"] / 1e6 / r["wall_s"]
                out["runs"][kind + decoder] = r
        out["second_look"] = second_look(gen["path"], max(1, repeats), gen["json_bytes"])
        if with_stages:
            out["stages"] = stages_side_by_side(gen["path"], repeats)
            out["stages_pure_python"] = stages(gen["path"], PURE)
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- (c) per-stage times ---------------------------------------------------------------------------

STAGES_SCRIPT = r"""
import json, os, sys, threading, time
PAGE = os.sysconf("SC_PAGE_SIZE")
peak, stage = {}, ["import"]
def sample():  # resident set every 2 ms, its largest value per stage
    with open("/proc/self/statm", "rb") as f:
        while True:
            f.seek(0)
            rss = int(f.read().split()[1]) * PAGE
            peak[stage[0]] = max(peak.get(stage[0], 0), rss)
            time.sleep(0.002)
threading.Thread(target=sample, daemon=True).start()
def clock():
    return time.perf_counter(), time.process_time()
def since(t):
    w, c = clock()
    return {"wall_s": w - t[0], "cpu_s": c - t[1]}
def enter(name):
    time.sleep(0.005)  # let the sampler see the end of the previous stage
    stage[0] = name
out, t = {}, clock()
import hostgap.cli
hostgap.cli.no_huge_pages()  # as the command does, before numpy is imported
from hostgap.readers import default_jobs, load_trace
from hostgap.readers.text import text_pieces
out["import"] = since(t)
# the decode stage's profile: CPU in the compiled decoder's calls (on whichever thread) and in
# finish (joining and sorting the columns, all its threads), wall of finish
from hostgap.readers import kineto
from hostgap.readers.kineto import compiled as kineto_columns
prof, lock = {"decoder_cpu_s": 0.0, "finish_cpu_s": 0.0, "finish_wall_s": 0.0}, threading.Lock()
nat = kineto_columns._NATIVE
if nat is not None:
    class Timed:
        scratch, number_ns = staticmethod(nat.scratch), staticmethod(nat.number_ns)
        @staticmethod
        def decode(*a):
            c = time.thread_time(); r = nat.decode(*a); c = time.thread_time() - c
            with lock:
                prof["decoder_cpu_s"] += c
            return r
    kineto_columns._NATIVE = Timed
finish = kineto._Builder.finish
def timed_finish(self, *a):
    w, c = clock(); r = finish(self, *a)
    prof["finish_wall_s"] += time.perf_counter() - w; prof["finish_cpu_s"] += time.process_time() - c
    return r
kineto._Builder.finish = timed_finish
path = sys.argv[1]
enter("text (read + inflate)")
t = clock(); n = sum(len(p) for p in text_pieces(path)); out["text (read + inflate)"] = since(t)
enter("decode + columns")
t = clock(); trace = load_trace(path); load = since(t)
out["decode + columns"] = {k: load[k] - out["text (read + inflate)"][k] for k in load}
from hostgap.anatomy.link import link
from hostgap.anatomy.overview import overview
from hostgap.anatomy.steps import AnalysisOptions, analyze
enter("link")
from hostgap.memory import release_free_memory  # as the command does after each of the two
t = clock(); links = link(trace); release_free_memory(); out["link"] = since(t)
enter("anatomy: overview")
t = clock()
doc = overview(trace, links, gap_threshold_ns=30_000, top=10); release_free_memory()
enter("anatomy: steps")
analyze(trace, AnalysisOptions(gap_threshold_ns=30_000, top=10), links).to_dict()
out["anatomy (overview + steps)"] = since(t)
enter("end")
time.sleep(0.01)
print(json.dumps({"json_bytes": n, "events": len(trace.events), "stages": out, "peak_rss_bytes": peak,
                  "jobs": default_jobs(), "decode_profile": prof}))
"""


def stages(trace: str, extra_env: dict | None = None, warm_up: bool = True) -> dict:
    cmd = [sys.executable, "-c", STAGES_SCRIPT, trace]
    env = {**ENV, **(extra_env or {})}
    if warm_up:
        subprocess.run(cmd, capture_output=True, check=True, env=env)  # bytecode and page cache
    p = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(p.stdout.strip().splitlines()[-1])


def stages_side_by_side(trace: str, repeats: int) -> dict:
    """Stages with one decoding worker and with two (and 4 and 8 where the process may use that
    many cores), alternating ``repeats`` times (the run with the faster decode stage kept for
    each); the ratio of the one-worker decode stage's wall time to each."""
    stages(trace)  # warm-up
    cores = len(os.sched_getaffinity(0))
    counts = [j for j in (1, 2, 4, 8) if j <= max(2, cores)]
    runs: dict[str, list[dict]] = {str(j): [] for j in counts}
    for _ in range(repeats):
        for jobs in runs:
            runs[jobs].append(stages(trace, {"HOSTGAP_JOBS": jobs}, warm_up=False))
    best = {j: min(r, key=lambda x: x["stages"]["decode + columns"]["wall_s"]) for j, r in runs.items()}
    wall = {j: best[j]["stages"]["decode + columns"]["wall_s"] for j in best}
    return {
        "one worker": best["1"],
        "two workers": best["2"],
        "decode_scaling": wall["1"] / wall["2"],
        "curve": {j: {"decode_wall_s": w, "speedup": wall["1"] / w} for j, w in wall.items()},
        "cores": cores,
        "repeats": repeats,
    }


# -- report ----------------------------------------------------------------------------------------


def report(res: dict) -> str:
    la = res["load_average"]
    lines = [
        f"load average (1, 5, 15 min) at the start {' '.join(f'{x:.2f}' for x in la['start'])}, "
        f"at the end {' '.join(f'{x:.2f}' for x in la['end'])} ({os.cpu_count()} CPUs)"
    ]
    a = res["whole_process"]
    lines.append(f"(a) {a['trace']} ({a['json_bytes'] / 1e6:.1f} MB of JSON)")
    h = a["hostgap"]
    lines.append(
        f"    hostgap analyze --json   wall {h['wall_min_s']:.2f} s   CPU {h['cpu_min_s']:.2f} s   "
        f"(min of {h['repeats']})"
    )
    o = a["hostgap_one_worker"]
    lines.append(f"      one decoding worker    wall {o['wall_min_s']:.2f} s   CPU {o['cpu_min_s']:.2f} s")
    q = a["hostgap_pure_python"]
    lines.append(f"      pure-Python decoder    wall {q['wall_min_s']:.2f} s   CPU {q['cpu_min_s']:.2f} s")
    n = a["hostgap_no_bytecode_cache"]
    lines.append(f"      without bytecode cache wall {n['wall_min_s']:.2f} s   CPU {n['cpu_min_s']:.2f} s")
    if "hta" in a:
        t = a["hta"]
        lines.append(
            f"    HTA load + temporal      wall {t['wall_min_s']:.2f} s   CPU {t['cpu_min_s']:.2f} s   "
            f"(min of {t['repeats']})"
        )
        ok = "met" if a["speedup_cpu"] >= TARGETS["speedup_vs_hta"] else "MISSED"
        lines.append(
            f"    ratio: {a['speedup_wall']:.1f}x wall, {a['speedup_cpu']:.1f}x CPU "
            f"(target >= {TARGETS['speedup_vs_hta']:.0f}x CPU: {ok}); pure-Python decoder "
            f"{a['speedup_cpu_pure_python']:.1f}x CPU"
        )
    lines += second_look_lines(res["second_look"], "(a')")
    for cmd, it in res.get("import_time", {}).items():
        heavy = ", ".join(it["heavy_imported"]) or "none"
        lines.append(
            f"    python -X importtime: {cmd} imports in {it['total_ms']:.0f} ms; heavy packages imported: "
            f"{heavy}; costliest: " + ", ".join(f"{k} {v:.0f} ms" for k, v in it["top"][:6])
        )
    if "large" in res:
        g = res["large"]["generated"]
        lines.append(
            f"(b) generated {g['json_bytes'] / 1e9:.2f} GB of JSON, {g['events']:,} events "
            f"({g['copies']} copies, {g['generate_s']:.0f} s to write; deleted)"
        )
        for kind, r in res["large"]["runs"].items():
            mem_ok = "met" if r["peak_rss_per_json_byte"] <= TARGETS["peak_rss_per_json_byte"] else "MISSED"
            thr_ok = "met" if r["json_mb_per_cpu_s"] >= TARGETS["json_mb_per_cpu_s"] else "MISSED"
            lines.append(
                f"    .{kind:<20} wall {r['wall_s']:.1f} s  CPU {r['cpu_s']:.1f} s  "
                f"peak RSS {r['peak_rss_bytes'] / 1e9:.2f} GB = {r['peak_rss_per_json_byte']:.2f}x JSON "
                f"(<= {TARGETS['peak_rss_per_json_byte']}: {mem_ok})  {r['json_mb_per_cpu_s']:.0f} MB/CPU-s "
                f"(>= {TARGETS['json_mb_per_cpu_s']:.0f}: {thr_ok}), {r['json_mb_per_wall_s']:.0f} MB/wall-s"
            )
            if kind in ("json", "json.gz"):  # the default: one decoding worker per core
                per_gb = r["wall_s"] / (g["json_bytes"] / 1e9)
                ok = "met" if per_gb <= TARGETS["wall_s_per_gb"] else "MISSED"
                lines.append(
                    f"      whole analysis {per_gb:.1f} s of wall per GB of JSON "
                    f"(<= {TARGETS['wall_s_per_gb']:.0f}, i.e. 8 s for 2 GB: {ok})"
                )
    if "large" in res and "second_look" in res["large"]:
        lines += second_look_lines(res["large"]["second_look"], "(b')")
    for name, st in res.get("stages", {}).items():
        if "decode_scaling" in st:
            for label in ("one worker", "two workers"):
                lines += stage_lines(f"{name}, {label}", st[label])
            ok = "met" if st["decode_scaling"] >= TARGETS["decode_scaling_2_workers"] else "MISSED"
            lines.append(
                f"    decode + columns, 1 -> 2 workers: {st['decode_scaling']:.2f}x wall "
                f"(>= {TARGETS['decode_scaling_2_workers']}: {ok}; best of {st['repeats']} each, alternating)"
            )
            lines.append(
                f"    decode + columns by workers ({st['cores']} cores): "
                + ", ".join(f"{j}: {c['decode_wall_s']:.2f} s ({c['speedup']:.2f}x)" for j, c in st["curve"].items())
            )
        else:
            lines += stage_lines(name, st)
    return "\n".join(lines)


def second_look_lines(s: dict, tag: str) -> list[str]:
    f = s["first_with_cache"]
    lines = [
        f"{tag} the first analysis filling the cache: wall {f['wall_s']:.2f} s, CPU {f['cpu_s']:.2f} s, "
        f"peak RSS {f['peak_rss_per_json_byte']:.2f}x JSON; the entry {s['entry_bytes'] / 1e6:.1f} MB on disk"
    ]
    for cmd, r in s["later"].items():
        ok = "met" if r["wall_min_s"] <= TARGETS["later_wall_s"] else "MISSED"
        lines.append(
            f"    later: hostgap {cmd:<16} wall {r['wall_min_s']:.2f} s  CPU {r['cpu_min_s']:.2f} s  "
            f"peak RSS {r['peak_rss_bytes'] / 1e6:.0f} MB ({r['peak_rss_per_json_byte']:.2f}x JSON)  "
            f"(<= {TARGETS['later_wall_s']} s: {ok})"
        )
    return lines


def stage_lines(name: str, st: dict) -> list[str]:
    lines = [
        f"(c) stages on {name} ({st['json_bytes'] / 1e6:.1f} MB, {st['events']:,} events, "
        f"{st.get('jobs', '?')} decoding workers): "
        + ", ".join(f"{k} {v['wall_s']:.2f} s ({v['cpu_s']:.2f} CPU)" for k, v in st["stages"].items())
    ]
    dec = st["stages"]["decode + columns"]
    rate = st["json_bytes"] / 1e6 / dec["cpu_s"]
    ok = "met" if rate >= TARGETS["decode_mb_per_cpu_s"] else "MISSED"
    p = st.get("decode_profile") or {}
    lines.append(
        f"    decode + columns: {rate:.0f} MB/CPU-s (>= {TARGETS['decode_mb_per_cpu_s']:.0f}: {ok}); "
        f"CPU in the compiled decoder {p.get('decoder_cpu_s', 0):.2f} s, finish (join + sort) "
        f"{p.get('finish_cpu_s', 0):.2f} s ({p.get('finish_wall_s', 0):.2f} s wall), the rest "
        f"{dec['cpu_s'] - p.get('decoder_cpu_s', 0) - p.get('finish_cpu_s', 0):.2f} s"
    )
    if st.get("peak_rss_bytes"):
        lines.append(
            "    peak RSS by stage: "
            + ", ".join(f"{k} {v / 1e9:.2f} GB" for k, v in st["peak_rss_bytes"].items() if k != "end")
            + f" ({max(st['peak_rss_bytes'].values()) / st['json_bytes']:.2f}x the JSON)"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hta-python", default=str(DEFAULT_HTA_PYTHON))
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--large-gb", type=float, default=0.0, help="also generate and analyse a trace this large")
    ap.add_argument("--large-gzip", action="store_true", help="the large trace also as gzip -1")
    ap.add_argument("--large-stages", action="store_true", help="per-stage times on the large trace too")
    ap.add_argument("--large-repeats", type=int, default=1, help="alternating stage runs on the large trace")
    ap.add_argument("--tmp", default=None, help="folder for the generated trace (default: system temp)")
    ap.add_argument(
        "--stages",
        action="store_true",
        help="only the stage table (bench/ingest_stages.py): on --trace, or with --large-gb on the "
        "generated trace as plain JSON and as gzip -1",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    global ENV
    cache = tempfile.mkdtemp(prefix="hostgap-ingest-pyc-", dir=args.tmp)
    ENV = child_env(cache)
    try:
        stage_tables(args) if args.stages else run(args)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


NO_CHILD = "no cache, the analysis in one process"
"""The same command with the enclosures and the overview computed in the calling process (no
child, ``HOSTGAP_BESIDE_MIN_EVENTS`` above any trace): the child's gain, side by side."""


def stage_tables(args) -> None:
    """``--stages``: every CPU-second of ``analyze --json`` by stage (bench/ingest_stages.py), the
    first look (no cache) and the first look filling a fresh cache, after one warm-up run."""
    import ingest_stages

    load_start = os.getloadavg()
    d = tempfile.mkdtemp(prefix="hostgap-ingest-", dir=args.tmp)
    try:
        if args.large_gb:
            gen = generate(Path(args.trace), Path(d) / "large.json", int(args.large_gb * 1e9))
            subprocess.run(["gzip", "-1", "-k", gen["path"]], check=True)
            forms = {"json": gen["path"], "json.gz": gen["path"] + ".gz"}
            sizes = dict.fromkeys(forms, gen["json_bytes"])
        else:
            forms = {Path(args.trace).name: args.trace}
            sizes = {Path(args.trace).name: json_size(Path(args.trace))}
        out = {}
        for kind, path in forms.items():
            ingest_stages.run_child(path, ENV)  # warm-up: bytecode and page cache
            tries: dict[str, list[dict]] = {}
            labels = ["no cache", NO_CHILD, "filling a fresh cache"]
            if kind.endswith(".gz"):  # the fallback inflater beside ISA-L's, in the same run
                labels.insert(2, "no cache, stdlib zlib")
            for _ in range(max(1, args.large_repeats)):  # the labels alternate, run after run
                for label in labels:
                    cache = tempfile.mkdtemp(prefix="hostgap-ingest-cache-", dir=args.tmp) if "fresh" in label else None
                    env = {**ENV, "HOSTGAP_STDLIB_ZLIB": "1"} if "zlib" in label else ENV
                    if label == NO_CHILD:
                        env = {**ENV, "HOSTGAP_BESIDE_MIN_EVENTS": str(2**62)}
                    try:
                        tries.setdefault(label, []).append(ingest_stages.run_child(path, env, cache))
                    finally:
                        if cache:
                            shutil.rmtree(cache, ignore_errors=True)
            runs = {label: min(t, key=lambda r: r["child_wall_s"]) for label, t in tries.items()}
            for label, t in tries.items():
                runs[label]["walls_s"] = [r["child_wall_s"] for r in t]
                runs[label]["cpus_s"] = [r["wait4_cpu_s"] for r in t]
            out[kind] = {"json_bytes": sizes[kind], "compressed_bytes": os.path.getsize(path), "runs": runs}
    finally:
        shutil.rmtree(d, ignore_errors=True)
    res = {"stages": out, "load_average": {"start": load_start, "end": os.getloadavg()}}
    if args.json:
        print(json.dumps(res, indent=2))
        return
    la = res["load_average"]
    print(f"load average at the start {la['start'][0]:.2f}, at the end {la['end'][0]:.2f} ({os.cpu_count()} CPUs)")
    for kind, o in out.items():
        for label, r in o["runs"].items():
            walls = ", ".join(f"{w:.2f}" for w in r["walls_s"])
            print(
                f"\n{kind} ({o['compressed_bytes'] / 1e6:.1f} MB on disk), analyze --json, {label} (walls {walls} s):"
            )
            print(ingest_stages.table(r, o["json_bytes"]))


def run(args) -> None:
    load_start = os.getloadavg()
    trace = Path(args.trace)
    hta = None if args.no_hta or not Path(args.hta_python).exists() else args.hta_python
    res = {
        "whole_process": whole_process_vs_hta(trace, args.repeats, hta),
        "second_look": second_look(str(trace), args.repeats, json_size(trace)),
        "import_time": import_time(str(trace)),
        "stages": {
            trace.name: stages_side_by_side(str(trace), args.repeats),
            f"{trace.name}, pure-Python decoder": stages(str(trace), PURE),
        },
    }
    if args.large_gb:
        res["large"] = large_trace(
            trace, args.large_gb, args.tmp, args.large_gzip, args.large_stages, args.large_repeats
        )
        if "stages" in res["large"]:
            res["stages"]["generated large.json"] = res["large"].pop("stages")
            res["stages"]["generated large.json, pure-Python decoder"] = res["large"].pop("stages_pure_python")
    res["load_average"] = {"start": load_start, "end": os.getloadavg()}
    print(json.dumps(res, indent=2) if args.json else report(res))


if __name__ == "__main__":
    main()
