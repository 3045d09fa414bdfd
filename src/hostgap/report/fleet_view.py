"""The fleet view on the terminal: one line per instance per interval (watch's line, the
instance in front) and the fleet's summary."""

from __future__ import annotations

import time

from hostgap.report.watch_view import HEADER, table_line

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
