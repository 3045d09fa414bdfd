"""Cross-rank alignment on hand-made step rows and collectives (values derived by hand)."""

from __future__ import annotations

import numpy as np

from hostgap.analysis.align import RankSteps, collective_wait, cross_rank, match_steps, straggler, summary
from hostgap.anatomy.collectives import TYPES

AR, SR = TYPES.index("allreduce"), TYPES.index("sendrecv")


def step(index, name="s", wall=100, host=0, compute=0, comm=0, start=0, active=None, overlap=0):
    return {
        "index": index,
        "name": name,
        "start_ns": start,
        "wall_ns": wall,
        "gpu_active_ns": active or compute + comm,
        "host_wait_ns": host,
        "compute_active_ns": compute,
        "comm_active_ns": comm,
        "comm_overlap_ns": overlap,
    }


def rank(r, steps, colls=(), offset=0):
    """colls: (step, type, ordinal, start, dur)."""
    c = np.array(colls, dtype=np.int64).reshape(-1, 5)
    return RankSteps(r, steps, offset, c[:, 0], c[:, 1], c[:, 2], c[:, 3], c[:, 4])


def test_clock_offsets_align_collectives_and_starts():
    """Rank 1's clock reads 1,000 ns behind: raw starts 500 (rank 0) and -400 (rank 1) are 500 and
    600 on the aligned clock; rank 0 waits 100 of its 300 ns, rank 1 none."""
    r0 = rank(0, [step(0, start=10)], [(0, AR, 0, 500, 300)])
    r1 = rank(1, [step(0, start=-990)], [(0, AR, 0, -400, 300)], offset=1000)
    wait, n = collective_wait([r0, r1], [0, 0])
    assert wait.tolist() == [100, 0] and n == 1
    cr = cross_rank([r1, r0], 2)  # given out of order: sorted by rank
    assert cr["ranks_present"] == [0, 1]
    assert [p["start_ns"] for p in cr["steps"][0]["per_rank"]] == [10, 10]


def test_wait_is_capped_at_the_kernel_and_types_are_matched_apart():
    """allreduce #0: starts 0 and 1,000, rank 0's lasts 200: it waits 200 (capped), not 1,000.
    sendrecv #0: starts 50 and 20: rank 1 waits 30. allreduce #1 only on rank 0: not counted."""
    r0 = rank(0, [step(0)], [(0, AR, 0, 0, 200), (0, SR, 0, 50, 100), (0, AR, 1, 2000, 100)])
    r1 = rank(1, [step(0)], [(0, AR, 0, 1000, 200), (0, SR, 0, 20, 100)])
    wait, n = collective_wait([r0, r1], [0, 0])
    assert wait.tolist() == [200, 30] and n == 2


def test_collectives_of_other_steps_are_ignored():
    r0 = rank(0, [step(0), step(1)], [(1, AR, 0, 0, 500)])
    r1 = rank(1, [step(0), step(1)], [(1, AR, 0, 400, 500)])
    assert collective_wait([r0, r1], [0, 0])[0].tolist() == [0, 0]
    assert collective_wait([r0, r1], [1, 1])[0].tolist() == [400, 0]


def test_three_ranks_median_of_the_others():
    """Own times 100, 100, 160 (no waits): rank 2 straggles, spread 60. Others' host 10 and 30
    (median 20), rank 2's 50: excess 30; compute 40 vs median(20, 60) = 40: excess 0;
    communication 5 vs median(5, 25) = 15: excess -10. Cause: host."""
    per = [
        {
            "rank": 0,
            "own_ns": 100,
            "host_wait_ns": 10,
            "compute_active_ns": 20,
            "comm_active_ns": 5,
            "collective_wait_ns": 0,
        },
        {
            "rank": 1,
            "own_ns": 100,
            "host_wait_ns": 30,
            "compute_active_ns": 60,
            "comm_active_ns": 25,
            "collective_wait_ns": 0,
        },
        {
            "rank": 2,
            "own_ns": 160,
            "host_wait_ns": 50,
            "compute_active_ns": 40,
            "comm_active_ns": 5,
            "collective_wait_ns": 0,
        },
    ]
    s = straggler(per)
    assert s == {
        "straggler_rank": 2,
        "cause": "host",
        "spread_ns": 60,
        "excess_ns": {"host": 30, "compute": 0, "communication": -10},
    }


