"""Timestamp text -> ns (readers/decimal_ns.py): zeros and tiny values by hand (mutation audit,
bench/mutation.sh)."""

from __future__ import annotations

from hostgap.readers.decimal_ns import OK, OUT_OF_RANGE, ns_from_text


def test_zero_with_a_large_exponent_is_zero_not_out_of_range():
    # 0 x 10**20 µs is 0 ns whatever the exponent; 1e17 µs (1e20 ns) is beyond 2**62 ns
    ns, status = ns_from_text([b"0e20", b"-0E+30", b"0.000e99", b"1e-13", b"-4e-7", b"1e17"])
    assert ns.tolist() == [0, 0, 0, 0, 0, 0]
    assert status.tolist() == [OK, OK, OK, OK, OK, OUT_OF_RANGE]
    # half a ns rounds to the even 0, 0.6 ns up to 1: 5e-4 µs and 6e-4 µs
    ns, status = ns_from_text([b"5e-4", b"6e-4", b"-6e-4"])
    assert ns.tolist() == [0, 1, -1] and (status == OK).all()
