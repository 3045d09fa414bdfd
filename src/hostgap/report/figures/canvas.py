"""What every report figure shares: matplotlib (Agg/SVG, no pyplot state) rendered to inline SVG text.

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
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import MaxNLocator

from hostgap.report.inputs import Input

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

MAX_STEP_BARS = 300
"""Per-step bar charts draw at most this many bars; longer traces are averaged over bins of
consecutive steps (the caption says so)."""

C_GPU, C_HOST, C_WAIT = "#4C72B0", "#DD8452", "#8C2D04"
C_TAX = {
    "ft_ns": "#55A868",
    "ct_ns": "#C44E52",
    "kt_ns": "#8172B3",
    "kt_fw_ns": "#937860",
    "unattributed_ns": "#BBBBBB",
}
TAX_LABEL = {
    "ft_ns": "ΔFT framework translation",
    "ct_ns": "ΔCT library translation",
    "kt_ns": "ΔKT launch floor",
    "kt_fw_ns": "ΔKT_fw launch above floor",
    "unattributed_ns": "unattributed host time",
}

ACTIVITY_LABEL = {"gpu": "GPU-active", "cpu-compute": "CPU-compute (device-active analogue)"}


@dataclass(frozen=True)
class Figure:
    """One figure: its SVG (None: does not apply, the caption says why), and ``drawn``, the
    numbers as drawn (after binning and clipping), so tests can check that no part is drawn
    larger than its whole and that no point is dropped."""

    id: str
    title: str
    caption: str
    svg: str | None
    drawn: dict | None = None


def _step_ticks(ax, x) -> None:
    """Whole step numbers on the x axis; every step labelled when there are only a few."""
    if len(x) <= 12:
        ax.set_xticks(np.asarray(x) + 0.4 * (x[1] - x[0] if len(x) > 1 else 1))
        ax.set_xticklabels([str(int(v)) for v in x])
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def activity_label(inp: Input) -> str:
    return ACTIVITY_LABEL.get(inp.activity, "device-active")


def _legend_below(ax, fig, handles=None, n: int = 1) -> None:
    """Legend under the plot, in as many columns as fit: constrained layout makes room for it,
    where a legend beside a short figure is cut off by the figure's edge."""
    kw = {"handles": handles} if handles is not None else {"handles": ax.get_legend_handles_labels()[0]}
    fig.legend(loc="outside lower left", fontsize=8, ncols=min(max(n, 1), 3), frameon=False, **kw)


# -- rendering -------------------------------------------------------------------------------

_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.image_inline": True,
}


def new_figure(width: float = 11.0, height: float = 3.6) -> MplFigure:
    return MplFigure(figsize=(width, height), layout="constrained")


def to_svg(fig: MplFigure, salt: str) -> str:
    """SVG text of ``fig`` for inlining: no XML prolog or DOCTYPE, ids made unique per figure
    (``salt``) and stable between runs."""
    buf = io.StringIO()
    with rc_context({**_RC, "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.find("<svg") :]
    # matplotlib numbers its element ids from 1 in every figure (axes_1, xtick_1 ...): prefix
    # them and every reference to them, so ids stay unique on a page of many figures
    text = text.replace(' id="', f' id="{salt}-').replace('href="#', f'href="#{salt}-')
    return text.replace("url(#", f"url(#{salt}-")


def draw(fig_builder, *args, salt: str) -> str:
    with rc_context({**_RC, "svg.hashsalt": salt}):
        fig = fig_builder(*args)
        return to_svg(fig, salt)


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
    verts = np.stack([np.stack([x, b], 1), np.stack([x1, b], 1), np.stack([x1, b + h], 1), np.stack([x, b + h], 1)], 1)
    color = kw.pop("color", None)
    if color is not None:
        kw.setdefault("facecolors", color)
    kw.setdefault("linewidths", 0)
    # matplotlib's stub types verts as a Sequence of arrays; its code takes (and has a fast
    # path for) one (n, 4, 2) ndarray, which is what this passes
    coll = PolyCollection(verts, **kw)  # type: ignore[arg-type]
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


def _ms(ns) -> str:
    return "—" if ns is None else f"{ns / 1e6:.3f} ms"
