"""The analysis with its enclosures and overview computed in a forked child (``hostgap analyze``
on more than one worker): the same documents and cache entry as in one process, exactly."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from conftest import vendored_path
from hostgap.analysis import trace as T
from hostgap.analysis import trace_cache as C
from hostgap.anatomy.link import Enclosing, Links, enclosing_links, launch_links, link
from hostgap.parallel import beside as B
from hostgap.readers import load_trace

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are forked on Linux only"),
    pytest.mark.usefixtures("one_thread"),  # (conftest: forking needs no other thread)
]

TRACES = [
    "hta/a100_deep_queue_rank0.json.gz",  # GPU: TaxBreak reads the enclosures
    "hta/cpu_only.json.gz",  # no GPU: the host rankings read them
    "tracelens/h100_bert-small.json.gz",  # Python frames: frame_of is an array
    "hta/a100_nccl_2rank.json.gz",
]


@pytest.fixture
def forks(monkeypatch) -> list[B.Beside]:
    """Every child started, and no threshold: the small vendored traces fork too."""
    monkeypatch.setenv("HOSTGAP_BESIDE_MIN_EVENTS", "0")
    started: list[B.Beside] = []
    real = B.Beside._start

    def spy(self):
        real(self)
        started.append(self)

    monkeypatch.setattr(B.Beside, "_start", spy)
    return started


def dumps(doc: dict) -> str:
    return json.dumps(doc, allow_nan=True, default=str)


@pytest.mark.parametrize("rel", TRACES)
def test_the_document_from_two_processes_is_the_one_from_one(rel, forks):
    path = str(vendored_path(rel))
    one = T.analyse_trace(path, cache=False, jobs=1)
    ref = one.document()
    assert forks == []  # one worker: no child
    two = T.analyse_trace(path, cache=False, jobs=2)
    got = two.document()
    assert len(forks) == 1 and forks[0].forked
    assert two._overview_beside  # the child computed the overview too
    assert dumps(got) == dumps(ref)
    assert dumps(two.anatomy_dict()) == dumps(one.anatomy_dict())
    assert forks[0]._pid is not None and forks[0]._done  # its result was read, the child reaped


@pytest.mark.parametrize("rel", TRACES[:3])
def test_the_steps_alone_fork_only_the_enclosures(rel, forks):
    path = str(vendored_path(rel))
    ref = T.analyse_trace(path, cache=False, jobs=1).anatomy_dict()
    two = T.analyse_trace(path, cache=False, jobs=2)
    got = two.anatomy_dict()
    assert len(forks) == 1 and not two._overview_beside
    assert dumps(got) == dumps(ref)


def test_below_the_threshold_no_child(monkeypatch, forks):
    path = str(vendored_path(TRACES[0]))
    n = len(load_trace(path).events)
    monkeypatch.setenv("HOSTGAP_BESIDE_MIN_EVENTS", str(n + 1))
    T.analyse_trace(path, cache=False, jobs=2).document()
    assert forks == []
    monkeypatch.setenv("HOSTGAP_BESIDE_MIN_EVENTS", str(n))
    T.analyse_trace(path, cache=False, jobs=2).document()
    assert len(forks) == 1
    monkeypatch.setenv("HOSTGAP_BESIDE_MIN_EVENTS", "not a number")  # the default, 1,000,000
    assert T._beside_min_events() == T.BESIDE_MIN_EVENTS
    T.analyse_trace(path, cache=False, jobs=2).document()
    assert len(forks) == 1


def test_the_overview_alone_forks_nothing(forks):
    a = T.analyse_trace(str(vendored_path(TRACES[0])), cache=False, jobs=2)
    a.overview()
    assert forks == []


@pytest.mark.parametrize("rel", TRACES[:3])
def test_the_cache_entry_holds_the_links_one_process_computes(rel, forks, tmp_path, monkeypatch):
    path = str(vendored_path(rel))
    monkeypatch.setenv("HOSTGAP_CACHE_MIN", "0")
    arrays = {}
    for jobs in (1, 2):
        monkeypatch.setenv("HOSTGAP_CACHE_DIR", str(tmp_path / f"cache{jobs}"))
        a = T.analyse_trace(path, jobs=jobs)
        doc = a.document()
        assert a.entry is not None and not a._links_unsaved
        arrays[jobs] = C.entry_for(path).arrays("links")
        assert arrays[jobs] is not None
        # a second look reads the same document from the entry, without linking again
        b = T.analyse_trace(path, jobs=jobs)
        assert dumps(b.document()) == dumps(doc)
        assert "links" not in b.__dict__
    assert len(forks) == 1
    assert arrays[1].keys() == arrays[2].keys()
    for k in arrays[1]:
        np.testing.assert_array_equal(arrays[2][k], arrays[1][k], err_msg=k)
        assert arrays[2][k].dtype == arrays[1][k].dtype, k
    assert ("frame_of" in arrays[1]) == (rel.startswith("tracelens"))


def test_links_read_the_enclosures_only_when_asked():
    trace = load_trace(str(vendored_path(TRACES[2])))
    calls = []

    def later() -> Enclosing:
        calls.append(1)
        return enclosing_links(trace)

    links = Links(launch_links(trace), later)
    whole = link(trace)
    np.testing.assert_array_equal(links.launch_of, whole.launch_of)
    np.testing.assert_array_equal(links.gpu_ops_of_launch, whole.gpu_ops_of_launch)
    assert links.unlinked_gpu_ops == whole.unlinked_gpu_ops
    assert calls == []
    for name in ("op_of", "top_op_of", "frame_of"):
        np.testing.assert_array_equal(getattr(links, name), getattr(whole, name))
    np.testing.assert_array_equal(links.ops.parent, whole.ops.parent)
    np.testing.assert_array_equal(links.frames.rows, whole.frames.rows)
    assert calls == [1]


def test_no_python_frames_read_as_none_everywhere_without_memory():
    trace = load_trace(str(vendored_path(TRACES[0])))
    links = link(trace)
    assert links.enclosing.frame_of is None
    f = links.frame_of
    assert f.strides == (0,) and len(f) == len(trace.events) and (f == -1).all() and f.dtype == links.launch_of.dtype


def test_no_child_where_the_system_lacks_the_memory(monkeypatch, forks):
    path = str(vendored_path(TRACES[0]))
    n = len(load_trace(path).events)
    need = 2 * T.BESIDE_BYTES_PER_EVENT * n
    monkeypatch.setattr(T, "available_bytes", lambda: need - 1)
    T.analyse_trace(path, cache=False, jobs=2).document()
    assert forks == []
    monkeypatch.setattr(T, "available_bytes", lambda: need)
    T.analyse_trace(path, cache=False, jobs=2).document()
    assert len(forks) == 1
    monkeypatch.setattr(T, "available_bytes", lambda: None)  # not known: as with enough
    T.analyse_trace(path, cache=False, jobs=2).document()
    assert len(forks) == 2


def test_the_systems_available_memory_is_read():
    from hostgap.memory import available_bytes, meminfo

    got = available_bytes()
    if sys.platform.startswith("linux"):
        assert got is not None and 0 < got <= meminfo("MemTotal") < 1 << 50
    assert meminfo("NoSuchField") is None


def test_the_child_computes_the_overview_the_command_does_not(monkeypatch, forks):
    """With a child, the command's process never computes the overview (the child's is used); the
    steps alone fork the enclosures only, and the command then computes no overview either."""
    from hostgap.anatomy import overview as ov

    here: list[int] = []
    real = ov.overview
    monkeypatch.setattr(ov, "overview", lambda *a, **k: here.append(1) or real(*a, **k))
    path = str(vendored_path(TRACES[0]))
    T.analyse_trace(path, cache=False, jobs=2).document()
    assert len(forks) == 1 and here == []
    T.analyse_trace(path, cache=False, jobs=1).document()
    assert here == [1]  # one process: computed here


def test_the_links_are_kept_when_known_and_never_twice(forks, tmp_path, monkeypatch):
    path = str(vendored_path(TRACES[0]))
    monkeypatch.setenv("HOSTGAP_CACHE_MIN", "0")
    monkeypatch.setenv("HOSTGAP_CACHE_DIR", str(tmp_path / "cache"))
    puts: list[str] = []
    real = C.Entry.put_arrays
    monkeypatch.setattr(C.Entry, "put_arrays", lambda self, g, *a, **k: puts.append(g) or real(self, g, *a, **k))
    # one process, the links alone (what trim and the overview need): kept at once
    a = T.analyse_trace(path, jobs=1)
    a.links  # noqa: B018
    assert puts == ["links"] and C.entry_for(path).arrays("links") is not None
    # with a child, keeping them waits for the enclosures: not forced when the links are made
    monkeypatch.setenv("HOSTGAP_CACHE_DIR", str(tmp_path / "cache2"))
    puts.clear()
    b = T.analyse_trace(path, jobs=2)
    b._want_enclosing = True
    b.links  # noqa: B018
    assert len(forks) == 1 and not forks[0]._done and puts == []
    b.anatomy()
    assert forks[0]._done and puts == ["links"]
    # a second look writes no links again
    puts.clear()
    c = T.analyse_trace(path, jobs=2)
    c.document()
    c.anatomy()
    assert puts == [] and len(forks) == 1
