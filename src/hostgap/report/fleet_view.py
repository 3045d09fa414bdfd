"""The fleet view on the terminal: one line per instance per interval (watch's line, the
instance in front) and the fleet's summary."""

from __future__ import annotations

import html
import time

from hostgap.report.watch_view import HEADER, table_line

esc = html.escape

FLEET_HEADER = f"{'instance':<24} {'end (UTC)':<8} " + HEADER


def fleet_line(row: dict) -> str:
    """One row: instance, the interval's end (UTC), then watch's line."""
    end = time.strftime("%H:%M:%S", time.gmtime(row["t_end"]))
    return f"{row['instance'][:24]:<24} {end:<8} " + table_line(row)


def _share(s: dict) -> str:
    if s.get("host_share") is None:
        return "no share"
    return f"{s['host_share']:.2f} [{s['host_share_low']:.2f}-{s['host_share_high']:.2f}] ({s['host_share_basis']})"


def summary_lines(doc: dict) -> list[str]:
    """The fleet's summary: instances, host-bound ones, the worst five, each instance's share and
    calibration, the --fail-if conditions."""
    s = doc["summary"]
    end = "now" if doc.get("end") is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(doc["end"]))
    start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(doc["start"]))
    which = doc["match"] if doc["match"] != "{}" else "(every instance)"
    lines = [
        f"fleet of {doc['prometheus']} {which}: {s['instances']} instances, {start} to {end} UTC, "
        f"every {doc['interval_s']:g} s ({doc['intervals_total']} rows)",
        f"host-bound (window share ≥ {s['host_bound_min']:g}): {len(s['host_bound'])} of "
        f"{s['instances_with_share']} with a share"
        + (f": {', '.join(s['host_bound'][:10])}" if s["host_bound"] else ""),
    ]
    if s.get("anomalous"):
        lines.append(f"step anomalies (slower than the load explains): {', '.join(s['anomalous'][:10])}")
    if s["worst"]:
        lines.append("worst by host-exposed share:")
        lines += [
            f"  {w['instance']}: {_share({**w, 'host_share_basis': w['calibration'] or 'device timer'})}"
            for w in s["worst"]
        ]
    lines.append(f"{'instance':<32} {'engine':<7} {'model':<24} {'share':<40} calibration")
    for i in s["per_instance"]:
        name = f"{i['instance']} ({i['job']})" if i["job"] else i["instance"]
        cal = i["calibration"] or "-"
        if i["calibration_out_of_range_share"]:
            cal += f" (batch outside its range in {i['calibration_out_of_range_share']:.0%} of intervals)"
        lines.append(
            f"{name[:32]:<32} {str(i['engine'] or '-'):<7} {str(i['model'] or '-')[:24]:<24} {_share(i['summary']):<40} {cal}"
        )
    for c in s["fail_if"]:
        where = f" on {', '.join(c['instances'])}" if c["instances"] else ""
        lines.append(f"fail-if {c['condition']}: {'HOLDS' + where if c['holds'] else 'holds on no instance'}")
    return lines


def _cell(x: float | None, fmt: str = ".3g", scale: float = 1.0) -> str:
    return "—" if x is None else format(x * scale, fmt)


def fleet_section(n: int, arg: str, doc: dict) -> tuple[str, str, dict]:
    """``hostgap report`` on a stored fleet view (``watch --prometheus --json``): a section with
    one line per instance (its window's share with basis and interval, step period, batch,
    calibration, anomalous intervals), and the entry whose instances get rows in the inputs table."""
    s = doc["summary"]
    head = (
        "<tr><th class='name'>instance</th><th>engine</th><th>model</th><th>host-exposed share</th>"
        "<th>basis</th><th>step period (ms)</th><th>sequences per step</th><th>calibration</th>"
        "<th>anomalous intervals</th></tr>"
    )
    rows = []
    for i in s["per_instance"]:
        w = i["summary"]
        share = (
            "—"
            if w.get("host_share") is None
            else f"{w['host_share']:.2f} [{w['host_share_low']:.2f}–{w['host_share_high']:.2f}]"
        )
        judged = i.get("judged_intervals") or 0
        rows.append(
            f"<tr><td class='name'>{esc(i['instance'])} ({esc(str(i['job']))})</td><td>{esc(str(i['engine']))}</td>"
            f"<td>{esc(str(i['model']))}</td><td>{share}</td><td>{esc(str(w.get('host_share_basis')))}</td>"
            f"<td>{_cell(w.get('step_period_s'), '.3g', 1e3)}</td><td>{_cell(w.get('seqs_per_step'), '.2f')}</td>"
            f"<td>{esc(str(i['calibration'] or '—'))}</td>"
            f"<td>{i.get('anomaly_intervals', 0)} of {judged}</td></tr>"
        )
    html_text = (
        f"<section id='fleet-{n}'><h2>fleet view {esc(arg)}</h2>"
        f"<p class='meta'>{esc(summary_lines(doc)[0])}</p>"
        f"<figure id='fig-fleet-{n}'><h3>Instances</h3><table>{head}{''.join(rows)}</table>"
        "<figcaption>Per instance over the window (hostgap watch --prometheus, docs/watch.md): the step-weighted "
        "mean of its intervals' host-exposed share with the interval's low and high, the basis, the mean step "
        "period and decode batch, the class calibration it was read with, and how many of its intervals the "
        "calibrated model judged slower than their load explains.</figcaption></figure></section>"
    )
    entry = {
        "source": arg,
        "kind": "fleet_watch",
        "prometheus": doc.get("prometheus"),
        "instances": [
            {"instance": i["instance"], "job": i["job"], "calibration": i["calibration"], "summary": i["summary"]}
            for i in s["per_instance"]
        ],
    }
    return html_text, "fleet_watches", entry
