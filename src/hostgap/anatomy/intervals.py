"""Interval arithmetic on int64 nanosecond arrays (vectorised)."""

from __future__ import annotations

import numpy as np


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals as disjoint sorted segments (touching intervals are merged).

    >>> merge(np.array([0, 5, 2]), np.array([3, 6, 4]))
    (array([0, 5]), array([4, 6]))
    """
    if len(start) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    seg_start = s[first]
    last = np.concatenate((first[1:] - 1, [len(s) - 1]))
    seg_end = reach[last]
    return seg_start.astype(np.int64), seg_end.astype(np.int64)


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals."""
    s, e = merge(start, end)
    return int(np.sum(e - s))


def clip(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals clipped to [lo, hi]; those outside become empty (start == end)."""
    s = np.clip(start, lo, hi)
    e = np.clip(end, lo, hi)
    return s, np.maximum(e, s)


def overlap_ns(start: np.ndarray, end: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray) -> int:
    """Total length of [start, end) intervals that lies inside disjoint sorted segments."""
    if len(start) == 0 or len(seg_start) == 0:
        return 0
    cum = np.concatenate(([0], np.cumsum(seg_end - seg_start)))

    def covered_before(t):
        # length of the segments' union that lies before time t
        i = np.searchsorted(seg_start, t, side="right")  # segments starting <= t
        prev = np.maximum(i - 1, 0)
        partial = np.where(i > 0, np.clip(t - seg_start[prev], 0, seg_end[prev] - seg_start[prev]), 0)
        return cum[np.maximum(i - 1, 0)] * (i > 0) + partial

    return int(np.sum(covered_before(end) - covered_before(start)))


def gaps(seg_start: np.ndarray, seg_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The holes between disjoint sorted segments."""
    return seg_end[:-1], seg_start[1:]
