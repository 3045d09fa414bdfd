"""``hostgap compare A B``: two runs or traces side by side, and a regression gate.

Per-step numbers of each side (:func:`metrics`), then B − A with its sign, absolute and
relative (:func:`compare`). Each row says its basis, and the terminal prints one table per
basis, never two bases in one table:

- ``differencing`` (both sides measured runs): wall, device-active, host-exposed, host fraction
  and kernels per step from the differencing method (``results.json``);
- ``steps`` (otherwise, or ``--basis steps``): medians over the steady decode steps of each
  trace (falling back to the non-partial steps when a trace has no steady decode steps).

Under ``differencing`` only the quantities the differencing method gives are on that basis;
host_wait, launches, kernel sum/union and the TaxBreak parts stay per-step medians over the
same steps (basis ``steps``); HDBI, unique kernels and kernels per token are trace-level
(basis ``trace``).

``--fail-if`` grammar (no ``eval``; :func:`parse_conditions`)::

    conditions := cond ("," cond)*
    cond       := METRIC OP NUMBER [UNIT]
    OP         := ">" | ">=" | "<" | "<="
    NUMBER     := ["+" | "-"] digits ["." digits]
    UNIT       := "%"            relative change (B − A) / |A|, in percent
                | "pp"           change in percentage points (fractions: host_fraction ...)
                | ns|us|µs|ms|s  absolute change of a time metric (``*_ns``)
                | (none)         absolute change in the metric's own unit

``host_fraction>+5%`` holds when B's host fraction is more than 5 % (relative) above A's;
``host_fraction>+2pp`` when it is more than 2 percentage points above; ``wall_ns>+0.1ms`` when
B's step is more than 0.1 ms longer; ``hdbi<-0.05`` when B's HDBI dropped by more than 0.05.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from hostgap.errors import HostgapError
from hostgap.report.inputs import Input
from hostgap.version import SCHEMA_VERSION

STEP_KEYS = (
    "wall_ns",
    "gpu_active_ns",
    "host_exposed_ns",
    "host_wait_ns",
    "host_fraction",
    "kernel_count",
    "launches",
    "graph_launches",
    "kernel_sum_ns",
    "kernel_union_ns",
)
TAX_KEYS = (
    "ft_ns",
    "ct_ns",
    "kt_ns",
    "kt_fw_ns",
    "py_ns",
    "dispatch_ns",
    "unattributed_ns",
    "orchestrate_ns",
    "device_active_ns",
)
METRICS = STEP_KEYS + TAX_KEYS + ("hdbi", "unique_kernels", "kernels_per_token")
FRACTIONS = ("host_fraction", "hdbi")
DIFF_KEYS = {
    "wall_ns": "t_step_ns",
    "gpu_active_ns": "g_step_ns",
    "host_exposed_ns": "h_step_ns",
    "host_fraction": "host_fraction",
    "kernel_count": "k_step",
}


def unit_of(metric: str) -> str:
    if metric.endswith("_ns"):
        return "ns"
    if metric in FRACTIONS:
        return "fraction"
    return "count"


def step_pool(anatomy: dict) -> tuple[list[dict], str]:
    """The steps whose medians stand for the trace, and which ones they are."""
    steps = (anatomy or {}).get("steps") or []
    steady = set(((anatomy or {}).get("summary") or {}).get("steady", {}).get("indices") or [])
    pool = [s for s in steps if s["index"] in steady]
    if pool:
        return pool, "steady decode steps"
    pool = [s for s in steps if not s.get("partial")]
    if pool:
        return pool, "non-partial steps (no steady decode steps)"
    return steps, "all steps"


def _median(values) -> float | None:
    v = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.median(v)) if v else None


def metrics(inp: Input, basis: str = "steps") -> dict:
    """Per-step numbers of one input (``basis``: "steps" or "differencing")."""
    an = inp.anatomy or {}
    pool, pool_name = step_pool(an)
    out: dict = {k: _median([s.get(k) for s in pool]) for k in STEP_KEYS}
    for k in TAX_KEYS:
        out[k] = _median([(s.get("taxbreak") or {}).get(k) for s in pool])
    tax = an.get("taxbreak") or {}
    out["hdbi"] = tax.get("hdbi")
    out["unique_kernels"] = tax.get("unique_kernels")
    out["kernels_per_token"] = tax.get("kernels_per_token")
    if basis == "differencing":
        d = (inp.results or {}).get("differencing") or {}
        for k, dk in DIFF_KEYS.items():
            out[k] = d.get(dk)
        out["kernels_per_token"] = d.get("kernels_per_output_token", out["kernels_per_token"])
    return {"values": out, "steps_used": len(pool), "steps": pool_name}


TRACE_LEVEL = ("hdbi", "unique_kernels", "kernels_per_token")
GPU_ONLY = ("host_wait_ns", "launches", "graph_launches", "hdbi") + TAX_KEYS
"""Metrics left out when both sides are CPU runs: no kernel launches, so no host_wait or TaxBreak."""

BASIS_TITLE = {
    "differencing": "per decode step, differencing of both measured runs (untraced wall, traced device-active)",
    "steps": "per step, median over each side's steps ({steps})",
    "trace": "whole trace (or measured run), not per step",
}


def row_basis(metric: str, basis: str) -> str:
    """Which basis one metric's numbers are on: ``differencing`` (only the metrics the
    differencing method gives, under that basis), ``steps`` (per-step medians) or ``trace``."""
    if metric in TRACE_LEVEL:
        return "trace"
    if basis == "differencing" and metric in DIFF_KEYS:
        return "differencing"
    return "steps"


def choose_basis(a: Input, b: Input, requested: str = "auto") -> str:
    if requested == "steps":
        return "steps"
    # a run without differencing (an attached server's, ``mode: attach``) compares on its steps
    both_runs = all(bool((x.results or {}).get("differencing")) for x in (a, b))
    if requested == "differencing":
        if not both_runs:
            side = a if not a.has_differencing else b
            what = "a bare trace" if side.results is None else f"an {side.run_kind} run, no differencing"
            raise HostgapError(side.source, f"--basis differencing needs measured runs on both sides (this is {what})")
        return "differencing"
    return "differencing" if both_runs else "steps"


def delta(a: float | None, b: float | None) -> tuple[float | None, float | None]:
    """(B − A, (B − A) / |A|); relative is None when A is 0 or either side is missing."""
    if a is None or b is None:
        return None, None
    d = b - a
    if a == 0:
        return d, (0.0 if d == 0 else None)
    return d, d / abs(a)


CI_KEYS = {
    "wall_ns": "t_step_ns",
    "gpu_active_ns": "g_step_ns",
    "host_exposed_ns": "h_step_ns",
    "host_fraction": "host_fraction",
}
"""Differencing metrics with an interval in each run's ``differencing.ci``."""


