"""Integers read from Kineto JSON (readers/kineto/schema.py ``int_or_none``): only a real int64 is
an integer; a bool, a float or a value past 2**63 is not (mutation audit: the guard's ``and``
turned ``or`` let a bool and a 2**70 id through, and no test noticed). A string is one only when
it is written as a JSON integer is (``int_text``; tests/test_load_number_strings.py): `` 42 ``
is not, since the two decoders once disagreed on such strings."""

from __future__ import annotations

import pytest

from conftest import kernel
from hostgap.readers import load_trace
from hostgap.readers.kineto.schema import int_or_none


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (-(2**63), -(2**63)),
        (2**63 - 1, 2**63 - 1),
        ("1700000000000000000", 1700000000000000000),
        (" 42 ", None),
        ("+42", None),
        ("0042", 42),
        ("-7", -7),
        (2**63, None),
        (-(2**63) - 1, None),
        (2**70, None),
        ("99999999999999999999", None),
        (True, None),
        (False, None),
        (1.0, None),
        (1.5, None),
        ("1e3", None),
        ("", None),
        (None, None),
        ([1], None),
    ],
)
def test_int_or_none_reads_only_int64_integers(value, expected):
    got = int_or_none(value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("base", [True, 2**70, 1.7e18, "soon"])
def test_a_base_time_that_is_not_an_int64_is_unknown(kineto_trace, base):
    t = load_trace(kineto_trace([kernel("k", ts=1.0)], baseTimeNanoseconds=base))
    assert t.meta.base_time_ns is None


def test_a_base_time_given_as_int_or_decimal_text_is_kept(kineto_trace):
    for base in (1700000000123456789, "1700000000123456789"):
        t = load_trace(kineto_trace([kernel("k", ts=1.0)], baseTimeNanoseconds=base))
        assert t.meta.base_time_ns == 1700000000123456789 and type(t.meta.base_time_ns) is int
