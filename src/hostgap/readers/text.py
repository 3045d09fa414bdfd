"""A trace file's bytes, read with bounds: gzip inflation capped, BOM dropped, bad bytes fenced.

Limits (docs/input.md):

- the inflated text may be at most :data:`MAX_INFLATE_RATIO` times the compressed file (real
  Kineto traces inflate 10-30x; a gzip bomb ~1000x) and at most :func:`max_trace_bytes` in all
  (:data:`MAX_INFLATED_BYTES` unless ``HOSTGAP_MAX_TRACE_BYTES`` says otherwise, e.g. ``64G``);
  a plain JSON file is held to the absolute limit too. Beyond either the file is refused with
  one line before the memory is spent, so the loader's peak stays within about 3x the limit.
- :func:`fence_bad_text` turns what would make the whole JSON undecodable into invalid UTF-8
  inside the one value that holds it (lone ``\\uD800``-style escapes, raw control characters),
  so the event holding it is skipped and counted instead of the file rejected.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import zlib
from collections.abc import Generator, Iterable

from hostgap.errors import HostgapError
from hostgap.readers.inflater import backend

MAX_INFLATE_RATIO = 200
"""Inflated size / compressed size above which a gzip file is refused as a bomb."""

MAX_INFLATED_BYTES = 16 * 2**30
"""Default absolute limit on a trace's JSON text (16 GiB); ``HOSTGAP_MAX_TRACE_BYTES`` overrides."""

ENV_LIMIT = "HOSTGAP_MAX_TRACE_BYTES"
BOM = b"\xef\xbb\xbf"
_PREALLOC_RATIO = 128  # trust the gzip trailer's size only up to this ratio


