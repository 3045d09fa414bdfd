"""`hostgap regimes --published`: the published host-overhead figures placed on the model."""

from __future__ import annotations

import json

import click


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if unit != "%" else f"{v:.1f}"


def _published(row: dict) -> str:
    p = row["published"]
    return f"{p[0]:g}-{p[1]:g}" if isinstance(p, list) else f"{p:g}"


def show(as_json: bool, as_csv: bool) -> None:
    """Print the table (model.published) as text, JSON or CSV."""
    import hostgap
    from hostgap.model import published

    rows = published.table()
    if as_json:
        click.echo(
            json.dumps(
                {"schema_version": hostgap.SCHEMA_VERSION, "figures": rows, "graph_launch": published.graph_fit()},
                indent=2,
                default=float,
            )
        )
        return
    if as_csv:
        click.echo("id,unit,published,predicted,error,status,regime")
        for r in rows:
            err = "" if r["error"] is None else f"{r['error']:.4f}"
            pred = "" if r["predicted"] is None else f"{r['predicted']:.6g}"
            click.echo(f"{r['id']},{r['unit']},{_published(r)},{pred},{err},{r['status']},{r['regime'] or ''}")
        return
    click.echo("published host-overhead figures placed on the model (docs/models.md §9)")
    for r in rows:
        err = "" if r["error"] is None else f"  error {r['error'] * 100:+.0f} %"
        click.echo(f"\n{r['id']}: {r['figure']} [{r['source']}]")
        click.echo(
            f"  published {_published(r)} {r['unit']}; hostgap: "
            + (
                f"outside the model: {r['reason']}"
                if r["status"] != "predicted"
                else f"{_num(r['predicted'], r['unit'])} {r['unit']}{err}"
            )
        )
        click.echo(
            f"  cell: {r['cell']}"
            + (f" ({r['regime']}, host fraction {r['host_fraction']:.2f})" if r["regime"] else "")
        )
        if r["note"]:
            click.echo(f"  note: {r['note']}")
