"""JSON number text in µs → int64 ns, exactly: no binary float on the way.

Kineto writes ``ts`` and ``dur`` in µs, either as integers (epoch µs such as
``1661203462598772``) or with up to three decimals (``5234.567``). A float64 cannot hold an
epoch timestamp in ns (it is a 256 ns grid there), and the double a 19-digit decimal parses to
is already off, so the loader keeps the values' JSON text (``msgspec.Raw``) and converts it
here, column-wise:

- a batch of plain numbers (``-?digits(.digits)?`` that fit int64 without the point): the
  points are dropped from the batch's joined text at once and the digits read as one integer
  each (``int`` of bytes, in C), then scaled column-wise by the number of decimals (found
  from the points' positions): exact up to three decimals, half to even beyond. Integers
  and Kineto's ``%.3f`` (the digits are then the ns) skip the scaling;
- any other batch (an exponent, a longer number, a null, a string): value by value, numbers
  through :class:`decimal.Decimal` (exact), same rounding;
- absent or ``null``: missing; strings, booleans, objects, arrays: malformed.

:func:`ns_from_text` returns the ns column and a status column (:data:`OK`, :data:`MISSING`,
:data:`MALFORMED`, :data:`OUT_OF_RANGE`: ``|ns| >= MAX_ABS_NS``).
"""

from __future__ import annotations

import decimal

import numpy as np

OK, MISSING, MALFORMED, OUT_OF_RANGE = 0, 1, 2, 3

MAX_ABS_NS = 2**62
"""Timestamps and durations beyond this (in ns) are out of range: start + dur then always fits
in int64, and no real clock is within orders of magnitude of it."""

MAX_TEXT = 4096
"""Longer number texts are not parsed (no timestamp needs them): out of range."""

_POW10 = 10 ** np.arange(19, dtype=np.int64)


def ns_from_text(texts: list) -> tuple[np.ndarray, np.ndarray]:
    """(ns int64, status int8) for JSON value texts in µs (bytes-like; ``b""`` = absent)."""
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int8)
    # JSON value text never holds a NUL byte (raw control characters are invalid JSON)
    joined = b"\x00".join(texts)
    dots = np.flatnonzero(np.frombuffer(joined, dtype=np.uint8) == ord("."))
    try:
        # the digits without the point, as one integer each (int() of bytes runs in C)
        digits = np.fromiter(
            map(int, (joined.replace(b".", b"") if len(dots) else joined).split(b"\x00")), dtype=np.int64, count=n
        )
    except (ValueError, OverflowError):  # null, absent, strings, exponents, > 18 digits
        return _each(joined.split(b"\x00"))
    if not len(dots):  # integer µs: ns = µs * 1000 below the range limit
        out = (digits <= -_INT_LIMIT) | (digits >= _INT_LIMIT)
        return np.where(out, 0, digits * 1000), out.astype(np.int8) * np.int8(OUT_OF_RANGE)
    # each value is a JSON number here, so it holds one point at most: its decimals are the
    # bytes between the point and the value's end
    ends = np.append(np.flatnonzero(np.frombuffer(joined, dtype=np.uint8) == 0), len(joined))
    at = np.searchsorted(ends, dots)
    if len(dots) == n and np.array_equal(ends - dots, np.full(n, 4)):  # all "%.3f": digits are ns
        out = (digits <= -MAX_ABS_NS) | (digits >= MAX_ABS_NS)
        return np.where(out, 0, digits), out.astype(np.int8) * np.int8(OUT_OF_RANGE)
    decimals = np.zeros(n, dtype=np.int64)
    decimals[at] = ends[at] - dots - 1
    return _scale(digits, decimals)


def _scale(digits: np.ndarray, decimals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ns from ``digits / 10**decimals`` µs: exact up to three decimals, half to even beyond."""
    mag = np.abs(digits)  # -2**63 stays negative here: out of range below
    up = np.clip(3 - decimals, 0, 18)  # scale up: integers and 1-2 decimals
    down = np.clip(decimals - 3, 0, 18)  # scale down: sub-ns decimals
    limit = -(-MAX_ABS_NS // _POW10[up])  # the least magnitude whose ns reach MAX_ABS_NS
    out = (mag < 0) | (mag >= np.where(down > 0, _INT64_MAX, limit))
    div = _POW10[down]
    q, r = np.divmod(mag, div)
    half = div // 2
    q += (down > 0) & ((r > half) | ((r == half) & ((q & 1) == 1)))
    mag = np.where(out, 0, np.where(down > 0, q, mag * _POW10[up]))
    out |= mag >= MAX_ABS_NS
    ns = np.where(digits < 0, -mag, mag)
    return np.where(out, 0, ns), np.where(out, OUT_OF_RANGE, OK).astype(np.int8)


_INT64_MAX = np.int64(2**63 - 1)
_INT_LIMIT = -(-MAX_ABS_NS // 1000)
"""Integer µs at or beyond this (in magnitude) are out of range (:func:`_scale` with no decimals)."""


def _each(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Value by value, for a batch holding anything but plain numbers of <= 18 digits."""
    pairs = [_one(t) for t in parts]
    return (
        np.fromiter((v for v, _ in pairs), dtype=np.int64, count=len(pairs)),
        np.fromiter((s for _, s in pairs), dtype=np.int8, count=len(pairs)),
    )


def _one(t: bytes) -> tuple[int, int]:
    """One JSON value text: absent/null → MISSING; non-numbers → MALFORMED; numbers through
    Decimal (exact), rounded half to even to whole ns."""
    if not t or t == b"null":
        return 0, MISSING
    if not (t[:1] == b"-" or t[:1].isdigit()):
        return 0, MALFORMED
    if len(t) > MAX_TEXT:
        return 0, OUT_OF_RANGE
    try:
        d = decimal.Decimal(t.decode("ascii"))
    except (decimal.InvalidOperation, UnicodeDecodeError):
        return 0, MALFORMED
    if d.is_zero() or d.adjusted() < -12:  # below 1e-12 µs: rounds to 0 ns
        return 0, OK
    if d.adjusted() > 16:
        return 0, OUT_OF_RANGE
    with decimal.localcontext() as ctx:
        ctx.prec = 64
        q = int((d * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))
    return (q, OK) if abs(q) < MAX_ABS_NS else (0, OUT_OF_RANGE)
