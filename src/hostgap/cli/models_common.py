"""What the model commands (`account`, `fit`, `predict`, `regimes`) share: option choices and
their output (JSON and lines on stdout, notes on stderr)."""

from __future__ import annotations

from collections.abc import Iterable

import click

_ENGINES = click.Choice(["vllm", "hf", "hf-cb"])
_DTYPES = click.Choice(["bfloat16", "float16", "float32", "fp8", "int8"])


def _echo_json(obj) -> None:
    from hostgap.report.model_view import dumps

    click.echo(dumps(obj))


def _echo(lines: Iterable[str], err: bool = False) -> None:
    for line in lines:
        click.echo(line, err=err)


def _log(msg: str) -> None:
    click.echo(msg, err=True)
