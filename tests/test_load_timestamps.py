"""Kineto ts/dur → int64 ns exactly from their decimal text (no binary float on the way).

Expected values come from :class:`fractions.Fraction` of the same text (exact rational
arithmetic, rounded half to even by ``round``), an independent computation.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from hostgap.readers import load_trace
from hostgap.readers.decimal_ns import MALFORMED, MAX_ABS_NS, MISSING, OK, OUT_OF_RANGE, ns_from_text


def reference(text: str) -> int:
    return round(Fraction(text) * 1000)


def write_raw(tmp_path, name: str, events: list[str]) -> str:
    """A trace whose events are written as literal JSON text (json.dumps would pass the
    numbers through a float)."""
    p = tmp_path / name
    p.write_text('{"traceEvents": [' + ",".join(events) + "]}")
    return str(p)


def kernel_text(name: str, ts: str, dur: str, stream: int = 7) -> str:
    return (
        f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {stream}, '
        f'"ts": {ts}, "dur": {dur}, "args": {{"device": 0, "stream": {stream}}}}}'
    )


def test_epoch_us_integers_are_exact(tmp_path):
    # float64(1661203462598772) * 1000 lands on a 256 ns grid: 1661203462598772000 is exact here
    t = load_trace(
        write_raw(
            tmp_path,
            "epoch.json",
            [
                kernel_text("a", "1661203462598772", "5"),
                kernel_text("b", "1661203462598777", "1"),
            ],
        )
    )
    assert t.events.start_ns.tolist() == [1661203462598772000, 1661203462598777000]
    assert t.events.dur_ns.tolist() == [5000, 1000]
    # a ends exactly where b starts: no phantom overlap
    assert int(t.events.end_ns[0]) == int(t.events.start_ns[1])


def test_epoch_us_with_fractions_are_exact(tmp_path):
    t = load_trace(
        write_raw(
            tmp_path,
            "frac.json",
            [
                kernel_text("a", "1661203462598772.123", "0.877"),
                kernel_text("b", "1661203462598773.001", "2.5"),
                kernel_text("c", "5234.567", "0.001"),
            ],
        )
    )
    got = dict(zip(t.names_of(np.arange(3)), zip(t.events.start_ns.tolist(), t.events.dur_ns.tolist())))
    assert got == {"a": (1661203462598772123, 877), "b": (1661203462598773001, 2500), "c": (5234567, 1)}
    # the float64 of the text is off: the exact value is not what a float would give
    assert round(float("1661203462598772.123") * 1000) != 1661203462598772123


def test_sub_ns_decimals_round_half_to_even(tmp_path):
    texts = ["1.0005", "1.0015", "1.00051", "1.0004999", "-2.0005", "-2.0015", "0.0005"]
    ns, status = ns_from_text([s.encode() for s in texts])
    assert ns.tolist() == [1000, 1002, 1001, 1000, -2000, -2002, 0]
    assert ns.tolist() == [reference(s) for s in texts]
    assert (status == OK).all()


def test_exponents_nulls_and_non_numbers(tmp_path):
    texts = [
        b"1.5e3",
        b"1E-3",
        b"2e+2",
        b"null",
        b"",
        b'"12"',
        b"true",
        b"{}",
        b"1e999",
        b"-1e999",
        b"123456789012345678901234567890",
        b"4611686018427387.904",
        b"4611686018427387.903",
    ]
    ns, status = ns_from_text(texts)
    assert ns[:3].tolist() == [1500000, 1, 200000]
    assert status.tolist() == [
        OK,
        OK,
        OK,
        MISSING,
        MISSING,
        MALFORMED,
        MALFORMED,
        MALFORMED,
        OUT_OF_RANGE,
        OUT_OF_RANGE,
        OUT_OF_RANGE,
        OUT_OF_RANGE,
        OK,
    ]
    assert int(ns[-1]) == MAX_ABS_NS - 1


def test_int64_extremes_do_not_wrap():
    ns, status = ns_from_text([b"-9223372036854775808", b"9223372036854775807", b"-4611686018427387.903"])
    assert status.tolist() == [OUT_OF_RANGE, OUT_OF_RANGE, OK]
    assert int(ns[2]) == -(MAX_ABS_NS - 1)


decimal_text = st.builds(
    lambda sign, whole, frac: f"{sign}{whole}" + (f".{frac}" if frac else ""),
    st.sampled_from(["", "-"]),
    st.integers(0, 4_611_686_018_427),
    st.text("0123456789", max_size=7),
)


@settings(**examples(300), deadline=None)
@given(st.lists(decimal_text, min_size=1, max_size=40), st.booleans())
def test_matches_exact_rational_arithmetic(texts, with_null):
    raw = [t.encode() for t in texts] + ([b"null"] if with_null else [])  # a null: the per-value path
    ns, status = ns_from_text(raw)
    for t, v, s in zip(texts, ns.tolist(), status.tolist()):
        want = reference(t)
        if abs(want) < MAX_ABS_NS:
            assert (v, s) == (want, OK), t
        else:
            assert s == OUT_OF_RANGE, t


def test_batches_of_one_shape_take_their_shortcuts_exactly():
    # integers only (scaled by 1000) and %.3f only (the digits are the ns): range ends included
    ns, status = ns_from_text([b"4611686018427387", b"-4611686018427387", b"4611686018427388", b"0", b"-0"])
    assert ns.tolist() == [4611686018427387000, -4611686018427387000, 0, 0, 0]  # 2**62 = 4611686018427387904
    assert status.tolist() == [OK, OK, OUT_OF_RANGE, OK, OK]
    # one and two decimals are scaled up: the same end, and the per-value path agrees
    for texts in (
        [b"4611686018427387.9", b"4611686018427387.90", b"4611686018427388.0", b"4611686018427387.91"],
        [b"4611686018427387.9", b"4611686018427387.90", b"4611686018427388.0", b"4611686018427387.91", b"null"],
    ):
        ns, status = ns_from_text(texts)
        assert ns[:4].tolist() == [4611686018427387900, 4611686018427387900, 0, 0]
        assert status[:4].tolist() == [OK, OK, OUT_OF_RANGE, OUT_OF_RANGE]
    ns, status = ns_from_text(
        [
            b"4611686018427387.903",
            b"-4611686018427387.903",
            b"4611686018427387.904",
            b"-4611686018427387.904",
            b"-0.000",
            b"0.001",
            b"1661203462598772.123",
        ]
    )
    assert ns.tolist() == [MAX_ABS_NS - 1, -(MAX_ABS_NS - 1), 0, 0, 0, 1, 1661203462598772123]
    assert status.tolist() == [OK, OK, OUT_OF_RANGE, OUT_OF_RANGE, OK, OK, OK]


@settings(**examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["", "-"]), st.integers(0, 9_999_999_999_999_999), st.integers(0, 999)),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
)
def test_one_shape_batches_match_exact_arithmetic(values, three_decimals):
    texts = [f"{s}{w}.{f:03d}" if three_decimals else f"{s}{w}" for s, w, f in values]
    ns, status = ns_from_text([t.encode() for t in texts])
    for t, v, s in zip(texts, ns.tolist(), status.tolist()):
        want = reference(t)
        assert (v, s) == ((want, OK) if abs(want) < MAX_ABS_NS else (0, OUT_OF_RANGE)), t
