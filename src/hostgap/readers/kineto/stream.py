"""A Kineto JSON document's ``traceEvents`` decoded chunk by chunk.

The text arrives in pieces (:func:`hostgap.readers.text.text_pieces`: plain reads, or gzip
inflated as it is read) and is never held whole: :class:`EventStream` keeps a buffer of about
:data:`CHUNK` bytes, cuts it after the last complete event and yields the decoded events
before the cut, so the memory beyond the caller's columns is a few chunks.

A cut is exact, never guessed: a candidate cut is a ``},`` followed by ``{`` (where one event
ends and the next begins, in every writer's layout), and it is accepted only if
``[`` + text before it + ``]`` decodes as a JSON list. That holds only at the end of a complete
event of ``traceEvents`` itself: inside a string the string would be unterminated, inside a
nested value a container would be unclosed. The text before ``traceEvents`` and after it is
decoded as JSON too, so every byte of the document is checked, as a whole-document decode would.

Anything else (a document this shape does not fit, ``traceEvents`` given twice, text that does
not decode: lone surrogate escapes, raw control characters, bad nesting, an event larger than
:data:`MAX_PENDING`) raises :class:`NotStreamable` before a result is built: the caller then
loads the file whole, where such text is fenced or reported exactly as before.

With ``jobs`` > 1 and a ``speculate`` function (the compiled decoder, which releases the GIL),
chunks are decoded on ``jobs`` threads while the text is still being read: each chunk is cut at
its last candidate without a decode, speculated on a worker, and confirmed in document order on
the calling thread. The rule above still decides every cut: a chunk is accepted only when the
chunk before it was (so it starts where an event starts) and it decodes as a JSON list (so it
ends where one ends). A chunk that does not decode is joined with the text after it and decoded
again, the speculative result of that text discarded; the events yielded, their order and
every error are those of the one-thread stream.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator

import msgspec

from hostgap.readers.text import BOM, text_pieces

CHUNK = 2 << 20
"""Text gathered before each cut (bytes)."""
MAX_PREFIX = 64 << 20
"""Text before ``"traceEvents": [`` beyond which the document is loaded whole."""
MAX_PENDING = 8 * CHUNK
"""Text held without a valid cut (one huge event, or a long tail after the events) beyond
which the document is loaded whole."""
CUT_TRIES = 8
"""Candidate cuts tried (each one a decode of the buffer) before more text is read."""
TAIL_TRIES = 4096
"""``]`` tried as the end of ``traceEvents`` (each a decode of the last event only)."""
IN_FLIGHT = 2
"""Chunks cut ahead per worker thread (bounds the text and results held by the parallel path)."""
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)

_ABSENT = msgspec.Raw(b"")
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WS = b" \t\r\n"
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


class NotStreamable(Exception):
    """The document cannot be split here; load it whole (the reason is informational)."""


class _Top(msgspec.Struct):
    """The top level around ``traceEvents``: the metadata the loader reads."""

    traceEvents: msgspec.Raw = _ABSENT
    baseTimeNanoseconds: msgspec.Raw = _ABSENT
    deviceProperties: msgspec.Raw = _ABSENT
    distributedInfo: msgspec.Raw = _ABSENT


_META = ("baseTimeNanoseconds", "deviceProperties", "distributedInfo")
_TOP = msgspec.json.Decoder(_Top)


class EventStream:
    """Iterate to get the decoded events of ``traceEvents`` in lists, in document order;
    afterwards :attr:`meta` holds the top-level metadata values (raw text, ``b""`` when
    absent; a key given twice keeps its last value). ``decode`` turns the text of a JSON list
    of events into a list (``msgspec.Raw`` spans by default) and raises msgspec's errors when
    the text is not a JSON list: a decoded value may reference the text. Raises
    :class:`NotStreamable` (see the module docstring) and the HostgapErrors of
    :func:`text_pieces` (limits, corrupt gzip)."""

    def __init__(
        self,
        path: str,
        decode: Callable[..., list] = _RAWS.decode,
        *,
        speculate: Callable[[bytearray], object] | None = None,
        jobs: int = 1,
    ):
        self.path = path
        self.decode = decode
        self.speculate = speculate
        self.jobs = jobs if speculate is not None else 1
        self.meta: dict[str, msgspec.Raw] = {}
        self.bytes_read = [0]
        """Bytes of the file read so far (compressed bytes for gzip), in its only item."""
        self._pieces = text_pieces(path, self.bytes_read)
        self._eof = False

    def _read(self, buf: bytearray, want: int) -> bytearray:
        """A new buffer: ``buf`` plus pieces until it holds ``want`` bytes or the text ends.
        (Buffers are never reused or resized: decoded values may reference them.)"""
        parts: list[bytes | bytearray] = [buf]
        have = len(buf)
        while have < want:
            piece = next(self._pieces, None)
            if piece is None:
                self._eof = True
                break
            parts.append(piece)
            have += len(piece)
        return bytearray().join(parts)

    def __iter__(self) -> Iterator[list]:
        try:
            yield from self._events() if self.jobs < 2 else self._events_parallel()
        finally:
            self._pieces.close()  # the file, and the inflating thread when one runs

    def _events(self) -> Iterator[list]:
        buf = self._prefix()  # the buffer always starts with the "[" of an event list
        while True:
            buf = self._read(buf, CHUNK)
            while not self._eof:
                events, rest = self._cut(buf)
                if events is not None:
                    yield events
                    buf = rest
                    break
                if len(buf) > MAX_PENDING:
                    raise NotStreamable("no event boundary found in the text held")
                buf = self._read(buf, len(buf) + CHUNK)
            if self._eof:
                yield from self._tail(buf)
                return

    def _events_parallel(self) -> Iterator[list]:
        """:meth:`_events` with chunks speculated on worker threads (see the module docstring):
        ``speculate(chunk)`` runs on a worker, ``decode(view, speculated)`` here, in order."""
        from concurrent.futures import Future, ThreadPoolExecutor

        speculate = self.speculate
        assert speculate is not None
        buf, lo, want = self._prefix(), 0, CHUNK
        window: deque[tuple[bytearray, Future]] = deque()
        pool = ThreadPoolExecutor(self.jobs, thread_name_prefix="hostgap-decode")
        try:
            while window or not self._eof:
                if window and (self._eof or len(window) >= self.jobs * IN_FLIGHT):
                    seg, fut = window.popleft()
                    events, seg = self._confirm(seg, fut.result(), window)
                    if events is not None:
                        yield events
                    else:  # back into the buffer: cuts after the failed one only
                        buf, lo, want = _rejoin(seg, buf), len(seg) - 2, CHUNK
                    continue
                buf = self._read(buf, want)
                if self._eof:
                    continue
                cut, buf, lo = self._split(buf, lo)
                if cut is not None:
                    window.append((cut, pool.submit(speculate, cut)))
                    want = CHUNK
                elif len(buf) > MAX_PENDING:
                    raise NotStreamable("no event boundary found in the text held")
                else:
                    want = len(buf) + CHUNK
        finally:
            for _, fut in window:
                fut.cancel()
            pool.shutdown(wait=True)
        yield from self._tail(buf)

    def _confirm(self, seg: bytearray, spec, window: deque) -> tuple[list | None, bytearray]:
        """(the events of ``seg``, seg); (None, the text held) when neither ``seg`` nor ``seg``
        joined with each next chunk of ``window`` decodes."""
        while True:
            try:
                return self.decode(memoryview(seg), spec), seg
            except _DECODE_ERRORS:
                pass
            if not window:
                return None, seg
            nxt, fut = window.popleft()
            fut.cancel()  # it may start inside an event: its result is not used
            seg = _rejoin(seg, nxt)
            if len(seg) > MAX_PENDING:
                raise NotStreamable("no event boundary found in the text held")
            spec = self.speculate(seg)  # type: ignore[misc]

    @staticmethod
    def _split(buf: bytearray, lo: int) -> tuple[bytearray | None, bytearray, int]:
        """(chunk, rest, 0): ``buf`` cut at its last candidate past ``lo`` (``[`` + events +
        ``]``, not decoded) and ``[`` + the text after it; (None, buf, lo) when there is none."""
        end = len(buf)
        while True:
            p = buf.rfind(b"},", lo + 1, end)
            if p < 0:
                return None, buf, lo
            end = p
            if buf[p + 2 : p + 2 + 256].lstrip(_WS)[:1] == b"{":
                break
        rest = bytearray(b"[") + buf[p + 2 :]
        del buf[p + 2 :]
        buf[p + 1] = 0x5D  # "]"
        return buf, rest, 0

    def _prefix(self) -> bytearray:
        """Read up to ``"traceEvents": [``, decode what precedes it; return ``[`` and the text
        after it."""
        head = self._read(bytearray(), CHUNK)
        if head[:3] == BOM:
            del head[:3]
        pos = 0
        while True:
            m = _KEY.search(head, max(0, pos - 64))
            if m:
                break
            if self._eof or len(head) > MAX_PREFIX:
                raise NotStreamable("no top-level traceEvents list near the start")
            pos = len(head)
            head = self._read(head, pos + CHUNK)
        try:
            top = _TOP.decode(bytes(head[: m.end()]) + b"]}")
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            raise NotStreamable("the text before traceEvents does not decode") from None
        if bytes(top.traceEvents) != b"[]":  # the key was the tail of another string
            raise NotStreamable("traceEvents found, but not as the top-level key")
        self.meta = {k: getattr(top, k) for k in _META}
        return head[m.end() - 1 :]

    def _cut(self, buf: bytearray) -> tuple[list | None, bytearray]:
        """The complete events at the front of ``buf`` and a new buffer, ``[`` and the text
        after them; (None, buf) when no candidate cut decodes. A candidate's comma is turned
        into the list's ``]`` for the decode (no copy), and back when the cut fails."""
        end = len(buf)
        for _ in range(CUT_TRIES):
            p = buf.rfind(b"},", 0, end)
            if p < 0:
                break
            end = p
            if buf[p + 2 : p + 2 + 256].lstrip(_WS)[:1] != b"{":
                continue
            buf[p + 1] = 0x5D  # "]"
            try:
                events = self.decode(memoryview(buf)[: p + 2])
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                buf[p + 1] = 0x2C  # ","
                continue
            return events, bytearray(b"[") + buf[p + 2 :]
        return None, buf

    def _tail(self, buf: bytearray) -> Iterator[list]:
        """The last events, the end of ``traceEvents`` and the rest of the document. The
        events but the last are cut as usual; then the first ``]`` that ends a decodable event
        list is the end of ``traceEvents`` (an earlier one lies inside an event)."""
        events, rest = self._cut(buf)
        if events is not None:
            yield events
            buf = rest
        start = 0
        for _ in range(TAIL_TRIES):
            q = buf.find(b"]", start)
            if q < 0:
                break
            start = q + 1
            # the list's end follows an event's "}" or its own "[": a "]" after anything else
            # (a nested list, a string) cannot end it, and trying each one decodes the tail
            # once per bracket
            if buf[max(0, q - 4096) : q].rstrip(_WS)[-1:] not in (b"}", b"["):
                continue
            try:
                events = self.decode(memoryview(buf)[: q + 1])
            except msgspec.DecodeError as e:
                if "truncated" in str(e):  # the "]" lies inside an event: read on
                    continue
                # malformed before this "]": the same bytes lie before every later one
                raise NotStreamable("the events before the end of traceEvents do not decode") from None
            except (msgspec.ValidationError, RecursionError):
                raise NotStreamable("the events before the end of traceEvents do not decode") from None
            try:
                after = _TOP.decode(b'{"":0' + bytes(buf[q + 1 :]))
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                raise NotStreamable("the text after traceEvents does not decode") from None
            if len(after.traceEvents):
                raise NotStreamable("traceEvents given twice")
            self.meta.update({k: v for k in _META if len(v := getattr(after, k))})
            yield events
            return
        raise NotStreamable("the end of traceEvents not found")


def _rejoin(seg: bytearray, rest: bytearray) -> bytearray:
    """The text of a chunk and of what followed its cut, as it was before the cut: ``seg`` ends
    in the ``]`` that replaced the comma, ``rest`` starts with the ``[`` added after it."""
    return seg[:-1] + b"," + rest[1:]
