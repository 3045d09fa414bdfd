"""Report figures: matplotlib (Agg/SVG, no pyplot state) rendered to inline SVG text.

Every function takes resolved inputs (:class:`hostgap.report.inputs.Input`) and returns a
:class:`Figure`: the SVG (None when the figure does not apply) and a caption saying what it
shows and how it was computed. Text from traces (kernel, op, frame names) goes into SVG
``<text>`` elements, which matplotlib XML-escapes; math-text parsing is off so a ``$`` in a
kernel name is drawn as is.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from hostgap.anatomy.timeline import IDLE_CLASSES, gap_bins
from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN
from hostgap.report.compare import metrics
from hostgap.report.inputs import Input

MAX_STEP_BARS = 300
"""Per-step bar charts draw at most this many bars; longer traces are averaged over bins of
consecutive steps (the caption says so)."""

C_GPU, C_HOST, C_WAIT = "#4C72B0", "#DD8452", "#8C2D04"
C_TAX = {"ft_ns": "#55A868", "ct_ns": "#C44E52", "kt_ns": "#8172B3", "kt_fw_ns": "#937860",
         "unattributed_ns": "#BBBBBB"}
TAX_LABEL = {"ft_ns": "ΔFT framework translation", "ct_ns": "ΔCT library translation",
             "kt_ns": "ΔKT launch floor", "kt_fw_ns": "ΔKT_fw launch above floor",
             "unattributed_ns": "unattributed host time"}

ACTIVITY_LABEL = {"gpu": "GPU-active", "cpu-compute": "CPU-compute (device-active analogue)"}


@dataclass(frozen=True)
class Figure:
    id: str
    title: str
    caption: str
    svg: str | None  # None: does not apply (the caption says why)



def _step_ticks(ax, x) -> None:
    """Whole step numbers on the x axis; every step labelled when there are only a few."""
    if len(x) <= 12:
        ax.set_xticks(np.asarray(x) + 0.4 * (x[1] - x[0] if len(x) > 1 else 1))
        ax.set_xticklabels([str(int(v)) for v in x])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))

def activity_label(inp: Input) -> str:
    return ACTIVITY_LABEL.get(inp.activity, "device-active")


# -- rendering -------------------------------------------------------------------------------

_RC = {"svg.fonttype": "none", "text.parse_math": False, "font.size": 9, "axes.titlesize": 10,
       "axes.spines.top": False, "axes.spines.right": False, "svg.image_inline": True}


def new_figure(width: float = 11.0, height: float = 3.6) -> MplFigure:
    return MplFigure(figsize=(width, height), layout="constrained")


def to_svg(fig: MplFigure, salt: str) -> str:
    """SVG text of ``fig`` for inlining: no XML prolog or DOCTYPE, ids made unique per figure
    (``salt``) and stable between runs."""
    buf = io.StringIO()
    with rc_context({**_RC, "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.find("<svg"):]
    # matplotlib numbers its element ids from 1 in every figure (axes_1, xtick_1 ...): prefix
    # them and every reference to them, so ids stay unique on a page of many figures
    text = text.replace(' id="', f' id="{salt}-').replace('href="#', f'href="#{salt}-')
    return text.replace("url(#", f"url(#{salt}-")


def draw(fig_builder, *args, salt: str) -> str:
    with rc_context({**_RC, "svg.hashsalt": salt}):
        fig = fig_builder(*args)
        return to_svg(fig, salt)


def trim(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


# -- per-step bars ------------------------------------------------------------------------------


def binned(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Mean over ``n_bins`` runs of consecutive entries (the last bins may be one shorter)."""
    if len(values) <= n_bins:
        return values.astype(float)
    edges = np.linspace(0, len(values), n_bins + 1).astype(int)
    sums = np.add.reduceat(values.astype(float), edges[:-1])
    return sums / np.diff(edges)


