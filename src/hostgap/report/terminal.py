"""Terminal tables (rich) and CSV/JSON writers for the trace commands. Presentation only."""

from __future__ import annotations

import io
import re
import sys
from typing import TYPE_CHECKING, Any

import msgspec

from hostgap.anatomy.markers import describe

if TYPE_CHECKING:
    from rich.console import Console as RichConsole
    from rich.table import Table as RichTable

# rich is imported on first use: `--json` and `--csv` runs never need it (cold start)


def Console(*args: Any, **kwargs: Any) -> RichConsole:  # noqa: N802 (stands in for the class)
    from rich.console import Console as RichConsole

    return RichConsole(*args, **kwargs)


def Table(*args: Any, **kwargs: Any) -> RichTable:  # noqa: N802
    from rich.table import Table as RichTable

    return RichTable(*args, **kwargs)


class StderrConsole:
    """rich's stderr console, created on first use."""

    _console: RichConsole | None = None

    def __getattr__(self, name):
        if StderrConsole._console is None:
            StderrConsole._console = Console(stderr=True)
        return getattr(StderrConsole._console, name)


def ms(ns) -> str:
    return "—" if ns is None else f"{ns / 1e6:.3f}"


def pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def dumps_json(doc) -> str:
    """JSON text (numpy scalars and dataclasses already converted by the callers)."""
    return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode()


def write_csv(rows: list[dict], out=None) -> None:
    out = out or sys.stdout
    if not rows:
        return
    keys: list[str] = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    import csv

    w = csv.DictWriter(out, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(v) for k, v in r.items()})


def _cell(v):
    if isinstance(v, (dict, list)):
        return msgspec.json.encode(v).decode()
    return v


_PADDING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)
"""Spaces at the end of a line, before any closing colour codes."""


class TrimmedLines(io.TextIOBase):
    """A text stream that drops the spaces rich pads table lines with up to the table's width
    (so copied output has no trailing blanks); whole lines only, the rest waits for its newline
    or a flush."""

    def __init__(self, file):
        self._file = file
        self._rest = ""

    def write(self, s: str) -> int:
        head, sep, self._rest = (self._rest + s).rpartition("\n")
        if sep:
            self._file.write(_PADDING.sub(r"\1", head) + "\n")
        return len(s)

    def flush(self) -> None:
        if self._rest:
            self._file.write(self._rest)
            self._rest = ""
        self._file.flush()

    def isatty(self) -> bool:
        return self._file.isatty()

    # typeshed declares TextIOBase.encoding a writable attribute; at runtime it is a read-only
    # descriptor (assigning it raises AttributeError), so a read-only property is the true override
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._file, "encoding", "utf-8")


def stdout_console(**kw) -> RichConsole:
    """A console on stdout whose lines carry no trailing spaces."""
    return Console(file=TrimmedLines(sys.stdout), **kw)


def console(quiet: bool = False) -> RichConsole:
    return stdout_console(quiet=quiet, width=max(140, Console().width))


