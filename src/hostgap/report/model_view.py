"""The latency models' commands as text (``account``, ``fit``, ``predict``, ``regimes``): plain
aligned tables and lines, no colour, each function returning the lines a command prints (its
``--csv`` too), and the JSON text of their ``--json``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN, classify
from hostgap.model.fitting.measured import tp_label
from hostgap.model.prediction import error_total

if TYPE_CHECKING:
    from hostgap.model.accounting import Account
    from hostgap.model.fitting.measured import FittedModel
    from hostgap.model.fitting.sources import FitOutcome
    from hostgap.model.prediction import CellPrediction
    from hostgap.model.regimes import RegimeMap


def dumps(obj: Any) -> str:
    """The models' ``--json`` text (NaN stays NaN: an unknown number is not a zero)."""
    return json.dumps(obj, indent=2, default=float, allow_nan=True)


def table(headers: Sequence, rows: Sequence[Sequence]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned;
    no trailing blanks."""
    cols = [headers, *rows]
    widths = [max(len(str(r[i])) for r in cols) for i in range(len(headers))]

    def fmt(r) -> str:
        return "  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths)))

    return "\n".join(fmt(r).rstrip() for r in (headers, *rows))


def ms(ns: float) -> str:
    """Nanoseconds as milliseconds, 3 decimals; ``-`` for NaN."""
    return f"{ns / 1e6:.3f}" if ns == ns else "-"


# -- predict ------------------------------------------------------------------------------


def prediction_notes(p: CellPrediction, as_json: bool) -> list[str]:
    """What ``predict`` writes on stderr: with ``--json``, the basis where it rests on defaults
    (the table prints it); a warning where the cell does not fit in the GPU's memory."""
    out = [f"note: {p.basis}"] if as_json and p.on_defaults else []
    if not p.memory.fits:
        out.append(
            f"warning: {p.memory.message(p.setup.device.name)}: this cell does not run as given "
            "(use --tp or a larger GPU)"
        )
    return out


def prediction_lines(p: CellPrediction) -> list[str]:
    """``predict``'s text: the cell, its basis, the table (predicted, then each measured run with
    the prediction's error), then each what-if with its assumptions and measured runs."""
    s, base = p.setup, p.step
    c0 = s.cell
    out = [
        f"{p.preset} on {s.device.name}: batch {c0.batch}, KV {c0.context}, TP {c0.tp}, {c0.dtype}, {c0.engine} {s.mode}",
        f"basis: {p.basis}",
    ]
    rows = [
        (
            "predicted",
            ms(base.device_ns),
            ms(base.collective_ns + base.collective_wait_ns),
            ms(base.host_ns),
            ms(base.total_ns),
            f"{base.host_fraction:.2f}",
            "",
        )
    ]
    for c in p.measured:
        rows.append(
            (
                f"measured {c.run_id}"[:40],
                ms(c.g_step_ns),
                "",
                ms(c.h_step_ns),
                ms(c.t_step_ns),
                f"{c.host_fraction:.2f}" if c.host_fraction == c.host_fraction else "-",
                f"{error_total(base, c) * 100:+.1f} %",
            )
        )
    out.append(table(("", "device ms", "collective ms", "host ms", "total ms", "host frac", "error"), rows))
    if base.collective_wait_ns:
        out.append(
            f"collective includes {ms(base.collective_wait_ns)} ms waiting for the slowest rank's host "
            f"(host-caused: serial + exposed orchestration {ms(base.host_caused_ns)} ms)"
        )
    for w, measured in zip(p.what_ifs, p.what_if_measured):
        sc = w.scenario
        wait = f" + {ms(sc.collective_wait_ns)} ms waiting in all-reduce for the slowest rank's host"
        out += [
            "",
            f"what-if {w.name}: step {ms(w.baseline.total_ns)} -> {ms(sc.total_ns)} ms "
            f"({w.step_change * 100:+.1f} %), per-token speed-up {w.per_token_speedup:.2f}x",
            f"  device {ms(sc.device_ns)} ms, collective {ms(sc.collective_ns)} ms"
            + (wait if sc.collective_wait_ns else "")
            + f", host {ms(sc.host_ns)} ms",
        ]
        out += [f"  assumes: {a}" for a in w.assumptions]
        out += [
            f"  measured {c.run_id}: {ms(c.t_step_ns)} ms ({error_total(sc, c) * 100:+.1f} % error)" for c in measured
        ]
    return out


# -- account ------------------------------------------------------------------------------

ACCOUNT_KEYS = (
    "name", "family", "count", "flops", "weight_bytes", "kv_read_bytes", "kv_write_bytes", "act_bytes", "launches",
)  # fmt: skip


def account_csv_lines(acc: Account) -> list[str]:
    """``account --csv``: one row per op, its per-instance numbers."""
    return [",".join(ACCOUNT_KEYS)] + [",".join(str(getattr(o, k)) for k in ACCOUNT_KEYS) for o in acc.ops]


def account_lines(acc: Account, context: int) -> list[str]:
    """``account``'s text: per op, count x per-instance in GFLOP, MB and launches; totals last.
    ``context``: the KV length as asked (the cell holds at least the step's tokens)."""

    def cells(flops, weights, kv_read, kv_write, act, launches) -> tuple[str, ...]:
        return (
            f"{flops / 1e9:.3f}",
            f"{weights / 1e6:.2f}",
            f"{kv_read / 1e6:.2f}",
            f"{kv_write / 1e6:.3f}",
            f"{act / 1e6:.3f}",
            f"{launches:g}",
        )

    rows: list[tuple[object, ...]] = [
        (o.name, o.family, o.count)
        + cells(*(o.count * getattr(o, k) for k in ACCOUNT_KEYS[3:]))
        for o in acc.ops
    ]  # fmt: skip
    t = acc.totals()
    rows.append(("total", "", "", *cells(*(t[k] for k in ACCOUNT_KEYS[3:]))))
    c = acc.cell
    head = ("op", "family", "count", "GFLOP", "weights MB", "KV read MB", "KV write MB", "act MB", "launches")
    return [
        f"{acc.arch_name}: batch {c.batch}, {c.q_tokens} token(s)/seq, KV {context}, TP {c.tp} (per rank), "
        f"{c.dtype}, {c.engine} launches",
        table(head, rows),
    ]


# -- fit ----------------------------------------------------------------------------------


def paper_fit_lines(o: FitOutcome) -> list[str]:
    """``fit --paper-cells``: the fitted host term beside the shipped default, then every
    published cell with the default's and the leave-one-out prediction's error."""
    from hostgap.model.fitting import calibrate
    from hostgap.model.stepmodel import DEFAULT_HOST

    assert o.paper is not None
    host, d = o.paper.host, DEFAULT_HOST["vllm"]
    parts = [(k, f"{getattr(host, k) / 1e3:.2f} us", f"{getattr(d, k) / 1e3:.2f} us") for k in calibrate.PARAMS]
    cells = [
        (r.cell, r.quantity, r.use, f"{r.published:g}", f"{r.default:.3f}", f"{r.error * 100:+.1f}",
         f"{r.loo:.3f}", f"{r.loo_error * 100:+.1f}")
        for r in o.paper.rows
    ]  # fmt: skip
    return [
        f"host term fitted on the published cells ({calibrate.CELLS_FILE.name}), H100 vLLM eager; "
        f"device scale {o.paper.device_scale:.3f}",
        table(("part", "fitted", "shipped default"), parts),
        "",
        table(("cell", "quantity", "use", "published", "default", "error %", "leave-one-out", "error %"), cells),
    ]


def kernel_fit_lines(o: FitOutcome) -> list[str]:
    """``fit --vidur-mlp``: each file's scores by the fit on the others, then the test files'."""
    head = ("file", "device", "GEMM MAPE %", "all-op MAPE %", "max err %", "rows")

    def fmt(r: dict) -> tuple:
        pcts = (f"{r[k]:.1f}" for k in ("gemm_mape_pct", "op_mape_pct", "max_err_pct"))
        return (r["file"], r["device"], *pcts, r["rows"])

    out = []
    if o.report.get("heldout_files"):
        out += ["roofline (GEMMs one family), each file held out (fit on the others):"]
        out += [table(head, [fmt(r) for r in o.report["heldout_files"]])]
    if o.report.get("tests"):
        out.append(
            f"roofline (GEMMs one family) fitted on all {o.kernel_files} file(s) ({o.kernel_device}), scored on "
            "the test files "
            + (
                f"(efficiencies and t_min applied to {o.test_device}'s datasheet peaks and bandwidth):"
                if o.test_device != o.kernel_device
                else "(same GPU):"
            )
        )
        out.append(table(head, [fmt(r) for r in o.report["tests"]]))
    return out


def model_lines(model: FittedModel) -> list[str]:
    """A fitted model's groups (scale, host term, held-out errors) and its all-reduce fit."""
    out = []
    if model.groups:
        rows = [
            (g.device_name, g.engine, g.tp, g.n_cells, f"{g.device_scale:.3f}", ms(g.host.serial_ns),
             f"{g.host.per_seq_ns / 1e3:.1f}", f"{g.host.per_kernel_ns / 1e3:.2f}", f"{g.heldout.mape * 100:.1f}",
             f"{g.heldout.max_error * 100:.1f}", f"{g.heldout_host_only.mape * 100:.1f}")
            for g in model.groups
        ]  # fmt: skip
        head = (
            "device", "engine", "TP", "cells", "dev scale", "serial ms", "per-seq us", "per-kernel us",
            "held-out MAPE %", "max err %", "host-only MAPE %",
        )  # fmt: skip
        out.append(table(head, rows))
    ar = model.all_reduce
    if ar is not None:
        out.append(
            "all-reduce: "
            + ", ".join(
                f"k={k} {ar.latency_ns[k] / 1e3:.1f} us + size / {ar.bw_bytes_per_s[k] / 1e9:.0f} GB/s"
                for k in sorted(ar.latency_ns)
            )
        )
    return out


def wrote_line(model: FittedModel, path, chosen: bool) -> str:
    """The line saying where the model went (``chosen``: by ``-o``) and what it holds."""
    return (
        f"wrote {path}{'' if chosen else ' (the default location; -o to choose)'} "
        f"(schema_version {model.to_dict()['schema_version']}, data sha256 {model.provenance['data_sha256'][:12]})"
    )


# -- regimes ------------------------------------------------------------------------------

_SHORT: dict[str | None, str] = {"host-bound": "H", "balanced": "B", "device-bound": "D"}


def regime_csv_lines(m: RegimeMap) -> list[str]:
    """``regimes --csv``: one row per cell (with ``--predict``, the model's beside it)."""
    head = "model,device,engine,mode,batch,prompt_len,host_fraction,regime,run_id,contended"
    out = [head + (",predicted_host_fraction,predicted_regime" if m.predicted else "")]
    for c in m.cells:
        out.append(
            f"{c.model},{c.device},{c.engine},{c.mode},{c.batch},{c.prompt_len},{c.host_fraction:.4f},"
            f"{c.regime},{c.run_id},{int(c.run_id in m.busy)}"
            + (f",{c.predicted_host_fraction:.4f},{c.predicted_regime}" if m.predicted else "")
        )
    return out


def regime_lines(m: RegimeMap) -> list[str]:
    """``regimes``' text: per setting a grid (rows batch, columns prompt length) of the median
    host fraction and its class, the boundaries, and the runs left out."""
    out = [
        f"regimes by host fraction: host-bound >= {HOST_BOUND_MIN}, balanced >= {DEVICE_BOUND_MAX}, else device-bound"
    ]
    groups: dict = {}
    for c in m.cells:
        groups.setdefault((c.model, c.device, c.engine, c.mode, c.tp), []).append(c)
    for (model, dev, eng, mode, k), cs in sorted(groups.items()):
        out.append(
            f"\n{model} on {dev} ({eng} {mode}{tp_label(k)}): host fraction (median over runs), rows batch, "
            "columns prompt length"
        )
        out.append(_grid(cs, m.busy))
    out.append("\nH: host-bound, B: balanced, D: device-bound; !: measured on a busy machine. Boundaries:")
    out += [f"  {b.model}: {b.note}" for b in m.boundaries]
    labels = {f"{c.model} ({c.device}, {c.engine} {c.mode}{tp_label(c.tp)})" for c in m.cells}
    for label in sorted(labels - {b.model for b in m.boundaries}):
        out.append(f"  {label}: no boundary: needs two or more batch sizes or prompt lengths")
    out += [f"left out, invalid measurement {rid}: {why[0]}" for rid, why in m.invalid.items()]
    return out


def _grid(cs: list, busy: frozenset[str]) -> str:
    prompts = sorted({c.prompt_len for c in cs})
    batches = sorted({c.batch for c in cs})
    grid: dict = {}
    for c in cs:
        grid.setdefault((c.batch, c.prompt_len), []).append((c.host_fraction, c.predicted_host_fraction))
        if c.run_id in busy:
            grid.setdefault(("busy", c.batch, c.prompt_len), [])
    rows = [
        (
            str(b),
            *(
                regime_text(grid[(b, p)]) + ("!" if ("busy", b, p) in grid else "") if (b, p) in grid else "."
                for p in prompts
            ),
        )
        for b in batches
    ]
    return table(("batch", *map(str, prompts)), rows)


def regime_text(pairs: list[tuple[float, float]]) -> str:
    """Median measured host fraction and class; ``p`` and the model's, when predicted.

    >>> regime_text([(0.6, float("nan")), (0.4, float("nan"))])
    '0.50 H (n=2)'
    """
    f = float(np.median([m for m, _ in pairs]))
    n = f" (n={len(pairs)})" if len(pairs) > 1 else ""
    text = f"{f:.2f} {_SHORT.get(classify(f), '?')}{n}"
    p = float(np.median([q for _, q in pairs]))
    return text + (f" | p {p:.2f} {_SHORT.get(classify(p), '?')}" if p == p else "")


# -- regimes --published ------------------------------------------------------------------


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if unit != "%" else f"{v:.1f}"


def _published(row: dict) -> str:
    p = row["published"]
    return f"{p[0]:g}-{p[1]:g}" if isinstance(p, list) else f"{p:g}"


def published_csv_lines(rows: list[dict]) -> list[str]:
    """``regimes --published --csv``: one row per figure."""
    out = ["id,unit,published,predicted,error,status,regime"]
    for r in rows:
        err = "" if r["error"] is None else f"{r['error']:.4f}"
        pred = "" if r["predicted"] is None else f"{r['predicted']:.6g}"
        out.append(f"{r['id']},{r['unit']},{_published(r)},{pred},{err},{r['status']},{r['regime'] or ''}")
    return out


def published_lines(rows: list[dict]) -> list[str]:
    """``regimes --published``: each figure, its source, hostgap's number and error (or why it
    is outside the model), and the cell it was placed on."""
    out = ["published host-overhead figures placed on the model (docs/models.md §9)"]
    for r in rows:
        err = "" if r["error"] is None else f"  error {r['error'] * 100:+.0f} %"
        placed = (
            f"outside the model: {r['reason']}"
            if r["status"] != "predicted"
            else f"{_num(r['predicted'], r['unit'])} {r['unit']}{err}"
        )
        out += [
            f"\n{r['id']}: {r['figure']} [{r['source']}]",
            f"  published {_published(r)} {r['unit']}; hostgap: " + placed,
            f"  cell: {r['cell']}"
            + (f" ({r['regime']}, host fraction {r['host_fraction']:.2f})" if r["regime"] else ""),
        ]
        if r["note"]:
            out.append(f"  note: {r['note']}")
    return out