def bars(ax, x, height, *, bottom=None, width=0.8, **kw):
    """Vertical bars as one PolyCollection (left edges ``x``): draws thousands of bars far
    faster than ``Axes.bar`` (one Rectangle artist each) and writes the same SVG paths."""
    from matplotlib.collections import PolyCollection

    x = np.asarray(x, dtype=float)
    h = np.asarray(height, dtype=float)
    b = np.zeros(len(x)) if bottom is None else np.asarray(bottom, dtype=float)
    x1 = x + width
    verts = np.stack([np.stack([x, b], 1), np.stack([x1, b], 1), np.stack([x1, b + h], 1),
                      np.stack([x, b + h], 1)], 1)
    color = kw.pop("color", None)
    if color is not None:
        kw.setdefault("facecolors", color)
    kw.setdefault("linewidths", 0)
    coll = PolyCollection(verts, **kw)
    ax.add_collection(coll, autolim=True)
    ax.autoscale_view()
    return coll


def _step_arrays(steps: list[dict], keys) -> dict[str, np.ndarray]:
    return {k: np.array([float(s.get(k) or 0) for s in steps]) for k in keys}


def _x_axis(steps: list[dict], n_bins: int):
    idx = np.array([s["index"] for s in steps], dtype=float)
    if len(idx) <= n_bins:
        return idx, 1
    edges = np.linspace(0, len(idx), n_bins + 1).astype(int)
    return idx[edges[:-1]], int(math.ceil(len(idx) / n_bins))


def steps_figure(inp: Input, fid: str, max_bars: int = MAX_STEP_BARS) -> Figure:
    steps = (inp.anatomy or {}).get("steps") or []
    label = activity_label(inp)
    title = "Per-step wall time: device-active vs host-exposed"
    if not steps:
        return Figure(fid, title, "No steps in this input: nothing to draw.", None)
    a = _step_arrays(steps, ("gpu_active_ns", "host_exposed_ns", "host_wait_ns"))
    x, per_bin = _x_axis(steps, max_bars)
    gpu = binned(a["gpu_active_ns"], max_bars) / 1e6
    host = binned(a["host_exposed_ns"], max_bars) / 1e6
    wait = np.minimum(binned(a["host_wait_ns"], max_bars) / 1e6, host)
    flagged = np.array([bool(s.get("queued") or s.get("partial")) for s in steps])

    def build():
        fig = new_figure()
        ax = fig.add_subplot()
        w = 0.8 * per_bin
        bars(ax, x, gpu, width=w, color=C_GPU, label=label)
        bars(ax, x, host, bottom=gpu, width=w, color=C_HOST, label="host-exposed (wall − device-active)")
        bars(ax, x + 0.2 * w, wait, bottom=gpu, width=0.6 * w, facecolors="none", edgecolors=C_WAIT,
             hatch="////", label="of which host_wait (GPU idle waiting on this step's host)")
        ax.set_ylim(bottom=0)
        if flagged.any() and per_bin == 1:
            fx = x[flagged] + 0.4 * w
            ax.plot(fx, (gpu + host)[flagged] * 1.02, "v", color="black", markersize=4,
                    label="flagged step (queued or partial)")
        ax.set_xlabel("step index" + (f" (bins of {per_bin} steps, mean)" if per_bin > 1 else ""))
        _step_ticks(ax, x)
        ax.set_ylabel("ms")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        return fig

    binned_note = (f" {len(steps):,} steps are averaged over bins of {per_bin} consecutive steps "
                   f"({len(x)} bars) to keep the report small." if per_bin > 1 else "")
    caption = (f"Each bar is one engine step's wall time (its marker start to the next step's marker start), "
               f"split into {label} (the union of the GPU ops the step launched, assigned by launch call) "
               f"and host-exposed time (wall − {label}). The hatched part is host_wait: GPU-idle gaps that ended "
               f"at one of the step's ops and began before that op was launched — time the device provably "
               f"waited on this step's host work. Triangles mark flagged steps (queued: the host ran ahead, so "
               f"wall − device-active is not host time; partial: cut by the capture).{binned_note}")
    return Figure(fid, title, caption, draw(build, salt=fid))


