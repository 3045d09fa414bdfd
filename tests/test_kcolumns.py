"""The compiled Kineto decoder (hostgap.readers._kcolumns + kineto_columns) against the msgspec path:
every column, name, skip count and metadata value equal on every corpus trace and fixture, and
the C number parser against the exact decimal one on generated number texts."""

from __future__ import annotations

import decimal
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from conftest import TRACES, cpu_op, kernel, launch, process_name, write_kineto
from hostgap.events import COLUMNS
from hostgap.readers import kineto
from hostgap.readers.decimal_ns import OK, ns_from_text
from hostgap.readers.kineto import compiled as kineto_columns
from hostgap.readers.kineto import stream as kineto_stream

ROOT = Path(__file__).resolve().parents[1]
ext = kineto_columns._NATIVE
needs_ext = pytest.mark.skipif(ext is None, reason="the compiled decoder is not built here")

CORPUS = sorted(TRACES.glob("*/*.json.gz")) if TRACES.is_dir() else []
FIXTURES = sorted((ROOT / "tests" / "data").rglob("*.json.gz"))


def load_both(path: str, monkeypatch) -> tuple:
    """(compiled, pure) traces of one file, both streamed."""
    monkeypatch.delenv("HOSTGAP_PURE_PYTHON", raising=False)
    fast = kineto.load_kineto(path)
    monkeypatch.setenv("HOSTGAP_PURE_PYTHON", "1")
    slow = kineto.load_kineto(path)
    monkeypatch.delenv("HOSTGAP_PURE_PYTHON")
    return fast, slow


def assert_same(a, b) -> None:
    assert a.names == b.names
    for k in COLUMNS:
        x, y = getattr(a.events, k), getattr(b.events, k)
        assert x.dtype == y.dtype and np.array_equal(x, y), k
    assert a.meta == b.meta


@needs_ext
@pytest.mark.parametrize("path", [str(p) for p in CORPUS + FIXTURES], ids=lambda p: Path(p).name)
def test_every_column_equals_the_msgspec_loaders(path, monkeypatch):
    fast, slow = load_both(path, monkeypatch)
    assert len(fast.events) > 0
    assert_same(fast, slow)


def test_corpus_and_fixtures_are_found():
    assert FIXTURES
    if TRACES.is_dir():
        assert len(CORPUS) >= 10


@needs_ext
def test_small_chunks_and_odd_events_give_the_same_columns(tmp_path, monkeypatch):
    """Many chunks (batches cut across them), string pids (mapped per batch), string args,
    flagged numbers, unknown categories and chunks the extension refuses, all at once."""
    monkeypatch.setattr(kineto_stream, "CHUNK", 1500)
    monkeypatch.setattr(kineto, "BATCH", 7)
    events = []
    for i in range(300):
        t = 1661203462598772 + i * 10
        events += [
            cpu_op(f"op{i % 13}", ts=t, dur=3, ext=i),
            launch(ts=t + 1, dur=1, corr=i, ext=i),
            kernel(f"k{i % 5}", ts=t + 2, dur=2.5, corr=i, ext=i),
        ]
        if i % 17 == 0:
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "odd",
                    "pid": "Spans",
                    "tid": f"stream {i % 3}",
                    "ts": f"{t}.1234",
                    "dur": "1e0",
                    "args": {"correlation": "12", "bytes": "x"},
                }
            )
        if i % 23 == 0:
            events.append({"ph": "X", "cat": "kernel", "name": "float pid", "pid": 1.5, "tid": 1, "ts": t, "dur": 1})
        if i % 29 == 0:
            events.append(
                {"ph": "X", "cat": "mystery", "name": None, "pid": "7", "tid": None, "ts": 1.5e3, "dur": 0.0005}
            )
        if i % 31 == 0:
            events.append(process_name(i, f"proc{i}"))
            events.append({"ph": "i", "cat": "cpu_instant_event", "name": "inst", "pid": 1, "tid": 1, "ts": t})
    path = write_kineto(tmp_path / "t.json", events)
    fast, slow = load_both(str(path), monkeypatch)
    assert_same(fast, slow)
    assert any(k.startswith("unknown category") for k in fast.meta.skipped)


# ------------------------------------------------------------------ number texts

# the float64 edges (2^42 us: ns lost by a double; 2^43, 2^53) as us and as ns, the range limit 2^62 ns
EDGES_US = [
    2**42,
    2**43,
    2**53,
    2**42 // 1000,
    2**43 // 1000,
    2**53 // 1000,
    2**62 // 1000,
    2**62 // 1000 + 1,
    2**63 // 1000,
    10**15,
    10**16 - 1,
    10**16,
]


def number_texts():
    ints = st.one_of(
        st.integers(0, 10**20),
        st.sampled_from(EDGES_US),
        st.sampled_from(EDGES_US).flatmap(lambda e: st.integers(e - 3, e + 3)),
    )
    frac = st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=6).map(lambda f: "." + f))
    exp = st.one_of(st.just(""), st.integers(-20, 20).map(lambda e: f"e{e}"))
    return st.builds(lambda s, i, f, e: f"{s}{i}{f}{e}", st.sampled_from(["", "-"]), ints, frac, exp)


