"""What every command writes besides its result: notes and progress on stderr (rich, no markup),
and the status line while a trace loads. Results print themselves (``to_json``, ``to_csv``,
``print`` of :mod:`hostgap.api`)."""

from __future__ import annotations

import sys
from contextlib import contextmanager

_ERR = None


def err():
    """rich's console on stderr, made on first use (``--json`` runs never import rich)."""
    global _ERR
    if _ERR is None:
        from rich.console import Console

        _ERR = Console(stderr=True)
    return _ERR


def note(message: str, style: str | None = None, fd2: bool = False) -> None:
    """One line on stderr, as it is (no markup, no highlighting, never wrapped); ``fd2``: on the
    process's file descriptor 2 itself (:func:`hostgap.cli.measure_console.err_console`)."""
    if fd2:
        from hostgap.cli.measure_console import err_console

        err_console().print(message, style=style, markup=False, soft_wrap=True)
    else:
        err().print(message, style=style, markup=False, highlight=False, soft_wrap=True)


def progress(quiet: bool):
    """A callback printing progress lines dimmed on stderr, or None with ``quiet``."""
    if quiet:
        return None
    return lambda msg: err().print(f"[dim]{msg}[/dim]", soft_wrap=True, highlight=False)


@contextmanager
def status(message: str, quiet: bool):
    """A spinner with ``message`` on a terminal's stderr while the block runs."""
    if quiet or not sys.stderr.isatty():
        yield
        return
    with err().status(message):
        yield


def no_cache_option(f):
    """``--no-cache``: the command neither reads nor fills the analysis cache (docs/input.md)."""
    import click

    def off(ctx, param, value):
        if value:
            import os

            os.environ["HOSTGAP_NO_CACHE"] = "1"  # this process and the workers it starts
        return value

    return click.option(
        "--no-cache",
        is_flag=True,
        expose_value=False,
        callback=off,
        help="Neither read nor fill the analysis cache (decode and analyse from scratch).",
    )(f)
