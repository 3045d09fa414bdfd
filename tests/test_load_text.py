"""Bounded reading of a trace's bytes (hostgap.readers.text): the size limit's syntax, gzip
inflation within limits, BOM removal, and the fences that keep one bad value from failing
the whole file."""

from __future__ import annotations

import gzip

import pytest

from hostgap.errors import HostgapError
from hostgap.readers import text
from hostgap.readers.text import fence_control_char, fence_lone_surrogates, gunzip, max_trace_bytes, read_trace_text


@pytest.mark.parametrize(
    "value, expected",
    [
        ("", text.MAX_INFLATED_BYTES),
        ("5", 5),
        ("10k", 10 * 1024),
        ("3M", 3 * 2**20),
        ("64G", 64 * 2**30),
        ("2T", 2 * 2**40),
        ("12MiB", 12 * 2**20),
        ("7 kb", 7 * 1024),
        (" 8G ", 8 * 2**30),
    ],
)
def test_max_trace_bytes_syntax(monkeypatch, value, expected):
    monkeypatch.setenv(text.ENV_LIMIT, value)
    assert max_trace_bytes() == expected


@pytest.mark.parametrize("value", ["1.5G", "G", "10X", "-3"])
def test_max_trace_bytes_rejects_other_text(monkeypatch, value):
    monkeypatch.setenv(text.ENV_LIMIT, value)
    with pytest.raises(HostgapError, match="is not a byte count"):
        max_trace_bytes()


def test_gunzip_members_padding_and_limits():
    body = b'{"traceEvents": []}' * 50  # 950 bytes
    two = gzip.compress(body[:400]) + gzip.compress(body[400:]) + b"\x00" * 8
    assert bytes(gunzip(two, "x.gz", limit=10_000)) == body
    with pytest.raises(HostgapError, match="exceeds"):
        gunzip(gzip.compress(body), "x.gz", limit=900)
    assert bytes(gunzip(gzip.compress(body), "x.gz", limit=950)) == body  # exactly at the limit
    with pytest.raises(EOFError):
        gunzip(gzip.compress(body)[:-12], "x.gz", limit=10_000)
    zeros = bytes(300 * 1000)
    bomb = gzip.compress(zeros)
    assert len(zeros) > text.MAX_INFLATE_RATIO * len(bomb)
    with pytest.raises(HostgapError, match="gzip bomb"):
        gunzip(bomb, "b.gz", limit=10**9)


def test_read_trace_text_drops_the_bom_and_refuses_empty_or_big(tmp_path, monkeypatch):
    body = b'{"traceEvents": []}'
    p = tmp_path / "a.json"
    p.write_bytes(text.BOM + body)
    assert bytes(read_trace_text(str(p))) == body
    g = tmp_path / "a.json.gz"
    g.write_bytes(gzip.compress(text.BOM + body))
    assert bytes(read_trace_text(str(g))) == body
    e = tmp_path / "e.json"
    e.write_bytes(b"")
    with pytest.raises(HostgapError, match="empty file"):
        read_trace_text(str(e))
    eg = tmp_path / "e.json.gz"
    eg.write_bytes(gzip.compress(b""))
    with pytest.raises(HostgapError, match="empty file inside gzip"):
        read_trace_text(str(eg))
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(body)[:12])
    with pytest.raises(HostgapError, match="truncated or corrupt gzip"):
        read_trace_text(str(bad))
    with pytest.raises(HostgapError, match="cannot read"):
        read_trace_text(str(tmp_path))  # a directory
    monkeypatch.setenv(text.ENV_LIMIT, str(len(body) - 1))
    with pytest.raises(HostgapError, match="exceeds"):
        read_trace_text(str(tmp_path / "a.json"))
    monkeypatch.setenv(text.ENV_LIMIT, str(len(body) + 3))  # the BOM counts toward the file size
    assert bytes(read_trace_text(str(p))) == body


def test_fence_lone_surrogates_same_length():
    assert fence_lone_surrogates(b'{"a": "plain"}') is None
    assert fence_lone_surrogates(b'{"a": "\\ud83d\\ude00"}') is None  # a valid pair stays
    out = fence_lone_surrogates(b'{"a": "x\\ud800y", "b": "\\udc00"}')
    assert out == bytearray(b'{"a": "x' + b"\xff" * 6 + b'y", "b": "' + b"\xff" * 6 + b'"}')
    assert fence_lone_surrogates(b'{"a": "\\\\ud800"}') is None  # an escaped backslash: literal text


def test_fence_control_char_only_at_the_named_offset():
    t = bytearray(b'{"a": "x\ty"}')
    assert not fence_control_char(t, "no offset here")
    assert not fence_control_char(t, "invalid character (byte 2)")  # not a control byte there
    assert not fence_control_char(t, "invalid character (byte 99)")  # beyond the text
    assert fence_control_char(t, "invalid character (byte 8)")
    assert t == bytearray(b'{"a": "x\xffy"}')
