"""Steps aligned across ranks: collective wait, the straggler rank and its cause
(docs/multirank.md has the definitions with a worked example).

Input: one :class:`RankSteps` per rank (from :mod:`hostgap.analysis.traceset`), times on one
clock (each rank's ``clock_offset_ns`` added: the trace's Unix base time when it has one).

* **Matching steps.** When every rank's step names are unique and the ranks share names
  (``ProfilerStep#551`` on every rank), steps are matched by name, keeping the names every
  rank has; otherwise by position (step 0 with step 0), up to the shortest rank.
* **Collective wait.** The k-th collective of a type (``allreduce``, ``sendrecv`` ...) in a
  step is the same collective on every rank that has one. Rank r's wait in it is the part
  before the last rank arrived: ``min(max(last_start - start_r, 0), dur_r)``; a step's
  ``collective_wait_ns`` sums its collectives. Collectives that not every rank has are not
  counted.
* **Straggler.** Each rank's *own time* in a step is ``wall_ns - collective_wait_ns``: the part
  it was not waiting for the others. The straggler is the rank with the most own time (the
  lowest rank on a tie); ``spread_ns`` = most own time - least own time.
* **Cause.** The straggler's excess over the median of the other ranks in host-caused idle
  (``host_wait_ns``: ``host``), compute (``compute_active_ns``: ``compute``) and communication
  outside waiting (``comm_active_ns - collective_wait_ns``: ``communication``); the cause is the
  largest positive excess, ``null`` when none is positive or only one rank is present.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEY_SHAPE = (64, 1 << 40)
"""(collective type, ordinal) -> one integer key per collective of a step."""

CAUSE_TERMS = (("host", "host_wait_ns"), ("compute", "compute_active_ns"), ("communication", "comm_transfer_ns"))


@dataclass(frozen=True)
class RankSteps:
    """What alignment needs of one rank: its step rows and its collectives (``coll_*`` arrays as
    in :class:`hostgap.anatomy.comm.StepComm`, times on the rank's own clock)."""

    rank: int
    steps: list[dict]
    clock_offset_ns: int
    coll_step: np.ndarray
    coll_type: np.ndarray
    coll_ordinal: np.ndarray
    coll_start_ns: np.ndarray
    coll_dur_ns: np.ndarray


def match_steps(ranks: list[RankSteps]) -> tuple[str, list[list[int]]]:
    """("name" | "index", per matched step the step index on each rank)."""
    names = [[s["name"] for s in r.steps] for r in ranks]
    if all(len(set(n)) == len(n) for n in names):
        common = set(names[0]).intersection(*names[1:])
        if common:
            order = [n for n in names[0] if n in common]
            pos = [{n: i for i, n in enumerate(rn)} for rn in names]
            return "name", [[p[n] for p in pos] for n in order]
    n = min(len(r.steps) for r in ranks)
    return "index", [[i] * len(ranks) for i in range(n)]


def collective_wait(ranks: list[RankSteps], step_of_rank: list[int]) -> tuple[np.ndarray, int]:
    """(collective wait per rank, number of collectives every rank has) in one matched step."""
    keys, starts, durs = [], [], []
    for r, i in zip(ranks, step_of_rank):
        m = r.coll_step == i
        keys.append(np.ravel_multi_index((r.coll_type[m], r.coll_ordinal[m]), KEY_SHAPE))
        starts.append(r.coll_start_ns[m] + r.clock_offset_ns)
        durs.append(r.coll_dur_ns[m])
    common = keys[0]
    for k in keys[1:]:
        common = np.intersect1d(common, k)
    if not len(common):
        return np.zeros(len(ranks), dtype=np.int64), 0
    # keys are unique within a step of one rank: searchsorted finds each common key's row
    sel = [np.argsort(k, kind="stable") for k in keys]
    at = [o[np.searchsorted(k[o], common)] for k, o in zip(keys, sel)]
    start = np.stack([s[a] for s, a in zip(starts, at)])  # ranks x collectives
    dur = np.stack([d[a] for d, a in zip(durs, at)])
    last = start.max(axis=0)
    wait = np.minimum(np.maximum(last - start, 0), dur)
    return wait.sum(axis=1).astype(np.int64), int(len(common))


def cross_rank(ranks: list[RankSteps], world_size: int | None) -> dict:
    """The ``cross_rank`` object of a trace set (docs/json.md)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    match, matched = match_steps(ranks) if ranks else ("index", [])
    steps = []
    for index, idx in enumerate(matched):
        wait, n_coll = collective_wait(ranks, idx)
        per_rank = [_rank_row(r, r.steps[i], int(w)) for r, i, w in zip(ranks, idx, wait)]
        steps.append(
            {
                "index": index,
                "name": ranks[0].steps[idx[0]]["name"],
                "collectives_matched": n_coll,
                **straggler(per_rank),
                "per_rank": per_rank,
            }
        )
    return {
        "world_size": world_size,
        "ranks_present": [r.rank for r in ranks],
        "step_match": match,
        "steps": steps,
        "summary": summary(steps),
    }


def _rank_row(r: RankSteps, s: dict, wait: int) -> dict:
    return {
        "rank": r.rank,
        "step": s["index"],
        "start_ns": s["start_ns"] + r.clock_offset_ns,
        "wall_ns": s["wall_ns"],
        "gpu_active_ns": s["gpu_active_ns"],
        "host_wait_ns": s["host_wait_ns"],
        "compute_active_ns": s["compute_active_ns"],
        "comm_active_ns": s["comm_active_ns"],
        "comm_overlap_ns": s["comm_overlap_ns"],
        "collective_wait_ns": wait,
        "own_ns": s["wall_ns"] - wait,
    }


def straggler(per_rank: list[dict]) -> dict:
    """``straggler_rank``, ``cause``, ``spread_ns`` and the straggler's ``excess_ns`` per cause
    term over the other ranks' median (module docstring)."""
    own = np.array([p["own_ns"] for p in per_rank], dtype=np.int64)
    if len(per_rank) < 2:
        return {"straggler_rank": None, "cause": None, "spread_ns": 0, "excess_ns": None}
    j = int(np.argmax(own))  # first maximum: the lowest rank on a tie (rows sorted by rank)
    others = [p for k, p in enumerate(per_rank) if k != j]
    excess = {}
    for cause, key in CAUSE_TERMS:
        mine = _term(per_rank[j], key)
        excess[cause] = int(mine - np.median([_term(p, key) for p in others]))
    best = max(excess, key=lambda c: excess[c])
    return {
        "straggler_rank": per_rank[j]["rank"],
        "cause": best if excess[best] > 0 else None,
        "spread_ns": int(own.max() - own.min()),
        "excess_ns": excess,
    }


def _term(row: dict, key: str) -> int:
    if key == "comm_transfer_ns":
        return row["comm_active_ns"] - row["collective_wait_ns"]
    return row[key]


def summary(steps: list[dict]) -> dict:
    """How often each rank was the straggler, the causes named, and the median spread."""
    counts: dict[str, int] = {}
    causes: dict[str, int] = {}
    for s in steps:
        if s["straggler_rank"] is not None:
            counts[str(s["straggler_rank"])] = counts.get(str(s["straggler_rank"]), 0) + 1
        if s["cause"] is not None:
            causes[s["cause"]] = causes.get(s["cause"], 0) + 1
    spreads = [s["spread_ns"] for s in steps]
    return {
        "steps": len(steps),
        "straggler_counts": counts,
        "cause_counts": causes,
        "median_spread_ns": float(np.median(spreads)) if spreads else None,
    }