def taxbreak_figure(inp: Input, fid: str, max_bars: int = MAX_STEP_BARS) -> Figure:
    an = inp.anatomy or {}
    steps = an.get("steps") or []
    title = "TaxBreak: host work per step (exposed or hidden)"
    tax = an.get("taxbreak") or {}
    if not tax.get("applicable") or not steps or not any(s.get("taxbreak") for s in steps):
        why = tax.get("note") or "the input has no per-launch host data"
        return Figure(fid, title, f"TaxBreak does not apply here: {why}. On a CPU-only trace there are no "
                      "kernel launches to decompose.", None)
    keys = list(C_TAX)
    a = {k: np.array([float((s.get("taxbreak") or {}).get(k) or 0) for s in steps]) for k in keys}
    host = np.array([float(s.get("host_exposed_ns") or 0) for s in steps])
    x, per_bin = _x_axis(steps, max_bars)

    def build():
        fig = new_figure()
        ax = fig.add_subplot()
        w = 0.8 * per_bin
        bottom = np.zeros(len(x))
        for k in keys:
            v = binned(a[k], max_bars) / 1e6
            bars(ax, x, v, bottom=bottom, width=w, color=C_TAX[k], label=TAX_LABEL[k])
            bottom = bottom + v
        ax.step(x + w / 2, binned(host, max_bars) / 1e6, where="mid", color="black", linewidth=1.0,
                label="host-exposed (for reference, not a sum of these parts)")
        ax.set_xlabel("step index" + (f" (bins of {per_bin} steps, mean)" if per_bin > 1 else ""))
        _step_ticks(ax, x)
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        return fig

    floor = tax.get("launch_floor_ns")
    caption = ("TaxBreak parts of each step's host work (docs/method.md; TaxBreak, arXiv 2603.12465): per eager launch "
               "ΔFT = T_py + T_dispatch (framework translation; library kernels get the median non-library "
               "dispatch), ΔCT = library dispatch above that median, ΔKT = the launch floor per launch "
               f"({floor / 1000:.3f} µs, {tax.get('floor_source')})" if floor else "")
    caption = caption + ("; ΔKT_fw = launch time above the floor for kernels whose stream was idle; unattributed = "
                         "time on the launching thread covered by no TaxBreak interval or sync call. These are host "
                         "work whether or not the GPU was busy meanwhile: they are not parts of host-exposed time "
                         "(the black line), which is drawn beside them for reference.")
    if per_bin > 1:
        caption += f" Bars are means over bins of {per_bin} consecutive steps."
    return Figure(fid, title, caption, draw(build, salt=fid))


# -- differencing ---------------------------------------------------------------------------


def differencing_figure(inp: Input, fid: str) -> Figure:
    title = "Differencing fit: wall and device-active time against tokens generated"
    res = inp.results
    if res is None:
        return Figure(fid, title, "This figure needs a measured run (hostgap measure): a bare trace has no "
                      "untraced wall times W(N) or traced device-active times G(N) over a sweep of N.", None)
    d = res.get("differencing") or {}
    sw = inp.sweep or {}
    label = d.get("activity_label") or activity_label(inp)

    def build():
        fig = new_figure(8.0, 3.6)
        ax = fig.add_subplot()
        n = np.array(sw.get("n") or [], dtype=float)
        for key, fit_key, color, name in (("wall_ns", "fit_wall", C_HOST, "wall W(N), untraced"),
                                          ("gpu_ns", "fit_gpu", C_GPU, f"{label} G(N), traced")):
            ys = sw.get(key) or []
            pts = [(ni, y) for ni, y in zip(n, ys) if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], "o", color=color, label=name)
            fit = d.get(fit_key)
            if fit:
                lo = min([p[0] for p in pts] + [res.get("n1") or 1])
                hi = max([p[0] for p in pts] + [res.get("n2") or 2])
                xs = np.array([lo, hi], dtype=float)
                ax.plot(xs, (fit["intercept"] + fit["slope"] * xs) / 1e6, "-", color=color, linewidth=1,
                        label=f"fit: {fit['slope'] / 1e6:.3f} ms/token, R² = {fit['r2']:.4f}")
        ax.set_xlabel("tokens generated N")
        ax.set_ylabel("ms per run")
        ax.legend(loc="upper left", fontsize=8)
        return fig

    est = sw.get("estimator") or d.get("estimator")
    kv = d.get("kv_range")
    agree = d.get("slope_agreement")
    caption = (f"Each point is one N of the sweep: W(N) the {est} over untraced repeats of the run's wall time, "
               f"G(N) the {est} over traced repeats of the {label} union. Lines are least-squares fits; their "
               f"slopes are the per-step wall and {label} time. The per-step split itself is the two-point "
               f"difference between N1 = {res.get('n1')} and N2 = {res.get('n2')}: t_step = "
               f"{_ms(d.get('t_step_ns'))}, g_step = {_ms(d.get('g_step_ns'))}, h_step = {_ms(d.get('h_step_ns'))}"
               + (f"; two-point vs fitted wall slope differ by {100 * agree:.2f} %" if agree is not None else "")
               + (f"; the mean over KV lengths {kv[0]}..{kv[1]}" if kv else "") + ".")
    if not sw.get("n"):
        caption += " The sweep points were not found (timings.json missing): only the fitted lines are drawn."
    if not d.get("fit_wall"):
        caption += " The run's sweep had fewer than 3 N values: no fit."
    return Figure(fid, title, caption, draw(build, salt=fid))


