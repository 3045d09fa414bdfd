"""The progress the measuring commands show on stderr (:mod:`hostgap.cli.measure`): the bar of a
measurement or a sweep (tokens generated, cells done, with ETA) on a console of its own. The
result itself prints as :func:`hostgap.measure`'s result does (:mod:`hostgap.report.run_view`).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

_ERR: TextIO | None = None


def err_console():
    """A console on a duplicate of file descriptor 2, so progress keeps drawing while the
    capture filters Kineto's lines on descriptor 2 itself."""
    global _ERR
    from rich.console import Console

    if _ERR is None:
        try:
            _ERR = os.fdopen(os.dup(2), "w", buffering=1)
        except OSError:
            _ERR = sys.stderr
    return Console(file=_ERR, highlight=False)


class ProgressBar:
    """A rich progress bar on stderr (tokens generated, with ETA); plain lines when stderr is
    not a terminal."""

    def __init__(self, label: str, quiet: bool = False, cells: int | None = None):
        self.label, self.quiet = label, quiet
        self.console = err_console()
        self.live = self.console.is_terminal and not quiet
        self.task: TaskID | None = None
        self.cells_task: TaskID | None = None
        self.cells = cells  # a sweep: a second bar over cells, with its own ETA
        self.progress: Progress | None = None  # set on entering, when live
        self.last_phase: str | None = None

    def __enter__(self):
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[unit]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self.progress.__enter__()
            if self.cells:
                self.cells_task = self.progress.add_task("cells", total=self.cells, unit="cells")
            self.task = self.progress.add_task(self.label, total=None, unit="tokens")
        return self

    def cell(self, done: int, label: str) -> None:
        """Sweep: ``done`` cells finished (measured or skipped); ``label`` the current one."""
        if self.progress is not None and self.cells_task is not None:
            from rich.markup import escape

            self.progress.update(self.cells_task, completed=done, description=escape(f"cells ({label})"))
            self.label = "  tokens"

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.live and self.progress is not None and self.task is not None:
            from rich.markup import escape

            self.progress.update(self.task, description=escape(f"{self.label}: {phase}"), completed=done, total=total)
        elif not self.quiet and phase != self.last_phase:
            self.console.print(f"{self.label}: {phase} ({done}/{total} tokens)", markup=False)
        self.last_phase = phase

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.__exit__(*exc)
