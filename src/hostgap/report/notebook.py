"""How a result of the Python API shows itself in a notebook (``_repr_html_``): one self-contained
HTML fragment (inline SVG, no scripts, no network) with the verdict and its key figure, drawn by
the same code as ``hostgap report`` (:mod:`hostgap.report.html`, :mod:`hostgap.report.figures.stepwise`)."""

from __future__ import annotations

import html
from pathlib import Path

esc = html.escape

MAX_ROWS = 20
"""Rows of a table result shown in the notebook (the table itself holds them all)."""


def result_html(kind: str, doc) -> str:
    """The fragment for a result of ``kind`` (``trace``, ``measured``, ``attached``, ``watched``,
    ``watch``, ``comparison``, ...) whose document is ``doc``."""
    try:
        if kind in ("trace", "measured", "attached", "measure", "attach"):
            return _card(_input_of(kind, doc))
        if kind in ("watched", "watch"):
            return _watch(doc)
        if kind == "comparison":
            return _comparison(doc)
        if kind == "prediction":
            return _prediction(doc)
    except Exception as exc:  # a view must never hide the result: fall back to its summary
        return _wrap(f"<p>hostgap {esc(kind)} (no view: {esc(type(exc).__name__)}: {esc(str(exc))})</p>")
    return _table(kind, doc)


def _input_of(kind: str, doc: dict):
    from hostgap.anatomy.steps import AnalysisOptions
    from hostgap.report.inputs import Input, _from_results

    if kind == "trace":
        return Input(
            source=doc["trace"], kind="trace", label=Path(doc["trace"]).name, trace_path=doc["trace"],
            anatomy=doc, overview=doc,
        )  # fmt: skip
    run_dir = Path(doc["run_dir"]) if doc.get("run_dir") else None
    return _from_results(doc.get("run_id") or "run", doc, run_dir, AnalysisOptions(), None)


def _card(inp) -> str:
    from hostgap.report.figures import stepwise as F
    from hostgap.report.html import _figure, _verdict_card, report_data

    d = report_data([inp])["inputs"][0]
    fig = F.steps_figure(inp, "fig-steps-nb")
    return _wrap(_verdict_card(0, inp, d) + _figure(fig))


def _watch(doc: dict) -> str:
    from hostgap.report.html import _figure
    from hostgap.report.watch_section import watch_figure

    stored = doc if "watch" in doc else {"watch": {"intervals": doc["intervals"], "summary": doc["summary"]}}
    summ = stored["watch"]["summary"]
    share = summ.get("host_share")
    head = (
        f"<h3>watch of {esc(str(doc.get('url') or doc.get('server_url')))} ({esc(str(doc.get('engine')))})</h3>"
        f"<p>{summ.get('intervals')} intervals; host-exposed share "
        + (f"{share:.2f} [{summ['host_share_low']:.2f}-{summ['host_share_high']:.2f}]" if share is not None else "n/a")
        + f" ({esc(str(summ.get('host_share_basis')))})</p>"
    )
    return _wrap(head + _figure(watch_figure(stored, "fig-watch-nb")))


def _comparison(doc: dict) -> str:
    from hostgap.report.compare import fmt_delta, fmt_rel, fmt_value

    rows = "".join(
        f"<tr><td>{esc(r['metric'])}</td><td>{esc(fmt_value(r['metric'], r['a']))}</td>"
        f"<td>{esc(fmt_value(r['metric'], r['b']))}</td><td>{esc(fmt_delta(r['metric'], r['delta']))}</td>"
        f"<td>{esc(fmt_rel(r['relative']))}</td></tr>"
        for r in doc["metrics"]
    )
    verdict = "FAILED" if doc.get("failed") else "no --fail-if condition held" if doc.get("fail_if") else ""
    return _wrap(
        f"<h3>B − A ({esc(doc['basis'])} basis)</h3><p>A: {esc(str(doc['a'].get('label')))}; "
        f"B: {esc(str(doc['b'].get('label')))} {esc(verdict)}</p>"
        f"<table><tr><th>metric</th><th>A</th><th>B</th><th>B − A</th><th>relative</th></tr>{rows}</table>"
    )


def _prediction(doc: dict) -> str:
    """``hostgap predict``: the cell, its basis, and the step predicted beside each what-if."""

    def row(label: str, p: dict, change: str = "") -> str:
        nums = (p["device_ns"], p["collective_ns"] + p["collective_wait_ns"], p["host_ns"], p["total_ns"])
        cells = "".join(f"<td>{v / 1e6:.3f}</td>" for v in nums)
        return f"<tr><td>{esc(label)}</td>{cells}<td>{p['host_fraction']:.2f}</td><td>{esc(change)}</td></tr>"

    c = doc["cell"]
    rows = row("predicted", doc["prediction"]) + "".join(
        row(f"what-if {w['name']}", w["scenario"], f"{w['step_change'] * 100:+.1f} %") for w in doc["what_ifs"]
    )
    return _wrap(
        f"<h3>{esc(doc['preset'])} on {esc(doc['device'])}: batch {c['batch']}, KV {c['context']}, TP {c['tp']}, "
        f"{esc(c['dtype'])}, {esc(c['engine'])} {esc(doc['mode'])}</h3><p>{esc(doc['basis'])}</p>"
        "<table><tr><th></th><th>device ms</th><th>collective ms</th><th>host ms</th><th>total ms</th>"
        f"<th>host frac</th><th>step change</th></tr>{rows}</table>"
    )


def _table(kind: str, doc) -> str:
    rows = doc if isinstance(doc, list) else [doc] if isinstance(doc, dict) else []
    rows = [r for r in rows if isinstance(r, dict)]
    if not rows:
        return _wrap(f"<p>hostgap {esc(kind)}: nothing to show</p>")
    cols = [c for c in rows[0] if not isinstance(rows[0][c], (dict, list))][:12]
    body = "".join("<tr>" + "".join(f"<td>{esc(str(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows[:MAX_ROWS])
    more = f"<p>{len(rows) - MAX_ROWS} more rows</p>" if len(rows) > MAX_ROWS else ""
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    return _wrap(f"<h3>hostgap {esc(kind)}</h3><table><tr>{head}</tr>{body}</table>{more}")


def _wrap(inner: str) -> str:
    return f"<div class='hostgap-result'><style>{scoped_style()}</style>{inner}</div>"


def scoped_style() -> str:
    """The report's style sheet with every rule scoped to ``.hostgap-result`` (a notebook page
    keeps its own look); the page-level ``body`` rule is left out.

    >>> "body" in scoped_style(), scoped_style().count(".hostgap-result table") > 0
    (False, True)
    """
    from hostgap.report.html import _STYLE

    out = []
    for rule in _STYLE.replace("\n", "").split("}"):
        if "{" not in rule:
            continue
        selectors, body = rule.split("{", 1)
        scoped = [f".hostgap-result {s.strip()}" for s in selectors.split(",") if s.strip() != "body"]
        if scoped:
            out.append(",".join(scoped) + "{" + body + "}")
    return "".join(out)