def change_interval(metric: str, a: Input, b: Input) -> list[float] | None:
    """The interval of B − A for a differencing metric: MOVER over the two runs' own intervals
    (each side's half-widths added in quadrature, as for two engines measured together,
    :func:`hostgap.stats.differencing.mover_difference`); None without both intervals or
    when either run is invalid."""
    from hostgap.stats.differencing import Slope, mover_difference

    key = CI_KEYS.get(metric)
    sides = []
    for inp in (a, b):
        r = inp.results or {}
        d = r.get("differencing") or {}
        ci = (d.get("ci") or {}).get(key) if key else None
        v = d.get(key) if key else None
        if not ci or v is None or ci[0] is None or ci[1] is None or r.get("valid") is False:
            return None
        sides.append(Slope(float(v), float(ci[0]), float(ci[1])))
    m = mover_difference(sides[1], sides[0])
    return [m.lo, m.hi]


def compare(
    a: Input, b: Input, basis: str = "auto", conditions: list[Condition] | None = None, outside_noise: bool = False
) -> dict:
    """The compare document (what ``--json`` prints). On the differencing basis the rows of
    wall, device-active, host-exposed and host fraction carry ``interval`` (of B − A, MOVER)
    and ``within_noise`` (the interval contains 0: the change lies within both runs' noise);
    ``outside_noise``: a --fail-if condition on such a row holds only when the change is also
    outside the noise."""
    basis = choose_basis(a, b, basis)
    ma, mb = metrics(a, basis), metrics(b, basis)
    rows = []
    cpu_only = a.activity != "gpu" and b.activity != "gpu"
    for k in METRICS:
        va, vb = ma["values"].get(k), mb["values"].get(k)
        if (va is None and vb is None) or (cpu_only and k in GPU_ONLY):
            continue
        d, r = delta(va, vb)
        row = {
            "metric": k,
            "unit": unit_of(k),
            "basis": row_basis(k, basis),
            "a": va,
            "b": vb,
            "delta": d,
            "relative": r,
        }
        if row["basis"] == "differencing" and k in CI_KEYS:
            iv = change_interval(k, a, b)
            row["interval"] = iv
            row["within_noise"] = None if iv is None else bool(iv[0] <= 0 <= iv[1])
        rows.append(row)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "basis": basis,
        "a": _side(a, ma),
        "b": _side(b, mb),
        "activity_label": _activity_label(a, b),
        "metrics": rows,
        "fail_if": [],
        "failed": False,
    }
    from hostgap.report.compare_levers import lever_check

    check = lever_check(a, b)  # did the change do what its lever predicted (docs/advise.md)
    if check is not None:
        doc["lever_check"] = check
    if conditions:
        table = {r["metric"]: r for r in rows}
        results = [evaluate(c, table, a, b, outside_noise) for c in conditions]
        doc["fail_if"] = results
        doc["failed"] = any(r["holds"] for r in results)
    return doc


