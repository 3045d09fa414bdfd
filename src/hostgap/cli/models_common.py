"""What the model commands (`account`, `fit`, `predict`, `regimes`) share: option choices, JSON
and table output, the extra device file."""

from __future__ import annotations

import json

import click

_ENGINES = click.Choice(["vllm", "hf"])
_DTYPES = click.Choice(["bfloat16", "float16", "float32", "fp8", "int8"])


def _echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, default=float, allow_nan=True))


def _log(msg: str) -> None:
    click.echo(msg, err=True)


def _devices(device_file):
    from hostgap.model.devices import load_device_file

    return load_device_file(device_file) if device_file else None


def _table(headers, rows) -> str:
    cols = [headers, *rows]
    widths = [max(len(str(r[i])) for r in cols) for i in range(len(headers))]

    def fmt(r) -> str:
        return "  ".join(str(v).rjust(w) if i else str(v).ljust(w) for i, (v, w) in enumerate(zip(r, widths)))

    return "\n".join(fmt(r).rstrip() for r in (headers, *rows))


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}" if ns == ns else "-"