def max_trace_bytes() -> int:
    """The absolute limit on a trace's text: ``$HOSTGAP_MAX_TRACE_BYTES`` (a byte count with an
    optional K/M/G/T suffix, powers of 1024) or :data:`MAX_INFLATED_BYTES`."""
    v = os.environ.get(ENV_LIMIT, "").strip()
    if not v:
        return MAX_INFLATED_BYTES
    m = re.fullmatch(r"(\d+)\s*([kKmMgGtT]?)i?[bB]?", v)
    if not m:
        raise HostgapError(ENV_LIMIT, f"{v!r} is not a byte count (e.g. 64G)")
    return int(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")


def read_trace_text(path: str) -> bytes | bytearray | memoryview:
    """The JSON text of a Kineto file (plain or gzip), within the limits, BOM removed."""
    limit = max_trace_bytes()
    try:
        size = os.path.getsize(path)
        if size > limit:
            raise HostgapError(path, _too_big(size, limit))
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise HostgapError(path, f"cannot read ({e.strerror})") from None
    if not raw:
        raise HostgapError(path, "empty file")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gunzip(raw, path, limit)
        except _gzip_errors(OSError) as e:
            raise HostgapError(path, f"truncated or corrupt gzip ({_short(e)})") from None
        if not raw:
            raise HostgapError(path, "empty file inside gzip")
    if raw[:3] == BOM:
        if isinstance(raw, bytearray):
            del raw[:3]  # in place: no second copy of the text
        else:
            raw = memoryview(raw)[3:]
    return raw


READ_PIECE = 1 << 20
"""Bytes read from a plain JSON file at a time by :func:`text_pieces`."""


def text_pieces(path: str, read: list[int] | None = None) -> Generator[bytes, None, None]:
    """The JSON text of a Kineto file (plain or gzip) in pieces, within the limits of
    :func:`read_trace_text` (a leading BOM is left to the caller). Only one piece is held
    here at a time; a gzip file is inflated as it is read. ``read[0]``, when given, counts the
    bytes read from the file (compressed bytes for gzip; they may be read ahead of the text
    yielded)."""
    limit = max_trace_bytes()
    try:
        size = os.path.getsize(path)
        if size > limit:
            raise HostgapError(path, _too_big(size, limit))
        f = open(path, "rb")
    except OSError as e:
        raise HostgapError(path, f"cannot read ({e.strerror})") from None
    with f:
        try:
            gz = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            reads = iter(lambda: f.read(IN_PIECE if gz else READ_PIECE), b"")
            if read is not None:
                reads = _counted(reads, read)
            if not gz:
                yield from reads
                return
            yield from ahead(inflate(reads, size, path, limit))
        except OSError as e:
            raise HostgapError(path, f"cannot read ({e.strerror})") from None
        except _gzip_errors() as e:
            raise HostgapError(path, f"truncated or corrupt gzip ({_short(e)})") from None


def _counted(pieces: Iterable[bytes], read: list[int]) -> Generator[bytes, None, None]:
    for piece in pieces:
        read[0] += len(piece)
        yield piece


AHEAD = 8
"""Inflated pieces prepared ahead of the consumer by :func:`ahead`'s worker thread."""


def ahead(items: Generator[bytes, None, None], depth: int | None = None) -> Generator[bytes, None, None]:
    """``items``, produced on a worker thread up to ``depth`` ahead. The inflater releases the GIL
    while it inflates, so on two or more cores the text is inflated while the caller decodes the
    previous piece. An exception in the worker is raised here, in order; closing this
    generator stops the worker (and closes ``items``) before it returns. ``depth`` defaults to
    :data:`AHEAD`."""
    q: queue.Queue = queue.Queue(depth or AHEAD)
    stop = threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def work() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((None, None))
        except BaseException as e:  # handed to the consumer, raised there
            put((None, e))
        finally:
            items.close()

    worker = threading.Thread(target=work, name="hostgap-inflate", daemon=True)
    worker.start()
    try:
        while True:
            item, error = q.get()
            if error is not None:
                raise error
            if item is None:
                return
            yield item
    finally:
        stop.set()
        worker.join()


def _gzip_errors(*more: type[Exception]) -> tuple[type[Exception], ...]:
    """What a truncated or corrupt gzip stream raises: ``EOFError``, the inflater's errors
    (zlib's, and ISA-L's where it inflates), and ``more``."""
    return (EOFError, *backend(note=False)[1], *more)


def _too_big(n: int, limit: int) -> str:
    return (
        f"trace text exceeds the {limit / 2**30:.3g} GiB limit ({n / 2**30:.3g} GiB so far); "
        f"use hostgap --max-trace-bytes 64G (or {ENV_LIMIT}) to load a genuinely larger trace"
    )


def gunzip(data: bytes, path: str = "gzip", limit: int | None = None) -> bytearray:
    """Every member of a gzip stream, inflated into one buffer sized from the gzip trailer
    (``bytes.join`` or ``gzip.decompress`` would hold the text twice at their peak), within the
    limits of :func:`inflate`."""
    limit = max_trace_bytes() if limit is None else limit
    # the trailer's size (mod 2**32) is trusted only up to a plausible ratio: a truncated or
    # corrupt file ends in arbitrary bytes and must not allocate gigabytes
    size_hint = int.from_bytes(data[-4:], "little") if len(data) >= 18 else 0
    out = bytearray(min(size_hint, _PREALLOC_RATIO * len(data), limit))
    pos = 0
    view = memoryview(data)
    slices = (view[i : i + IN_PIECE] for i in range(0, len(data), IN_PIECE))
    for chunk in inflate(slices, len(data), path, limit):
        end = pos + len(chunk)
        if end > len(out):  # the trailer holds the size mod 2**32, or more members follow
            out.extend(bytes(max(end - len(out), min(len(out) // 2, limit - len(out)))))
        out[pos:end] = chunk
        pos = end
    del out[pos:]
    return out


IN_PIECE = 1 << 16
"""Compressed bytes fed to the decompressor at a time."""
OUT_PIECE = 1 << 20
"""Largest piece of inflated text produced at a time."""


def inflate(
    pieces: Iterable, compressed_size: int, path: str = "gzip", limit: int | None = None
) -> Generator[bytes, None, None]:
    """The inflated text of every member of a gzip stream given as ``pieces`` of compressed
    bytes, in pieces of at most :data:`OUT_PIECE` bytes. Raises HostgapError once the text
    passes ``limit`` or :data:`MAX_INFLATE_RATIO` times ``compressed_size``, before the excess
    is held; ``EOFError`` or the inflater's error (:func:`hostgap.readers.inflater.backend`) for a
    truncated or corrupt stream."""
    limit = max_trace_bytes() if limit is None else limit
    ratio_cap = MAX_INFLATE_RATIO * compressed_size
    lib, _ = backend()
    d = lib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    total = 0
    held = b""  # after a member's end, one byte: too few to tell whether a gzip header follows
    for data in pieces:
        if held:
            data, held = held + bytes(data), b""
        more = len(data) > 0
        while more:
            if d.eof:  # another member follows, or zero padding
                data = bytes(data).lstrip(b"\x00")
                if len(data) < 2:
                    held = data
                    break
                if data[:2] != b"\x1f\x8b":
                    # zlib's gzip mode refuses any other header; ISA-L's would take a zlib stream
                    raise zlib.error("incorrect header check after a gzip member")
                d = lib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            chunk = d.decompress(data, OUT_PIECE)
            total += len(chunk)
            if total > ratio_cap:
                raise HostgapError(
                    path,
                    f"gzip inflates more than {MAX_INFLATE_RATIO}x "
                    f"({compressed_size} bytes compressed): refused as a likely gzip bomb",
                )
            if total > limit:
                raise HostgapError(path, _too_big(total, limit))
            if chunk:
                yield chunk
            if d.eof:
                data = d.unused_data
                more = len(data) > 0
            else:  # a full piece may leave output inside the decompressor: call again
                data = d.unconsumed_tail
                more = len(data) > 0 or len(chunk) == OUT_PIECE
    if not d.eof or held:
        raise EOFError("compressed stream ended before the end-of-stream marker")


# a \uD800-\uDBFF escape not followed by a low one, or a \uDC00-\uDFFF escape not preceded by
# a high one (a preceding backslash makes it literal text, not an escape)
_LONE_SURROGATE = re.compile(
    rb"(?<!\\)\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<![\\]u[dD][89abAB][0-9a-fA-F]{2})(?<!\\)\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
_CONTROL = re.compile(rb"[\x00-\x1f]")
_BAD_CHAR = re.compile(r"invalid character \(byte (\d+)\)")
MAX_FENCES = 64
"""Raw control characters fenced one decode attempt at a time before the file is refused."""


def fence_lone_surrogates(text) -> bytearray | None:
    """A copy of ``text`` with every lone surrogate escape replaced by 6 bytes of invalid
    UTF-8 (same length), or None when there is none."""
    if b"\\ud" not in text and b"\\uD" not in text:
        return None
    out, n = _LONE_SURROGATE.subn(b"\xff" * 6, bytes(text))
    return bytearray(out) if n else None


def fence_control_char(text: bytearray, message: str) -> bool:
    """When a decode error names a raw control character at a byte offset, overwrite it with an
    invalid UTF-8 byte in place (so only the value holding it fails later) and return True."""
    m = _BAD_CHAR.search(message)
    if not m:
        return False
    i = int(m.group(1))
    if i < len(text) and _CONTROL.match(text, i):
        text[i] = 0xFF
        return True
    return False


def _short(e: Exception) -> str:
    s = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return s[:160]
