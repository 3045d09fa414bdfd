"""The measuring commands' terminal output (:mod:`hostgap.cli.measure_console`): the progress bar
on a terminal and off it, and the short result table."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from hostgap.cli import measure_console as mc


@pytest.fixture
def stderr_as(monkeypatch):
    """Point the progress bar's console at a buffer, as a terminal or not."""

    def make(terminal: bool) -> io.StringIO:
        buf = io.StringIO()
        monkeypatch.setattr(mc, "err_console", lambda: Console(file=buf, force_terminal=terminal, width=120))
        return buf

    return make


def test_off_a_terminal_one_line_per_phase(stderr_as):
    buf = stderr_as(False)
    with mc.ProgressBar("tiny") as pb:
        assert not pb.live and pb.progress is None
        pb("warm-up", 0, 8)
        pb("warm-up", 4, 8)  # same phase: no new line
        pb("sweep", 1, 8)
        pb.cell(1, "b2")  # no bar, no cells: nothing
    assert buf.getvalue().splitlines() == ["tiny: warm-up (0/8 tokens)", "tiny: sweep (1/8 tokens)"]
    assert pb.last_phase == "sweep" and pb.label == "tiny"


def test_quiet_prints_nothing_even_on_a_terminal(stderr_as):
    buf = stderr_as(True)
    with mc.ProgressBar("tiny", quiet=True) as pb:
        assert not pb.live and pb.progress is None
        pb("warm-up", 0, 8)
    assert buf.getvalue() == ""


def test_on_a_terminal_a_bar_of_tokens_and_one_of_cells(stderr_as):
    stderr_as(True)
    with mc.ProgressBar("tiny", cells=3) as pb:
        assert pb.live and pb.progress is not None
        tasks = {t.id: t for t in pb.progress.tasks}
        assert tasks[pb.cells_task].total == 3 and tasks[pb.task].total is None
        pb("sweep", 5, 8)
        t = tasks[pb.task]
        assert (t.description, t.completed, t.total) == ("tiny: sweep", 5, 8)
        pb.cell(2, "[b4]")
        c = tasks[pb.cells_task]
        assert c.completed == 2 and c.description == "cells (\\[b4])" and pb.label == "  tokens"
        pb("decode", 1, 4)
        assert tasks[pb.task].description == "  tokens: decode"
    # one bar without cells: no cells task
    with mc.ProgressBar("x") as pb:
        assert pb.cells_task is None and len(pb.progress.tasks) == 1


def test_render_prints_the_table_the_note_and_the_run_directory(monkeypatch):
    from hostgap.report import run_rows as s
    from hostgap.report.run_view import render_measured

    monkeypatch.setattr(s, "title", lambda r: "tiny [cpu]")
    monkeypatch.setattr(s, "step_rows", lambda r: [("wall", "1.000 ms", "[0.9, 1.1]")])
    monkeypatch.setattr(s, "check_rows", lambda r: [("machine busy", "no", "1 attempt(s)")])
    monkeypatch.setattr(s, "footnote", lambda r: "per decode step: N1=1")
    buf = io.StringIO()
    con = Console(file=buf, width=120)
    monkeypatch.setattr(s, "agreement_note", lambda r: "the two disagree [trust anatomy]")
    render_measured({"run_dir": "runs/x"}, con)
    out = buf.getvalue()
    assert out.index("tiny [cpu]") < out.index("wall") < out.index("checks") < out.index("machine busy")
    assert "[0.9, 1.1]" in out and "the two disagree [trust anatomy]" in out
    assert out.rstrip().splitlines()[-1] == "run directory: runs/x"
    buf.truncate(0), buf.seek(0)
    monkeypatch.setattr(s, "agreement_note", lambda r: None)
    render_measured({}, con)
    out = buf.getvalue()
    assert "disagree" not in out and "run directory" not in out
    assert out.rstrip().splitlines()[-1] == "per decode step: N1=1"


def test_the_consoles(monkeypatch):
    monkeypatch.setattr(mc, "_ERR", None)
    a, b = mc.err_console(), mc.err_console()
    assert a.file is b.file and a.file is mc._ERR  # one duplicate of descriptor 2, kept
    monkeypatch.setattr(mc, "_ERR", None)
    monkeypatch.setattr(mc.os, "dup", lambda fd: (_ for _ in ()).throw(OSError("no fd")))
    assert mc.err_console().file is mc.sys.stderr
    from hostgap.report.terminal import run_console

    out = run_console()  # not a terminal under pytest: a wide table, no soft wrap
    assert out.width == 160 and not out.soft_wrap
