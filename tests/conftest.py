"""Shared fixtures: the real-trace corpus and a builder for hand-written Kineto micro traces.

Micro traces are plain Python dicts written to a temporary file::

    def test_something(kineto_trace):
        path = kineto_trace([kernel("gemm", ts=10, dur=5, corr=1),
                             launch(ts=3, dur=2, corr=1)],
                            distributedInfo={"rank": 0, "world_size": 2})
        trace = load_trace(path)

The event helpers (:func:`kernel`, :func:`launch`, :func:`runtime`, :func:`memcpy`,
:func:`memset`, :func:`cpu_op`, :func:`python_frame`, :func:`annotation`,
:func:`gpu_annotation`, :func:`flow`) return ordinary Kineto event dicts; tests import them with
``from conftest import kernel, launch``. Times are in µs, as in Kineto files.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from vllm_server import vllm_server  # noqa: F401  (the session-wide real vLLM server)


def pytest_configure(config):
    # A shell starts a background job (`cmd &`) with SIGINT ignored, and an ignored signal stays
    # ignored in every process it starts: the Ctrl-C tests (which send SIGINT to this process or
    # to a hostgap they start) would then test nothing. Python's own handler here makes SIGINT a
    # KeyboardInterrupt again, and a started process gets the default action back at exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # the analysis cache (docs/input.md) of this test process: a folder of its own, never the user's
    if "HOSTGAP_CACHE_DIR" not in os.environ:
        os.environ["HOSTGAP_CACHE_DIR"] = _OWN_CACHE[0] = tempfile.mkdtemp(prefix="hostgap-test-cache-")


_OWN_CACHE: list[str | None] = [None]


def pytest_unconfigure(config):
    if _OWN_CACHE[0]:
        shutil.rmtree(_OWN_CACHE[0], ignore_errors=True)
        os.environ.pop("HOSTGAP_CACHE_DIR", None)


TRACES = Path(os.environ.get("HOSTGAP_TRACES") or Path(__file__).resolve().parents[1].parent / "shared" / "traces")
"""The shared real-trace corpus, read in place: ``../shared/traces``, or ``$HOSTGAP_TRACES`` (point it
at a folder that does not exist to run the suite as a clone without the corpus does)."""

VENDORED = Path(__file__).resolve().parent / "data" / "corpus"
"""Trimmed copies of a few corpus traces under the same relative names, with their licenses
(``tests/data/corpus/README.md``): read where the corpus is absent."""


def corpus_path(relative: str, *, vendored: bool = False) -> Path:
    """Path of a corpus file; skips the calling test with a clear reason when it is absent.

    ``vendored=True``: without the corpus, the trimmed copy in ``tests/data/corpus`` instead (for
    tests whose assertions hold on the copy too)."""
    p = TRACES / relative
    if not p.exists() and vendored and (VENDORED / relative).exists():
        return VENDORED / relative
    if not p.exists():
        pytest.skip(f"shared trace corpus not available ({p} missing); tests that need it are skipped")
    return p


def vendored_path(relative: str) -> Path:
    """A trimmed copy in ``tests/data/corpus`` (always there: part of the repository)."""
    p = VENDORED / relative
    assert p.exists(), f"{p} missing (tests/data/corpus/README.md lists the vendored traces)"
    return p


@pytest.fixture
def one_thread():
    """A test process running no other thread, as forking needs (``hostgap.parallel.beside``):
    one left by an earlier test (tqdm's monitor, a generation loop's) is waited for briefly, then
    named in the skip; with ``HOSTGAP_TEST_FORK=1`` (scripts/test.sh's fresh-process pass) it fails."""
    import threading
    import time

    deadline = time.monotonic() + 5
    while threading.active_count() > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        why = f"other threads run in this test process: {others}"
        if os.environ.get("HOSTGAP_TEST_FORK") == "1":
            pytest.fail(why)
        pytest.skip(f"{why}; scripts/test.sh runs this file again in a fresh process")


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The corpus folder ``../shared/traces``; skips when absent."""
    if not TRACES.is_dir():
        pytest.skip(f"shared trace corpus not available ({TRACES} missing); tests that need it are skipped")
    return TRACES


@pytest.fixture(scope="session")
def traces_or_vendored_dir() -> Path:
    """The corpus folder, or without it ``tests/data/corpus`` (same layout, trimmed copies)."""
    return TRACES if TRACES.is_dir() else VENDORED


HOST_PID = 100
HOST_TID = 1


@pytest.fixture
def quiet_machine(monkeypatch, tmp_path_factory):
    """The machine's noise readings (:func:`hostgap.stats.noise.snapshot`) taken from a quiet
    stand-in ``/proc`` instead of the real one: tests that measure a stand-in engine and expect a
    valid result must not turn invalid because the shared test machine's hypervisor stole CPU
    time (steal share) while they ran. Only the default root is replaced; a test that passes its
    own fixture root still reads that."""
    from hostgap.stats import noise

    root = tmp_path_factory.mktemp("quiet-proc")
    (root / "proc").mkdir()
    ticks = itertools.count(1)
    real = noise.snapshot

    def quiet(root_arg: str = "/", clock=None) -> dict:
        if root_arg != "/":
            return real(root_arg, clock)
        idle = 1000 * next(ticks)  # time passes, all of it idle: no steal, no pressure
        (root / "proc/stat").write_text(f"cpu  100 0 50 {idle} 0 0 0 0 0 0\n")
        return real(str(root), clock)

    monkeypatch.setattr(noise, "snapshot", quiet)
    return root


# -- micro traces ----------------------------------------------------------------------


def write_kineto(path: Path, events: list, *, gz: bool = False, **top_level) -> Path:
    """Write ``{"traceEvents": events, **top_level}`` as JSON (gzip when ``gz``)."""
    doc = {**top_level, "traceEvents": events}
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def kineto_trace(tmp_path):
    """Builder: ``kineto_trace(events, gz=False, **top_level) -> path`` of a new trace file
    (``top_level`` keys such as ``baseTimeNanoseconds``, ``deviceProperties``,
    ``distributedInfo`` go beside ``traceEvents``)."""
    counter = itertools.count()

    def build(events: list, gz: bool = False, **top_level) -> str:
        name = f"micro{next(counter)}.json" + (".gz" if gz else "")
        return str(write_kineto(tmp_path / name, events, gz=gz, **top_level))

    return build


def _args(**kw) -> dict:
    return {k: v for k, v in kw.items() if v is not None}


def kernel(name="kernel", ts=0.0, dur=1.0, *, corr=None, device=0, stream=7, ext=None, cat="kernel", **args) -> dict:
    """A GPU kernel on ``device``/``stream`` (Kineto puts it on pid=device, tid=stream)."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": _args(device=device, stream=stream, correlation=corr, **{"External id": ext}, **args),
    }


