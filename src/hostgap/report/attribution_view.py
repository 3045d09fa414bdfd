"""``hostgap attribute`` as the terminal shows it: the model's coefficients, the metrics table
(model vs token baseline), one step's per-request shares; their JSON and CSV forms, and notes
on stderr. Presentation only: the numbers come from :mod:`hostgap.model.attribution`."""

from __future__ import annotations

import csv
import json
import math
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from hostgap.model.attribution import Explanation, Metrics, Model, Shares
    from hostgap.model.steptable.files import Steps


def console() -> Console:
    """A console on stdout; when piped, tables are data: not squeezed into 80 columns."""
    from hostgap.report.terminal import stdout_console

    return stdout_console(width=None if sys.stdout.isatty() else 160)


def log(msg: str) -> None:
    """One note on stderr."""
    from rich.console import Console

    Console(stderr=True).print(msg, highlight=False)


def log_notes(steps: Steps) -> None:
    """What reading STEPS left out, one note per line on stderr, each naming the file."""
    for note in steps.notes:
        log(f"{steps.origin}: {note}")


def finite(v) -> float | None:
    """A float for JSON: NaN or ±inf (unknown) become None."""
    v = float(v)
    return v if math.isfinite(v) else None


def strict_json(obj) -> str:
    """JSON text with no NaN/Infinity tokens (invalid JSON): non-finite floats become null."""

    def clean(o):
        if isinstance(o, float):
            return o if math.isfinite(o) else None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    return json.dumps(clean(obj), indent=2, allow_nan=False)


def print_csv(rows: list[dict]) -> None:
    """``rows`` as CSV on stdout, the first row's keys as the header."""
    w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)


def _ms(v) -> str:
    return "—" if v is None or v != v else f"{v / 1e6:.3f}"


def _pct(v) -> str:
    return "—" if v is None or v != v else f"{100 * v:.1f}%"


def _ratio(v) -> str:
    return "—" if v is None or v != v else f"{v:.2f}×"


def print_model(model: Model) -> None:
    """The coefficients of every class and segment, then the model's notes."""
    from rich.table import Table

    from hostgap.model.attribution import TERMS

    t = Table(title=f"attribution model (target {model.target}, NNLS, {model.loss} loss)")
    for col in ("class", "Σp range", "β ms", "a1 µs/tok", "a2 ns/kv", "a3 ns/tok²", "a4 µs/req", "a5 ns/(tok·kv)"):
        t.add_column(col, justify="right")
    for name, cm in model.classes.items():
        lo = 0.0
        for s in cm.segments:
            hi = "∞" if s.sum_p_max == float("inf") else f"{s.sum_p_max:g}"
            c = dict(zip(TERMS, s.coef))
            t.add_row(
                name,
                f"({lo:g}, {hi}]",
                f"{c['beta_ns'] / 1e6:.3f}",
                f"{c['a1_ns_per_token'] / 1e3:.3f}",
                f"{c['a2_ns_per_kv_token']:.3f}",
                f"{c['a3_ns_per_token2']:.4f}",
                f"{c['a4_ns_per_request'] / 1e3:.3f}",
                f"{c['a5_ns_per_token_kv_token']:.5f}",
            )
            lo = s.sum_p_max
    con = console()
    con.print(t)
    for name, cm in model.classes.items():
        for n in cm.notes:
            con.print(f"  {name}: {n}", highlight=False)
    for n in model.notes:
        con.print(f"  {n}", highlight=False)
    if "decode" in model.classes:
        con.print("  decode: p = 1, so a4 is the per-request constant a1 + a3 + a4", highlight=False)


_METRIC_COLUMNS = (
    "source",
    "class",
    "steps",
    "R²",
    "p50",
    "p90",
    "p99",
    "base R²",
    "base p50",
    "base p90",
    "base p99",
    "gain p90",
    "gain p99",
    "host frac",
)


