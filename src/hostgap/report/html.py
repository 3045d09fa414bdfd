"""``hostgap report``: one self-contained HTML file (no scripts, no network) with figures.

The page is built from :func:`report_data` (the document ``hostgap report --json`` prints, also
embedded in the page as inert JSON) and the SVG figures of :mod:`hostgap.report.figures.stepwise`.
Every string that can come from a trace or a file name is escaped with :func:`html.escape`;
the embedded JSON escapes ``<``, ``>`` and ``&`` so no text can close its element; and a
Content-Security-Policy forbids scripts and network loads altogether.
"""

from __future__ import annotations

import datetime as _dt
import html
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import msgspec

from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN
from hostgap.errors import HostgapError
from hostgap.report.compare import fmt_value, metrics
from hostgap.report.figures import across as M
from hostgap.report.figures import canvas as C
from hostgap.report.figures import hotspots as K
from hostgap.report.figures import stepwise as F
from hostgap.report.inputs import Input
from hostgap.report.words import check_label, words
from hostgap.version import SCHEMA_VERSION, __version__

KEY_METRICS = (
    "wall_ns",
    "gpu_active_ns",
    "host_exposed_ns",
    "host_wait_ns",
    "host_fraction",
    "kernel_count",
    "launches",
    "hdbi",
    "ft_ns",
    "ct_ns",
    "kt_ns",
    "kt_fw_ns",
    "unattributed_ns",
    "orchestrate_ns",
)

FIGURES = ("verdict", "steps", "taxbreak", "differencing", "processes", "kernels", "host", "gaps", "timeline")
"""Figure ids per input: ``fig-<name>-<i>``; plus ``fig-summary`` and ``fig-regime`` once."""

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; "
    "script-src 'none'; base-uri 'none'; form-action 'none'"
)

_ACTIVE_TAGS = {"script", "foreignobject", "iframe", "object", "embed", "handler", "animate", "set"}


def active_content(svg: str) -> str | None:
    """What in an SVG could run or load something (None when nothing): script-like elements,
    ``on*`` event attributes, ``javascript:`` links. Checks elements and attributes, so an
    escaped name in a ``<text>`` element is text, as it should be."""
    try:
        root = ET.fromstring(svg)
    except ET.ParseError as e:
        return f"not well-formed SVG ({e})"
    for el in root.iter():
        tag = el.tag.rsplit("}", 1)[-1].lower()
        if tag in _ACTIVE_TAGS:
            return f"<{tag}> element"
        for k, v in el.attrib.items():
            name = k.rsplit("}", 1)[-1].lower()
            if name.startswith("on"):
                return f"{name} attribute"
            if name == "href" and not v.startswith("#") and not v.startswith("data:image/"):
                return f"external link {v[:40]!r}"
    return None


esc = html.escape


def key_numbers(inp: Input) -> dict:
    """The numbers of the verdict card: measured runs on their differencing numbers (with the
    run's checks), traces on the median over their steady decode steps."""
    basis = "differencing" if inp.has_differencing else "steps"
    m = metrics(inp, basis)
    v = dict((inp.results or {}).get("verdict") or (inp.anatomy or {}).get("verdict") or {})
    out = {
        "basis": basis,
        "steps": m["steps"],
        "steps_used": m["steps_used"],
        "verdict": v.get("verdict"),
        "verdict_basis": v.get("basis"),
        "verdict_note": v.get("note") or "",
        "values": {k: m["values"].get(k) for k in KEY_METRICS},
    }
    out["run_kind"] = inp.run_kind
    if inp.has_differencing:
        d = (inp.results or {}).get("differencing") or {}
        out["checks"] = {
            k: d.get(k)
            for k in (
                "r2_wall",
                "r2_gpu",
                "slope_agreement",
                "profiler_inflation",
                "sum_minus_union_step_ns",
                "h2d_bytes_per_step",
                "d2h_bytes_per_step",
                "kernels_per_output_token",
            )
        }
        out["ci"] = d.get("ci")
        out["kv_range"] = d.get("kv_range")
    return out