def memcpy(
    name="Memcpy HtoD (Pageable -> Device)",
    ts=0.0,
    dur=1.0,
    *,
    nbytes=0,
    corr=None,
    device=0,
    stream=7,
    cat="gpu_memcpy",
) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": _args(device=device, stream=stream, correlation=corr, bytes=nbytes),
    }


def memset(
    name="Memset (Device)", ts=0.0, dur=1.0, *, nbytes=0, corr=None, device=0, stream=7, cat="gpu_memset"
) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": _args(device=device, stream=stream, correlation=corr, bytes=nbytes),
    }


def runtime(name, ts=0.0, dur=1.0, *, corr=None, ext=None, pid=HOST_PID, tid=HOST_TID, cat="cuda_runtime") -> dict:
    """A host runtime/driver API call (``cudaLaunchKernel``, ``hipGraphLaunch``, ``cudaMemcpyAsync`` ...)."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": _args(correlation=corr, **{"External id": ext}),
    }


def launch(ts=0.0, dur=1.0, *, corr=None, name="cudaLaunchKernel", **kw) -> dict:
    return runtime(name, ts, dur, corr=corr, **kw)


def cpu_op(name, ts=0.0, dur=1.0, *, ext=None, pid=HOST_PID, tid=HOST_TID, cat="cpu_op") -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": _args(**{"External id": ext}),
    }


def python_frame(name, ts=0.0, dur=1.0, *, pid=HOST_PID, tid=HOST_TID) -> dict:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def annotation(name, ts=0.0, dur=1.0, *, pid=HOST_PID, tid=HOST_TID) -> dict:
    """A host-side range (record_function / ``ProfilerStep#N``)."""
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def gpu_annotation(name, ts=0.0, dur=1.0, *, device=0, stream=7) -> dict:
    """The GPU-side copy of a range (Kineto ``gpu_user_annotation``)."""
    return {
        "ph": "X",
        "cat": "gpu_user_annotation",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": stream},
    }


def flow(ts, corr, phase="s", *, pid=HOST_PID, tid=HOST_TID, cat="ac2g") -> dict:
    """A flow event (``s`` start at the launch, ``f`` finish at the GPU op)."""
    ev = {"ph": phase, "id": corr, "cat": cat, "name": cat, "pid": pid, "tid": tid, "ts": ts}
    if phase == "f":
        ev["bp"] = "e"
    return ev


def process_name(pid, name) -> dict:
    return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}