def print_metrics(metrics: Metrics, title: str) -> None:
    """One row per source and class, model vs token baseline, then the notes."""
    from rich.table import Table

    t = Table(title=f"{title}: |T̂ − T| / T, model vs token baseline")
    for col in _METRIC_COLUMNS:
        t.add_column(col, justify="right")
    for g in metrics.groups:
        r2 = "—" if g.r2 is None else f"{g.r2:.4f}"
        br2 = "—" if g.baseline_r2 is None else f"{g.baseline_r2:.3f}"
        t.add_row(
            g.source,
            g.step_class,
            str(g.n_steps),
            r2,
            *map(_pct, g.rel_err),
            br2,
            *map(_pct, g.baseline_rel_err),
            _ratio(g.improvement[1]),
            _ratio(g.improvement[2]),
            _pct(g.host_fraction_median),
        )
    con = console()
    con.print(t)
    by_source: dict = {}
    for g in metrics.groups:  # one note per source: its all-classes group when there is one
        if g.source not in by_source or g.step_class == "all":
            by_source[g.source] = g.note
    for src, note in by_source.items():
        if note:
            con.print(f"  {src}: {note}", highlight=False)
    if metrics.note:
        con.print(f"  {metrics.note}", highlight=False)


def explain_doc(ex: Explanation) -> dict[str, Any]:
    """``explain --json``: the step, its predicted and measured time, and one row per request
    (:func:`explain_rows`) under ``requests_shares``."""
    one, sh = ex.steps, ex.shares
    return {
        "source": one.sources[one.source_idx[0]],
        "step": ex.step,
        "class": "prefill" if one.is_prefill[0] else "decode",
        "requests": int(one.n_requests[0]),
        "predicted_ns": finite(sh.predicted_ns[0]),
        "measured_ns": finite(sh.measured_ns[0]),
        "host_fraction": finite(sh.host_fraction[0]),
        "split": ex.split,
        "rescaled": ex.rescaled,
        "range_note": ex.range_note,
        "requests_shares": explain_rows(sh),
    }


def explain_rows(sh: Shares) -> list[dict]:
    """One row per request: its share, the token baseline's, device and host parts, alone."""
    import numpy as np

    total = float(sh.share_ns.sum())
    tokens = float(sh.p.sum())
    return [
        {
            "request": str(sh.request[i]),
            "phase": "prefill" if sh.prefill[i] else "decode",
            "q": int(sh.p[i]),
            "s": int(sh.c[i]),
            "share_ns": float(sh.share_ns[i]),
            "share_fraction": float(sh.share_ns[i] / total) if total > 0 else None,
            "token_fraction": float(sh.p[i] / tokens),  # what the token baseline charges
            "device_ns": finite(sh.device_ns[i]),
            "host_ns": finite(sh.host_ns[i]),
            "alone_ns": None if np.isnan(sh.alone_ns[i]) else float(sh.alone_ns[i]),
        }
        for i in range(len(sh.share_ns))
    ]


def print_explain(doc: dict[str, Any]) -> None:
    """:func:`explain_doc` as a table, with where its host parts come from."""
    from rich.table import Table

    t = Table(
        title=f"{doc['source']} step {doc['step']} ({doc['class']}, "
        f"{doc['requests']} requests): predicted {_ms(doc['predicted_ns'])} ms, "
        f"measured {_ms(doc['measured_ns'])} ms"
    )
    for col in ("request", "phase", "q", "s", "share ms", "share", "by tokens", "device ms", "host ms", "alone ms"):
        t.add_column(col, justify="right")
    for r in doc["requests_shares"]:
        t.add_row(
            r["request"],
            r["phase"],
            str(r["q"]),
            str(r["s"]),
            _ms(r["share_ns"]),
            _pct(r["share_fraction"]),
            _pct(r["token_fraction"]),
            _ms(r["device_ns"]),
            _ms(r["host_ns"]),
            _ms(r["alone_ns"]),
        )
    con = console()
    con.print(t)
    basis = (
        "each request's device/host model ratio"
        if doc["split"] == "model"
        else f"the step's host fraction {_pct(doc['host_fraction'])}"
        if doc["host_fraction"] is not None
        else "the step's host fraction, which is unknown (no host_exposed_ns here or in training)"
    )
    con.print(
        f"  shares add up to the {'measured' if doc['rescaled'] else 'predicted'} step "
        f"time; host part from {basis}; 'by tokens' is the token-count baseline's share",
        highlight=False,
    )
    if doc.get("range_note"):
        con.print(f"  note: {doc['range_note']}", highlight=False)