def report_data(inputs: list[Input]) -> dict:
    """The report document (``hostgap report --json``); the HTML shows exactly these numbers."""
    docs: list[dict[str, Any]] = []
    for i, inp in enumerate(inputs):
        an = inp.anatomy or {}
        docs.append(
            {
                "n": i + 1,
                "label": inp.label,
                "source": inp.source,
                "kind": inp.kind,
                "run_kind": inp.run_kind,
                "trace": inp.trace_path,
                "activity": inp.activity,
                "activity_label": C.activity_label(inp),
                "run_id": (inp.results or {}).get("run_id"),
                "key": key_numbers(inp),
                "taxbreak": an.get("taxbreak"),
                "summary_counts": {
                    g: (an.get("summary") or {}).get(g, {}).get("count")
                    for g in ("steady", "prefill", "warmup", "flagged")
                },
                "steps": len(an.get("steps") or []),
                "top_kernels": K.top_kernels(inp),
                "top_ops": an.get("top_ops") or [],
                "top_frames": K.host_rows(inp)[1],
                "notes": list(inp.notes),
                "figures": [f"fig-{name}-{i}" for name in FIGURES],
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "hostgap_version": __version__,
        "thresholds": {"host_bound_min": HOST_BOUND_MIN, "device_bound_max": DEVICE_BOUND_MAX},
        "inputs": docs,
        "regime": M.regime_points(inputs),
        "figures": ["fig-summary", "fig-regime"] + [f for d in docs for f in d["figures"]],
    }


def figures_of(inputs: list[Input], max_bars: int = C.MAX_STEP_BARS) -> dict[str, C.Figure]:
    out = {"fig-regime": M.regime_figure(inputs, "fig-regime")}
    for i, inp in enumerate(inputs):
        for fig in (
            F.steps_figure(inp, f"fig-steps-{i}", max_bars),
            F.taxbreak_figure(inp, f"fig-taxbreak-{i}", max_bars),
            F.differencing_figure(inp, f"fig-differencing-{i}"),
            F.processes_figure(inp, f"fig-processes-{i}"),
            K.kernels_figure(inp, f"fig-kernels-{i}", max_bars),
            K.host_figure(inp, f"fig-host-{i}"),
            M.gaps_figure(inp, f"fig-gaps-{i}"),
            M.timeline_figure(inp, f"fig-timeline-{i}"),
        ):
            bad = active_content(fig.svg) if fig.svg is not None else None
            if bad:
                raise HostgapError(fig.id, f"figure SVG holds active content ({bad}); refusing to write it")
            out[fig.id] = fig
    return out


def render(
    inputs: list[Input],
    title: str | None = None,
    max_bars: int = C.MAX_STEP_BARS,
    progress=None,
    extra: Sequence[tuple[str, str, Any]] = (),
) -> tuple[str, dict]:
    """(HTML text, report document). ``extra``: ``(section HTML, data key, data entry)`` of
    further sections (trace sets: :mod:`hostgap.report.traceset_view`), placed after the inputs."""
    data = report_data(inputs)
    for _, key, entry in extra:
        data.setdefault(key, []).append(entry)
    if progress:
        progress("drawing figures")
    figs = figures_of(inputs, max_bars)
    title = title or (
        "hostgap report: "
        + ", ".join(i.label for i in inputs[:3])
        + (f" and {len(inputs) - 3} more" if len(inputs) > 3 else "")
    )
    parts = [
        _head(title),
        f"<body><header><h1>{esc(title)}</h1>",
        f"<p class='meta'>hostgap {esc(__version__)}, written "
        f"{esc(_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC'))}. "
        "Definitions: docs/method.md of the hostgap project; every figure says how it was computed.</p></header>",
        _summary(data),
        _figure(figs["fig-regime"]),
    ]
    for i, inp in enumerate(inputs):
        parts.append(_section(i, inp, data["inputs"][i], figs))
    parts.extend(section for section, _, _ in extra)
    parts.append(_footer(data))
    parts.append("</body></html>\n")
    return "\n".join(parts), data


# -- pieces -----------------------------------------------------------------------------------


_STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:0 auto;
max-width:1200px;padding:0 24px 48px;color:#222;line-height:1.4}
h1{font-size:22px;margin:20px 0 4px}h2{font-size:18px;border-bottom:2px solid #ddd;margin-top:36px}
h3{font-size:15px;margin:4px 0}.meta{color:#666;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border-bottom:1px solid #e4e4e4;padding:3px 8px;text-align:right;vertical-align:top}
th:first-child,td:first-child,td.name,th.name{text-align:left}td.name{font-family:ui-monospace,monospace;
font-size:12px;word-break:break-all;max-width:700px}
figure{margin:18px 0;padding:10px 12px;border:1px solid #e4e4e4;border-radius:6px;background:#fff}
figcaption{font-size:13px;color:#444;margin-top:6px}
.na{padding:18px;background:#f6f6f6;color:#666;font-style:italic;border-radius:4px}
.verdict{display:inline-block;white-space:nowrap;padding:3px 10px;border-radius:12px;font-weight:600;color:#fff}
.v-host-bound{background:#c0562a}.v-balanced{background:#8a7a2a}.v-device-bound{background:#3d6aa8}
.v-none{background:#888}.note{color:#8a5a00;font-size:13px}figure svg{height:auto;max-width:100%;display:block}
details{font-size:13px;margin-top:24px}
"""


def _head(title: str) -> str:
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head>"
    )


def _verdict_badge(v: str | None) -> str:
    cls = f"v-{v}" if v in ("host-bound", "balanced", "device-bound") else "v-none"
    return f"<span class='verdict {cls}'>{esc(v or 'no verdict')}</span>"


def _num(key: str, value, shown: str | None = None) -> str:
    """A table cell carrying its exact number (``data-value``) beside the shown text."""
    raw = "" if value is None else repr(float(value))
    return (
        f"<td data-key='{esc(key)}' data-value='{esc(raw)}'>"
        f"{esc(shown if shown is not None else fmt_value(key, value))}</td>"
    )


def _summary(data: dict) -> str:
    rows = []
    for d in data["inputs"]:
        k = d["key"]
        v = k["values"]
        rows.append(
            f"<tr data-input='{d['n']}'><td>{d['n']}</td><td class='name'>{esc(d['label'])}</td>"
            f"<td>{esc(d['run_kind'])}</td><td>{_verdict_badge(k['verdict'])}</td>"
            + "".join(
                _num(m, v.get(m))
                for m in ("wall_ns", "gpu_active_ns", "host_exposed_ns", "host_fraction", "kernel_count", "hdbi")
            )
            + f"<td>{esc(k['basis'])}</td></tr>"
        )
    watched = list(data.get("watch_runs") or [])
    for fleet in data.get("fleet_watches") or []:  # one row per instance of a stored fleet view
        watched += [
            {"run_id": i["instance"], "url": fleet["prometheus"], "summary": i["summary"]} for i in fleet["instances"]
        ]
    for j, entry in enumerate(watched):
        rows.append(_watch_row(len(data["inputs"]) + j + 1, j, entry))
    head = (
        "<tr><th>#</th><th class='name'>input</th><th>kind</th><th>verdict</th><th>wall / step</th>"
        "<th>device-active / step (GPU-active; CPU: CPU-compute)</th><th>host-exposed / step</th>"
        "<th>host fraction</th><th>kernels / step (CPU: compute ops)</th><th>HDBI (GPU only)</th>"
        "<th>basis</th></tr>"
    )
    cap = (
        f"Per decode step. Basis 'differencing': a measured run's two-point differencing (untraced wall, traced "
        f"device-active union); 'steps': median over the trace's steady decode steps. Device-active is the GPU "
        f"union of kernels, copies and memsets; on CPU-only inputs it is the CPU-compute analogue. Verdict "
        f"thresholds: host-bound at host fraction ≥ {HOST_BOUND_MIN:g}, device-bound below "
        f"{DEVICE_BOUND_MAX:g}. A watched run (hostgap watch): wall / step is its step period (the mean "
        f"inter-token latency), host fraction its host-exposed share over the window, host-exposed / step "
        f"share × period; its basis cell gives the share's basis and interval and the decode batch, as "
        f"`hostgap show` does (docs/watch.md)."
    )
    return (
        f"<figure id='fig-summary'><h3>Inputs and their verdicts</h3><table>{head}{''.join(rows)}</table>"
        f"<figcaption>{esc(cap)}</figcaption></figure>"
    )


def _watch_row(n: int, j: int, entry: dict) -> str:
    """A stored watch's row of the inputs table: its window's step period, host share and batch."""
    s = entry.get("summary") or {}
    period, share, batch = s.get("step_period_s"), s.get("host_share"), s.get("seqs_per_step")
    basis = str(s.get("host_share_basis") or "none")
    parts = [f"watch, {basis}"]
    if share is not None and s.get("host_share_low") is not None and s.get("host_share_high") is not None:
        parts.append(f"share {share:.2f} [{s['host_share_low']:.2f}-{s['host_share_high']:.2f}]")
    else:
        parts.append("share not estimated")
    parts.append("batch —" if batch is None else f"batch {batch:.1f}")
    host_ns = share * period * 1e9 if share is not None and period is not None else None
    label = f"{entry.get('run_id') or entry.get('source')} ({entry.get('url')})"
    return (
        f"<tr data-input='watch-{j}'><td>{n}</td><td class='name'>{esc(label)}</td><td>watched</td>"
        f"<td>{_verdict_badge(None)}</td>"
        + _num("wall_ns", None if period is None else period * 1e9)
        + _num("gpu_active_ns", None)
        + _num("host_exposed_ns", host_ns)
        + _num("host_fraction", share)
        + _num("kernel_count", None)
        + _num("hdbi", None)
        + f"<td>{esc(', '.join(parts))}</td></tr>"
    )


def _figure(fig: C.Figure) -> str:
    body = fig.svg if fig.svg is not None else "<div class='na'>Not drawn for this input.</div>"
    cap = f"<figcaption>{esc(fig.caption)}</figcaption>"
    return f"<figure id='{esc(fig.id)}'><h3>{esc(fig.title)}</h3>{body}{cap}</figure>"


def _verdict_card(i: int, inp: Input, d: dict) -> str:
    from hostgap.report.energy_view import energy_html

    k = d["key"]
    v = k["values"]
    label = d["activity_label"]
    w = words(d["activity"])
    cpu = w.device == "CPU"
    names = {
        "wall_ns": "wall per step",
        "gpu_active_ns": f"{label} per step",
        "host_exposed_ns": "host-exposed per step",
        "host_wait_ns": "host_wait per step",
        "host_fraction": "host fraction (host-exposed / wall)",
        "kernel_count": f"{w.ops} per step",
        "launches": "launches per step",
        "hdbi": "HDBI",
        "ft_ns": "ΔFT per step",
        "ct_ns": "ΔCT per step",
        "kt_ns": "ΔKT per step",
        "kt_fw_ns": "ΔKT_fw per step",
        "unattributed_ns": "unattributed host per step",
        "orchestrate_ns": "T_Orchestrate per step",
    }
    # a CPU run has no launches, no TaxBreak and no host_wait: rows of GPU-only quantities are left out
    gpu_only = {
        "host_wait_ns",
        "launches",
        "hdbi",
        "ft_ns",
        "ct_ns",
        "kt_ns",
        "kt_fw_ns",
        "unattributed_ns",
        "orchestrate_ns",
    }
    rows = [
        f"<tr><td>{esc(names[m])}</td>{_num(m, v.get(m))}</tr>"
        for m in KEY_METRICS
        if v.get(m) is not None and not (cpu and m in gpu_only)
    ]
    checks = k.get("checks") or {}
    if checks:
        fmt = {
            "r2_wall": lambda x: f"{x:.4f}",
            "r2_gpu": lambda x: f"{x:.4f}",
            "slope_agreement": lambda x: f"{100 * x:.2f}%",
            "profiler_inflation": lambda x: f"{100 * x:+.1f}%",
            "sum_minus_union_step_ns": lambda x: f"{x / 1e6:.4f} ms",
            "h2d_bytes_per_step": lambda x: f"{x:,.0f} B",
            "d2h_bytes_per_step": lambda x: f"{x:,.0f} B",
            "kernels_per_output_token": lambda x: f"{x:,.1f}",
        }
        for name, val in checks.items():
            text = check_label(name, d["activity"])
            if val is not None and text is not None:
                rows.append(f"<tr><td>check: {esc(text)}</td>{_num(name, val, fmt[name](val))}</tr>")
    basis = (
        "differencing: t_step = (W(N2) − W(N1)) / (N2 − N1) from untraced runs, g_step from traced runs, "
        "h_step = t_step − g_step"
        if k["basis"] == "differencing"
        else f"median over {k['steps_used']} {k['steps']} of the "
        + (
            "attached trace (one traced window of the server's own traffic, not a differencing measurement)"
            if k.get("run_kind") == "attached"
            else "trace"
        )
    )
    if k["basis"] == "differencing" and k.get("kv_range"):
        basis += f"; the mean over KV lengths {k['kv_range'][0]}..{k['kv_range'][1]}"
    note = f"<p class='note'>{esc(k['verdict_note'])}</p>" if k["verdict_note"] else ""
    cap = (
        f"Verdict from hostgap's thresholds on the host fraction (host-exposed / wall; "
        f"host-bound ≥ {HOST_BOUND_MIN:g}, device-bound < {DEVICE_BOUND_MAX:g}), basis {k['verdict_basis']}. "
        f"Numbers per decode step — {basis}."
    )
    if cpu:
        cap += (
            f" {label}: the union of CPU-compute ops (docs/method.md §3); host-exposed is the rest of the step "
            "(framework and Python time). host_wait, launches, TaxBreak and HDBI are GPU quantities and do not "
            "apply to a CPU run."
        )
    else:
        hw, he = v.get("host_wait_ns"), v.get("host_exposed_ns")
        if hw is not None and he is not None and hw > he:
            cap += (
                f" host_wait ({hw / 1e6:.3f} ms) is larger than host-exposed ({he / 1e6:.3f} ms) here: host_wait "
                "adds up device-idle gaps per stream and device, host-exposed is the part of the wall with no "
                "device op on any of them, so on several devices or streams the first can exceed the second; "
                "the per-step figure draws host_wait clipped to host-exposed."
            )
        cap += (
            f" host_wait, launches and TaxBreak parts are medians of the per-step sums over {k['steps_used']} "
            f"{k['steps']} of the trace (host work, exposed or hidden); HDBI = T_DeviceActive / (T_DeviceActive "
            "+ T_Orchestrate) over the whole trace."
        )
    return (
        f"<figure id='fig-verdict-{i}'><h3>Verdict and key numbers</h3><p>{_verdict_badge(k['verdict'])}</p>"
        f"{note}<table><tr><th>quantity</th><th>value</th></tr>{''.join(rows)}</table>"
        f"{energy_html((inp.results or {}).get('energy'))}"
        f"<figcaption>{esc(cap)}</figcaption></figure>"
    )


def _name_table(rows: list[dict], cols: list[tuple[str, str]], title: str) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{esc(c)}</th>" for _, c in cols)
    body = []
    for r in rows:
        cells = []
        for key, _ in cols:
            val: Any = r.get(key)  # a row mixes names, counts and shares
            if key == "name":
                cells.append(f"<td class='name'>{esc(str(val))}</td>")
            elif key == "class":
                cells.append(f"<td>{esc(str(val))}</td>")
            elif key == "share":
                cells.append(_num(key, val, f"{100 * val:.1f}%"))
            elif key.endswith("_ns") or key == "host_ns_per_step":
                cells.append(_num(key, val, f"{val / 1e6:.3f}"))
            else:
                cells.append(_num(key, val, "—" if val is None else f"{val:,}"))
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><caption>{esc(title)}</caption><tr>{head}</tr>{''.join(body)}</table>"


def _section(i: int, inp: Input, d: dict, figs: dict) -> str:
    notes = "".join(f"<p class='note'>{esc(n)}</p>" for n in d["notes"])
    counts = d["summary_counts"]
    meta = (
        f"{esc(d['kind'])} · {esc(str(d['source']))} · {d['steps']} steps (steady {counts['steady']}, "
        f"prefill {counts['prefill']}, warm-up {counts['warmup']}, flagged {counts['flagged']})"
    )
    kern = _name_table(
        d["top_kernels"],
        [
            ("name", "kernel"),
            ("class", "class"),
            ("count", "count"),
            ("total_ns", "total ms"),
            ("share", "share of kernel time"),
        ],
        "top kernels (whole trace)",
    )
    cpu = d["activity"] != "gpu"
    host_col = "framework ms/step" if cpu else "ΔFT+ΔCT ms/step"
    calls = "op calls" if cpu else "launches"
    ops = _name_table(
        d["top_ops"],
        [("name", "framework op"), ("host_ns_per_step", host_col), ("launches", calls), ("share", "share")],
        "host time by framework op",
    )
    frames = _name_table(
        d["top_frames"],
        [
            ("name", "Python frame (addresses removed)"),
            ("host_ns_per_step", host_col),
            ("launches", calls),
            ("share", "share"),
        ],
        "host time by Python frame",
    )
    g = lambda name: figs[f"fig-{name}-{i}"]  # noqa: E731
    return "\n".join(
        [
            f"<section id='input-{i}'><h2>{i + 1}. {esc(d['label'])}</h2><p class='meta'>{meta}</p>{notes}",
            _verdict_card(i, inp, d),
            _figure(g("steps")),
            _figure(g("taxbreak")),
            _figure(g("differencing")),
            _figure(g("processes")),
            _figure(g("kernels")).replace("</figure>", kern + "</figure>"),
            _figure(g("host")).replace("</figure>", ops + frames + "</figure>"),
            _figure(g("gaps")),
            _figure(g("timeline")),
            "</section>",
        ]
    )


def embedded_json(doc: dict) -> str:
    """JSON text safe inside a ``<script type="application/json">`` element."""
    text = msgspec.json.encode(doc).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _footer(data: dict) -> str:
    return (
        "<details><summary>Report data (JSON, as printed by <code>hostgap report --json</code>)</summary>"
        "<p>The numbers above, machine-readable, in the element with id <code>hostgap-data</code>.</p></details>"
        f"<script type='application/json' id='hostgap-data'>{embedded_json(data)}</script>"
    )
