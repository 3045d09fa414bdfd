"""Bounded reading of a trace's bytes (readers/text.py): the refusal message's numbers, pieces of
plain and gzip files, inflation that ends inside a full output piece, and a gzip file inflated
into one buffer sized from its trailer (mutation audit, bench/mutation.sh)."""

from __future__ import annotations

import gzip
import random
import tracemalloc

from hostgap.readers import text


def test_too_big_message_states_both_sizes_in_gib():
    assert text._too_big(3 * 2**30, 2**30) == (
        "trace text exceeds the 1 GiB limit (3 GiB so far); use hostgap --max-trace-bytes 64G "
        f"(or {text.ENV_LIMIT}) to load a genuinely larger trace"
    )
    assert "the 0.5 GiB limit (0.75 GiB so far)" in text._too_big(3 * 2**28, 2**29)


def _body(n: int) -> bytes:
    rng = random.Random(7)
    rows = (
        f'{{"ph": "X", "name": "k{rng.randrange(50)}", "ts": {i * 13}, "dur": {rng.randrange(9)}}},' for i in range(n)
    )
    return ("".join(rows)).encode()


def test_text_pieces_of_plain_and_gzip_files_are_the_file(tmp_path):
    body = _body(60_000)  # ~3 MB: several pieces either way
    plain, gz = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(body)
    gz.write_bytes(gzip.compress(body))
    assert b"".join(text.text_pieces(str(plain))) == body
    pieces = list(text.text_pieces(str(gz)))
    assert b"".join(pieces) == body and max(map(len, pieces)) <= text.OUT_PIECE


def test_inflation_that_ends_with_a_full_output_piece_is_complete():
    # 3 MiB of zeros compress to ~3 KB: fed as one piece, the input is consumed while inflated
    # output is still held in the decompressor; the last pieces must still come out
    zeros = bytes(3 * 2**20 + 12345)
    data = gzip.compress(zeros)
    out = b"".join(text.inflate([data], compressed_size=len(zeros), limit=2 * len(zeros)))
    assert len(out) == len(zeros) and out == zeros


def test_gunzip_fills_one_buffer_sized_from_the_trailer():
    body = _body(150_000)  # ~7.5 MB
    data = gzip.compress(body)
    tracemalloc.start()
    try:
        out = text.gunzip(data, "x.gz", limit=10 * len(body))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert bytes(out) == body
    # the text once plus one output piece in flight; growing the buffer piecewise copies it
    assert peak < len(body) + 3 * text.OUT_PIECE
