"""How a cache entry's files are written: the bytes np.save would write, each file's size and
CRC-32 in the manifest taken while writing (not by reading the file back), and an entry written
so read back with every column equal."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
from click.testing import CliRunner

from hostgap.analysis import trace_cache as C
from hostgap.cli import cli
from test_examples import decode_trace

ARRAYS = [
    np.arange(10, dtype=np.int32),
    np.zeros(0, dtype=np.int64),
    np.arange(12.0).reshape(3, 4),
    np.arange(12).reshape(3, 4).T,  # Fortran order: np.save's own path
    np.arange(5, dtype=np.uint8)[::2],  # not contiguous: the same
    np.array(3.5),
    np.array(["a", "bcd"]),
    np.array([1, -1], dtype=">i8"),  # big-endian
]


@pytest.mark.parametrize("i", range(len(ARRAYS)))
def test_an_array_is_written_as_np_save_writes_it(tmp_path, i):
    a = ARRAYS[i]
    size, crc = C._write(tmp_path / "a.npy", a)
    np.save(tmp_path / "ref.npy", a, allow_pickle=False)
    data = (tmp_path / "a.npy").read_bytes()
    assert data == (tmp_path / "ref.npy").read_bytes()
    assert (size, crc) == (len(data), zlib.crc32(data))
    assert np.array_equal(np.load(tmp_path / "a.npy"), a)


def test_bytes_are_written_with_their_size_and_crc(tmp_path):
    size, crc = C._write(tmp_path / "m.json", b'{"x": 1}')
    assert (tmp_path / "m.json").read_bytes() == b'{"x": 1}' and (size, crc) == (8, zlib.crc32(b'{"x": 1}'))


def test_a_written_entry_matches_its_manifest_and_is_read_back(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("HOSTGAP_CACHE_DIR", str(root))
    monkeypatch.setenv("HOSTGAP_CACHE_MIN", "0")
    monkeypatch.delenv("HOSTGAP_NO_CACHE", raising=False)
    path = str(decode_trace(tmp_path / "t.json.gz", 40.0))
    first = CliRunner().invoke(cli, ["analyze", path, "--json"])
    (entry,) = list((root / f"v{C.FORMAT}").iterdir())
    manifests = list(entry.rglob(C.MANIFEST))
    assert {m.parent.name for m in manifests} >= {"events", "links"}
    for m in manifests:
        for name, (size, crc) in json.loads(m.read_text())["files"].items():
            data = (m.parent / name).read_bytes()
            assert (size, crc) == (len(data), zlib.crc32(data)), name
    again = CliRunner().invoke(cli, ["analyze", path, "--json"])
    assert again.stdout == first.stdout and "unusable" not in again.stderr