C_PROC = {"compute_ns": C_GPU, "worker_host_ns": C_HOST, "between_ns": "#8C8C8C"}


def processes_figure(inp: Input, fid: str) -> Figure:
    """vLLM runs: the traced decode step split across the engine's processes, one stacked bar
    (``engine_facts.process_split``; hostgap.capture.vllm_split)."""
    from hostgap.capture.vllm_split import DETAIL, LABELS, PARTS

    title = "Where the engine step goes across vLLM's processes"
    split = ((inp.results or {}).get("engine_facts") or {}).get("process_split") or {}
    if "step_ns" not in split:
        why = split.get("unavailable") or "only a vLLM run measured by hostgap measure --engine vllm has one"
        return Figure(fid, title, f"Not available: {why}.", None)

    def build():
        fig = new_figure(9.0, 2.0)
        ax = fig.add_subplot()
        left = 0.0
        for k in PARTS:
            v = split[k] / 1e6
            ax.barh([0], [v], left=[left], color=C_PROC[k], label=f"{LABELS[k]} ({v:.3f} ms)")
            left += v
        ax.set_yticks([])
        ax.set_xlabel("ms per decode step (traced)")
        fig.legend(loc="outside lower center", ncol=3, fontsize=8, frameon=False)
        return fig

    fe = split.get("frontend_ns")
    caption = (f"Mean over {split['steps']} steady decode steps of the traced N2 run, from the Worker's trace: "
               + "; ".join(f"{LABELS[k]} = {DETAIL[k]}" for k in PARTS)
               + f". The parts add up to the traced step ({_ms(split['step_ns'])}, profiler overhead included). "
               "The frontend runs beside this loop: what it adds per step on untraced runs is "
               + (f"{_ms(fe)}." if fe is not None else "not known."))
    return Figure(fid, title, caption, draw(build, salt=fid))


def _ms(ns) -> str:
    return "—" if ns is None else f"{ns / 1e6:.3f} ms"


# -- kernels ----------------------------------------------------------------------------------


def top_kernels(inp: Input) -> list[dict]:
    """Top kernels of the trace over all devices (from the overview), merged by name."""
    ov = inp.overview or {}
    merged: dict[str, dict] = {}
    for d in ov.get("devices") or []:
        for k in d.get("top_kernels") or []:
            m = merged.setdefault(k["name"], {"name": k["name"], "count": 0, "total_ns": 0})
            m["count"] += k["count"]
            m["total_ns"] += k["total_ns"]
    rows = sorted(merged.values(), key=lambda r: -r["total_ns"])[:10]
    grand = sum(d.get("kernel_sum_ns", 0) for d in ov.get("devices") or []) or 1
    for r in rows:
        r["share"] = r["total_ns"] / grand
    return rows


