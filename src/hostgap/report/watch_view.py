"""What ``hostgap watch`` shows on the terminal: the live table's header and one line per interval,
the summary lines of the window, and a stored watch as ``hostgap show`` prints it."""

from __future__ import annotations

HEADER = (
    f"{'t s':>6} {'steps/s':>8} {'tok/step':>8} {'seq/step':>8} {'period ms':>9} {'p90 ms':>7} "
    f"{'busy':>5} {'prefill':>7}  {'host share':<22} {'top lever':<13} notes"
)


def _num(x: float | None, fmt: str, scale: float = 1.0) -> str:
    width = fmt.split(".")[0]
    return format("-", f">{width}") if x is None else format(x * scale, fmt)


def table_line(row: dict, previous: dict | None = None) -> str:
    """One live-table line of an interval row (notes the previous row had too are not repeated)."""
    if row["host_share"] is None:
        share = "-" if row["host_share_basis"] == "none" else f"- ({row['host_share_basis']})"
    else:
        share = (
            f"{row['host_share']:.2f} [{row['host_share_low']:.2f}-{row['host_share_high']:.2f}] "
            f"{'dev' if row['host_share_basis'] == 'device timer' else 'model'}"
        )
    top = row.get("top_lever")
    lever = f"{top['lever']} {top['gain']:+.0%}" if isinstance(top, dict) and top.get("gain") is not None else "-"
    seen = set(previous["notes"]) if previous else set()
    notes = "; ".join(n for n in row["notes"] if n not in seen)
    if row.get("calibrating"):
        notes = f"calibrating; {notes}" if notes else "calibrating"
    if row["status"] not in ("ok", "idle"):
        notes = f"{row['status']}: {notes}" if notes else row["status"]
    return (
        f"{row['t_rel_s'] + row['interval_s']:>6.0f} {_num(row['steps_per_s'], '8.1f')} {_num(row['tokens_per_step'], '8.2f')} "
        f"{_num(row['seqs_per_step'], '8.2f')} {_num(row['step_period_s'], '9.2f', 1e3)} "
        f"{_num(row['step_period_p90_s'], '7.2f', 1e3)} {_num(row['busy_share'], '5.2f')} "
        f"{_num(row['prefill_share'], '7.2f')}  {share:<22} {lever:<13} {notes}"
    ).rstrip()


def summary_lines(summ: dict) -> list[str]:
    lines = [
        f"{summ['intervals']} intervals ({', '.join(f'{k} {v}' for k, v in summ['by_status'].items() if v)}), "
        f"{summ['steps']:.0f} steps, {_num(summ['steps_per_s'], '.1f')} steps/s, "
        f"{_num(summ['tokens_per_step'], '.2f')} tokens/step, step period {_num(summ['step_period_s'], '.2f', 1e3)} ms"
    ]
    if summ["host_share"] is not None:
        lines.append(
            f"host-exposed share {summ['host_share']:.2f} [{summ['host_share_low']:.2f}-"
            f"{summ['host_share_high']:.2f}] ({summ['host_share_basis']}; per interval "
            f"{summ['host_share_min']:.2f}-{summ['host_share_max']:.2f})"
        )
    else:
        lines.append("host-exposed share: not estimated (see the notes above)")
    if summ.get("host_breakdown"):
        parts = sorted(summ["host_breakdown"].items(), key=lambda kv: -kv[1])
        lines.append("scheduler loop by stage: " + ", ".join(f"{k} {v:.0%}" for k, v in parts))
    top = summ.get("top_lever")
    if top:
        lines.append(
            f"top lever: {top['lever']} in {top['intervals']} interval(s), mean predicted gain {top['gain_mean']:+.0%} "
            "(hostgap advise on the stored watch for every lever, its target and basis)"
        )
    for c in summ["fail_if"]:
        shown = "n/a" if c["value"] is None else f"{c['value']:.4g}"
        lines.append(f"fail-if {c['condition']}: {'HOLDS' if c['holds'] else 'does not hold'} (window value {shown})")
    return lines


def stored_lines(r: dict) -> list[str]:
    """``hostgap show`` of a stored watch: its intervals as the live table showed them, then the
    window's summary."""
    w = r.get("watch") or {}
    rows = w.get("intervals") or []
    out = [f"watch {r.get('run_id')} of {r.get('server_url')} ({r.get('engine')}), every {w.get('interval_s')} s"]
    cal = w.get("calibration")
    if cal:
        out.append(f"calibration {cal['source']}: {cal['steps']} decode steps at batch {list(cal['batches'])}")
    taken = [h for h in (w.get("calibrations") or {}).get("history") or [] if h.get("ok")]
    if taken:
        out.append(f"self-calibrations: {len(taken)} ({', '.join(h['reason'] for h in taken)})")
    if w.get("intervals_dropped"):
        out.append(
            f"{w['intervals_total']} intervals; the last {len(rows)} below, the whole watch in "
            f"{len(w.get('buckets') or [])} buckets of {w.get('bucket_intervals')} intervals (results.json)"
        )
    if rows:
        out.append(HEADER)
    for i, row in enumerate(rows):
        out.append(table_line(row, rows[i - 1] if i else None))
    out.extend(summary_lines(w["summary"]) if w.get("summary") else [])
    if r.get("run_dir"):
        out.append(f"run directory: {r['run_dir']}")
    return out
