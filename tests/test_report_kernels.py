"""The report's kernel and host-time figures (:mod:`hostgap.report.figures.hotspots`): the
numbers they draw and the words under them, worked out by hand on small inputs."""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.report.figures import hotspots as K
from hostgap.report.inputs import Input
from hostgap.report.words import NO_FRAME


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figures the module builds (instead of their SVG)."""
    figs = []

    def keep(build, *args, salt):
        fig = build(*args)
        figs.append(fig)
        return "<svg/>"

    monkeypatch.setattr(K, "draw", keep)
    return figs


def _kernel(name, count, total_ns, cls="compute"):
    return {"name": name, "count": count, "total_ns": total_ns, "class": cls}


def _gpu_input(steps=None, devices=None, anatomy=None) -> Input:
    an = {"activity": "gpu", "steps": steps or [], **(anatomy or {})}
    return Input("t", "trace", "t", None, anatomy=an, overview={"devices": devices or []})


def test_top_kernels_merge_devices_sort_and_share():
    devices = [
        {"kernel_sum_ns": 600, "top_kernels": [_kernel("gemm", 2, 300), _kernel("norm", 1, 100)]},
        {"kernel_sum_ns": 400, "top_kernels": [_kernel("gemm", 3, 200), _kernel("copy", 4, 150, "memcpy")]},
    ]
    rows = K.top_kernels(_gpu_input(devices=devices))
    assert [r["name"] for r in rows] == ["gemm", "copy", "norm"]
    gemm, copy, norm = rows
    assert (gemm["count"], gemm["total_ns"], gemm["share"]) == (5, 500, 0.5)  # 500 of 600 + 400
    assert (copy["class"], copy["share"]) == ("memcpy", 0.15)
    assert norm["share"] == 0.1


def test_top_kernels_keeps_ten_and_survives_a_zero_sum():
    ks = [_kernel(f"k{i}", 1, 10 * i) for i in range(1, 13)]
    rows = K.top_kernels(_gpu_input(devices=[{"kernel_sum_ns": 0, "top_kernels": ks}]))
    assert [r["name"] for r in rows] == [f"k{i}" for i in range(12, 2, -1)]
    assert rows[0]["share"] == 120.0  # no kernel sum: shares over 1 ns, not a division by zero


def test_distinct_short_cuts_keep_both_ends_and_part_collisions():
    assert K.distinct_short(["short"], 10) == ["short"]
    # 20 characters into 10: 6 of the head, the ellipsis, 3 of the tail
    assert K.distinct_short(["abcdefghijklmnopqrst"], 10) == ["abcdef…rst"]
    a, b = "xmma_gemm_f32_tile64x256_stage3_kernel", "xmma_gemm_f32_tile128x128_stage3_kernel"
    assert K.distinct_short([a, b], 24) == ["xmma_…tile64x256_s…ernel", "xmma_…tile128x128_…ernel"]
    # three that collide: each shows the part after the name it shares most with (a and x2
    # share 21 characters, so theirs starts at 21 - 4 = 17; b shares 18 with both: from 14)
    x2 = "xmma_gemm_f32_tile64x128_stage3_kernel"
    assert K.distinct_short([a, x2, b], 24) == [
        "xmma_…e64x256_stag…ernel",
        "xmma_…e64x128_stag…ernel",
        "xmma_…tile128x128_…ernel",
    ]
    # equal names share all 38 characters: the middle part starts at 38 - 12 // 3 = 34, and
    # they stay equal after it, so they are numbered from the second one
    assert K.distinct_short([a, a, a], 24) == ["xmma_…rnel…ernel", "xmma_…rnel…ernel #2", "xmma_…rnel…ernel #3"]


def test_kernels_figure_draws_the_counts_and_milliseconds(drawn):
    steps = [{"index": i, "kernel_count": c} for i, c in enumerate([3, 5, 4])]
    devices = [
        {"kernel_sum_ns": 5_000_000, "top_kernels": [_kernel("gemm", 9, 3_000_000), _kernel("norm", 3, 1_000_000)]}
    ]
    fig = K.kernels_figure(_gpu_input(steps, devices), "f")
    assert fig.svg and "top kernels" in fig.title
    left, right = drawn[0].axes
    verts = left.collections[0].get_paths()
    heights = [p.vertices[:, 1].max() for p in verts]
    widths = [np.ptp(p.vertices[:4, 0]) for p in verts]
    assert heights == [3, 5, 4] and widths == pytest.approx([0.8] * 3)
    # the horizontal bars, largest at the top: milliseconds of the whole trace
    assert [round(p.get_width(), 6) for p in right.patches] == [1.0, 3.0]
    assert [t.get_text() for t in right.get_yticklabels()] == ["norm", "gemm"]


def test_kernels_figure_bins_long_runs(drawn):
    steps = [{"index": i, "kernel_count": 2 if i % 2 else 4} for i in range(8)]
    K.kernels_figure(_gpu_input(steps), "f", max_bars=4)
    (ax,) = drawn[0].axes
    verts = ax.collections[0].get_paths()
    assert [p.vertices[:, 1].max() for p in verts] == [3.0] * 4  # the mean of each pair
    assert [np.ptp(p.vertices[:4, 0]) for p in verts] == pytest.approx([1.6] * 4)  # 0.8 of 2 steps
    assert "bins of 2, mean" in ax.get_xlabel()


def test_kernels_figure_without_anything_says_so():
    fig = K.kernels_figure(_gpu_input(), "f")
    assert fig.svg is None and fig.caption == "No steps and no GPU kernels in this input."


def _host_anatomy(frames, ops, activity="gpu", **extra):
    return {"activity": activity, "steps": [], "top_frames": frames, "top_ops": ops, **extra}


def test_host_rows_merge_frames_and_keep_the_limit():
    frames = [
        {"name": "forward (<Model object at 0x7f00>)", "host_ns_per_step": 300, "share": 0.3},
        {"name": "forward (<Model object at 0x7f99>)", "host_ns_per_step": 200, "share": 0.2},
        {"name": "sample", "host_ns_per_step": 100, "share": 0.1},
        {"name": NO_FRAME, "host_ns_per_step": 400, "share": 0.4},
    ]
    ops = [{"name": "aten::mm", "host_ns_per_step": 700}]
    inp = Input("t", "trace", "t", None, anatomy=_host_anatomy(frames, ops, top_frames_max=1))
    got_ops, got_frames, unframed = K.host_rows(inp)
    assert got_ops == ops
    assert len(got_frames) == 1 and got_frames[0]["host_ns_per_step"] == 500  # the two forwards, merged
    assert unframed == pytest.approx(0.4)


def test_host_figure_bars_and_the_unframed_share(drawn):
    frames = [
        {"name": "step", "host_ns_per_step": 2_000_000, "share": 0.75},
        {"name": NO_FRAME, "host_ns_per_step": 500_000, "share": 0.25},
    ]
    ops = [{"name": "aten::mm", "host_ns_per_step": 1_500_000}, {"name": "aten::add", "host_ns_per_step": 500_000}]
    inp = Input("t", "trace", "t", None, anatomy=_host_anatomy(frames, ops))
    fig = K.host_figure(inp, "h")
    ax_ops, ax_frames = drawn[0].axes
    assert [round(p.get_width(), 6) for p in ax_ops.patches] == [0.5, 1.5]
    assert [round(p.get_width(), 6) for p in ax_frames.patches] == [2.0]
    assert ax_ops.get_xlabel() == "ΔFT + ΔCT, ms per step"
    assert "25.0 % of this host time ran in no recorded Python frame" in fig.caption
    assert "(left)" in fig.caption and "innermost Python frame enclosing it (right)" in fig.caption


def test_host_figure_on_a_cpu_run_without_frames(drawn):
    ops = [{"name": "aten::linear", "host_ns_per_step": 250_000}]
    inp = Input("t", "trace", "t", None, anatomy=_host_anatomy([], ops, activity="cpu"))
    fig = K.host_figure(inp, "h")
    (ax,) = drawn[0].axes
    assert ax.get_xlabel() == "framework time, ms per step"
    assert "(left)" not in fig.caption and "only the framework-op panel is drawn" in fig.caption
    assert "CPU run (no kernel launches, so no TaxBreak)" in fig.caption


def test_host_figure_not_available_names_why():
    gpu = Input("t", "trace", "t", None, anatomy=_host_anatomy([], [], taxbreak={"note": "no launches"}))
    assert K.host_figure(gpu, "h").caption.endswith("Not available: no launches.")
    cpu = Input("t", "trace", "t", None, anatomy=_host_anatomy([], [], activity="cpu"))
    assert "no top-level framework ops inside its steps" in K.host_figure(cpu, "h").caption
