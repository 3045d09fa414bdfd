"""Numbers written as JSON strings in Kineto's integer fields (pid, tid, the integer args): one
rule for both decoders (docs/input.md, "Numbers written as strings"): a string is a number
exactly when it is an optional ``-`` and ASCII digits within int64
(:func:`hostgap.readers.kineto.schema.int_text`, ``int64_text`` in ``_kcolumns.c``). Before the
rule, three mutants of corpus traces decoded differently: ``"pid": " 12 "`` was pid 12 to the
pure-Python decoder and a named pid to the compiled one, and ``"١٢"`` in ``args.stream`` or
``args.bytes`` was 12 to one and a malformed arg to the other."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from hostgap.events import COLUMNS, NONE
from hostgap.readers import load_trace
from hostgap.readers.kineto.compiled import native
from hostgap.readers.kineto.schema import int_or_none, int_text

COMPILED = native() is not None
MALFORMED = "malformed args (event kept)"


def both(path: str, monkeypatch) -> tuple:
    """(compiled, pure-Python) loads; the pure-Python one twice when the extension is absent."""
    monkeypatch.delenv("HOSTGAP_PURE_PYTHON", raising=False)
    fast = load_trace(path, jobs=1)
    monkeypatch.setenv("HOSTGAP_PURE_PYTHON", "1")
    slow = load_trace(path, jobs=1)
    monkeypatch.delenv("HOSTGAP_PURE_PYTHON")
    return fast, slow


def assert_same(a, b) -> None:
    assert a.names == b.names and a.meta == b.meta
    for c in COLUMNS:
        assert np.array_equal(getattr(a.events, c), getattr(b.events, c)), c


def write(tmp_path, events: list, name: str = "t.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}, ensure_ascii=False), encoding="utf-8")
    return str(p)


def op(pid=100, **args) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 2.0, "pid": pid, "tid": 1, "args": args}


def copy(**args) -> dict:
    return {
        "ph": "X",
        "cat": "gpu_memcpy",
        "name": "Memcpy HtoD (Pinned -> Device)",
        "ts": 5.0,
        "dur": 1.0,
        "pid": 0,
        "tid": 7,
        "args": {"correlation": 9, "device": 0, **args},
    }


def test_the_three_known_disagreements_now_decode_alike(tmp_path, monkeypatch):
    events = [op(pid=" 12 "), copy(stream="\u0661\u0662"), copy(bytes="\u0661\u0662"), op(pid=12)]
    fast, slow = both(write(tmp_path, events), monkeypatch)
    assert_same(fast, slow)
    ev = fast.events
    order = np.argsort(ev.start_ns, kind="stable")
    pid, stream, nbytes = ev.pid[order], ev.stream[order], ev.bytes[order]
    assert pid[0] < -1 and pid[1] == 12  # " 12 " names a process; 12 is one
    assert stream.tolist()[2:] == [7, 7]  # "١٢" is no stream: the tid (7) is the stream
    assert nbytes.tolist()[2:] == [0, 0]  # nor a byte count
    assert fast.meta.skipped[MALFORMED] == 2


GRAMMAR = [
    ("12", 12),
    ("-12", -12),
    ("007", 7),
    ("-0", 0),
    ("0" * 100 + "1", 1),
    ("9223372036854775807", 2**63 - 1),
    ("-9223372036854775808", -(2**63)),
    ("9223372036854775808", None),
    ("-9223372036854775809", None),
    ("1" + "0" * 40, None),
    ("+5", None),
    (" 12", None),
    ("12 ", None),
    ("1 2", None),
    ("\t12", None),
    ("1_000", None),
    ("\u0661\u0662", None),  # Arabic-Indic digits
    ("\uff11\uff12", None),  # fullwidth digits
    ("\u00b2", None),  # superscript two: str.isdigit() says yes
    ("", None),
    ("-", None),
    ("--1", None),
    ("1e3", None),
    ("1.0", None),
    ("0x10", None),
    ("12\u0000", None),
]


@pytest.mark.parametrize(("text", "expected"), GRAMMAR)
def test_int_text_grammar(text, expected):
    got = int_text(text)
    assert got == expected and (got is None or type(got) is int)
    assert int_or_none(text) == expected


def test_every_grammar_case_decodes_alike_in_every_integer_field(tmp_path, monkeypatch):
    events = []
    for k, (text, _) in enumerate(GRAMMAR):
        events.append(dict(op(pid=text, correlation=text, device=text, stream=text), ts=float(k)))
        events.append(dict(op(**{"External id": text, "external id": text}), tid=text, ts=float(k) + 0.5))
        events.append(dict(copy(bytes=text, stream=text), ts=float(k) + 0.7))
    fast, slow = both(write(tmp_path, events), monkeypatch)
    assert_same(fast, slow)
    ev = fast.events
    order = np.argsort(ev.start_ns, kind="stable")
    for k, (_, expected) in enumerate(GRAMMAR):
        a, b, c = order[3 * k : 3 * k + 3]
        want = NONE if expected is None else expected
        assert ev.correlation[a] == want and ev.external_id[b] == want
        if expected is None:
            assert ev.pid[a] < -1 and ev.tid[b] < -1  # a named process / thread
            assert ev.bytes[c] == 0 and ev.stream[c] == 7
        else:
            assert ev.pid[a] == expected and ev.tid[b] == expected
            assert ev.bytes[c] == max(expected, 0) and ev.stream[c] == expected


def test_random_strings_decode_alike(tmp_path, monkeypatch):
    """Strings over digits, signs, spaces, ``_`` and other scripts' digits, in every integer
    field; one trace, both decoders, column by column."""
    rng = random.Random(43)
    alphabet = "0123456789" * 3 + "-+ _\t\u0661\u0663\uff10\u00b2e."
    events = []
    for k in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 2, 3, 5, 19, 20, 25])))
        field = rng.choice(["pid", "tid", "correlation", "stream", "bytes", "device", "External id"])
        if field in ("pid", "tid"):
            events.append(dict(op(), ts=float(k), **{field: text}))
        else:
            events.append(dict(copy(**{field: text}), ts=float(k)))
    fast, slow = both(write(tmp_path, events), monkeypatch)
    assert_same(fast, slow)
    assert len(fast.events) == 400


@pytest.mark.skipif(not COMPILED, reason="the compiled decoder is not built")
def test_the_compiled_decoder_converts_numeric_arg_strings_itself():
    from hostgap.readers import _kcolumns

    t = _kcolumns.decode(b'[{"ph": "X", "args": {"bytes": "-0042", "stream": " 7", "device": "\\u0661"}}]')
    assert t is not None
    table, args, args_k = t[1], t[16], t[17]
    a = np.frombuffer(args, dtype=np.int64).reshape(6, 1)[:, 0]
    k = np.frombuffer(args_k, dtype=np.int8).reshape(6, 1)[:, 0]
    # rows: correlation, External id, external id, device, stream, bytes
    assert k[5] == 0 and a[5] == -42  # an integer
    assert k[4] == 2 and table[a[4]] == " 7"  # left as a string: not a number
    assert k[3] == 2 and table[a[3]] == "\u0661"
