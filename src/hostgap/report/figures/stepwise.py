"""Report figures per step: the step split (device-active and host-exposed), TaxBreak's host
parts, the differencing fit, and how a step's time falls across the engine's processes or its
loop. Each returns a :class:`~hostgap.report.figures.canvas.Figure` (:mod:`.canvas`)."""

from __future__ import annotations

import numpy as np

from hostgap.report.figures.canvas import (
    C_GPU,
    C_HOST,
    C_TAX,
    C_WAIT,
    MAX_STEP_BARS,
    TAX_LABEL,
    Figure,
    _legend_below,
    _ms,
    _step_arrays,
    _step_ticks,
    _x_axis,
    activity_label,
    bars,
    binned,
    draw,
    new_figure,
)
from hostgap.report.inputs import Input
from hostgap.report.words import words


def steps_figure(inp: Input, fid: str, max_bars: int = MAX_STEP_BARS) -> Figure:
    steps = (inp.anatomy or {}).get("steps") or []
    label = activity_label(inp)
    w_ = words(inp.activity)
    title = f"Per-step wall time: {w_.active} vs host-exposed"
    if not steps:
        return Figure(fid, title, "No steps in this input: nothing to draw.", None)
    a = _step_arrays(steps, ("gpu_active_ns", "host_exposed_ns", "host_wait_ns"))
    x, per_bin = _x_axis(steps, max_bars)
    gpu = binned(a["gpu_active_ns"], max_bars) / 1e6
    host = binned(a["host_exposed_ns"], max_bars) / 1e6
    # host_wait is a part of host-exposed: never draw it taller than its whole
    over = int(np.sum(a["host_wait_ns"] > a["host_exposed_ns"]))
    wait = np.minimum(binned(np.minimum(a["host_wait_ns"], a["host_exposed_ns"]), max_bars) / 1e6, host)
    show_wait = w_.wait_legend is not None and bool(np.any(a["host_wait_ns"] > 0))
    flagged = np.array([bool(s.get("queued") or s.get("partial")) for s in steps])

    def build():
        fig = new_figure(11.0, 4.0)
        ax = fig.add_subplot()
        w = 0.8 * per_bin
        bars(ax, x, gpu, width=w, color=C_GPU, label=label)
        bars(ax, x, host, bottom=gpu, width=w, color=C_HOST, label=f"host-exposed (wall − {w_.active.split(' ')[0]})")
        if show_wait:
            bars(
                ax,
                x + 0.2 * w,
                wait,
                bottom=gpu,
                width=0.6 * w,
                facecolors="none",
                edgecolors=C_WAIT,
                hatch="////",
                linewidths=0.6,
                label=w_.wait_legend,
            )
        ax.set_ylim(bottom=0)
        n_leg = 2 + show_wait
        if flagged.any() and per_bin == 1:
            fx = x[flagged] + 0.4 * w
            ax.plot(
                fx,
                (gpu + host)[flagged] * 1.02,
                "v",
                color="black",
                markersize=4,
                label="flagged step (queued or partial)",
            )
            n_leg += 1
        ax.set_xlabel("step index" + (f" (bins of {per_bin} steps, mean)" if per_bin > 1 else ""))
        _step_ticks(ax, x)
        ax.set_ylabel("ms per step")
        _legend_below(ax, fig, n=n_leg)
        return fig

    binned_note = (
        f" {len(steps):,} steps are averaged over bins of {per_bin} consecutive steps "
        f"({len(x)} bars) to keep the report small."
        if per_bin > 1
        else ""
    )
    if w_.wait_legend is None:
        part = (
            f"split into {label} (the union of the CPU-compute ops inside the step's window) and host-exposed "
            f"time (wall − CPU-compute: framework and Python time). host_wait does not apply to a CPU run "
            "(no separate device waits on the host)."
        )
    else:
        part = (
            f"split into {label} (the union of the GPU ops the step launched, assigned by launch call) "
            f"and host-exposed time (wall − {label}). The hatched part is host_wait: GPU-idle gaps that "
            "ended at one of the step's ops and began before that op was launched — time the device "
            "provably waited on this step's host work." + ("" if show_wait else " No step has any.")
        )
        if over:
            part += (
                f" In {over} of {len(steps)} steps the recorded host_wait is larger than host-exposed "
                "(host_wait counts gaps per stream, host-exposed is the device-wide union): there it is "
                "drawn clipped to host-exposed."
            )
    caption = (
        f"Each bar is one engine step's wall time (its marker start to the next step's marker start), {part} "
        "Triangles mark flagged steps (queued: the host ran ahead, so wall − device-active is not host "
        f"time; partial: cut by the capture).{binned_note}"
    )
    drawn = {
        "whole": gpu + host,
        "parts": {"active": gpu, "host_exposed": host},
        "within": {"host_wait": (wait if show_wait else np.zeros_like(host), host)},
        "clipped": over,
    }
    return Figure(fid, title, caption, draw(build, salt=fid), drawn)