def render_overview(doc: dict, con: RichConsole) -> None:
    con.print(
        f"[bold]{doc['trace']}[/bold]  ({doc['format']}, {doc['events']:,} events"
        + (f", rank {doc['rank']}/{doc['world_size']}" if doc.get("world_size") else "")
        + ")"
    )
    if not doc["device_activity"]:
        con.print("  no device activity: this trace has no GPU kernels, copies or memsets")
    if doc["devices"]:
        t = Table(title="GPU timeline per device (ms)", title_justify="left")
        for c in (
            "device",
            "name",
            "span",
            "busy",
            "idle",
            "kernel sum",
            "kernel union",
            "kernels",
            "memcpy",
            "memcpy bytes",
            "memset",
        ):
            t.add_column(c, justify="right" if c not in ("name",) else "left")
        for d in doc["devices"]:
            t.add_row(
                str(d["device"]),
                d["name"],
                ms(d["span_ns"]),
                ms(d["busy_ns"]),
                ms(d["idle_ns"]),
                ms(d["kernel_sum_ns"]),
                ms(d["kernel_union_ns"]),
                f"{d['kernel_count']:,}",
                ms(d["memcpy_ns"]),
                f"{d['memcpy_bytes']:,}",
                ms(d["memset_ns"]),
            )
        con.print(t)
        for d in doc["devices"]:
            if d.get("comm_count"):
                con.print(
                    f"  device {d['device']} busy = compute {ms(d['compute_active_ns'])} ms + communication "
                    f"{ms(d['comm_active_ns'])} ms ({d['comm_count']:,} ops) − overlap "
                    f"{ms(d['comm_overlap_ns'])} ms"
                )
        for d in doc["devices"]:
            g = d["idle_gaps"]
            parts = ", ".join(f"{k} {g['count'][k]:,} gaps / {ms(g['total_ns'][k])} ms" for k in g["count"])
            n = d.get("streams")
            basis = f"summed over its {n} streams, stream-time: can exceed the span" if n and n > 1 else "one stream"
            con.print(f"  device {d['device']} idle gaps ({basis}; threshold {g['threshold_ns'] / 1000:g} µs): {parts}")
            if d["top_kernels"]:
                t = Table(title=f"top kernels, device {d['device']}", title_justify="left")
                for c in ("kernel", "class", "count", "total ms", "mean µs", "share"):
                    t.add_column(c, justify="left" if c in ("kernel", "class") else "right")
                for k in d["top_kernels"]:
                    t.add_row(
                        _trim(k["name"], 70),
                        k["class"],
                        f"{k['count']:,}",
                        ms(k["total_ns"]),
                        f"{k['mean_ns'] / 1e3:.2f}",
                        pct(k["share"]),
                    )
                con.print(t)
    if doc["windows"]:
        t = Table(title="windows (GPU ops clipped to the window, ms)", title_justify="left")
        for c in ("window", "device", "source", "span", "busy", "idle", "kernel sum", "kernel union", "kernels"):
            t.add_column(c, justify="left" if c in ("window", "source") else "right")
        for w in doc["windows"]:
            t.add_row(
                w["name"],
                str(w["device"]),
                w["source"],
                ms(w["span_ns"]),
                ms(w["busy_ns"]),
                ms(w["idle_ns"]),
                ms(w["kernel_sum_ns"]),
                ms(w["kernel_union_ns"]),
                f"{w['kernel_count']:,}",
            )
        con.print(t)
    if doc["launch_stats"]:
        t = Table(title="launch APIs (µs)", title_justify="left")
        for c in ("api", "calls", "GPU ops", "call p50", "call p95", "launch→start p50", "p95"):
            t.add_column(c, justify="left" if c == "api" else "right")
        for s in doc["launch_stats"]:
            a, d = s["api_dur_ns"], s["delay_ns"]
            t.add_row(
                s["api"],
                f"{s['count']:,}",
                f"{s['gpu_ops']:,}",
                _us(a.get("p50")),
                _us(a.get("p95")),
                _us(d.get("p50")),
                _us(d.get("p95")),
            )
        con.print(t)
    links = doc["links"]
    con.print(
        f"  links: {links['launches']:,} launches, {links['graph_launches']:,} graph launches "
        f"replaying {links['graph_replayed_ops']:,} ops; {links['unlinked_gpu_ops']:,} GPU ops "
        "without a launch partner (kept)"
    )
    g = doc.get("graph_launch_cost")
    if g:
        con.print(
            f"  graph launches: {g['host_ns'] / 1e3:,.1f} µs of host time for {g['nodes']:,} replayed nodes: "
            f"{g['host_ns_per_node'] / 1e3:.3f} µs per node ({g['launches']:,} launch(es), median "
            f"{g['nodes_per_launch_p50']:g} nodes each)"
        )
    if doc["skipped"]:
        con.print("  skipped events: " + ", ".join(f"{k}: {v:,}" for k, v in doc["skipped"].items()))


def _us(ns) -> str:
    return "—" if ns is None else f"{ns / 1e3:.2f}"


def _trim(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def overview_csv_rows(doc: dict) -> list[dict]:
    """One row per device and per window (``scope`` says which)."""
    rows = []
    for d in doc["devices"]:
        rows.append(
            {
                "trace": doc["trace"],
                "scope": "device",
                "name": d["name"],
                **{k: v for k, v in d.items() if k not in ("idle_gaps", "top_kernels", "name")},
            }
        )
    for w in doc["windows"]:
        rows.append({"trace": doc["trace"], "scope": "window", **w})
    return rows


def to_text(render, *args) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=140)
    render(*args, con)
    return buf.getvalue()