def _side(inp: Input, m: dict) -> dict:
    v = (inp.anatomy or {}).get("verdict") or {}
    if inp.results:
        v = inp.results.get("verdict") or v
    return {
        "label": inp.label,
        "source": inp.source,
        "kind": inp.kind,
        "activity": inp.activity,
        "steps_used": m["steps_used"],
        "steps": m["steps"],
        "verdict": v.get("verdict"),
    }


def _activity_label(a: Input, b: Input) -> str:
    acts = {a.activity, b.activity}
    if acts == {"gpu"}:
        return "GPU-active"
    if acts == {"cpu-compute"}:
        return "CPU-compute (device-active analogue)"
    return "device-active (GPU-active on GPU, CPU-compute analogue on CPU)"


# -- --fail-if ----------------------------------------------------------------------------

_COND = re.compile(
    r"^\s*([a-z_][a-z0-9_]*)\s*(>=|<=|>|<)\s*([+-]?\d+(?:\.\d*)?|[+-]?\.\d+)\s*(%|pp|ns|us|µs|ms|s)?\s*$"
)
_TIME = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


@dataclass(frozen=True)
class Condition:
    text: str
    metric: str
    op: str
    threshold: float  # in the metric's unit, or a ratio for "%"
    relative: bool


def parse_conditions(expr: str) -> list[Condition]:
    """Parse ``--fail-if``; HostgapError naming the bad part."""
    out = []
    for part in expr.split(","):
        if not part.strip():
            continue
        m = _COND.match(part)
        if not m:
            raise HostgapError(
                "--fail-if",
                f"cannot parse {part.strip()!r}: expected METRIC OP NUMBER[UNIT], e.g. host_fraction>+5% or hdbi<-0.05",
            )
        metric, op, num, unit = m.group(1), m.group(2), float(m.group(3)), m.group(4)
        if metric not in METRICS:
            raise HostgapError("--fail-if", f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
        relative = unit == "%"
        if relative:
            value = num / 100.0
        elif unit == "pp":
            if metric not in FRACTIONS:
                raise HostgapError("--fail-if", f"{part.strip()!r}: 'pp' applies to fractions ({', '.join(FRACTIONS)})")
            value = num / 100.0
        elif unit in _TIME:
            if not metric.endswith("_ns"):
                raise HostgapError("--fail-if", f"{part.strip()!r}: a time unit needs a *_ns metric")
            value = num * _TIME[unit]
        else:
            value = num
        out.append(Condition(part.strip(), metric, op, value, relative))
    if not out:
        raise HostgapError("--fail-if", "no condition given")
    return out


def evaluate(c: Condition, table: dict, a: Input, b: Input, outside_noise: bool = False) -> dict:
    """Whether condition ``c`` holds for B against A; HostgapError when it cannot be computed.
    ``outside_noise``: on a row with an interval of B − A, the condition holds only when that
    interval also excludes 0 (a change within both runs' noise never fails a gate); a row
    without one is judged on its value alone, and the result says so."""
    row = table.get(c.metric)
    if row is None or row["a"] is None or row["b"] is None:
        missing = a if row is None or row["a"] is None else b
        raise HostgapError("--fail-if", f"{c.text}: {c.metric} is not available for {missing.source}")
    value = row["relative"] if c.relative else row["delta"]
    if value is None:  # relative change from 0
        value = math.copysign(math.inf, row["delta"])
    holds = {
        ">": value > c.threshold,
        ">=": value >= c.threshold,
        "<": value < c.threshold,
        "<=": value <= c.threshold,
    }[c.op]
    out = {
        "condition": c.text,
        "metric": c.metric,
        "value": value,
        "relative": c.relative,
        "threshold": c.threshold,
        "holds": bool(holds),
    }
    if outside_noise:
        within = row.get("within_noise")
        out["within_noise"] = within
        if within:
            out["holds"] = False
    return out


# -- terminal ------------------------------------------------------------------------------


def fmt_value(metric: str, v) -> str:
    if v is None:
        return "—"
    u = unit_of(metric)
    if u == "ns":
        return f"{v / 1e6:.3f} ms"
    if metric == "host_fraction":
        return f"{100 * v:.1f}%"
    if u == "fraction":
        return f"{v:.3f}"
    return f"{v:,.1f}" if v != int(v) else f"{int(v):,}"


def fmt_delta(metric: str, d) -> str:
    if d is None:
        return "—"
    u = unit_of(metric)
    if u == "ns":
        return f"{d / 1e6:+.3f} ms"
    if metric == "host_fraction":
        return f"{100 * d:+.1f} pp"
    if u == "fraction":
        return f"{d:+.3f}"
    return f"{d:+,.1f}" if d != int(d) else f"{int(d):+,}"


def fmt_rel(r) -> str:
    return "—" if r is None else f"{100 * r:+.1f}%"


UNIT_LABEL = {"ns": "ms", "fraction": "0–1", "count": "count"}


def unit_label(metric: str) -> str:
    """The unit the table shows a metric's numbers in (time metrics in ms, whatever their key
    says: the key is the name ``--fail-if`` takes)."""
    return "%" if metric == "host_fraction" else UNIT_LABEL[unit_of(metric)]


def fmt_number(metric: str, v) -> str:
    """``v`` in :func:`unit_label`'s unit, without the unit."""
    if v is None:
        return "—"
    u = unit_of(metric)
    if u == "ns":
        return f"{v / 1e6:.3f}"
    if metric == "host_fraction":
        return f"{100 * v:.1f}"
    if u == "fraction":
        return f"{v:.3f}"
    return f"{v:,.1f}" if v != int(v) else f"{int(v):,}"


def fmt_number_delta(metric: str, d) -> str:
    if d is None:
        return "—"
    if metric == "host_fraction":
        return f"{100 * d:+.1f} pp"
    text = fmt_number(metric, abs(d))
    return ("-" if d < 0 else "+") + text


def render(doc: dict, con) -> None:
    """One table per basis (never two bases in one table), units in the unit column."""
    from rich.table import Table

    a, b = doc["a"], doc["b"]
    con.print(f"[bold]A[/bold] {a['label']}  ({a['kind']}, verdict {a['verdict']})", markup=True, highlight=False)
    con.print(f"[bold]B[/bold] {b['label']}  ({b['kind']}, verdict {b['verdict']})", markup=True, highlight=False)
    con.print(f"B − A; device-active = {doc['activity_label']}", highlight=False)
    steps = f"A: {a['steps_used']} {a['steps']}; B: {b['steps_used']} {b['steps']}"
    for basis in ("differencing", "steps", "trace"):
        rows = [r for r in doc["metrics"] if r.get("basis", "steps") == basis]
        if not rows:
            continue
        con.print(BASIS_TITLE[basis].format(steps=steps), highlight=False, soft_wrap=True)
        t = Table()
        noise = any("interval" in r for r in rows)
        cols = ("metric", "unit", "A", "B", "B − A", "relative") + (("95 % CI of B − A", "noise") if noise else ())
        for c in cols:
            t.add_column(c, justify="left" if c in ("metric", "unit", "noise") else "right")
        for r in rows:
            m = r["metric"]
            cells = [
                m,
                unit_label(m),
                fmt_number(m, r["a"]),
                fmt_number(m, r["b"]),
                fmt_number_delta(m, r["delta"]),
                fmt_rel(r["relative"]),
            ]
            if noise:
                iv = r.get("interval")
                cells += [
                    "" if not iv else f"[{fmt_number_delta(m, iv[0])}, {fmt_number_delta(m, iv[1])}]",
                    "" if r.get("within_noise") is None else ("within noise" if r["within_noise"] else "beyond noise"),
                ]
            t.add_row(*cells)
        con.print(t)
        if noise:
            con.print(
                "noise: the MOVER interval of B − A from both runs' own intervals; within noise = it contains 0",
                highlight=False,
                soft_wrap=True,
            )
    line = lever_line(doc)
    if line:
        con.print(line, highlight=False, soft_wrap=True, markup=False)


def lever_line(doc: dict) -> str | None:
    """The lever check's sentence, when the change is one a lever stands for."""
    c = doc.get("lever_check")
    return None if not c else f"lever check ({c['lever']}): {c['words']}"


def fail_lines(doc: dict) -> list[str]:
    lines = []
    for r in doc["fail_if"]:
        shown = fmt_rel(r["value"]) if r["relative"] else fmt_delta(r["metric"], r["value"])
        state = "HOLDS" if r["holds"] else "ok"
        note = (
            {True: ", within noise", False: ", beyond noise", None: ", no interval"}.get(r["within_noise"], "")
            if "within_noise" in r
            else ""
        )
        lines.append(f"fail-if {r['condition']}: {state} (B − A = {shown}{note})")
    return lines


def csv_rows(doc: dict) -> list[dict]:
    out = []
    for r in doc["metrics"]:
        row = {
            "basis": doc["basis"],
            "a_label": doc["a"]["label"],
            "b_label": doc["b"]["label"],
            **{k: v for k, v in r.items() if k != "interval"},
        }
        if "interval" in r:
            iv = r["interval"] or [None, None]
            row["interval_lo"], row["interval_hi"] = iv
        out.append(row)
    return out