def test_communication_excess_leaves_out_the_wait():
    """Rank 1 straggles by 40; its comm 90 of which 10 waiting (80 transfer) vs rank 0's 50 of
    which 40 waiting (10 transfer): communication excess 70, the cause."""
    per = [
        {
            "rank": 0,
            "own_ns": 60,
            "host_wait_ns": 5,
            "compute_active_ns": 30,
            "comm_active_ns": 50,
            "collective_wait_ns": 40,
        },
        {
            "rank": 1,
            "own_ns": 100,
            "host_wait_ns": 5,
            "compute_active_ns": 30,
            "comm_active_ns": 90,
            "collective_wait_ns": 10,
        },
    ]
    assert straggler(per) == {
        "straggler_rank": 1,
        "cause": "communication",
        "spread_ns": 40,
        "excess_ns": {"host": 0, "compute": 0, "communication": 70},
    }


def test_tie_goes_to_the_lowest_rank_and_one_rank_has_no_straggler():
    per = [
        {
            "rank": r,
            "own_ns": 100,
            "host_wait_ns": 0,
            "compute_active_ns": 0,
            "comm_active_ns": 0,
            "collective_wait_ns": 0,
        }
        for r in (3, 5)
    ]
    assert straggler(per)["straggler_rank"] == 3 and straggler(per)["cause"] is None
    assert straggler(per[:1]) == {"straggler_rank": None, "cause": None, "spread_ns": 0, "excess_ns": None}
    one = cross_rank([rank(0, [step(0), step(1)])], 4)
    assert [s["straggler_rank"] for s in one["steps"]] == [None, None]
    assert one["summary"] == {"steps": 2, "straggler_counts": {}, "cause_counts": {}, "median_spread_ns": 0.0}


def test_matching_rules():
    a = rank(0, [step(0, "A"), step(1, "B"), step(2, "C")])
    b = rank(1, [step(0, "C"), step(1, "B")])
    assert match_steps([a, b]) == ("name", [[1, 1], [2, 0]])  # rank 0's order, names both have
    dup = rank(1, [step(0, "B"), step(1, "B")])
    assert match_steps([a, dup]) == ("index", [[0, 0], [1, 1]])  # duplicate names: by position
    other = rank(1, [step(0, "X")])
    assert match_steps([a, other]) == ("index", [[0, 0]])  # no name in common: by position


def test_summary_counts_and_median_spread():
    steps = [
        {"straggler_rank": 1, "cause": "host", "spread_ns": 10},
        {"straggler_rank": 1, "cause": None, "spread_ns": 40},
        {"straggler_rank": 0, "cause": "compute", "spread_ns": 20},
        {"straggler_rank": None, "cause": None, "spread_ns": 0},
    ]
    assert summary(steps) == {
        "steps": 4,
        "straggler_counts": {"1": 2, "0": 1},
        "cause_counts": {"host": 1, "compute": 1},
        "median_spread_ns": 15.0,
    }
    assert summary([])["median_spread_ns"] is None


def test_cross_rank_rows():
    """Walls 100 and 90; rank 0 waits 30 in its all-reduce (starts 10 and 40, 50 long): own 70
    and 90, rank 1 straggles by 20. Excess: compute 40 - 20 = 20, communication (50 - 0) -
    (50 - 30) = 30: the cause is communication."""
    r0 = rank(0, [step(0, "P", wall=100, compute=20, comm=50, host=7, overlap=3)], [(0, AR, 0, 10, 50)])
    r1 = rank(1, [step(0, "P", wall=90, compute=40, comm=50, host=7)], [(0, AR, 0, 40, 50)])
    cr = cross_rank([r0, r1], 2)
    (s,) = cr["steps"]
    assert s["per_rank"][0] == {
        "rank": 0,
        "step": 0,
        "start_ns": 0,
        "wall_ns": 100,
        "gpu_active_ns": 70,
        "host_wait_ns": 7,
        "compute_active_ns": 20,
        "comm_active_ns": 50,
        "comm_overlap_ns": 3,
        "collective_wait_ns": 30,
        "own_ns": 70,
    }
    assert (s["straggler_rank"], s["cause"], s["spread_ns"], s["collectives_matched"]) == (1, "communication", 20, 1)
    assert s["excess_ns"] == {"host": 0, "compute": 20, "communication": 30}
    assert cr["summary"]["straggler_counts"] == {"1": 1} and cr["step_match"] == "name"