def kernels_figure(inp: Input, fid: str, max_bars: int = MAX_STEP_BARS) -> Figure:
    steps = (inp.anatomy or {}).get("steps") or []
    title = "Kernels per step and the top kernels"
    kernels = top_kernels(inp)
    if not steps and not kernels:
        return Figure(fid, title, "No steps and no kernels in this input.", None)
    cpu = inp.activity != "gpu"
    what = "CPU-compute ops" if cpu else "kernels"

    def build():
        fig = new_figure(11.0, 3.4)
        axs = fig.subplots(1, 2, width_ratios=[1, 1.3]) if kernels else [fig.add_subplot()]
        ax = axs[0]
        if steps:
            x, per_bin = _x_axis(steps, max_bars)
            kc = binned(np.array([float(s["kernel_count"]) for s in steps]), max_bars)
            bars(ax, x, kc, width=0.8 * per_bin, color=C_GPU)
            ax.set_ylim(bottom=0)
            ax.set_xlabel("step index" + (f" (bins of {per_bin}, mean)" if per_bin > 1 else ""))
            ax.set_ylabel(f"{what} per step")
            _step_ticks(ax, x)
        if kernels:
            ax2 = axs[1]
            names = [trim(k["name"], 48) for k in kernels][::-1]
            ax2.barh(np.arange(len(names)), [k["total_ns"] / 1e6 for k in kernels][::-1], color=C_GPU)
            ax2.set_yticks(np.arange(len(names)), names, fontsize=7)
            ax2.set_xlabel("total ms in trace")
        return fig

    caption = (f"Left: {what} each step launched (GPU ops assigned to the step whose CPU window holds their "
               "launch call; graph-replayed kernels count). Right: the kernels with the most total time in the "
               "whole trace (sum of durations over all devices); names are cut to fit — the table below has "
               "them in full.")
    if cpu:
        caption = (f"{what[0].upper() + what[1:]} per step (framework ops that compute on the CPU, the device-active "
                   "analogue of a CPU-only trace). No GPU kernels in this trace.")
    return Figure(fid, title, caption, draw(build, salt=fid))


# -- host time ---------------------------------------------------------------------------------


def host_figure(inp: Input, fid: str) -> Figure:
    an = inp.anatomy or {}
    ops, frames = an.get("top_ops") or [], an.get("top_frames") or []
    title = "Where the host time went: framework ops and Python frames"
    if not ops and not frames:
        tax = an.get("taxbreak") or {}
        why = tax.get("note") or "the trace has no launches linked to framework ops"
        return Figure(fid, title, f"Not available: {why}.", None)

    def build():
        fig = new_figure(11.0, 3.4)
        panels = [(r, t) for r, t in ((ops, "framework ops"), (frames, "Python frames")) if r]
        axs = fig.subplots(1, len(panels))
        axs = np.atleast_1d(axs)
        for ax, (rows, t) in zip(axs, panels):
            names = [trim(r["name"], 44) for r in rows][::-1]
            ax.barh(np.arange(len(rows)), [r["host_ns_per_step"] / 1e6 for r in rows][::-1], color=C_TAX["ft_ns"])
            ax.set_yticks(np.arange(len(rows)), names, fontsize=7)
            ax.set_xlabel("ΔFT + ΔCT, ms per step")
            ax.set_title(t)
        return fig

    caption = ("Host translation time (ΔFT + ΔCT, TaxBreak) charged to the top-level framework op that "
               "issued each launch (left) and to the innermost Python frame enclosing it (right), summed over "
               "the trace and divided by the number of steps. Names are cut to fit; the tables below have them "
               "in full.")
    return Figure(fid, title, caption, draw(build, salt=fid))


# -- idle gaps ---------------------------------------------------------------------------------


def gap_histogram(inp: Input) -> tuple[dict[str, np.ndarray], int | None]:
    ov = inp.overview or {}
    out = {c: np.zeros(len(gap_bins()) - 1, dtype=np.int64) for c in IDLE_CLASSES}
    thr = None
    for d in ov.get("devices") or []:
        g = d.get("idle_gaps") or {}
        thr = g.get("threshold_ns", thr)
        for c in IDLE_CLASSES:
            h = (g.get("histogram") or {}).get(c)
            if h:
                out[c] += np.asarray(h, dtype=np.int64)
    return out, thr


