"""The fleet view's cost against the number of instances, on a TSDB backfilled with promtool.

    .venv/bin/python bench/fleet_scale.py --instances 10,30,100 --hours 2
    .venv/bin/python bench/fleet_scale.py --instances 100,1000,3000 --hours 24   # the issue's sizes

For each size: write an OpenMetrics file of N vLLM instances (job "vllm", model m-a, one engine)
× H hours at 15 s (the series the fleet view reads: iteration-token and ITL histograms' count and
sum, decode and prompt token counters, running/waiting gauges; rates drawn per instance), backfill
it (`promtool tsdb create-blocks-from openmetrics`), start Prometheus on it (127.0.0.1, no scrape
targets), and time `hostgap watch --prometheus URL --start T0 --end T1 --calibration
tests/data/fleet/cal-a.json --json` over the whole span as a child process: wall time and peak
RSS (``wait4``). Prints a markdown table and writes --json. Everything lives in a temporary folder
deleted at the end; Prometheus is stopped also on failure. Backfilling is CPU-heavy: on a shared
machine run small sizes and say so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from prometheus_server import prometheus  # noqa: E402

STEP_S = 15
CAL = ROOT / "tests" / "data" / "fleet" / "cal-a.json"


def write_openmetrics(path: Path, instances: int, hours: float, end: int, seed: int = 1) -> int:
    """N instances' series over [end − hours, end) every 15 s; returns the number of samples."""
    rng = np.random.default_rng(seed)
    t = np.arange(end - int(hours * 3600), end, STEP_S)
    steps_rate = rng.uniform(8, 40, instances)  # steps per second
    batch = rng.choice([2.0, 4.0, 8.0], instances)
    period = rng.uniform(0.01, 0.03, instances)
    prompt_per_step = rng.uniform(0, 2, instances)
    elapsed = (t - t[0]).astype(float)
    samples = 0
    families = {
        "vllm:iteration_tokens_total_count": lambda k: steps_rate[k] * elapsed,
        "vllm:iteration_tokens_total_sum": lambda k: steps_rate[k] * (batch[k] + prompt_per_step[k]) * elapsed,
        "vllm:inter_token_latency_seconds_count": lambda k: steps_rate[k] * batch[k] * elapsed,
        "vllm:inter_token_latency_seconds_sum": lambda k: steps_rate[k] * batch[k] * period[k] * elapsed,
        "vllm:generation_tokens_total": lambda k: steps_rate[k] * batch[k] * elapsed,
        "vllm:prompt_tokens_total": lambda k: steps_rate[k] * prompt_per_step[k] * elapsed,
        "vllm:num_requests_running": lambda k: np.full(len(t), batch[k]),
        "vllm:num_requests_waiting": lambda k: np.zeros(len(t)),
    }
    ts = [str(int(x)) for x in t]
    with open(path, "w") as f:
        for name, values in families.items():
            f.write(f"# TYPE {name} gauge\n")  # the backfill keeps the values; the type is metadata
            for k in range(instances):
                lab = f'{{job="vllm",instance="i{k:05d}:8000",model_name="m-a",engine="0"}}'
                v = np.floor(values(k))
                f.writelines(f"{name}{lab} {int(x)} {s}\n" for x, s in zip(v, ts, strict=True))
                samples += len(ts)
        f.write("# EOF\n")
    return samples


def run_view(url: str, t0: int, t1: int, tmp: Path) -> dict:
    """The fleet view over [t0, t1] as a child process: wall time, peak RSS (wait4), its rows."""
    cmd = [str(ROOT / ".venv" / "bin" / "hostgap"), "watch", "--prometheus", url, "--start", str(t0), "--end", str(t1)]
    cmd += ["--calibration", str(CAL), "--json", "-q"]
    out_path, err_path = tmp / "view.json", tmp / "view.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(err_path.read_text()[-2000:])
    doc = json.loads(out_path.read_text())
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "rows": doc["intervals_total"],
        "instances_seen": doc["summary"]["instances"],
        "interval_s": doc["interval_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", default="10,30,100")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()
    if not shutil.which("promtool") or not shutil.which("prometheus"):
        sys.exit("fleet_scale: promtool/prometheus missing (Debian's prometheus package)")
    end = int(time.time() // 3600 * 3600) - 3600
    results = []
    for n in [int(x) for x in args.instances.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            tmpd = Path(tmp)
            om = tmpd / "fleet.om"
            t = time.perf_counter()
            samples = write_openmetrics(om, n, args.hours, end)
            gen_s = time.perf_counter() - t
            t = time.perf_counter()
            subprocess.run(
                ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(tmpd / "tsdb")],
                check=True, capture_output=True,
            )  # fmt: skip
            backfill_s = time.perf_counter() - t
            om.unlink()
            with prometheus(tmpd, []) as url:
                r = run_view(url, end - int(args.hours * 3600), end, tmpd)
            results.append(
                {
                    "instances": n,
                    "hours": args.hours,
                    "samples": samples,
                    "generate_s": gen_s,
                    "backfill_s": backfill_s,
                    **r,
                }
            )
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(
        f"| instances | hours | samples | backfill s | view wall s | view CPU s | peak RSS MB | rows |  (load {load[0]:.1f})"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['instances']} | {r['hours']:g} | {r['samples']:,} | {r['backfill_s']:.1f} | {r['wall_s']:.1f} "
            f"| {r['cpu_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['rows']:,} |"
        )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"load": load, "results": results}, indent=2))


if __name__ == "__main__":
    main()
