"""Report figures of the kernels and of the host's time: the top kernels by GPU time, and the
framework ops, CUDA-library calls and Python frames the host spent its time in. Drawn as the
other figures are (:mod:`hostgap.report.figures.stepwise`): matplotlib to inline SVG, with a caption.
"""

from __future__ import annotations

import os

import numpy as np

from hostgap.report.figures.canvas import (
    C_GPU,
    C_TAX,
    MAX_STEP_BARS,
    Figure,
    _step_ticks,
    _x_axis,
    bars,
    binned,
    draw,
    new_figure,
)
from hostgap.report.inputs import Input
from hostgap.report.words import merge_frames, words

# -- kernels ----------------------------------------------------------------------------------


def top_kernels(inp: Input) -> list[dict]:
    """Top kernels of the trace over all devices (from the overview), merged by name."""
    ov = inp.overview or {}
    merged: dict[str, dict] = {}
    for d in ov.get("devices") or []:
        for k in d.get("top_kernels") or []:
            m = merged.setdefault(
                k["name"], {"name": k["name"], "class": k.get("class", "compute"), "count": 0, "total_ns": 0}
            )
            m["count"] += k["count"]
            m["total_ns"] += k["total_ns"]
    rows = sorted(merged.values(), key=lambda r: -r["total_ns"])[:10]
    grand = sum(d.get("kernel_sum_ns", 0) for d in ov.get("devices") or []) or 1
    for r in rows:
        r["share"] = r["total_ns"] / grand
    return rows


def kernels_figure(inp: Input, fid: str, max_bars: int = MAX_STEP_BARS) -> Figure:
    steps = (inp.anatomy or {}).get("steps") or []
    w_ = words(inp.activity)
    title = f"{w_.ops[0].upper() + w_.ops[1:]} per step" + ("" if w_.device == "CPU" else " and the top kernels")
    kernels = top_kernels(inp)
    if not steps and not kernels:
        return Figure(fid, title, f"No steps and no {w_.ops} in this input.", None)
    what = w_.ops

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
            names = distinct_short([k["name"] for k in kernels], 48)[::-1]
            ax2.barh(np.arange(len(names)), [k["total_ns"] / 1e6 for k in kernels][::-1], color=C_GPU)
            ax2.set_yticks(np.arange(len(names)), names, fontsize=7)
            ax2.set_xlabel("total ms in trace (all devices)")
        return fig

    caption = (
        f"Left: {what} each step launched (GPU ops assigned to the step whose CPU window holds their "
        "launch call; graph-replayed kernels count). Right: the kernels with the most total time in the "
        "whole trace (sum of durations over all devices); long names are shortened in the middle — the "
        "table below has them in full."
    )
    if w_.device == "CPU":
        caption = (
            f"{what[0].upper() + what[1:]} per step: framework ops that compute on the CPU (the device-"
            "active analogue of a CPU run) inside each step's window. There are no GPU kernels."
        )
    return Figure(fid, title, caption, draw(build, salt=fid))


def distinct_short(names: list[str], n: int) -> list[str]:
    """Names cut to about ``n`` characters, keeping both ends (``head…tail``). Names that would
    collide (GEMM kernels differing only in their tile sizes) show the part where they differ
    instead of the head: ``head…middle…tail``; a collision left after that gets ``#k``.

    >>> distinct_short(["xmma_gemm_f32_tile64x256_stage3_kernel", "xmma_gemm_f32_tile128x128_stage3_kernel"], 24)
    ['xmma_…tile64x256_s…ernel', 'xmma_…tile128x128_…ernel']
    """

    def cut(name: str) -> str:
        return name if len(name) <= n else name[: (n - 1) * 2 // 3] + "…" + name[len(name) - (n - 1) // 3 :]

    short = [cut(x) for x in names]
    groups: dict[str, list[int]] = {}
    for i, sh in enumerate(short):
        groups.setdefault(sh, []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        side = max((n - 2) // 4, 1)
        mid = max(n - 2 * side - 2, 4)
        for i in members:
            x = names[i]
            # where this name parts from the member it shares most with
            common = max(len(os.path.commonprefix([x, names[j]])) for j in members if j != i)
            start = max(common - mid // 3, side)
            short[i] = x[:side] + "…" + x[start : start + mid] + "…" + x[len(x) - side :]
    out: list[str] = []
    seen: dict[str, int] = {}
    for sh in short:
        k = seen.get(sh, 0)
        seen[sh] = k + 1
        out.append(sh if k == 0 else f"{sh} #{k + 1}")
    return out


# -- host time ---------------------------------------------------------------------------------


def host_rows(inp: Input) -> tuple[list[dict], list[dict], float]:
    """(top ops, top Python frames with addresses stripped and merged, share of host time in no
    Python frame)."""
    an = inp.anatomy or {}
    frames, unframed = merge_frames(an.get("top_frames") or [])
    return list(an.get("top_ops") or []), frames[: an.get("top_frames_max") or 10], unframed


def host_figure(inp: Input, fid: str) -> Figure:
    an = inp.anatomy or {}
    ops, frames, unframed = host_rows(inp)
    cpu = inp.activity != "gpu"
    title = "Where the host time went: framework ops and Python frames"
    if not ops and not frames:
        tax = an.get("taxbreak") or {}
        why = tax.get("note") or "the trace has no launches linked to framework ops"
        if cpu:
            why = "the trace has no top-level framework ops inside its steps"
        return Figure(fid, title, f"Not available: {why}.", None)
    xlabel = "framework time, ms per step" if cpu else "ΔFT + ΔCT, ms per step"

    def build():
        fig = new_figure(11.0, 3.4)
        panels = [(r, t) for r, t in ((ops, "framework ops"), (frames, "Python frames")) if r]
        axs = fig.subplots(1, len(panels))
        axs = np.atleast_1d(axs)
        for ax, (rows, t) in zip(axs, panels):
            names = distinct_short([r["name"] for r in rows], 44)[::-1]
            ax.barh(np.arange(len(rows)), [r["host_ns_per_step"] / 1e6 for r in rows][::-1], color=C_TAX["ft_ns"])
            ax.set_yticks(np.arange(len(rows)), names, fontsize=7)
            ax.set_xlabel(xlabel)
            ax.set_title(t)
        return fig

    side = " (left)" if frames else ""
    if cpu:
        caption = (
            "CPU run (no kernel launches, so no TaxBreak): host time charged to each top-level framework op"
            f"{side} is the time before it since the previous top-level op (or the step start) plus its own "
            "time outside CPU-compute ops; summed over the trace and divided by the number of steps."
        )
        caption += " Right: the same time by the innermost Python frame enclosing the op." if frames else ""
    else:
        caption = (
            "Host translation time (ΔFT + ΔCT, TaxBreak) charged to the top-level framework op that "
            f"issued each launch{side}"
            + (" and to the innermost Python frame enclosing it (right)" if frames else "")
            + ", summed over the trace and divided by the number of steps."
        )
    if frames:
        caption += (
            " Frame names have object addresses removed (`… object at 0x…>` names one call site), and "
            "frames equal after that are merged."
        )
    caption += " Long names are shortened in the middle; the tables below have them in full."
    if not frames:
        caption += (
            " The trace records no Python frames (profile with with_stack=True to get them), so only the "
            "framework-op panel is drawn."
        )
    elif unframed > 0:
        caption += (
            f" {100 * unframed:.1f} % of this host time ran in no recorded Python frame (the trace was taken "
            "without Python stacks for it) and is not drawn in the frame panel."
        )
    return Figure(fid, title, caption, draw(build, salt=fid))
