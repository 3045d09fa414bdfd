"""The measured energy (results' ``energy``, docs/energy.md) in words: the lines the terminal and
the HTML report show. Without a counter, one line says why and no number appears."""

from __future__ import annotations

ROWS = (
    ("step_j", "energy per decode step", "J"),
    ("fixed_j", "fixed energy (prefill, set-up)", "J"),
    ("request_j", "energy per request", "J"),
    ("token_j", "energy per output token", "J"),
    ("power_w", "average power over the runs", "W"),
    ("step_power_w", "power during decode steps", "W"),
)


def _num(v: float) -> str:
    return f"{v:.4g}"


def energy_rows(energy: dict | None) -> list[tuple[str, str, str]]:
    """(quantity, value, interval) rows of a measured energy block; empty when there is none."""
    if not energy or not energy.get("available"):
        return []
    ci = energy.get("ci") or {}
    rows = []
    for key, label, unit in ROWS:
        v = energy.get(key)
        if v is None:
            continue
        iv = ci.get(key)
        rows.append((label, f"{_num(v)} {unit}", f"[{_num(iv[0])}, {_num(iv[1])}]" if iv else "no interval"))
    return rows


def energy_lines(energy: dict | None) -> list[str]:
    """The terminal's energy lines: a heading naming the source and the workload, then one line
    per number; or the one line saying why there is none (nothing for a run measured before
    energy was read)."""
    if energy is None:
        return []
    if not energy.get("available"):
        return [f"energy: not measured ({energy.get('reason', 'no counter')})"]
    of = "+".join(energy.get("of") or [])
    head = (
        f"energy ({energy['source']}: {of}; request and token at N={energy['at_tokens']}, "
        f"batch {energy['batch']}; 95 % intervals):"
    )
    lines = [head] + [f"  {label}: {value} {iv}" for label, value, iv in energy_rows(energy)]
    lines += [f"  note: {n}" for n in energy.get("notes") or []]
    ev = {d: e for d, e in (energy.get("counter_events") or {}).items() if e}
    if ev:
        said = "; ".join(f"{d}: " + ", ".join(f"{k} ×{v}" for k, v in sorted(e.items())) for d, e in sorted(ev.items()))
        lines.append(f"  counters: {said} (a wrap is added back; a reset or failed read leaves that run out)")
    return lines


def energy_html(energy: dict | None) -> str:
    """The HTML report's energy table of a measured run (or the line saying why there is none)."""
    from html import escape

    if energy is None:
        return ""
    if not energy.get("available"):
        return f"<p class='note'>{escape(energy_lines(energy)[0])}</p>"
    rows = "".join(
        f"<tr><td>{escape(label)}</td><td>{escape(value)}</td><td>{escape(iv)}</td></tr>"
        for label, value, iv in energy_rows(energy)
    )
    head, *rest = energy_lines(energy)
    notes = "".join(
        f"<p class='note'>{escape(x.strip())}</p>" for x in rest if x.strip().startswith(("note", "counters"))
    )
    return (
        f"<h3>Energy</h3><p>{escape(head.rstrip(':'))}</p>"
        f"<table><tr><th>quantity</th><th>value</th><th>95 % interval</th></tr>{rows}</table>{notes}"
    )


def _paper_value(r: dict) -> str:
    return "-" if r["value"] is None else f"{r['value']:.4g} {r['unit']}".rstrip()


def paper_lines(doc: dict) -> list[str]:
    """``regimes --published``: the energy paper's figures through the decomposition
    (:func:`hostgap.model.energy_paper.document`, docs/energy.md)."""
    out = [f"energy figures through E_window(N) = E_fixed + N e_step (docs/energy.md): {doc['source']}"]
    for r in doc["rows"]:
        out += [f"\n{r['id']}: {r['quantity']}", f"  {_paper_value(r)} ({r['status']}): {r['how']}"]
    return out


def shares_lines(block: dict) -> list[str]:
    """``attribute explain --step-energy``: each request's share of the step's energy."""

    def j(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g} J"

    out = [f"step energy {block['step_j']:.4g} J shared by {block['basis']} (docs/energy.md):"]
    out += [
        f"  {r['request']}: {j(r['energy_j'])} (device {j(r['device_j'])}, host {j(r['host_j'])})"
        for r in block["requests"]
    ]
    return out
