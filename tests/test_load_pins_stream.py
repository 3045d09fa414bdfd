"""The search for ``"traceEvents": [`` at the head of a streamed Kineto document
(load/kineto_stream.py ``EventStream._prefix``): each round searches only the text that arrived
since the last one, plus 64 bytes of overlap for a key cut by a read, so a long head is scanned
once, not once per round (mutation audit: the window's ``max(0, pos - 64)`` turned ``min``
rescanned from the start every round and no test noticed; the result is the same)."""

from __future__ import annotations

import json

import hostgap.readers.kineto.stream as kstream
import hostgap.readers.text as text_mod
from conftest import kernel


class Recorder:
    """``_KEY`` with every search's start and the length of the text it was given."""

    def __init__(self, pattern):
        self.pattern = pattern
        self.calls: list[tuple[int, int]] = []

    def search(self, text, pos=0):
        self.calls.append((pos, len(text)))
        return self.pattern.search(text, pos)


def test_each_round_searches_the_new_text_and_64_bytes_before_it(tmp_path, monkeypatch):
    props = [{"id": i, "name": f"GPU-{i}", "totalGlobalMem": 2**36} for i in range(20)]
    ev = [kernel(f"k{i}", float(i)) for i in range(5)]
    text = json.dumps({"deviceProperties": props, "traceEvents": ev}).encode()
    key_at = text.index(b'"traceEvents"')
    assert key_at > 1000
    path = tmp_path / "long_head.json"
    path.write_bytes(text)
    # 7-byte reads, 50-byte rounds: the head arrives in ~25 rounds, the key cut across reads
    monkeypatch.setattr(text_mod, "READ_PIECE", 7)
    monkeypatch.setattr(kstream, "CHUNK", 50)
    rec = Recorder(kstream._KEY)
    monkeypatch.setattr(kstream, "_KEY", rec)
    stream = kstream.EventStream(str(path))
    assert sum(len(b) for b in stream) == 5
    assert b'"GPU-19"' in bytes(stream.meta["deviceProperties"])
    starts = [pos for pos, _ in rec.calls]
    seen = [n for _, n in rec.calls]
    assert starts[0] == 0 and len(starts) > 20
    # round k starts 64 bytes before the end of the text round k - 1 searched
    assert starts[1:] == [max(0, n - 64) for n in seen[:-1]]
    # the last round found the key, inside the text it was given
    assert starts[-1] <= key_at < seen[-1]
