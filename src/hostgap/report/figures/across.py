"""Report figures across steps: idle gaps by class (time-weighted), the regime map of all
inputs, and the timeline excerpt of one step. Same contract as :mod:`hostgap.report.figures.stepwise`:
each returns a :class:`~hostgap.report.figures.stepwise.Figure` whose ``drawn`` holds the numbers as
drawn, and no input's data is dropped without the caption saying so.
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from hostgap.anatomy.timeline import IDLE_CLASSES, gap_bins
from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN
from hostgap.report.compare import metrics
from hostgap.report.figures.canvas import C_GPU, C_HOST, Figure, _legend_below, draw, new_figure
from hostgap.report.figures.hotspots import distinct_short
from hostgap.report.inputs import Input
from hostgap.report.words import words

# -- idle gaps ---------------------------------------------------------------------------------


def gap_histogram(inp: Input) -> tuple[dict[str, np.ndarray], int | None]:
    """Gap counts per class and log2 bin, summed over devices (the overview's histograms)."""
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


def gap_totals(inp: Input) -> tuple[dict[str, int], dict[str, int]]:
    """(total gap ns, gap count) per class over every stream of every device."""
    tot = dict.fromkeys(IDLE_CLASSES, 0)
    cnt = dict.fromkeys(IDLE_CLASSES, 0)
    for d in (inp.overview or {}).get("devices") or []:
        g = d.get("idle_gaps") or {}
        for c in IDLE_CLASSES:
            tot[c] += int((g.get("total_ns") or {}).get(c) or 0)
            cnt[c] += int((g.get("count") or {}).get(c) or 0)
    return tot, cnt


def gaps_figure(inp: Input, fid: str) -> Figure:
    title = "Idle gaps on the GPU streams, by class: time (left) and count (right)"
    hist, thr = gap_histogram(inp)
    if not any(h.sum() for h in hist.values()):
        why = (
            "a CPU run has no GPU streams"
            if inp.activity != "gpu"
            else "the input has no GPU streams"
            if inp.overview is None or not inp.overview.get("devices")
            else "no idle gaps between GPU ops"
        )
        return Figure(fid, "Idle gaps on the GPU streams", f"No idle-gap histogram: {why}.", None)
    tt = inp.gap_time_ns or {}
    time_ms = {c: np.asarray(tt.get(c) or np.zeros(len(hist[c])), dtype=float) / 1e6 for c in IDLE_CLASSES}
    edges = gap_bins() / 1000.0
    labels = [f"{_us(edges[i])}–{_us(edges[i + 1])}" for i in range(len(edges) - 1)]
    nz = np.flatnonzero(sum(hist.values()))
    lo, hi = int(nz.min()), int(nz.max()) + 1
    colors = {"host_wait": C_HOST, "kernel_wait": C_GPU, "other": "#999999"}
    tot, cnt = gap_totals(inp)

    def build():
        fig = new_figure(11.0, 3.6)
        ax, ax2 = fig.subplots(1, 2, width_ratios=[2.2, 1])
        x = np.arange(hi - lo)
        w = 0.8 / len(IDLE_CLASSES)
        for j, c in enumerate(IDLE_CLASSES):
            name = c.replace("_", "-")
            ax.bar(
                x + j * w,
                time_ms[c][lo:hi],
                width=w,
                color=colors[c],
                label=f"{name}: {tot[c] / 1e6:,.3f} ms in {cnt[c]:,} gaps",
            )
            ax2.bar(x + j * w, hist[c][lo:hi], width=w, color=colors[c])
        for a in (ax, ax2):
            a.set_xticks(x + w * (len(IDLE_CLASSES) - 1) / 2, labels[lo:hi], rotation=40, ha="right", fontsize=7)
            a.set_xlabel("gap length (µs, log2 bins)")
        ax.set_ylabel("idle time, ms (summed over streams)")
        ax2.set_ylabel("number of gaps")
        ax2.set_title("count (secondary view)", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        return fig

    n_streams = sum(int(d.get("streams") or 0) for d in (inp.overview or {}).get("devices") or [])
    n_dev = len((inp.overview or {}).get("devices") or [])
    tus = f"{thr / 1000:g} µs" if thr is not None else "the threshold"
    caption = (
        "Gaps between consecutive GPU ops on each stream, binned by length on a log2 µs scale. Left: the "
        "idle time in each bin (what the gaps cost); right: how many gaps. host-wait: the op's launch call "
        "started after the previous op on the stream had ended (the stream waited on the host; checked "
        f"first); kernel-wait: shorter than {tus}; other: the rest (syncs, dependencies, other streams). "
        f"Times are summed over {n_streams} stream(s) on {n_dev} device(s): while several streams are idle "
        "at once the sums can exceed the trace's wall span (they are stream-time, not wall time)."
    )
    drawn = {
        "time_ms": time_ms,
        "counts": hist,
        "total_ms": {c: tot[c] / 1e6 for c in IDLE_CLASSES},
        "total_counts": cnt,
    }
    return Figure(fid, title, caption, draw(build, salt=fid), drawn)


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
        basis = "differencing" if inp.has_differencing else "steps"
        v = metrics(inp, basis)["values"]
        out.append(
            {
                "n": i + 1,
                "label": inp.label,
                "basis": basis,
                "gpu_active_ns": v["gpu_active_ns"],
                "host_fraction": v["host_fraction"],
                "activity": inp.activity,
            }
        )
    return out


Y_LO, Y_HI = 0.0, 1.0
"""The host fraction's range; a point outside it is drawn on the edge with an arrow marker."""


def regime_layout(points: list[dict]) -> tuple[list[dict], list[str]]:
    """Where each point is drawn: ``y`` clipped to [0, 1] (``clipped`` says which way), and
    one line per input that cannot be placed (no device-active time or host fraction)."""
    drawn, missing = [], []
    for p in points:
        x, y = p["gpu_active_ns"], p["host_fraction"]
        if not x or x <= 0 or y is None:
            what = "no device-active time" if not x or x <= 0 else "no host fraction"
            missing.append(f"input {p['n']} ({p['label']}) is not on the map: {what}")
            continue
        clipped = "below" if y < Y_LO else "above" if y > Y_HI else None
        drawn.append({**p, "x_ms": x / 1e6, "y": min(max(y, Y_LO), Y_HI), "clipped": clipped})
    return drawn, missing


def regime_figure(inputs: list[Input], fid: str = "fig-regime") -> Figure:
    title = "Regime map: host fraction against device-active time per step"
    if len(inputs) < 2:
        return Figure(
            fid,
            title,
            "The regime map needs several runs or traces (give more than one input to "
            "hostgap report): one point per cell.",
            None,
        )
    pts, missing = regime_layout(regime_points(inputs))
    if not pts:
        return Figure(
            fid, title, "No input has both a device-active time and a host fraction: " + "; ".join(missing) + ".", None
        )
    kinds = {p["activity"] == "gpu" for p in pts}

    def build():
        fig = new_figure(8.0, 4.6)
        ax = fig.add_subplot()
        xs = np.array([p["x_ms"] for p in pts])
        ax.axhspan(HOST_BOUND_MIN, 1.0, color=C_HOST, alpha=0.12, linewidth=0)
        ax.axhspan(0.0, DEVICE_BOUND_MAX, color=C_GPU, alpha=0.12, linewidth=0)
        ax.axhline(HOST_BOUND_MIN, color=C_HOST, linestyle="--", linewidth=1, label=f"host-bound ≥ {HOST_BOUND_MIN:g}")
        ax.axhline(
            DEVICE_BOUND_MAX, color=C_GPU, linestyle="--", linewidth=1, label=f"device-bound < {DEVICE_BOUND_MAX:g}"
        )
        for kind, marker, name in ((True, "o", "GPU input"), (False, "s", "CPU input (CPU-compute analogue)")):
            sel = [p for p in pts if (p["activity"] == "gpu") == kind and not p["clipped"]]
            if kind in kinds:
                ax.plot(
                    [p["x_ms"] for p in sel],
                    [p["y"] for p in sel],
                    marker,
                    color="black",
                    markersize=6,
                    linestyle="none",
                    label=name,
                )
        out = [p for p in pts if p["clipped"]]
        for p in out:
            m = "v" if p["clipped"] == "below" else "^"
            ax.plot(
                [p["x_ms"]],
                [p["y"]],
                m,
                markerfacecolor="white",
                markeredgecolor="#C00000",
                markersize=9,
                clip_on=False,
                linestyle="none",
            )
        if out:
            ax.plot(
                [],
                [],
                "^",
                markerfacecolor="white",
                markeredgecolor="#C00000",
                linestyle="none",
                label="outside 0–1, drawn on the edge",
            )
        for p in pts:
            text = str(p["n"]) + (f" ({p['host_fraction']:.2f})" if p["clipped"] else "")
            ax.annotate(
                text,
                (p["x_ms"], p["y"]),
                textcoords="offset points",
                xytext=(5, 4 if p["y"] < 0.9 else -10),
                fontsize=8,
            )
        ax.set_xscale("log")
        ax.set_xlim(xs.min() / 2, xs.max() * 2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(-0.03, 1.03)
        for y, text in (
            ((1 + HOST_BOUND_MIN) / 2, "host-bound"),
            ((HOST_BOUND_MIN + DEVICE_BOUND_MAX) / 2, "balanced"),
            (DEVICE_BOUND_MAX / 2, "device-bound"),
        ):
            ax.text(1.01, y, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8, color="#555555")
        ax.set_xlabel("device-active per step (ms, log scale)")
        ax.set_ylabel("host fraction = host-exposed / wall")
        _legend_below(ax, fig, n=3)
        return fig

    caption = (
        "One point per input (numbered as in the table above): measured runs at their differencing "
        "numbers (g_step and h_step / t_step), traces at the median over their steady decode steps. The "
        "dashed lines are hostgap's verdict thresholds (hostgap.anatomy.verdict): host-bound at a host "
        f"fraction ≥ {HOST_BOUND_MIN:g}, device-bound below {DEVICE_BOUND_MAX:g}, balanced between."
    )
    caption += {
        frozenset({True}): " Circles are GPU inputs.",
        frozenset({False}): " Squares are CPU inputs (device-active = the CPU-compute analogue).",
        frozenset({True, False}): " Circles are GPU inputs, squares CPU inputs (device-active = the "
        "CPU-compute analogue).",
    }[frozenset(kinds)]
    out = [p for p in pts if p["clipped"]]
    if out:
        caption += (
            " Outside the 0–1 range, drawn on the edge as a red arrow with the value beside it: "
            + "; ".join(f"input {p['n']} at {p['host_fraction']:.3f}" for p in out)
            + " (a negative host fraction means the differencing estimate of host-exposed time is below "
            "its noise: device-active exceeded wall)."
        )
    if missing:
        caption += " " + "; ".join(missing) + "."
    drawn = {"points": pts, "missing": missing, "inputs": len(inputs)}
    return Figure(fid, title, caption, draw(build, salt=fid), drawn)


# -- timeline excerpt ---------------------------------------------------------------------------


def timeline_figure(inp: Input, fid: str) -> Figure:
    ex = inp.excerpt
    title = "Timeline excerpt: one steady-state step"
    if not ex or not ex["lanes"]:
        why = "the run's trace is not available" if inp.trace_path is None else "no step to draw"
        return Figure(fid, title, f"No timeline excerpt: {why}.", None)
    lanes = ex["lanes"]
    names = ex["names"]
    w_ = words(ex.get("activity"))
    # colour device ops by name (the 8 names with most bars), host calls by API
    counts = np.bincount([b[2] for ln in lanes if ln["kind"] == "device" for b in ln["bars"]], minlength=len(names))
    top = [int(i) for i in np.argsort(-counts, kind="stable")[:8] if counts[i]]
    palette = ["#4C72B0", "#55A868", "#C44E52", "#8172B3", "#CCB974", "#64B5CD", "#937860", "#DA8BC3"]
    color_of = {code: palette[j % len(palette)] for j, code in enumerate(top)}
    legend_names = distinct_short([names[c] for c in top], 60)
    has_host = any(ln["kind"] == "host" and ln["bars"] for ln in lanes)
    n_leg = len(top) + (1 if has_host else 0) + (1 if len(names) > len(top) else 0)
    legend_rows = -(-n_leg // 2)

    def build():
        fig = new_figure(11.0, 1.2 + 0.42 * len(lanes) + 0.2 * legend_rows)
        ax = fig.add_subplot()
        for i, ln in enumerate(lanes):
            bars = ln["bars"]
            if not bars:
                continue
            xr = [(b[0] / 1000, max(b[1] - b[0], 1) / 1000) for b in bars]
            cols = [C_HOST] * len(bars) if ln["kind"] == "host" else [color_of.get(b[2], "#AAAAAA") for b in bars]
            ax.broken_barh(xr, (i - 0.35, 0.7), facecolors=cols, linewidth=0)
        ax.set_yticks(np.arange(len(lanes)), [ln["label"] for ln in lanes], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, ex["wall_ns"] / 1000)
        ax.set_xlabel(f"µs from the start of step {ex['step']}")
        handles = [_patch(color_of[c], legend_names[j]) for j, c in enumerate(top)]
        if len(names) > len(top):
            handles.append(_patch("#AAAAAA", f"{len(names) - len(top)} other names"))
        if has_host:
            handles.append(_patch(C_HOST, "host launch / runtime call"))
        fig.legend(handles=handles, loc="outside lower left", fontsize=7, ncols=2, frameon=False)
        return fig

    dropped = (
        f" {ex['dropped']:,} of {ex['bars']:,} bars (the shortest ones) are left out to keep the figure small."
        if ex["dropped"]
        else ""
    )
    dev = "GPU ops per (device, stream)" if w_.device == "GPU" else "CPU-compute ops per thread"
    idle = "GPU-idle time" if w_.device == "GPU" else "time outside compute ops"
    caption = (
        f"Step {ex['step']} ({ex['kind']}), {ex['choice']}, from its marker start to the next step's: {dev} "
        "in the step's time window (coloured by name, the eight with most bars named in the legend, long "
        "names shortened in the middle)"
        + (" and host runtime/launch calls per thread (orange)" if has_host else "")
        + f". White space on the {w_.device} lanes is {idle}"
        + ("; on the host lanes, host time outside runtime calls (framework and Python)" if has_host else "")
        + f".{dropped}"
    )
    drawn = {
        "wall_us": ex["wall_ns"] / 1000,
        "bars_end_us": max((b[1] / 1000 for ln in lanes for b in ln["bars"]), default=0.0),
        "legend": [h for h in legend_names],
    }
    return Figure(fid, title, caption, draw(build, salt=fid), drawn)


def _patch(color, label):
    from matplotlib.patches import Patch

    return Patch(color=color, label=label)
