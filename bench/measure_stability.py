"""How often is the default ``hostgap measure`` valid, and how stable is its answer?

Runs the default main job (``hostgap measure`` with no workload arguments, as
``scripts/main.sh`` does) K times, each in a fresh process, and prints: valid count, time per
run (median, max), the host fraction's median and spread across the valid runs, whether
every valid run lies within every other's interval (and, since calibrated intervals need not:
how many intervals hold the valid runs' median, how many pairs overlap), agreement with the traced anatomy, the
re-measurement rounds used, and the invalid reasons by count. ``--load`` starts one CPU-bound
neighbour (``python -c 'while 1: pass'``) for the whole series and always stops it.

Writes ``bench/results/measure-stability-<label>.json`` (every run's figures) and ``.txt`` (the
summary printed).

    .venv/bin/python bench/measure_stability.py --label quiet              # K=20, ~12-15 min
    .venv/bin/python bench/measure_stability.py --label busy-core --load   # ~15-20 min
    .venv-vllm/bin/python bench/measure_stability.py --engine vllm -k 5 --label quiet
    .venv-vllm/bin/python bench/measure_stability.py --engine hf,vllm -k 3 --label quiet

Each run is ``python -m hostgap measure`` with the Python running this script, so vLLM needs
``.venv-vllm/bin/python`` (scripts/install-vllm.sh). Options after ``--`` go to measure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(engine: str, extra: list[str], out: str, timeout: float) -> dict:
    """One default measurement in a fresh process; its figures, or why it gave none."""
    cmd = [sys.executable, "-m", "hostgap", "measure", "--json", "--no-db", "-q", "-o", out]
    if engine != "hf":
        cmd += ["--engine", engine]
    cmd += extra
    t0 = time.monotonic()
    # its own process group: on a timeout every process it started (vLLM's engine) is ended too
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out, start_new_session=True
    )
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(p)
        return {"seconds": time.monotonic() - t0, "exit": None, "valid": False, "reasons": [f"timeout {timeout:.0f} s"]}
    except BaseException:
        _end_group(p)
        raise
    took = time.monotonic() - t0
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return {"seconds": took, "exit": p.returncode, "valid": False, "reasons": [f"no results: {tail[:200]}"]}
    runs = doc if isinstance(doc, list) else [doc]
    out_runs = []
    for r in runs:
        d = r.get("differencing") or {}
        ci = (d.get("ci") or {}).get("host_fraction")
        conv = d.get("convergence") or {}
        out_runs.append(
            {
                "engine": r.get("engine"),
                "valid": bool(r.get("valid")),
                "reasons": r.get("invalid_reasons") or [],
                "host_fraction": d.get("host_fraction"),
                "ci": ci,
                "t_step_ns": d.get("t_step_ns"),
                "anatomy_minus_diff": (r.get("agreement") or {}).get("difference"),
                "agree": (r.get("agreement") or {}).get("agree"),
                "rounds": len(conv.get("rounds") or []),
                "stopped": conv.get("stopped"),
                "attempts": d.get("attempts"),
                "machine": d.get("machine"),
                "engine_difference": r.get("engine_difference") if r is runs[0] else None,
            }
        )
    return {
        "seconds": took,
        "exit": p.returncode,
        "valid": all(x["valid"] for x in out_runs),
        "runs": out_runs,
        "reasons": [x for r in out_runs for x in r["reasons"]],
    }


def _end_group(p: subprocess.Popen) -> None:
    """SIGTERM to the run's process group, SIGKILL after 10 s."""
    import signal

    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _reason_kind(text: str) -> str:
    """A reason without its numbers, so that reasons count together."""
    return re.sub(r"[-+]?\d+(\.\d+)?", "#", text.split(":")[0] if text.startswith("machine busy") else text)


def summarise(rows: list[dict], engine: str) -> dict:
    """The figures of the series; the per-engine ones (host fraction, intervals, anatomy,
    rounds) are the first engine's at the top level and each engine's under ``engines``."""
    names = engine.split(",")
    out = _summarise_engine(rows, names[0])
    if len(names) > 1:
        out["engines"] = {n: _summarise_engine(rows, n) for n in names}
    return out


def _summarise_engine(rows: list[dict], name: str) -> dict:
    secs = [r["seconds"] for r in rows]
    per = [x for r in rows for x in (r.get("runs") or []) if x["engine"] == name]
    valid = [x for x in per if x["valid"] and x["host_fraction"] is not None]
    hf = [x["host_fraction"] for x in valid]
    overlap = (
        all(a["ci"] and b["ci"] and a["ci"][0] <= b["host_fraction"] <= a["ci"][1] for a in valid for b in valid)
        if valid
        else None
    )
    # Calibrated 95 % intervals from independent runs cannot all hold every other run's value (two
    # runs differ by sqrt(2) of one's error: each pair ~83 %), so two more telling figures beside
    # it: the pairs whose intervals overlap (~99.4 % when calibrated) and the runs whose interval
    # holds the valid runs' median (the best estimate of the true value: ~95 %).
    with_ci = [x for x in valid if x["ci"]]
    pairs = [(a, b) for i, a in enumerate(with_ci) for b in with_ci[i + 1 :]]
    overlapping = sum(1 for a, b in pairs if a["ci"][0] <= b["ci"][1] and b["ci"][0] <= a["ci"][1])
    mid = statistics.median(hf) if hf else None
    cover_median = sum(1 for x in with_ci if mid is not None and x["ci"][0] <= mid <= x["ci"][1])
    reasons = Counter(_reason_kind(x) for r in rows for x in r["reasons"])
    diffs = [x["engine_difference"] for r in rows for x in (r.get("runs") or []) if x.get("engine_difference")]
    both = {}
    if diffs:  # two engines: the difference's interval per run
        ok = [d for d in diffs if d.get("valid") and d.get("host_exposed_ns")]
        both = {
            "difference_valid": len(ok),
            "difference_host_exposed_ms": [
                [round(d["host_exposed_ns"][k] / 1e6, 4) for k in ("value", "lo", "hi")] for d in ok
            ],
        }
    return {
        "k": len(rows),
        "valid": sum(1 for r in rows if r["valid"]),
        "engine_valid": len(valid),
        "seconds_median": statistics.median(secs),
        "seconds_max": max(secs),
        "under_60s": sum(1 for s in secs if s < 60),
        "host_fraction_median": statistics.median(hf) if hf else None,
        "host_fraction_min": min(hf) if hf else None,
        "host_fraction_max": max(hf) if hf else None,
        "each_within_every_interval": overlap,
        "interval_pairs": len(pairs),
        "interval_pairs_overlapping": overlapping,
        "intervals": len(with_ci),
        "intervals_holding_median": cover_median,
        "anatomy_agree": sum(1 for x in valid if x["agree"]),
        "anatomy_minus_diff_max_abs": max(
            (abs(x["anatomy_minus_diff"]) for x in valid if x["anatomy_minus_diff"] is not None), default=None
        ),
        "rounds_median": statistics.median([x["rounds"] for x in per]) if per else None,
        "rounds_max": max((x["rounds"] for x in per), default=None),
        "invalid_reasons": dict(reasons.most_common()),
        **both,
    }


