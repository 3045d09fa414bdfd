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
def status(message: str | None, quiet: bool):
    """On a terminal's stderr while the block runs: a spinner with ``message``, and while a trace
    file decodes for more than a second, a bar of its bytes (:class:`LoadBar`). Nothing with
    ``quiet`` or when stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield
        return
    from hostgap import api

    with LoadBar(message) as bar, api._reporting_loads(bar.update):
        yield


class LoadBar:
    """One line on stderr: a spinner and a message, which becomes ``decoding  [bar]  bytes / size``
    once a decode has run for :data:`AFTER_S` (a small file never shows a bar), and ``analysing``
    when the decode is done (the analysis stages follow)."""

    AFTER_S = 1.0

    def __init__(self, message: str | None, clock=None):
        import time

        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.text import Text

        class OnlyWithTotal(BarColumn):
            """The bar, shown only while its task has a total (no pulsing bar beside a spinner)."""

            def render(self, task):
                return super().render(task) if task.total is not None else Text("")

        self._clock = clock or time.monotonic
        self._message = message or "loading"
        self._started: float | None = None
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            OnlyWithTotal(),
            TextColumn("{task.fields[bytes]}"),
            TimeElapsedColumn(),
            console=err(),
            transient=True,
        )
        self.task = self.progress.add_task(self._message, total=None, bytes="")

    def __enter__(self) -> LoadBar:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def update(self, done: int, total: int | None) -> None:
        """``done`` bytes of ``total`` read (the decode's progress callback)."""
        now = self._clock()
        if self._started is None:
            self._started = now
        finished = total is not None and done >= total
        if finished:
            self._started = None
            self.progress.update(self.task, description="analysing", completed=0, bytes="")
            self.progress.tasks[self.task].total = None  # update() keeps a total given None
        elif now - self._started >= self.AFTER_S:
            size = f" / {total / 1e6:,.0f} MB" if total else " MB"
            self.progress.update(
                self.task, description="decoding", total=total, completed=done, bytes=f"{done / 1e6:,.0f}{size}"
            )


def jobs_option(f):
    """``--jobs N``: threads that decode a trace file (default: the cores this process may use);
    the result is the same whatever the number (docs/input.md)."""
    import click

    def set_jobs(ctx, param, value):
        if value is not None:
            import os

            os.environ["HOSTGAP_JOBS"] = str(value)  # this process and the workers it starts
        return value

    return click.option(
        "--jobs",
        "-j",
        type=click.IntRange(min=1),
        default=None,
        expose_value=False,
        callback=set_jobs,
        help="Threads that decode a trace file (default: the cores this process may use).",
    )(f)


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
