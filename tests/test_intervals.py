"""Interval primitives against brute-force references: exact for any int64 values, whatever
the input's order (already sorted input takes the no-copy path, unsorted input the sorted one)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hostgap.anatomy.intervals import covered_each, grouped_merge, grouped_running_max, grouped_union, merge

I64 = np.iinfo(np.int64)
wide = st.integers(int(I64.min), int(I64.max))
narrow = st.integers(-50, 50)


def running_max_ref(values, group):
    out, best = [], None
    for i, (v, g) in enumerate(zip(values, group)):
        best = v if i == 0 or g != group[i - 1] else max(best, v)
        out.append(best)
    return out


def merge_ref(pairs):
    segs = []
    for s, e in sorted(pairs, key=lambda p: p[0]):
        if segs and s <= segs[-1][1]:
            segs[-1][1] = max(segs[-1][1], e)
        else:
            segs.append([s, e])
    return segs


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(wide, narrow), st.integers(0, 3)), min_size=1, max_size=30))
def test_grouped_running_max_matches_the_reference(rows):
    rows.sort(key=lambda r: r[1])  # rows pre-grouped, as the callers give them
    values = np.array([v for v, _ in rows], dtype=np.int64)
    group = np.array([g for _, g in rows], dtype=np.int64)
    got = grouped_running_max(values, group)
    assert got.dtype == np.int64
    assert got.tolist() == running_max_ref(values.tolist(), group.tolist())


def test_grouped_running_max_near_the_int64_limits():
    # a span of the whole type: lifting the values by it cannot fit, the ranks are lifted instead
    v = np.array([I64.max, I64.min, 0, -5, I64.min + 1], dtype=np.int64)
    g = np.array([0, 1, 1, 1, 2])
    assert grouped_running_max(v, g).tolist() == [I64.max, I64.min, 0, 0, I64.min + 1]
    # a span that fits once per group but not lifted over every group
    v = np.array([0, 2**62, 0, 2**62, 1], dtype=np.int64)
    g = np.array([0, 0, 1, 1, 2])
    assert grouped_running_max(v, g).tolist() == [0, 2**62, 0, 2**62, 1]
    # small values far from zero (epoch nanoseconds) take the lifted path
    v = np.array([1_700_000_000_000_000_005, 1_700_000_000_000_000_001, 1_700_000_000_000_000_003])
    assert grouped_running_max(v, np.array([0, 1, 1])).tolist() == [v[0], v[1], v[2]]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-2, 3), st.integers(-100, 100), st.integers(0, 40)), max_size=30),
    st.booleans(),
)
def test_grouped_merge_and_union_match_the_reference(rows, presorted):
    if presorted:  # the callers' common case: by group, then start
        rows.sort(key=lambda r: (r[0], r[1]))
    group = np.array([r[0] for r in rows], dtype=np.int64)
    start = np.array([r[1] for r in rows], dtype=np.int64)
    end = start + np.array([r[2] for r in rows], dtype=np.int64)
    g, s, e = grouped_merge(group, start, end)
    want = [
        (k, a, b)
        for k in sorted({r[0] for r in rows if r[0] >= 0})
        for a, b in merge_ref([(r[1], r[1] + r[2]) for r in rows if r[0] == k])
    ]
    assert list(zip(g.tolist(), s.tolist(), e.tolist())) == want
    union = grouped_union(group, start, end, 4)
    assert union.tolist() == [sum(b - a for k, a, b in want if k == i) for i in range(4)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-100, 100), st.integers(0, 40)), max_size=30), st.booleans())
def test_merge_matches_the_reference_sorted_or_not(rows, presorted):
    if presorted:
        rows.sort()
    start = np.array([r[0] for r in rows], dtype=np.int64)
    end = start + np.array([r[1] for r in rows], dtype=np.int64)
    s, e = merge(start, end)
    assert [[a, b] for a, b in zip(s.tolist(), e.tolist())] == merge_ref(list(zip(start.tolist(), end.tolist())))


def test_grouped_merge_keeps_its_inputs_and_reads_sorted_rows_in_place():
    group = np.array([0, 0, 1, 1])
    start = np.array([0, 5, 2, 3])
    end = np.array([6, 7, 4, 9])
    before = (group.copy(), start.copy(), end.copy())
    g, s, e = grouped_merge(group, start, end)
    assert (g.tolist(), s.tolist(), e.tolist()) == ([0, 1], [0, 2], [7, 9])
    assert all((a == b).all() for a, b in zip((group, start, end), before))
    # unsorted within a group: sorted first (a copy), the caller's arrays untouched
    g, s, e = grouped_merge(np.array([1, 0, 0]), np.array([0, 9, 1]), np.array([1, 10, 3]))
    assert (g.tolist(), s.tolist(), e.tolist()) == ([0, 0, 1], [1, 9, 0], [3, 10, 1])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-60, 60), st.integers(0, 30)), max_size=20),
    st.lists(st.tuples(st.integers(-60, 60), st.integers(0, 30)), max_size=20),
)
def test_covered_each_matches_the_reference(segments, intervals):
    segs = merge_ref([(a, a + d) for a, d in segments])  # disjoint and sorted, as the callers give them
    seg_s = np.array([a for a, _ in segs], dtype=np.int64)
    seg_e = np.array([b for _, b in segs], dtype=np.int64)
    start = np.array([a for a, _ in intervals], dtype=np.int64)
    end = start + np.array([d for _, d in intervals], dtype=np.int64)
    got = covered_each(start, end, seg_s, seg_e)
    want = [sum(max(0, min(e, b) - max(s, a)) for a, b in segs) for s, e in zip(start.tolist(), end.tolist())]
    assert got.dtype == np.int64 and got.tolist() == want


def test_covered_each_before_between_and_after_the_segments():
    seg_s, seg_e = np.array([10, 30]), np.array([20, 40])
    start = np.array([0, 0, 15, 25, 35, 45, 5])
    end = np.array([5, 50, 35, 28, 60, 50, 10])
    assert covered_each(start, end, seg_s, seg_e).tolist() == [0, 20, 10, 0, 5, 0, 0]