def taxbreak_figure(inp: Input, fid: str, max_bars: int = MAX_STEP_BARS) -> Figure:
    an = inp.anatomy or {}
    steps = an.get("steps") or []
    title = "TaxBreak: host work per step (exposed or hidden)"
    tax = an.get("taxbreak") or {}
    if inp.activity != "gpu":
        return Figure(
            fid,
            "TaxBreak: not for a CPU run",
            "TaxBreak splits the host work of each GPU kernel "
            "launch (ΔFT, ΔCT, ΔKT); a CPU run launches no kernels, so there is nothing to split. Its "
            "host-side time is drawn per framework op and Python frame below ('Where the host time "
            "went'), on the CPU basis stated there.",
            None,
        )
    if not tax.get("applicable") or not steps or not any(s.get("taxbreak") for s in steps):
        why = tax.get("note") or "the input has no per-launch host data"
        return Figure(fid, title, f"TaxBreak does not apply here: {why}.", None)
    keys = list(C_TAX)
    a = {k: np.array([float((s.get("taxbreak") or {}).get(k) or 0) for s in steps]) for k in keys}
    host = np.array([float(s.get("host_exposed_ns") or 0) for s in steps])
    x, per_bin = _x_axis(steps, max_bars)
    hb = binned(host, max_bars) / 1e6

    def build():
        fig = new_figure(11.0, 4.0)
        ax = fig.add_subplot()
        w = 0.8 * per_bin
        bottom = np.zeros(len(x))
        for k in keys:
            v = binned(a[k], max_bars) / 1e6
            bars(ax, x, v, bottom=bottom, width=w, color=C_TAX[k], label=TAX_LABEL[k])
            bottom = bottom + v
        # a bold bar-wide tick per step: visible for one step as for hundreds
        ax.hlines(
            hb, x, x + w, color="black", linewidth=2.2, label="host-exposed (for reference, not a sum of these parts)"
        )
        ax.set_xlabel("step index" + (f" (bins of {per_bin} steps, mean)" if per_bin > 1 else ""))
        _step_ticks(ax, x)
        ax.set_ylabel("ms per step")
        ax.set_ylim(bottom=0)
        _legend_below(ax, fig, n=len(keys) + 1)
        return fig

    floor = tax.get("launch_floor_ns")
    caption = (
        "TaxBreak parts of each step's host work (docs/method.md; TaxBreak, arXiv 2603.12465): per eager launch "
        "ΔFT = T_py + T_dispatch (framework translation; library kernels get the median non-library "
        "dispatch), ΔCT = library dispatch above that median, ΔKT = the launch floor per launch "
        f"({floor / 1000:.3f} µs, {tax.get('floor_source')})"
        if floor
        else ""
    )
    caption = caption + (
        "; ΔKT_fw = launch time above the floor for kernels whose stream was idle; unattributed = "
        "time on the launching thread covered by no TaxBreak interval or sync call. These are host "
        "work whether or not the GPU was busy meanwhile: they are not parts of host-exposed time "
        "(the black tick on each bar), which is drawn beside them for reference."
    )
    if per_bin > 1:
        caption += f" Bars are means over bins of {per_bin} consecutive steps."
    return Figure(fid, title, caption, draw(build, salt=fid), {"reference": hb})


# -- differencing ---------------------------------------------------------------------------


def differencing_figure(inp: Input, fid: str) -> Figure:
    title = "Differencing fit: wall and device-active time against tokens generated"
    res = inp.results
    if res is None or not inp.has_differencing:
        what = (
            "a bare trace has"
            if res is None
            else "an attached run is one traced window of the server's own traffic (docs/attach.md), with"
            if inp.run_kind == "attached"
            else "this run has"
        )
        return Figure(
            fid,
            title,
            f"This figure needs a measured run (hostgap measure): {what} no "
            "untraced wall times W(N) or traced device-active times G(N) over a sweep of N.",
            None,
        )
    d = res.get("differencing") or {}
    sw = inp.sweep or {}
    label = activity_label(inp)  # the report's vocabulary, not the capture's label

    def build():
        fig = new_figure(8.0, 3.6)
        ax = fig.add_subplot()
        n = np.array(sw.get("n") or [], dtype=float)
        for key, fit_key, color, name in (
            ("wall_ns", "fit_wall", C_HOST, "wall W(N), untraced"),
            ("gpu_ns", "fit_gpu", C_GPU, f"{label} G(N), traced"),
        ):
            ys = sw.get(key) or []
            pts = [(ni, y) for ni, y in zip(n, ys) if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], "o", color=color, label=name)
            fit = d.get(fit_key)
            if fit:
                lo = min([p[0] for p in pts] + [res.get("n1") or 1])
                hi = max([p[0] for p in pts] + [res.get("n2") or 2])
                xs = np.array([lo, hi], dtype=float)
                ax.plot(
                    xs,
                    (fit["intercept"] + fit["slope"] * xs) / 1e6,
                    "-",
                    color=color,
                    linewidth=1,
                    label=f"fit: {fit['slope'] / 1e6:.3f} ms/token, R² = {fit['r2']:.4f}",
                )
        ax.set_xlabel("tokens generated N")
        ax.set_ylabel("ms per run")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
        return fig

    est = sw.get("estimator") or d.get("estimator")
    kv = d.get("kv_range")
    agree = d.get("slope_agreement")
    caption = (
        f"Each point is one N of the sweep: W(N) the {est} over untraced repeats of the run's wall time, "
        f"G(N) the {est} over traced repeats of the {label} union. Lines are least-squares fits; their "
        f"slopes are the per-step wall and {label} time. The per-step split itself is the two-point "
        f"difference between N1 = {res.get('n1')} and N2 = {res.get('n2')}: t_step = "
        f"{_ms(d.get('t_step_ns'))}, g_step = {_ms(d.get('g_step_ns'))}, h_step = {_ms(d.get('h_step_ns'))}"
        + (f"; two-point vs fitted wall slope differ by {100 * agree:.2f} %" if agree is not None else "")
        + (f"; the mean over KV lengths {kv[0]}..{kv[1]}" if kv else "")
        + "."
    )
    if not sw.get("n"):
        caption += " The sweep points were not found (timings.json missing): only the fitted lines are drawn."
    if not d.get("fit_wall"):
        caption += " The run's sweep had fewer than 3 N values: no fit."
    return Figure(fid, title, caption, draw(build, salt=fid))


