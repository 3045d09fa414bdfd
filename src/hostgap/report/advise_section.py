"""The report's "What would help" section (docs/advise.md, docs/report.md): for each input, today's
step beside each applicable lever's predicted step, device and host stacked, the 95 % intervals
drawn, and the ranked table of every lever with its reason or basis."""

from __future__ import annotations

import html

import numpy as np

from hostgap.errors import HostgapError
from hostgap.report.figures.stepwise import Figure, draw, new_figure
from hostgap.report.inputs import Input

esc = html.escape


def lever_bars(inp: Input, gpu: str | None = None) -> dict | None:
    """Today's step and each applicable lever's: (label, device ns, host ns, interval) rows and the
    lever rows; None where the input gives nothing to advise on."""
    from hostgap.model.levers import arithmetic as A
    from hostgap.model.levers import ranked as L
    from hostgap.model.levers.baseline import baseline

    doc = inp.results if inp.results is not None else {**(inp.overview or {}), **(inp.anatomy or {})}
    try:
        b = baseline(doc, None, gpu)
    except HostgapError:
        return None
    rows = [
        {
            "label": "today",
            "device_ns": float(np.median(b.steps.device)),
            "step_ns": float(np.median(b.steps.wall)),
            "ci": A.today_interval(b),
        }
    ]
    levers = []
    for spec in L.specs(b, gpu):
        lever = A.evaluate(b, spec)
        levers.append(lever.to_dict())
        if lever.applicable and spec.apply is not None and lever.step_ns is not None:
            out = spec.apply(b.steps)
            rows.append(
                {
                    "label": f"{lever.lever} ({', '.join(f'{k}={v}' for k, v in lever.target.items())})",
                    "device_ns": min(float(np.median(out.device)), lever.step_ns),
                    "step_ns": lever.step_ns,
                    "ci": lever.step_ns_ci,
                    "gain": lever.gain,
                }
            )
    ranked = [r.to_dict() for r in A.rank([A.Lever(**{**x, "step_ns_ci": _t(x["step_ns_ci"])}) for x in levers])]
    return {"bars": rows, "levers": ranked, "notes": list(b.notes) + list(b.unfaithful)}


def _t(ci):
    return tuple(ci) if ci else None


def levers_figure(data: dict, fid: str) -> Figure:
    """Horizontal bars: device (blue) and host (orange) per step, today first, intervals as whiskers."""
    bars = data["bars"]
    title = "What would help: today's step beside each lever's predicted step"

    def build():
        fig = new_figure(11.0, 0.45 * len(bars) + 1.4)
        ax = fig.add_subplot(1, 1, 1)
        y = np.arange(len(bars))[::-1]
        dev = np.array([b["device_ns"] for b in bars]) / 1e6
        tot = np.array([b["step_ns"] for b in bars]) / 1e6
        ax.barh(y, dev, color="#3d6aa8", label="device-active")
        ax.barh(y, np.maximum(tot - dev, 0), left=dev, color="#c0562a", label="host (the rest of the step)")
        for yi, b in zip(y, bars, strict=True):
            if b["ci"]:
                lo, hi = b["ci"][0] / 1e6, b["ci"][1] / 1e6
                ax.errorbar((lo + hi) / 2, yi, xerr=[[(hi - lo) / 2]], fmt="none", ecolor="#222", capsize=3, lw=1)
        ax.set_yticks(y)
        ax.set_yticklabels([b["label"] for b in bars])
        ax.set_xlabel("wall per decode step, ms (whiskers: 95 % interval)")
        fig.legend(loc="outside lower left", fontsize=8, ncols=2, frameon=False)
        return fig

    cap = (
        "Each lever applied alone to this input's own steps (docs/advise.md): the predicted wall per decode step, "
        "split into device-active time and the rest (host), with its 95 % interval where the input gives one. "
        "Gains are per token where the lever changes the tokens per step (batch, spec)."
    )
    drawn = {"labels": [b["label"] for b in bars], "step_ns": [b["step_ns"] for b in bars]}
    return Figure(fid, title, cap, draw(build, salt=fid), drawn)


def _fmt_ms(ns) -> str:
    return "—" if ns is None else f"{ns / 1e6:.3f}"


def _gain(g) -> str:
    return "—" if g is None else f"{100 * g:+.1f} %"


def _ci(ci) -> str:
    return "—" if not ci else esc(_fmt_ms(ci[0]) + "–" + _fmt_ms(ci[1]))


def section(n: int, inp: Input, data: dict, fig: Figure) -> str:
    rows = "".join(
        f"<tr><td>{esc(r['lever'])}</td><td>{esc(', '.join(f'{k}={v}' for k, v in r['target'].items()))}</td>"
        f"<td>{_fmt_ms(r['step_ns'])}</td>"
        f"<td>{_ci(r['step_ns_ci'])}</td><td>{_gain(r['gain'])}</td>"
        f"<td>{esc(r['regime_after'] or '—')}</td>"
        f"<td class='name'>{esc(r['basis'] if r['applicable'] else r['reason'])}</td></tr>"
        for r in data["levers"]
    )
    notes = "".join(f"<p class='note'>{esc(x)}</p>" for x in data["notes"])
    return (
        f"<section id='levers-{n}'><h2>What would help: {esc(inp.label)}</h2>{notes}"
        f"<figure id='{fig.id}'>{fig.svg}<figcaption>{esc(fig.caption)}</figcaption></figure>"
        "<table><tr><th>lever</th><th>target</th><th>step (ms)</th><th>95 % interval</th><th>gain</th>"
        f"<th>regime after</th><th class='name'>basis / why not</th></tr>{rows}</table></section>"
    )


def levers_sections(inputs: list[Input]) -> list[tuple[str, str, dict]]:
    """``render``'s ``extra`` entries: one "What would help" section per input with levers."""
    out = []
    for n, inp in enumerate(inputs):
        data = lever_bars(inp)
        if data is None:
            continue
        fig = levers_figure(data, f"fig-levers-{n}")
        entry = {"source": inp.source, "figure": fig.id, "drawn": fig.drawn, "levers": data["levers"]}
        out.append((section(n, inp, data, fig), "levers", entry))
    return out
