"""The memory of one ``hostgap analyze --json`` with its child process counted: the largest
value, over the run, of the command's resident set plus its children's private memory (their
pages not shared with the command), sampled every 10 ms from ``/proc/PID/smaps_rollup``.

    .venv/bin/python bench/ingest_memory.py TRACE [--repeats 3] [--verb analyze|steps]

``wait4``'s peak RSS (what bench/ingest.py reports) is one process's: a child forked beside the
command (``hostgap.parallel.beside``) has its own, most of it pages it shares with the command.
This counts what the two hold together, each page once (the child's shared pages are the
command's). Linux only. Prints one JSON line per run and their largest sums, also with
``HOSTGAP_BESIDE_MIN_EVENTS`` above any trace (the analysis in one process) beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def rollup(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[-1] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def one_run(trace: str, verb: str, env: dict) -> dict:
    cmd = [sys.executable, "-m", "hostgap", verb, "--json", "--quiet", trace]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    best = {"sum": 0, "parent_rss": 0, "children_private": 0}
    peak_parent = peak_children = 0
    while p.poll() is None:
        rss = rollup(p.pid).get("Rss", 0)
        private = 0
        for c in children(p.pid):
            r = rollup(c)
            private += r.get("Private_Clean", 0) + r.get("Private_Dirty", 0)
        peak_parent, peak_children = max(peak_parent, rss), max(peak_children, private)
        if rss + private > best["sum"]:
            best = {"sum": rss + private, "parent_rss": rss, "children_private": private}
        time.sleep(0.01)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode})")
    return {
        **best,
        "peak_parent_rss": peak_parent,
        "peak_children_private": peak_children,
        "wall_s": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--verb", default="analyze", choices=["analyze", "steps"])
    ap.add_argument("--json-bytes", type=int, default=None, help="the JSON's size (default: the file's)")
    a = ap.parse_args()
    size = a.json_bytes or os.path.getsize(a.trace)
    base = {**os.environ, "HOSTGAP_NO_CACHE": "1"}
    forms = {"as shipped": base, "one process": {**base, "HOSTGAP_BESIDE_MIN_EVENTS": str(2**62)}}
    runs: dict[str, list[dict]] = {k: [] for k in forms}
    for _ in range(a.repeats):
        for k, env in forms.items():
            r = one_run(a.trace, a.verb, env)
            runs[k].append(r)
            print(json.dumps({"form": k, **r}))
    for k, rs in runs.items():
        top = max(rs, key=lambda r: r["sum"])
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in rs)
        print(
            f"{k:12s} largest (command RSS + children's private) {top['sum'] / 1e9:.3f} GB = {top['sum'] / size:.3f}x "
            f"the JSON (command {top['parent_rss'] / 1e9:.3f} GB, children {top['children_private'] / 1e9:.3f} GB); "
            f"walls {walls} s"
        )


if __name__ == "__main__":
    main()
