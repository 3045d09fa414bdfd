"""hostgap.events.distinct: np.unique's sorted distinct values, by a sort for 1-D integer arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hostgap.events import distinct

INT_DTYPES = st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64, ">i8"])


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(INT_DTYPES, st.integers(0, 300)))
def test_the_same_values_and_dtype_as_np_unique(a):
    got, want = distinct(a), np.unique(a)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_hand_worked():
    assert distinct(np.array([5, -1, 5, 3, -1, 7], dtype=np.int64)).tolist() == [-1, 3, 5, 7]
    assert distinct(np.array([2, 2, 2], dtype=np.int32)).tolist() == [2]
    assert distinct(np.array([9], dtype=np.int64)).tolist() == [9]
    assert distinct(np.zeros(0, dtype=np.int64)).dtype == np.int64
    assert distinct([3, 1, 3]).tolist() == [1, 3]  # a list, as np.unique takes it


def test_other_arrays_are_np_unique():
    f = np.array([1.0, np.nan, 1.0, np.nan, -0.0, 0.0])
    assert np.array_equal(distinct(f), np.unique(f), equal_nan=True) and len(distinct(f)) == 3  # one NaN
    m = np.array([[3, 1], [1, 2]])
    assert distinct(m).tolist() == [1, 2, 3]  # flattened, as np.unique does
    b = np.array([True, False, True])
    assert distinct(b).tolist() == [False, True]


def test_per_name_values_by_table_lookup_equal_the_unique_path():
    from hostgap.readers.kineto.schema import _per_name

    names = ("a", "bb", "ccc", "", "eeeee")
    codes = np.array([4, 1, 1, 0, 4, 2], dtype=np.int32)
    got = _per_name(len, names, codes)
    assert got.dtype == np.int8 and got.tolist() == [5, 2, 2, 1, 5, 3]
    seen = []
    _per_name(lambda n: seen.append(n) or 0, names, codes)
    assert sorted(seen) == ["a", "bb", "ccc", "eeeee"]  # once per name a row uses; "" (no row) never
    assert _per_name(len, names, np.zeros(0, dtype=np.int32)).dtype == np.int8
    rng = np.random.default_rng(3)
    many = tuple(str(i) * (i % 5) for i in range(300))
    c = rng.integers(0, 300, 10_000).astype(np.int32)
    used, inverse = np.unique(c, return_inverse=True)
    want = np.array([len(many[i]) for i in used], dtype=np.int8)[inverse]
    assert np.array_equal(_per_name(len, many, c), want)