# -- steps and TaxBreak ------------------------------------------------------------------------

# looked up with a document's "activity", which may be absent (None)
ACTIVITY_LABEL: dict[str | None, str] = {
    "gpu": "GPU-active",
    "cpu-compute": "CPU-compute (device-active analogue)",
}


def render_anatomy(doc: dict, con: RichConsole) -> None:
    """Steady-state step split, TaxBreak, verdict and where the host time went."""
    steps = doc.get("steps") or []
    label = ACTIVITY_LABEL.get(doc.get("activity"), "device-active")
    summ = doc["summary"]
    con.print(
        f"[bold]steps[/bold]: {len(steps)} ({describe(doc['marker_family'])}); steady decode "
        f"{summ['steady']['count']}, prefill {summ['prefill']['count']}, warm-up "
        f"{summ['warmup']['count']}, flagged (queued/partial) {summ['flagged']['count']}"
    )
    groups = [(g, summ[g]) for g in ("steady", "prefill", "warmup", "flagged") if summ[g]["count"]]
    if groups:
        t = Table(title=f"per step, median \\[p10–p90] (ms); {label}", title_justify="left")
        for c in ("group", "steps", "wall", label, "host-exposed", "host_wait", "host fraction", "kernels"):
            t.add_column(c, justify="left" if c == "group" else "right")
        for g, s in groups:
            t.add_row(
                g,
                str(s["count"]),
                _band(s["wall_ns"]),
                _band(s["gpu_active_ns"]),
                _band(s["host_exposed_ns"]),
                _band(s["host_wait_ns"]),
                _pband(s["host_fraction"]),
                _nband(s["kernel_count"]),
            )
        con.print(t)
    _render_comm(doc, groups, label, con)
    tax = doc["taxbreak"]
    if tax.get("applicable"):
        n = max(len(steps), 1)
        con.print(
            f"[bold]TaxBreak[/bold] per step (host work, exposed or hidden; not a part of host-exposed): "
            f"ΔFT {ms(tax['ft_ns'] / n)} ms, ΔCT {ms(tax['ct_ns'] / n)} ms, ΔKT {ms(tax['kt_ns'] / n)} ms "
            f"(floor {tax['launch_floor_ns'] / 1000:.3f} µs: {tax['floor_source']}), "
            f"ΔKT_fw {ms(tax['kt_fw_ns'] / n)} ms, unattributed {ms(tax['unattributed_ns'] / n)} ms; "
            f"T_DeviceActive {ms(tax['device_active_ns'] / n)} ms, T_Orchestrate {ms(tax['orchestrate_ns'] / n)} ms, "
            f"HDBI {_f(tax['hdbi'])}"
        )
        con.print(
            f"  kernels per step {_f(tax['kernels_per_step'], 1)}, per token {_f(tax['kernels_per_token'], 1)}; "
            f"unique {tax['unique_kernels']} ({pct(tax['unique_ratio'])}); launches {tax['launches']:,}, "
            f"graph launches {tax['graph_launches']:,}, library {tax['library_launches']:,}"
        )
        _render_tax_classes(tax, n, con)
    else:
        con.print(f"[bold]TaxBreak[/bold]: not applicable ({tax.get('note', '')})")
    v = doc["verdict"]
    con.print(
        f"[bold]verdict[/bold]: [bold]{v['verdict']}[/bold]  host fraction {pct(v['host_fraction'])}, "
        f"host_wait share {pct(v['host_wait_share'])}, HDBI {_f(v['hdbi'])}"
        + (f"  ({v['note']})" if v.get("note") else "")
    )
    if "levers" in doc:  # the top levers under the verdict (hostgap advise for all: docs/advise.md)
        from hostgap.report.advise_view import render_top

        render_top(doc, con)
    for key, title in (("top_ops", "framework ops"), ("top_frames", "Python frames")):
        rows = doc.get(key) or []
        if rows:
            basis = "ΔFT+ΔCT" if doc.get("activity") == "gpu" else "host time outside compute ops"
            t = Table(title=f"where the host time went: {title} by {basis}", title_justify="left")
            for c in ("name", "ms/step", "launches" if doc.get("activity") == "gpu" else "calls", "share"):
                t.add_column(c, justify="left" if c == "name" else "right")
            for r in rows:
                t.add_row(_trim(r["name"], 80), ms(r["host_ns_per_step"]), f"{r['launches']:,}", pct(r["share"]))
            con.print(t)


