"""vLLM's V1 engine on CPU with its processes pinned to 1 and 2 cores, with and without a
co-located CPU-bound load: the measured curve beside ``predict --what-if cpu:cores=N,load=L``.

One engine start (the ``tiny`` preset, eager, float32, ``load_format="dummy"``); for each
configuration every thread of the frontend, EngineCore and Worker processes is pinned to the
configuration's cores (``sched_setaffinity`` on each task), and the load, one ``python -c
'while 1: pass'`` process, is started on the same cores. Per configuration and repeat, the
decode step's wall time is differenced from two runs of the same batch-1 request (N1 and N2
generated tokens): ``(wall(N2) - wall(N1)) / (N2 - N1)``, which removes the prefill and the
request's fixed costs. Beside each point: /proc/loadavg and the steal and total jiffies of
/proc/stat over the point (the machine's other work is a load this script does not control).

    .venv-vllm/bin/python bench/cpu_cores.py -o bench/results/cpu_cores.json

Output: JSON with the points, the conditions, the model's prediction for each configuration
(the cpu what-if's fair-share stretch of the host term) and the measured ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = [  # (cores, co-located busy processes)
    ((0, 1), 0),
    ((0,), 0),
    ((0, 1), 1),
    ((0,), 1),
]


def _stat() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    vals = [int(x) for x in parts]
    return vals[7] if len(vals) > 7 else 0, sum(vals[:8])


def _loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def _pin(pids: list[int], cores: tuple[int, ...]) -> int:
    """Pin every thread of every process in ``pids``; returns the threads pinned."""
    n = 0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, set(cores))
                n += 1
            except (ProcessLookupError, PermissionError):
                pass
    return n


def _busy(cores: tuple[int, ...]) -> subprocess.Popen:
    """One CPU-bound process pinned to ``cores``."""

    def pin() -> None:
        os.sched_setaffinity(0, set(cores))

    return subprocess.Popen([sys.executable, "-c", "while 1: pass"], preexec_fn=pin)


def _model(cores: int, load: int) -> dict:
    from hostgap.model.whatif.cpu import busy_threads, slowdown

    t = busy_threads("vllm", 1)
    return {"threads": t, "slowdown": slowdown(t, cores, load)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--n1", type=int, default=4)
    ap.add_argument("--n2", type=int, default=36)
    ap.add_argument("-r", "--repeats", type=int, default=3)
    a = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        print("bench/cpu_cores.py: needs 2 CPU cores", file=sys.stderr)
        return 2
    from hostgap.capture.engines.vllm.common import VllmOptions, prompt_ids
    from hostgap.capture.engines.vllm.runtime import VllmRuntime
    from hostgap.model.arch import get_preset

    arch = get_preset("tiny")
    opts = VllmOptions(dtype="float32", kv_cache_gib=0.25, max_model_len=512, max_num_seqs=8)
    prompt = prompt_ids(arch.vocab, [64], 0)
    points: list[dict] = []
    t_start = time.time()
    la0 = _loadavg()
    with tempfile.TemporaryDirectory(prefix="hostgap-cpu-cores-") as tmp:
        rt = VllmRuntime(arch, opts, Path(tmp) / "run", profile=False)
        rt.start()
        load_procs: list[subprocess.Popen] = []
        try:
            pids = [os.getpid(), *rt.pids]
            rt.generate(prompt, [a.n2])  # warm-up
            for cores, load in CONFIGS:
                threads = _pin(pids, cores)
                load_procs = [_busy(cores) for _ in range(load)]
                time.sleep(0.5)
                steal0, tot0 = _stat()
                la = _loadavg()
                per_step = []
                for _ in range(a.repeats):
                    w1, _ = rt.generate(prompt, [a.n1])
                    w2, _ = rt.generate(prompt, [a.n2])
                    per_step.append((w2 - w1) / (a.n2 - a.n1))
                steal1, tot1 = _stat()
                for p in load_procs:
                    p.terminate()
                for p in load_procs:
                    p.wait(timeout=10)
                load_procs = []
                points.append(
                    {
                        "cores": list(cores),
                        "load": load,
                        "threads_pinned": threads,
                        "step_ns": per_step,
                        "step_ns_median": statistics.median(per_step),
                        "loadavg_before": la,
                        "loadavg_after": _loadavg(),
                        "steal_fraction": (steal1 - steal0) / max(tot1 - tot0, 1),
                        "model": _model(len(cores), load),
                    }
                )
                print(
                    f"cores {len(cores)} load {load}: {statistics.median(per_step) / 1e6:.3f} ms/step "
                    f"(repeats {[round(x / 1e6, 3) for x in per_step]}), loadavg {la[0]:.1f}",
                    file=sys.stderr,
                )
        finally:
            for p in load_procs:
                p.terminate()
                p.wait(timeout=10)
            _pin([os.getpid()], tuple(range(os.cpu_count() or 1)))
            rt.close()
    ref = next(pt for pt in points if len(pt["cores"]) == 2 and pt["load"] == 0)
    for pt in points:
        pt["measured_ratio"] = pt["step_ns_median"] / ref["step_ns_median"]
        pt["model_ratio"] = pt["model"]["slowdown"] / ref["model"]["slowdown"]
    doc = {
        "kind": "hostgap.bench.cpu_cores",
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        "duration_s": time.time() - t_start,
        "preset": "tiny",
        "engine": "vllm (V1, CPU device)",
        "n1": a.n1,
        "n2": a.n2,
        "repeats": a.repeats,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": la0,
        "loadavg_end": _loadavg(),
        "points": points,
    }
    Path(a.output).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
