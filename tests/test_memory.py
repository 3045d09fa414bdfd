"""release_free_memory: glibc's malloc_trim where the C library has it, a no-op elsewhere; the
single-trace analysis calls it after the linker and after the overview."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import hostgap.memory as memory


@pytest.fixture(autouse=True)
def fresh_lookup():
    memory._malloc_trim.cache_clear()
    yield
    memory._malloc_trim.cache_clear()


def test_no_trim_outside_linux(monkeypatch):
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory._malloc_trim() is None and memory.release_free_memory() is False


def test_no_trim_without_malloc_trim(monkeypatch):
    class Musl:  # a C library without malloc_trim
        pass

    monkeypatch.setattr(memory.sys, "platform", "linux")
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: Musl())
    assert memory.release_free_memory() is False


def test_trim_is_called_with_zero(monkeypatch):
    calls = []

    class Glibc:  # ctypes sets argtypes and restype on the function it finds
        def __init__(self):
            def malloc_trim(pad):
                calls.append(pad)
                return 1

            self.malloc_trim = malloc_trim

    lib = Glibc()
    monkeypatch.setattr(memory.sys, "platform", "linux")
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: lib)
    assert memory.release_free_memory() is True
    assert memory.release_free_memory() is True
    assert calls == [0, 0]


def test_the_real_trim_where_glibc_is():
    try:
        ctypes.CDLL(None).malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        pytest.skip("no glibc malloc_trim here")
    junk = [np.ones(200_000) for _ in range(50)]
    del junk
    assert memory.release_free_memory() is True


def test_analysis_releases_after_link_and_overview(monkeypatch, kineto_trace):
    from conftest import kernel, launch
    from hostgap.analysis import trace as one
    from hostgap.analysis import traceset
    from hostgap.anatomy.steps import AnalysisOptions

    calls = []
    monkeypatch.setattr(one, "release_free_memory", lambda: calls.append(1) or True)
    analysis = one.analyse_trace(
        kineto_trace([launch(ts=0, dur=2, corr=1), kernel("k", ts=5, dur=1, corr=1)]), AnalysisOptions()
    )
    doc = traceset.part_document(analysis)
    # after the launch join, after the enclosures (both parts of the link), after the overview
    assert len(calls) == 3 and doc["devices"]
