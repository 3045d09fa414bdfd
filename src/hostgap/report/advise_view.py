"""The levers on the terminal (``hostgap advise``; the top three under other commands' verdicts)
and as CSV rows (docs/advise.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

TOP = 3


def _ms(ns) -> str:
    return "—" if ns is None else f"{ns / 1e6:.3f}"


def _ci(ci) -> str:
    return "—" if not ci else f"{ci[0] / 1e6:.3f}–{ci[1] / 1e6:.3f}"


def _gain(g) -> str:
    return "—" if g is None else f"{g * 100:+.1f} %"


def _target(t: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in t.items())


def render(doc: dict, con: Console) -> None:
    """The full table: every lever, ranked, with its interval, target and basis."""
    today = doc.get("today") or {}
    con.print(f"[bold]levers[/bold] for {doc.get('input', '')}: ranked by predicted gain (docs/advise.md)")
    if today:
        con.print(
            f"  today: step {_ms(today.get('step_ns'))} ms [95 % {_ci(today.get('step_ns_ci'))}], device-active "
            f"{_ms(today.get('device_ns'))} ms, host-caused idle {_ms(today.get('host_wait_ns'))} ms, batch "
            f"{today.get('batch', 1):g}; {today.get('source', '')}",
            markup=False,
        )
    from rich.table import Table  # imported on first use, as terminal.py does

    t = Table(title="levers (step in ms; gain = share of today's time per token saved)", title_justify="left")
    for c in ("lever", "target", "step", "95 % interval", "tokens/s", "gain", "regime after", "why not"):
        t.add_column(c, justify="right" if c in ("step", "95 % interval", "tokens/s", "gain") else "left")
    rows = doc.get("levers") or []
    for r in rows:
        t.add_row(
            r["lever"],
            _target(r["target"]),
            _ms(r["step_ns"]),
            _ci(r["step_ns_ci"]),
            "—" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.1f}",
            _gain(r["gain"]),
            r["regime_after"] or "—",
            "" if r["applicable"] else r["reason"],
        )
    con.print(t)
    for r in rows:
        if r["applicable"]:
            con.print(f"  {r['lever']}: {r['basis']}; validated: {r['validated']}", markup=False, soft_wrap=True)
    for n in doc.get("notes") or []:
        con.print(f"  note: {n}", markup=False, soft_wrap=True)


def top_lines(levers: list[dict], n: int = TOP) -> list[str]:
    """One line per applicable lever predicted to gain, best first, at most ``n``: what the
    verdicts of analyze, measure and attach print under them."""
    rows = [r for r in levers if r["applicable"] and r["gain"] is not None and r["gain"] > 0][:n]
    return [
        f"{i}. {r['lever']} ({_target(r['target'])}): step {_ms(r['step_ns'])} ms"
        + (f" [95 % {_ci(r['step_ns_ci'])}]" if r["step_ns_ci"] else "")
        + f", gain {_gain(r['gain'])}, then {r['regime_after'] or '—'}"
        for i, r in enumerate(rows, 1)
    ]


def render_top(doc: dict | None, con: Console) -> None:
    """The top levers under a verdict (``hostgap advise`` for all of them)."""
    if not doc or not doc.get("levers"):
        return
    lines = top_lines(doc["levers"])
    if not lines:
        reasons = {r.get("reason") for r in doc["levers"] if not r["applicable"]}
        if len(reasons) == 1 and not any(r["applicable"] for r in doc["levers"]):
            con.print(f"what would help: no lever applies ({reasons.pop()})", markup=False)
        else:
            con.print("what would help: no lever predicted to gain (hostgap advise for each and why)")
        return
    con.print("[bold]what would help[/bold] (predicted; hostgap advise for every lever and its basis):")
    for line in lines:
        con.print(f"  {line}", markup=False)


def csv_rows(doc: dict) -> list[dict]:
    """``advise --csv``: one row per lever, nested values as JSON text."""
    return [
        {
            "input": doc.get("input"),
            **{k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()},
        }
        for r in doc.get("levers") or []
    ]
