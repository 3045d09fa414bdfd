"""The gzip inflater (hostgap.readers.inflater): ISA-L where installed, the stdlib's zlib as the
fallback; both give the same text, the same loads and the same one-line error for a truncated or
corrupt file, and the fallback says so once."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib

import pytest
from click.testing import CliRunner

from conftest import kernel
from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.readers import inflater, load_trace, text

BACKENDS = ["isal", "zlib"]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    """Each inflater in turn: ISA-L (skipped where the package is missing), then the stdlib."""
    if request.param == "isal":
        pytest.importorskip("isal")
        monkeypatch.delenv(inflater.STDLIB_ENV, raising=False)
    else:
        monkeypatch.setenv(inflater.STDLIB_ENV, "1")
    assert inflater.name() == request.param
    return request.param


def trace_text(n: int = 400) -> bytes:
    return json.dumps({"traceEvents": [kernel(f"k{i}", float(10 * i), 5.0) for i in range(n)]}).encode()


def inflated(data: bytes, piece: int) -> bytes:
    pieces = (data[i : i + piece] for i in range(0, len(data), piece))
    return b"".join(text.inflate(pieces, len(data)))


def test_backend_is_chosen_by_the_environment(monkeypatch, capsys):
    monkeypatch.setenv(inflater.STDLIB_ENV, "1")
    monkeypatch.setattr(inflater, "_noted", set())
    lib, errors = inflater.backend()
    assert lib is zlib and errors == (zlib.error,)
    inflater.backend()  # a second gzip file: no second note
    err = capsys.readouterr().err
    assert err.count("hostgap: note:") == 1 and inflater.STDLIB_ENV in err and "stdlib zlib" in err
    assert inflater.backend(note=False)[0] is zlib
    monkeypatch.setenv(inflater.STDLIB_ENV, "0")  # "0" is not set
    if inflater.name() == "isal":
        lib, errors = inflater.backend()
        assert lib.__name__ == "isal.isal_zlib" and lib.error in errors and zlib.error in errors
        assert capsys.readouterr().err == ""


def test_isal_missing_falls_back_with_one_note(monkeypatch, capsys):
    monkeypatch.delenv(inflater.STDLIB_ENV, raising=False)
    monkeypatch.setattr(inflater, "_noted", set())
    monkeypatch.setitem(sys.modules, "isal", None)  # import isal now raises ImportError
    assert inflater.name() == "zlib"
    body = trace_text()
    assert inflated(gzip.compress(body), 1000) == body
    assert inflated(gzip.compress(body), 1000) == body
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "isal package (ISA-L) is not installed" in err


@pytest.mark.parametrize("piece", [1, 7, 1 << 16])
def test_every_member_and_padding_inflated_alike(backend, piece):
    body = trace_text()
    a, b = body[: len(body) // 3], body[len(body) // 3 :]
    # two members, zero padding between and after (as tape and some writers leave)
    data = gzip.compress(a, 1) + b"\x00" * 3 + gzip.compress(b, 9) + b"\x00" * 5
    assert inflated(data, piece) == body
    assert bytes(text.gunzip(data)) == body


@pytest.mark.parametrize("piece", [1, 2, 3, 1 << 16])
def test_what_follows_a_member_must_be_gzip(backend, piece):
    body = trace_text(20)
    for tail in (zlib.compress(b"hello"), b"xy", b"x"):  # another format, garbage, one stray byte
        with pytest.raises((EOFError, *inflater.backend(note=False)[1])):
            inflated(gzip.compress(body) + tail, piece)


def corrupt_forms(body: bytes) -> dict[str, bytes]:
    data = gzip.compress(body)
    crc, size, mid = bytearray(data), bytearray(data), bytearray(data)
    crc[-6] ^= 0xFF
    size[-2] ^= 0xFF
    mid[len(data) // 2] ^= 0x55
    return {
        "truncated": data[: len(data) // 2],
        "no trailer": data[:-3],
        "zeroed tail": data[:-40] + b"\x00" * 40,
        "bad crc": bytes(crc),
        "bad size": bytes(size),
        "flipped middle": bytes(mid),
        "header only": data[:12],
    }


def test_truncated_or_corrupt_gzip_is_one_error_on_every_path(backend, tmp_path, monkeypatch):
    from hostgap.readers import kineto

    for name, data in corrupt_forms(trace_text()).items():
        p = tmp_path / f"{name.replace(' ', '_')}.json.gz"
        p.write_bytes(data)
        for streaming in (True, False):
            monkeypatch.setattr(kineto, "STREAMING", streaming)
            with pytest.raises(HostgapError, match="truncated or corrupt gzip") as e:
                load_trace(str(p))
            assert str(p) in str(e.value) and "\n" not in str(e.value), name
        with pytest.raises(HostgapError, match="truncated or corrupt gzip"):
            text.read_trace_text(str(p))


def test_corrupt_gzip_on_the_command_line_is_one_line_exit_2(backend, tmp_path):
    p = tmp_path / "bad.json.gz"
    p.write_bytes(corrupt_forms(trace_text())["bad crc"])
    r = CliRunner().invoke(cli, ["analyze", str(p), "--json", "--no-cache"])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("hostgap: error: ") and "truncated or corrupt gzip" in lines[-1]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_both_inflaters_load_the_same_trace(tmp_path, monkeypatch):
    pytest.importorskip("isal")
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(trace_text(3000)))
    out = {}
    for forced in ("0", "1"):
        env = {"HOSTGAP_NO_CACHE": "1", inflater.STDLIB_ENV: forced}
        r = subprocess.run(
            [sys.executable, "-m", "hostgap", "analyze", str(p), "--json", "--quiet"],
            capture_output=True,
            env={**__import__("os").environ, **env},
            check=True,
        )
        out[forced] = r.stdout
    assert out["0"] == out["1"] and b'"events": 3000' in out["0"]
