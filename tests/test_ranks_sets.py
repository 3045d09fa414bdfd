"""Trace-set assembly: which files, which ranks, which clocks (hand-built traces)."""

from __future__ import annotations

import pytest

from conftest import write_kineto
from hostgap.analysis.traceset import analyse, expand
from hostgap.errors import HostgapError
from test_ranks import rank_events

S = 1_000_000_000


def test_directory_takes_trace_files_only(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    for name in ("b.json.gz", "a.json", "c.sqlite", "notes.txt", "x.json.bak"):
        (d / name).write_text("")
    (d / "sub.json").mkdir()
    files, had_dir = expand([str(d), "other.json"])
    assert [f.rsplit("/", 1)[-1] for f in files] == ["a.json", "b.json.gz", "c.sqlite", "other.json"]
    assert had_dir
    assert expand(["x.json"]) == (["x.json"], False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(HostgapError, match="no trace files"):
        expand([str(tmp_path / "empty")])


def test_base_time_aligns_clocks(kineto_trace):
    """Same timestamps, Unix base times 10 s apart: rank 1 starts 10 s − 100 µs (9.9999 s, shown
    10.000) after rank 0's last event, refused. Rank 1's
    timestamps 10 s earlier with a base 10 s later: the same instants, one set, and the aligned
    step starts agree."""
    info = lambda r: {"rank": r, "world_size": 2}  # noqa: E731
    a = kineto_trace(rank_events((20, 30), (40, 40)), distributedInfo=info(0), baseTimeNanoseconds=100 * S)
    b = kineto_trace(rank_events((20, 30), (40, 40)), distributedInfo=info(1), baseTimeNanoseconds=110 * S)
    with pytest.raises(HostgapError, match=r"starts 10\.000 s after .*clocks far apart"):
        analyse([a, b])
    t0 = 10_000_000  # µs: 10 s
    c = kineto_trace(rank_events((20, 30), (40, 40), t0=t0), distributedInfo=info(0), baseTimeNanoseconds=100 * S)
    d = kineto_trace(rank_events((20, 30), (40, 40)), distributedInfo=info(1), baseTimeNanoseconds=110 * S)
    doc = analyse([c, d])
    p0, p1 = doc["cross_rank"]["steps"][0]["per_rank"]
    assert p0["start_ns"] == p1["start_ns"] == 110 * S
    assert p0["collective_wait_ns"] == p1["collective_wait_ns"] == 0


def test_duplicate_rank_numbers_in_file_names_fall_back_to_order(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    write_kineto(d / "a_rank0.json", rank_events((20, 30), (40, 40)))
    write_kineto(d / "b_rank0.json", rank_events((20, 30), (40, 40)))
    doc = analyse([str(d)])
    assert [r["rank_source"] for r in doc["ranks"]] == ["file order"] * 2
    assert [r["trace"].rsplit("/", 1)[1] for r in doc["ranks"]] == ["a_rank0.json", "b_rank0.json"]


def test_files_named_by_rank_form_a_set_without_metadata(tmp_path):
    for r in (3, 1):
        write_kineto(tmp_path / f"tp{r}.json", rank_events((20, 30), (40, 40)))
    doc = analyse([str(tmp_path / "tp3.json"), str(tmp_path / "tp1.json")])
    # ranks 1 and 3 of a world the traces do not state: at least 4 ranks
    assert [r["rank"] for r in doc["ranks"]] == [1, 3] and doc["cross_rank"]["world_size"] == 4
    assert "2 of 4 ranks present: cross-rank figures cover those ranks only" in doc["notes"]


def test_one_file_is_not_a_set_even_with_a_rank(kineto_trace):
    a = kineto_trace(rank_events((20, 30), (40, 40)), distributedInfo={"rank": 1, "world_size": 8})
    doc = analyse([a])
    assert doc["rank"] == 1 and "cross_rank" not in doc and "_rank" not in doc


def test_a_kineto_trace_on_two_devices_is_one_rank(kineto_trace):
    """Kineto puts each device's kernels on its own pid: that is one process, not two ranks."""
    from conftest import kernel, launch

    ev = rank_events((20, 30), (40, 40)) + [
        launch(ts=30, dur=1, corr=9),
        kernel("gemm", ts=50, dur=5, corr=9, device=1),
    ]
    doc = analyse([kineto_trace(ev)])
    assert "cross_rank" not in doc and sorted(d["device"] for d in doc["devices"]) == [0, 1]