def text(summary: dict, meta: dict) -> str:
    s = summary
    pct = lambda x: "-" if x is None else f"{100 * x:.1f} %"  # noqa: E731
    lines = [
        f"hostgap measure stability: {meta['label']} ({meta['engine']}, K={s['k']}, load: {meta['load']})",
        f"date {meta['date_utc']}, loadavg before {meta['loadavg_before']}, after {meta['loadavg_after']}, "
        f"{meta.get('cpus')} CPUs, nice {meta.get('nice')}",
        f"valid                   {s['valid']} of {s['k']}",
        f"time per run            median {s['seconds_median']:.1f} s, max {s['seconds_max']:.1f} s "
        f"({s['under_60s']} of {s['k']} under 60 s)",
    ]
    for name, e in (s.get("engines") or {"": s}).items():
        if name:
            lines.append(f"{name}: valid in {e.get('engine_valid')} of {s['k']} runs")
        lines += [
            f"host fraction (valid)   median {pct(e['host_fraction_median'])}, range "
            f"{pct(e['host_fraction_min'])} .. {pct(e['host_fraction_max'])}; each within every other's "
            f"interval: {e['each_within_every_interval']}",
            f"intervals               {e.get('intervals_holding_median')} of {e.get('intervals')} hold the valid "
            f"runs' median; {e.get('interval_pairs_overlapping')} of {e.get('interval_pairs')} pairs overlap",
            f"anatomy agrees          {e['anatomy_agree']} of {e.get('engine_valid', e['valid'])} valid (largest "
            f"|anatomy - diff| {pct(e['anatomy_minus_diff_max_abs'])})",
            f"re-measure rounds       median {e['rounds_median']}, max {e['rounds_max']}",
        ]
    lines.append("invalid reasons         " + ("none" if not s["invalid_reasons"] else ""))
    lines += [f"  {n} x {r}" for r, n in s["invalid_reasons"].items()]
    if "difference_valid" in s:
        lines.append(
            f"engine difference       valid in {s['difference_valid']} of {s['k']}; host-exposed "
            "(ms/step, value [lo, hi]): "
            + "; ".join(f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]" for v, lo, hi in s["difference_host_exposed_ms"])
        )
    return "\n".join(lines) + "\n"


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", type=int, default=20, help="runs (default 20)")
    ap.add_argument("--engine", default="hf", help="hf (default), vllm or hf,vllm")
    ap.add_argument("--load", action="store_true", help="one CPU-bound process beside the runs")
    ap.add_argument("--label", required=True, help="conditions in a word or two: quiet, busy-core, shared")
    ap.add_argument("--timeout", type=float, default=600, help="seconds before one run is given up")
    ap.add_argument("--out-dir", default=str(ROOT / "bench/results"))
    ap.add_argument("extra", nargs="*", help="more measure options after --, e.g. -- --budget 60")
    a = ap.parse_args(argv)
    if a.k < 1:
        print("measure_stability: -k: must be >= 1", file=sys.stderr)
        return 2
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", a.label).strip("-") or "run"
    meta = {
        "label": a.label,
        "engine": a.engine,
        "load": "one CPU-bound process" if a.load else "none",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_before": _loadavg(),
        "extra": a.extra,
        "cpus": os.cpu_count(),
        "nice": os.nice(0),
    }
    hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if a.load else None
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="hostgap-stability-") as tmp:
            for i in range(a.k):
                r = one_run(a.engine, a.extra, tmp, a.timeout)
                rows.append(r)
                print(
                    f"run {i + 1}/{a.k}: {'valid' if r['valid'] else 'invalid'} in {r['seconds']:.1f} s"
                    + ("" if r["valid"] else f" ({'; '.join(r['reasons'])[:160]})"),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if hog is not None:
            hog.terminate()
            try:
                hog.wait(timeout=10)
            except subprocess.TimeoutExpired:
                hog.kill()
                hog.wait()
    meta["loadavg_after"] = _loadavg()
    summary = summarise(rows, a.engine)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = out / f"measure-stability-{label}{'' if a.engine == 'hf' else '-' + a.engine.replace(',', '-')}"
    base.with_suffix(".json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=1) + "\n")
    t = text(summary, meta)
    base.with_suffix(".txt").write_text(t)
    print(t, end="")
    print(f"wrote {base}.json and .txt", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