def _render_comm(doc: dict, groups: list, label: str, con: RichConsole) -> None:
    """Per step group: compute-active, communication-active and their overlap (only when the
    trace has communication ops in its steps)."""
    comm = doc.get("communication") or {}
    if not comm.get("comm_count") or not groups:
        return
    t = Table(
        title=f"communication per step, median \\[p10–p90] (ms); {label} = compute + comm − overlap",
        title_justify="left",
    )
    for c in ("group", "steps", "compute", "comm", "overlap", "comm ops"):
        t.add_column(c, justify="left" if c == "group" else "right")
    for g, s in groups:
        t.add_row(
            g,
            str(s["count"]),
            _band(s["compute_active_ns"]),
            _band(s["comm_active_ns"]),
            _band(s["comm_overlap_ns"]),
            _nband(s["comm_count"]),
        )
    con.print(t)
    types = ", ".join(f"{k} {v:,}" for k, v in comm["by_type"].items())
    con.print(f"  communication ops in steps: {comm['comm_count']:,} ({types})")


def _render_tax_classes(tax: dict, n: int, con: RichConsole) -> None:
    """TaxBreak of the communication launches (and graph launches mixing both) apart, when any."""
    by = tax.get("by_class") or {}
    if not any(
        by.get(c, {}).get("launches") or by.get(c, {}).get("graph_launches") for c in ("communication", "mixed")
    ):
        return
    parts = []
    for c, v in by.items():
        launches = v["launches"] + v["graph_launches"]
        if not launches:
            continue
        parts.append(
            f"{c} {launches:,} launches, T_Orchestrate {ms(v['orchestrate_ns'] / n)} ms "
            f"({pct(v['orchestrate_ns'] / tax['orchestrate_ns'] if tax['orchestrate_ns'] else None)}), "
            f"device {ms(v['device_ns'] / n)} ms"
        )
    con.print("  by launch class, per step: " + "; ".join(parts))


def render_steps(doc: dict, con: RichConsole) -> None:
    label = ACTIVITY_LABEL.get(doc.get("activity"), "device-active")
    t = Table(title=f"steps of {doc['trace']} (ms)", title_justify="left")
    # launches = eager launch calls, as in the JSON; graph launches get their own column
    graph = any(s["graph_launches"] for s in doc["steps"])
    comm = any(s.get("comm_count") for s in doc["steps"])
    for c in (
        "#",
        "kind",
        "wall",
        label,
        "host-exposed",
        "host_wait",
        "host %",
        "kernels",
        "launches",
        *(("graph launches",) if graph else ()),
        *(("compute", "comm", "overlap") if comm else ()),
        "HDBI",
        "flags",
    ):
        t.add_column(c, justify="left" if c in ("kind", "flags") else "right")
    for s in doc["steps"]:
        flags = ",".join([f for f in ("queued", "partial") if s[f]] + list(s.get("graph_flags") or []))
        tb = s.get("taxbreak") or {}
        t.add_row(
            str(s["index"]),
            s["kind"],
            ms(s["wall_ns"]),
            ms(s["gpu_active_ns"]),
            ms(s["host_exposed_ns"]),
            ms(s["host_wait_ns"]),
            pct(s["host_fraction"]),
            f"{s['kernel_count']:,}",
            f"{s['launches']:,}",
            *((f"{s['graph_launches']:,}",) if graph else ()),
            *((ms(s["compute_active_ns"]), ms(s["comm_active_ns"]), ms(s["comm_overlap_ns"])) if comm else ()),
            _f(tb.get("hdbi")),
            flags,
        )
    con.print(t)
    render_anatomy({**doc, "top_ops": [], "top_frames": []}, con)


CLASS_LABEL = {"communication": "comm"}
"""Launch classes as the launch table shows them (the JSON and CSV spell them out)."""

KERNEL_TABLE_MAX = 1000
"""Launches shown in the terminal table of ``hostgap kernels``; --csv/--json give every row."""


