"""The compiled decoder's reusable memory (``_kcolumns.scratch()``): a chunk decoded with a scratch
gives exactly what it gives without one, whatever was decoded with that scratch before (a larger
chunk, a smaller one, a refused one, one with more distinct strings), and a scratch in use by one
call is not shared with another."""

from __future__ import annotations

import json
import random
import threading

import pytest

from hostgap.readers.kineto.compiled import native

ext = native()
pytestmark = pytest.mark.skipif(ext is None, reason="the compiled decoder is not built")


def chunk(n: int, rng: random.Random, names: int = 5) -> bytes:
    events = []
    for i in range(n):
        ev = {
            "ph": rng.choice(["X", "X", "X", "i", "M"]),
            "cat": rng.choice(["kernel", "cpu_op", "cuda_runtime", "x"]),
            "name": f"n{rng.randrange(names)}" + "\u00e9" * rng.randrange(3),
            "ts": rng.choice([i, 1661203462598772.123, "5", 1e3, 12345678901234567]),
            "dur": rng.choice([1, 0.5, -1, None, 1.0001]),
            "pid": rng.choice([0, 100, "Spans", "12", None]),
            "tid": rng.choice([1, 7, "stream 7"]),
            "args": rng.choice([{}, {"correlation": i, "bytes": str(i)}, {"External id": i, "name": "p"}, None]),
        }
        events.append(ev)
    return json.dumps(events).encode()


def test_a_scratch_gives_what_plain_allocations_give_in_any_order():
    rng = random.Random(5)
    texts = [chunk(n, rng, names) for n, names in [(3000, 50), (10, 2), (0, 1), (500, 400), (1, 1), (4000, 3)]]
    texts.insert(3, b'[{"ph": "X"}, 5]')  # refused: an event that is not an object
    texts.insert(5, b"[" * 40 + b"]" * 40)  # refused: too deep
    scratch = ext.scratch()
    for _ in range(2):
        for t in texts:
            assert ext.decode(t, scratch) == ext.decode(t)
    assert ext.decode(texts[3], scratch) is None


def test_one_scratch_per_thread_on_many_threads():
    rng = random.Random(9)
    texts = [chunk(rng.choice([1, 50, 800]), rng, rng.choice([1, 30])) for _ in range(40)]
    expected = [ext.decode(t) for t in texts]
    got: dict[int, object] = {}
    local = threading.local()

    def work(k: int) -> None:
        for i in range(k, len(texts), 4):
            s = getattr(local, "s", None) or setattr(local, "s", ext.scratch()) or local.s
            got[i] = ext.decode(texts[i], s)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(texts))] == expected


def test_a_shared_scratch_is_safe_too():
    """Two threads given the same scratch: the second call finds it busy and allocates its own."""
    rng = random.Random(3)
    texts = [chunk(2000, rng, 20) for _ in range(6)]
    expected = [ext.decode(t) for t in texts]
    shared = ext.scratch()
    got: dict[int, object] = {}

    def work(k: int) -> None:
        for _ in range(3):
            for i in range(k, len(texts), 2):
                got[i] = ext.decode(texts[i], shared)
                assert got[i] == expected[i]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == len(texts)


def test_not_a_scratch_is_a_type_error():
    with pytest.raises((TypeError, ValueError)):
        ext.decode(b"[]", object())
