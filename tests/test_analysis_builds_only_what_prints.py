"""Each trace command builds only what it prints: ``steps`` never builds the GPU overview that
only ``analyze`` prints, ``analyze --json`` never builds the per-launch kernels table, and only
``kernels`` does; a cache entry is written from what was computed, each part once."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from hostgap.analysis import trace as tr
from hostgap.analysis import trace_cache as C
from hostgap.anatomy import overview as ov
from hostgap.cli import cli
from test_examples import decode_trace


@pytest.fixture
def built(monkeypatch) -> dict[str, int]:
    """How many times each part was computed (the cache's reads do not count)."""
    calls = {"load": 0, "link": 0, "enclosing": 0, "overview": 0, "anatomy": 0, "kernels": 0}

    def counting(name, fn):
        def run(*a, **k):
            calls[name] += 1
            return fn(*a, **k)

        return run

    import hostgap.readers as readers

    monkeypatch.setattr(readers, "load_trace", counting("load", readers.load_trace))
    monkeypatch.setattr(tr, "launch_links", counting("link", tr.launch_links))
    monkeypatch.setattr(tr, "enclosing_links", counting("enclosing", tr.enclosing_links))
    monkeypatch.setattr(ov, "overview", counting("overview", ov.overview))
    monkeypatch.setattr(tr, "analyze", counting("anatomy", tr.analyze))
    from hostgap.anatomy import kernels

    monkeypatch.setattr(kernels, "kernel_rows_of", counting("kernels", kernels.kernel_rows_of))
    return calls


def run(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize(
    "verb, expected",
    [
        (("steps", "--json"), {"load": 1, "link": 1, "enclosing": 1, "overview": 0, "anatomy": 1, "kernels": 0}),
        (("steps", "--csv"), {"load": 1, "link": 1, "enclosing": 1, "overview": 0, "anatomy": 1, "kernels": 0}),
        (("analyze", "--json"), {"load": 1, "link": 1, "enclosing": 1, "overview": 1, "anatomy": 1, "kernels": 0}),
        (("kernels", "--json"), {"load": 1, "link": 1, "enclosing": 1, "overview": 0, "anatomy": 1, "kernels": 1}),
    ],
)
def test_each_command_builds_what_it_prints_once(built, tmp_path, monkeypatch, verb, expected):
    monkeypatch.setenv("HOSTGAP_NO_CACHE", "1")
    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    assert run(verb[0], path, verb[1])
    assert built == expected


def test_the_cache_entry_is_written_from_the_first_computation(built, tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTGAP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOSTGAP_CACHE_MIN", "0")
    monkeypatch.delenv("HOSTGAP_NO_CACHE", raising=False)
    writes: list[str] = []
    put = C.Entry._put

    def spy(self, group, files):
        writes.append(group.split("-")[-1] if group.startswith("o") else group)
        return put(self, group, files)

    monkeypatch.setattr(C.Entry, "_put", spy)
    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    first = run("analyze", path, "--json")
    # each part computed once, each written once, from that computation
    assert built == {"load": 1, "link": 1, "enclosing": 1, "overview": 1, "anatomy": 1, "kernels": 0}
    assert sorted(writes) == ["anatomy", "events", "links", "overview"]
    assert run("analyze", path, "--json") == first and run("steps", path, "--json")
    assert built == {"load": 1, "link": 1, "enclosing": 1, "overview": 1, "anatomy": 1, "kernels": 0}  # nothing again
