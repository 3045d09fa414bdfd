"""What a person sees while a big trace loads: the decode's bytes reach the command line's bar
(``hostgap.api._reporting_loads`` -> ``analysis.trace.LOAD_PROGRESS`` -> ``load_trace``), the
bar appears only after a second of decoding and goes back to its message when the decode ends,
nothing is drawn with ``-q`` or when stderr is not a terminal, and ``--jobs`` changes no number."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from conftest import corpus_path
from hostgap import api
from hostgap.cli import cli
from hostgap.cli.output import LoadBar, status

TRACE = "hta/a100_deep_queue_rank0.json.gz"


def test_the_decode_reports_its_bytes_to_the_context_callback():
    path = str(corpus_path(TRACE, vendored=True))
    calls: list[tuple[int, int | None]] = []
    with api._reporting_loads(lambda done, total: calls.append((done, total))):
        api.steps(path, cache=False)
    size = os.path.getsize(path)
    assert calls, "no progress reached the callback"
    assert calls[-1] == (size, size)
    assert all(0 <= d <= size and t == size for d, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    calls.clear()
    api.steps(path, cache=False)  # outside the block: nothing reported
    assert calls == []


def test_a_load_given_its_own_callback_uses_it_over_the_context():
    from hostgap.analysis.trace import analyse_trace

    path = str(corpus_path(TRACE, vendored=True))
    own: list[tuple[int, int | None]] = []
    ctx: list[tuple[int, int | None]] = []
    with api._reporting_loads(lambda d, t: ctx.append((d, t))):
        analyse_trace(path, cache=False, on_bytes=lambda d, t: own.append((d, t)))
    size = os.path.getsize(path)
    assert own and own[-1] == (size, size) and ctx == []


def test_the_bar_waits_a_second_then_shows_bytes_then_the_analysis():
    now = [100.0]
    bar = LoadBar("loading t.json", clock=lambda: now[0])
    task = bar.progress.tasks[0]
    bar.update(10_000_000, 100_000_000)
    assert task.total is None and task.description == "loading t.json"
    now[0] += LoadBar.AFTER_S - 0.01
    bar.update(20_000_000, 100_000_000)
    assert task.total is None, "a bar before a second of decoding"
    now[0] += 0.02
    bar.update(40_000_000, 100_000_000)
    assert (task.total, task.completed, task.description) == (100_000_000, 40_000_000, "decoding")
    assert task.fields["bytes"] == "40 / 100 MB"
    bar.update(100_000_000, 100_000_000)
    assert task.total is None and task.description == "analysing" and task.fields["bytes"] == ""
    # the next file starts its own second
    now[0] += 5
    bar.update(1, 10)
    assert task.total is None
    now[0] += 1.5
    bar.update(2, None)  # a gzip whose size is unknown: bytes without a total
    assert task.fields["bytes"] == "0 MB" and task.total is None


@pytest.mark.parametrize("quiet", [True, False])
def test_no_bar_off_a_terminal_or_with_quiet(quiet, monkeypatch):
    """CliRunner's stderr is not a terminal: the block runs with no reporting installed."""
    from hostgap.analysis.trace import LOAD_PROGRESS

    seen = []
    with status("loading x", quiet):
        seen.append(LOAD_PROGRESS.get())
    assert seen == [None]


def test_jobs_changes_no_number_and_a_bad_count_is_refused():
    path = str(corpus_path(TRACE, vendored=True))
    runner = CliRunner()
    outs = []
    for jobs in ("1", "2", "5"):
        r = runner.invoke(cli, ["steps", path, "--json", "--no-cache", "--jobs", jobs, "-q"])
        assert r.exit_code == 0, r.output
        outs.append(json.loads(r.stdout))
    assert outs[0] == outs[1] == outs[2]
    r = runner.invoke(cli, ["kernels", path, "--jobs", "0"])
    assert r.exit_code == 2 and "--jobs" in r.output
    a1 = api.analyze(path, jobs=1, cache=False).to_dict()
    a3 = api.analyze(path, jobs=3, cache=False).to_dict()
    assert a1 == a3