def gaps_figure(inp: Input, fid: str) -> Figure:
    title = "Idle gaps on the GPU streams, by class"
    hist, thr = gap_histogram(inp)
    if not any(h.sum() for h in hist.values()):
        why = "the input has no GPU streams" if inp.overview is None or not inp.overview.get("devices") else \
            "no idle gaps between GPU ops"
        return Figure(fid, title, f"No idle-gap histogram: {why}.", None)
    edges = gap_bins() / 1000.0
    labels = [f"{_us(edges[i])}–{_us(edges[i + 1])}" for i in range(len(edges) - 1)]
    nz = np.flatnonzero(sum(hist.values()))
    lo, hi = int(nz.min()), int(nz.max()) + 1
    colors = {"host_wait": C_HOST, "kernel_wait": C_GPU, "other": "#999999"}

    def build():
        fig = new_figure(11.0, 3.2)
        ax = fig.add_subplot()
        x = np.arange(hi - lo)
        w = 0.8 / len(IDLE_CLASSES)
        for j, c in enumerate(IDLE_CLASSES):
            ax.bar(x + j * w, hist[c][lo:hi], width=w, color=colors[c], label=c.replace("_", "-"))
        ax.set_xticks(x + w * (len(IDLE_CLASSES) - 1) / 2, labels[lo:hi], rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("gap length (µs, log2 bins)")
        ax.set_ylabel("gaps")
        ax.legend(fontsize=8)
        return fig

    tus = f"{thr / 1000:g} µs" if thr is not None else "the threshold"
    caption = ("Gaps between consecutive GPU ops on each stream (all devices), binned by length on a log2 µs scale. "
               "host-wait: the op's launch call started after the previous op on the stream had ended (the stream "
               f"waited on the host; checked first); kernel-wait: shorter than {tus}; other: the rest "
               "(syncs, dependencies, other streams).")
    return Figure(fid, title, caption, draw(build, salt=fid))


def _us(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}s"
    if v >= 1e3:
        return f"{v / 1e3:g}ms"
    return f"{v:g}"


# -- regime map ---------------------------------------------------------------------------------


def regime_points(inputs: list[Input]) -> list[dict]:
    """One point per input: device-active per step (x) and host fraction (y); measured runs use
    the differencing numbers, traces the median over their steady decode steps."""
    out = []
    for i, inp in enumerate(inputs):
        basis = "differencing" if inp.results is not None else "steps"
        v = metrics(inp, basis)["values"]
        out.append({"n": i + 1, "label": inp.label, "basis": basis, "gpu_active_ns": v["gpu_active_ns"],
                    "host_fraction": v["host_fraction"], "activity": inp.activity})
    return out


def regime_figure(inputs: list[Input], fid: str = "fig-regime") -> Figure:
    title = "Regime map: host fraction against device-active time per step"
    pts = [p for p in regime_points(inputs) if p["gpu_active_ns"] and p["host_fraction"] is not None]
    if len(inputs) < 2:
        return Figure(fid, title, "The regime map needs several runs or traces (give more than one input to "
                      "hostgap report): one point per cell.", None)
    if not pts:
        return Figure(fid, title, "No input has both a device-active time and a host fraction.", None)

    def build():
        fig = new_figure(8.0, 4.2)
        ax = fig.add_subplot()
        xs = np.array([p["gpu_active_ns"] / 1e6 for p in pts])
        ys = np.array([p["host_fraction"] for p in pts])
        xmin, xmax = xs.min() / 2, xs.max() * 2
        ax.axhspan(HOST_BOUND_MIN, 1.0, color=C_HOST, alpha=0.12, linewidth=0)
        ax.axhspan(0.0, DEVICE_BOUND_MAX, color=C_GPU, alpha=0.12, linewidth=0)
        ax.axhline(HOST_BOUND_MIN, color=C_HOST, linestyle="--", linewidth=1,
                   label=f"host-bound ≥ {HOST_BOUND_MIN:g}")
        ax.axhline(DEVICE_BOUND_MAX, color=C_GPU, linestyle="--", linewidth=1,
                   label=f"device-bound < {DEVICE_BOUND_MAX:g}")
        for p, x, y in zip(pts, xs, ys):
            marker = "o" if p["activity"] == "gpu" else "s"
            ax.plot([x], [y], marker, color="black", markersize=5)
            ax.annotate(str(p["n"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(xmin, xmax)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, 1.03)
        for y, text in (((1 + HOST_BOUND_MIN) / 2, "host-bound"), ((HOST_BOUND_MIN + DEVICE_BOUND_MAX) / 2, "balanced"),
                        (DEVICE_BOUND_MAX / 2, "device-bound")):
            ax.text(1.01, y, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8, color="#555555")
        ax.set_xlabel("device-active per step (ms, log scale)")
        ax.set_ylabel("host fraction = host-exposed / wall")
        ax.legend(loc="upper right", fontsize=8)
        return fig

    caption = (f"One point per input (numbered as in the table above): measured runs at their differencing "
               f"numbers (g_step and h_step / t_step), traces at the median over their steady decode steps. The "
               f"dashed lines are hostgap's verdict thresholds (hostgap.anatomy.verdict): host-bound at a host "
               f"fraction ≥ {HOST_BOUND_MIN:g}, device-bound below {DEVICE_BOUND_MAX:g}, balanced between. "
               "Squares are CPU runs (device-active = CPU-compute analogue).")
    return Figure(fid, title, caption, draw(build, salt=fid))


# -- timeline excerpt ---------------------------------------------------------------------------


def timeline_figure(inp: Input, fid: str) -> Figure:
    ex = inp.excerpt
    title = "Timeline excerpt: one steady-state step"
    if not ex or not ex["lanes"]:
        why = "the run's trace is not available" if inp.trace_path is None else "no step to draw"
        return Figure(fid, title, f"No timeline excerpt: {why}.", None)
    lanes = ex["lanes"]
    names = ex["names"]
    # colour device ops by name (the 8 names with most bars), host calls by API
    counts = np.bincount([b[2] for ln in lanes if ln["kind"] == "device" for b in ln["bars"]],
                         minlength=len(names))
    top = [int(i) for i in np.argsort(-counts)[:8] if counts[i]]
    palette = ["#4C72B0", "#55A868", "#C44E52", "#8172B3", "#CCB974", "#64B5CD", "#937860", "#DA8BC3"]
    color_of = {code: palette[j % len(palette)] for j, code in enumerate(top)}

    def build():
        fig = new_figure(11.0, 0.9 + 0.42 * len(lanes))
        ax = fig.add_subplot()
        for i, ln in enumerate(lanes):
            bars = ln["bars"]
            if not bars:
                continue
            xr = [(b[0] / 1000, max(b[1] - b[0], 1) / 1000) for b in bars]
            if ln["kind"] == "host":
                cols = [C_HOST] * len(bars)
            else:
                cols = [color_of.get(b[2], "#AAAAAA") for b in bars]
            ax.broken_barh(xr, (i - 0.35, 0.7), facecolors=cols, linewidth=0)
        ax.set_yticks(np.arange(len(lanes)), [ln["label"] for ln in lanes], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, ex["wall_ns"] / 1000)
        ax.set_xlabel(f"µs from the start of step {ex['step']}")
        handles = [_patch(color_of[c], trim(names[c], 40)) for c in top]
        handles.append(_patch(C_HOST, "host launch / runtime call"))
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return fig

    dropped = (f" {ex['dropped']:,} of {ex['bars']:,} bars (the shortest ones) are left out to keep the figure "
               "small." if ex["dropped"] else "")
    dev = "GPU ops per (device, stream)" if ex["activity"] == "gpu" else "CPU-compute ops per thread"
    caption = (f"Step {ex['step']} ({ex['kind']}), {ex['choice']}, from its "
               f"marker start to the next step's: {dev} in the step's time window (coloured by name, the most "
               "frequent eight named in the legend) and host runtime/launch calls per thread (orange). White "
               f"space on the device lanes is device-idle time; on the host lanes, host time outside runtime calls "
               f"(framework and Python).{dropped}")
    return Figure(fid, title, caption, draw(build, salt=fid))


def _patch(color, label):
    from matplotlib.patches import Patch

    return Patch(color=color, label=label)
