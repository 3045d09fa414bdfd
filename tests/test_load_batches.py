"""The compiled loader's batches: a batch cut across chunk boundaries (the rows a chunk leaves
over carried into the next) gives the columns of the pure-Python loader, whatever the chunk and
batch sizes, string pids (coded per batch) included."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import cpu_op, kernel, launch
from hostgap.events import COLUMNS
from hostgap.readers import kineto, text
from hostgap.readers.kineto import compiled as kineto_columns
from hostgap.readers.kineto import stream as kineto_stream

needs_ext = pytest.mark.skipif(kineto_columns._NATIVE is None, reason="compiled decoder not built")


def trace_file(tmp_path, n: int = 400) -> str:
    events = []
    for i in range(n):
        t = 1661203462598772 + i * 10
        events += [
            cpu_op(f"op{i % 13}", ts=t, dur=3, ext=i),
            launch(ts=t + 1, dur=1, corr=i, ext=i),
            kernel(f"k{i % 5}", ts=t + 2, dur=2.5, corr=i, ext=i),
        ]
        if i % 10 < 2:  # string pids, coded per batch in order of first appearance: "B" is -2 or -3
            pid = "A" if i % 10 == 0 else "B"  # as the batch holds "A" too or not
            events.append({"ph": "X", "cat": "kernel", "name": "s", "pid": pid, "tid": "t", "ts": t, "dur": 1})
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return str(p)


@needs_ext
@pytest.mark.parametrize("batch", [7, 25, 64, 5000])
@pytest.mark.parametrize("chunk", [700, 3000])
def test_batches_across_chunks_give_the_pure_python_columns(tmp_path, monkeypatch, batch, chunk):
    path = trace_file(tmp_path)
    monkeypatch.setattr(kineto_stream, "CHUNK", chunk)
    monkeypatch.setattr(text, "READ_PIECE", 256)  # else the small file is one piece, one chunk
    monkeypatch.setattr(kineto, "BATCH", batch)
    carried = []
    concat = kineto.concat

    def spy(parts):
        carried.append(len(parts))
        return concat(parts)

    monkeypatch.setattr(kineto, "concat", spy)
    monkeypatch.delenv("HOSTGAP_PURE_PYTHON", raising=False)
    fast = kineto.load_kineto(path)
    two = kineto.load_kineto(path, jobs=2)
    assert len(carried) > 10  # the streamed compiled path ran, and carried rows into the next chunks
    monkeypatch.setenv("HOSTGAP_PURE_PYTHON", "1")
    slow = kineto.load_kineto(path)
    assert len(slow.events) == 400 * 3 + sum(1 for i in range(400) if i % 10 < 2)
    for t in (fast, two):
        assert t.names == slow.names and t.meta.processes == slow.meta.processes
        for k in COLUMNS:
            x, y = getattr(t.events, k), getattr(slow.events, k)
            assert x.dtype == y.dtype and np.array_equal(x, y), k
