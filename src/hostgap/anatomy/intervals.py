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
    if np.all(start[1:] >= start[:-1]):  # trace rows are in start order: no sorted copies
        s, e = start, end
    else:
        order = np.argsort(start, kind="stable")
        s, e = start[order], end[order]
        del order
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
    """Total length of intervals that lies inside disjoint sorted segments."""
    return int(covered_each(start, end, seg_start, seg_end).sum())


def gaps(seg_start: np.ndarray, seg_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The holes between disjoint sorted segments."""
    return seg_end[:-1], seg_start[1:]


def grouped_running_max(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running max of ``values`` restarting at each change of ``group`` (rows pre-grouped).

    Exact for any int64 values (even near the type's limits): each run of equal groups is lifted
    above the previous one by the values' span and shifted back after one running max; when
    the lifted values would not fit in int64, the values' ranks are lifted instead."""
    n = len(values)
    if not n:
        return values.astype(np.int64)
    lane = np.empty(n, dtype=np.int64)  # 0, 1, 2 ... one per run of equal groups
    lane[0] = 0
    np.cumsum(group[1:] != group[:-1], out=lane[1:])
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if (int(lane[-1]) + 1) * span <= np.iinfo(np.int64).max:
        acc = np.subtract(values, lo, dtype=np.int64)  # in [0, span)
        lane *= span
        acc += lane
        np.maximum.accumulate(acc, out=acc)
        acc -= lane
        acc += lo
        return acc
    uniq, rank = np.unique(values, return_inverse=True)
    lane *= len(uniq)
    rank = rank.astype(np.int64) + lane
    np.maximum.accumulate(rank, out=rank)
    rank -= lane
    return uniq[rank].astype(np.int64)


def grouped_merge(group: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Per group (negative groups dropped), the union of its intervals as disjoint segments:
    (segment group, segment start, segment end), sorted by group then start."""
    g, s, e = group, start, end
    keep = g >= 0
    if not keep.all():
        g, s, e = g[keep], s[keep], e[keep]
    del keep
    if not len(g):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    if not _in_order(g, s):  # rows already by group then start need no sorted copies
        order = np.lexsort((s, g))
        g, s, e = g[order], s[order], e[order]
        del order
    reach = grouped_running_max(e, g)
    new_seg = np.concatenate(([True], g[1:] != g[:-1]))
    new_seg[1:] |= s[1:] > reach[:-1]
    first = np.flatnonzero(new_seg)
    last = np.concatenate((first[1:] - 1, [len(s) - 1]))
    return g[first], s[first], reach[last]


def _in_order(major: np.ndarray, minor: np.ndarray) -> bool:
    """Whether rows are sorted by ``major``, then by ``minor`` among equal ``major``."""
    up = major[1:] > major[:-1]
    up |= (major[1:] == major[:-1]) & (minor[1:] >= minor[:-1])
    return bool(up.all())


def grouped_union(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int) -> np.ndarray:
    """Union length of the intervals of each group 0..n_groups-1 (negative groups ignored)."""
    out = np.zeros(n_groups, dtype=np.int64)
    g, s, e = grouped_merge(group, start, end)
    np.add.at(out, g, e - s)
    return out


def covered_each(start: np.ndarray, end: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray) -> np.ndarray:
    """Per interval, the length of it that lies inside disjoint sorted segments."""
    if len(start) == 0:
        return np.zeros(0, dtype=np.int64)
    if len(seg_start) == 0:
        return np.zeros(len(start), dtype=np.int64)
    length = seg_end - seg_start
    cum = np.concatenate(([0], np.cumsum(length)))

    def before(t):  # covered time before t; in place, a few arrays of len(t) at most
        i = np.searchsorted(seg_start, t, side="right")
        none = i == 0
        i -= 1
        i[none] = 0
        out = np.subtract(t, seg_start[i], dtype=np.int64)
        np.clip(out, 0, length[i], out=out)
        out += cum[i]
        out[none] = 0
        return out

    out = before(end)
    out -= before(start)
    return out