def render_kernels(rows: list[dict], con: RichConsole, trace: str | None = None) -> None:
    """The launches of ``hostgap kernels`` as a table (times in µs); says how many are left out."""
    if not rows:
        con.print("no kernel launches in this trace (a CPU-only trace has none)", highlight=False)
        return
    shown = rows[:KERNEL_TABLE_MAX]
    t = Table(title=f"launches of {trace or 'the trace'} (µs; ΔKT = launch floor per launch)", title_justify="left")
    for c in (
        "step",
        "launch API",
        "kernel",
        "class",
        "op",
        "device",
        "T_py",
        "T_dispatch",
        "T_launch",
        "ΔFT",
        "ΔCT",
        "ΔKT",
        "ΔKT_fw",
        "queued",
    ):
        t.add_column(
            c,
            justify="left" if c in ("launch API", "kernel", "class", "op") else "right",
            min_width=16 if c == "launch API" else None,
        )
    for r in shown:
        t.add_row(
            str(r["step"]),
            r["launch_api"],
            _trim(r["kernel"], 48),
            CLASS_LABEL.get(r["class"], r["class"]),
            _trim(r["op"] or r["inner_op"], 28),
            _us(r["device_ns"]),
            _us(r["t_py_ns"]),
            _us(r["t_dispatch_ns"]),
            _us(r["t_launch_ns"]),
            _us(r["dft_ns"]),
            _us(r["dct_ns"]),
            _us(r["dkt_ns"]),
            _us(r["dkt_fw_ns"]),
            "yes" if r["queued"] else "",
        )
    con.print(t)
    if len(rows) > len(shown):
        con.print(
            f"{len(rows) - len(shown):,} more launches not shown ({len(rows):,} in all): --csv or --json "
            "prints every row",
            highlight=False,
        )


def step_csv_rows(doc: dict) -> list[dict]:
    rows = []
    for s in doc["steps"]:
        row = {k: v for k, v in s.items() if k not in ("taxbreak", "idle_causes", "devices")}
        for k, v in (s.get("idle_causes") or {}).items():  # per-device parts: JSON only
            row[f"idle_{k}"] = v
        for k, v in (s.get("taxbreak") or {}).items():
            row[f"tb_{k}"] = v
        row["activity"] = doc["activity"]
        rows.append(row)
    return rows


def _f(x, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _band(st) -> str:
    if not st:
        return "—"
    return f"{st['median'] / 1e6:.3f} [{st['p10'] / 1e6:.3f}–{st['p90'] / 1e6:.3f}]"


def _pband(st) -> str:
    if not st:
        return "—"
    return f"{100 * st['median']:.1f}% [{100 * st['p10']:.0f}–{100 * st['p90']:.0f}]"


def _nband(st) -> str:
    return "—" if not st else f"{st['median']:.0f}"


def run_console(file=None) -> RichConsole:
    """The console the measuring commands and ``show`` print a run on: stdout (or ``file``),
    the terminal's width, else 160 columns; no highlighting, no soft wrap."""
    if file is not None:
        return Console(file=TrimmedLines(file), highlight=False, soft_wrap=False, width=160)
    probe = Console()
    return stdout_console(highlight=False, soft_wrap=False, width=probe.width if probe.is_terminal else 160)


def cache_lines(doc: dict) -> list[str]:
    """``hostgap cache`` on the terminal: where, how full, then one line per entry."""
    import time

    out = []
    if doc.get("cleared"):
        c = doc["cleared"]
        out.append(f"cleared {c['entries']} entr{'y' if c['entries'] == 1 else 'ies'} ({c['bytes'] / 1e6:,.1f} MB)")
    state = "" if doc["enabled"] else " (off: HOSTGAP_NO_CACHE is set)"
    out.append(
        f"analysis cache {doc['dir']}{state}: {len(doc['entries'])} entr{'y' if len(doc['entries']) == 1 else 'ies'}, "
        f"{doc['total_bytes'] / 1e6:,.1f} MB of {doc['max_bytes'] / 1e9:,.1f} GB"
    )
    for e in doc["entries"]:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["last_used"]))
        out.append(f"  {e['size_bytes'] / 1e6:10,.1f} MB  {used}  {e['path']}  ({', '.join(e['parts'])})")
    return out