C_PROC = {"compute_ns": C_GPU, "worker_host_ns": C_HOST, "between_ns": "#8C8C8C"}


def processes_figure(inp: Input, fid: str) -> Figure:
    """vLLM runs: the traced decode step split across the engine's processes, one stacked bar
    (``engine_facts.process_split``; hostgap.analysis.vllm_split); continuous batching
    (``hf-cb``): :func:`loop_figure`."""
    from hostgap.analysis.vllm_split import DETAIL, LABELS, PARTS

    facts = (inp.results or {}).get("engine_facts") or {}
    if str(facts.get("engine", "")).startswith("hf-cb"):
        return loop_figure(facts.get("cb_split") or {}, fid)
    title = "Where the engine step goes across vLLM's processes"
    split = facts.get("process_split") or {}
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
    caption = (
        f"Mean over {split['steps']} steady decode steps of the traced N2 run, from the Worker's trace: "
        + "; ".join(f"{LABELS[k]} = {DETAIL[k]}" for k in PARTS)
        + f". The parts add up to the traced step ({_ms(split['step_ns'])}, profiler overhead included). "
        "The frontend runs beside this loop: what it adds per step on untraced runs is "
        + (f"{_ms(fe)}." if fe is not None else "not known.")
    )
    return Figure(fid, title, caption, draw(build, salt=fid))


def loop_figure(split: dict, fid: str) -> Figure:
    """transformers' continuous batching: the traced decode step tiled into compute, host in the
    step and the loop's host parts between steps, one stacked bar (hostgap.analysis.cb_split)."""
    title = "Where the continuous-batching loop's step goes"
    if "step_ns" not in split:
        why = split.get("unavailable") or "no decode steps in the traced run"
        return Figure(fid, title, f"Not available: {why}.", None)
    loop = sorted(split["loop_parts"].items(), key=lambda kv: -kv[1])
    shown = loop[:4]
    bars = [("compute", split["compute_ns"], C_GPU), ("host in the step", split["step_host_ns"], C_HOST)]
    greys = ("#525252", "#737373", "#969696", "#BDBDBD")
    bars += [(f"loop: {p}", v, greys[i]) for i, (p, v) in enumerate(shown)]
    rest = sum(v for _p, v in loop[4:])
    if rest:
        bars.append(("loop: rest", rest, "#D9D9D9"))

    def build():
        fig = new_figure(9.0, 2.0)
        ax = fig.add_subplot()
        left = 0.0
        for label, v, color in bars:
            ax.barh([0], [v / 1e6], left=[left], color=color, label=f"{label} ({v / 1e6:.3f} ms)")
            left += v / 1e6
        ax.set_yticks([])
        ax.set_xlabel("ms per decode step (traced)")
        fig.legend(loc="outside lower center", ncol=4, fontsize=8, frameon=False)
        return fig

    caption = (
        f"Mean over {split['steps']} steady decode steps of the traced N2 run, from the loop thread's "
        "annotations: compute = device-active time in the step; host in the step = the forward's Python and "
        "dispatch, kwargs, sampling; loop = the loop's host work between forward passes (update, admission, "
        "scheduling, input preparation), by part. The parts add up to the traced step "
        f"({_ms(split['step_ns'])}, profiler overhead included); the loop's work between forward passes, "
        f"compute included, is {_ms(split['between_ns'])} per step."
    )
    return Figure(fid, title, caption, draw(build, salt=fid))