@needs_ext
@settings(**examples(2000), deadline=None)
@given(number_texts())
def test_c_number_parser_agrees_with_the_exact_path(text):
    b = text.encode()
    v = ext.number_ns(b)
    ns, st_ = ns_from_text([b])
    d = decimal.Decimal(text) * 1000
    if v is not None:  # the fast path: only exact conversions, below 2^62
        assert st_[0] == OK and int(ns[0]) == v == int(d) and abs(v) < 2**62
    digits = text.lstrip("-").split("e")[0]
    simple = "e" not in text and len(digits.split(".")[0]) <= 16 and len(digits.partition(".")[2]) <= 3
    if simple and abs(d) < 2**62:
        assert v is not None  # and the fast path takes every such text
    # through a whole chunk: fast or flagged, the column equals the decimal path
    chunk = json.dumps([{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "args": {}}])
    t = ext.decode(chunk.replace('"args"', f'"ts": {text}, "dur": {text}, "args"').encode())
    raw = kineto_columns.raw_from_native(t, kineto_columns.Strings())
    assert int(raw["ts"][0]) == int(ns[0]) and int(raw["ts_st"][0]) == int(st_[0])


@needs_ext
@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-0",
        "0.001",
        "-0.0005",
        "0.0005",
        "0.0015",
        "1.0005",
        str(2**42),
        str(2**43),
        str(2**53),
        f"{2**53}.999",
        f"{2**53 // 1000}.{2**53 % 1000:03d}",
        str(2**62 // 1000),
        f"{2**62 // 1000}.903",
        f"{2**62 // 1000}.904",
        str(2**62),
        "9999999999999999.999",
        "1661203462598772.123",
        "1e3",
        "1E-3",
        "12345678901234567890",
        "-9223372036854775.808",
    ],
)
def test_number_edges(text):
    b = text.encode()
    ns, st_ = ns_from_text([b])
    v = ext.number_ns(b)
    assert v is None or (st_[0] == OK and v == int(ns[0]))
    if text in (
        "0",
        "-0",
        "0.001",
        str(2**42),
        str(2**43),
        f"{2**53 // 1000}.{2**53 % 1000:03d}",
        "1661203462598772.123",
        f"{2**62 // 1000}.903",
    ):
        assert v is not None
    if text in (f"{2**62 // 1000}.904", str(2**62), str(2**53), "1e3", "0.0005", "12345678901234567890"):
        assert v is None


@needs_ext
def test_decoder_refuses_what_it_does_not_take():
    """Anything but plain events: None, so the msgspec path decides."""
    for text in [
        b"{}",
        b"[1]",
        b'[{"ph": 1}]',
        b'[{"pid": 1.0}]',
        b'[{"pid": 9223372036854775808}]',
        b'[{"ph": "X", "ph": "M"}]',
        b'[{"args": []}]',
        b'[{"args": {"name": 3}}]',
        b'[{"args": {"bytes": true}}]',
        b'[{"x": "\\ud800"}]',
        b"[" + b"[" * 40 + b"]" * 40 + b"]",
        b'[{"name": "\xff"}]',
        b"[{}",
        b"[{}] x",
        b"",
    ]:
        assert ext.decode(text) is None, text
    assert ext.decode(b"[]")[0] == 0
    assert ext.decode(b'[{"x": [[[[1]]]], "y": 1e999}]')[0] == 1


def test_pure_python_note_once_on_stderr(tmp_path):
    path = write_kineto(tmp_path / "t.json", [kernel("k", ts=1, dur=1), kernel("k", ts=3, dur=1)])
    code = f"from hostgap.readers import load_trace\nfor _ in range(3): load_trace({str(path)!r})\n"
    env = {**os.environ, "HOSTGAP_PURE_PYTHON": "1"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert r.stderr.count("hostgap: note:") == 1 and "HOSTGAP_PURE_PYTHON" in r.stderr
    env.pop("HOSTGAP_PURE_PYTHON")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert r.stderr == ("" if ext is not None else r.stderr)


def test_without_the_extension_the_pure_path_runs_with_one_note(tmp_path):
    """As on a machine with no C compiler: the module cannot be imported."""
    path = write_kineto(tmp_path / "t.json", [kernel("k", ts=1, dur=1), launch(ts=0, dur=1, corr=1)])
    code = (
        "import sys; sys.modules['hostgap.readers._kcolumns'] = None\n"
        "from hostgap.readers import load_trace\nfrom hostgap.readers.kineto import compiled as kineto_columns\n"
        "assert kineto_columns._NATIVE is None\n"
        f"for _ in range(2): print(len(load_trace({str(path)!r}).events))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "HOSTGAP_PURE_PYTHON"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["2", "2"]
    assert r.stderr.count("hostgap: note:") == 1 and "not built" in r.stderr


@pytest.mark.slow
def test_install_without_a_compiler_succeeds(tmp_path):
    """setup.py's build_ext: a compiler that fails leaves a note and no extension, not an error."""
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    src = tmp_path / "src" / "hostgap" / "readers"
    src.mkdir(parents=True)
    (src / "_kcolumns.c").write_bytes((ROOT / "src/hostgap/readers/_kcolumns.c").read_bytes())
    shutil.copytree(ROOT / "src/hostgap/readers/_yyjson", src / "_yyjson")  # every source there: the compiler fails
    env = {**os.environ, "CC": "false", "LDSHARED": "false"}
    r = subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-lib",
            str(tmp_path / "lib"),
            "--build-temp",
            str(tmp_path / "tmp"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "the compiled Kineto decoder was not built" in r.stdout
    assert not list((tmp_path / "lib").rglob("*.so"))
