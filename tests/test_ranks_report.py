"""The trace-set section of ``hostgap report``: heat map numbers, the section, the JSON entry."""

from __future__ import annotations

import json

from click.testing import CliRunner

from conftest import write_kineto
from hostgap.analysis.traceset import analyse
from hostgap.cli import cli
from hostgap.report.traceset_view import heat_matrix, split_trace_sets
from test_ranks import rank_events


def rank_dir(tmp_path):
    """Two ranks (file names carry the rank); rank 1's host launches its gemm 30 µs late."""
    d = tmp_path / "tp2"
    d.mkdir()
    write_kineto(d / "rank0.json", rank_events((20, 30), (40, 40)))
    write_kineto(d / "rank1.json", rank_events((50, 20), (70, 10), gemm_launch=40, coll_launch=46))
    return d


def test_heat_matrix_is_host_wait_by_rank_and_step(tmp_path):
    doc = analyse([str(rank_dir(tmp_path))])
    ranks, grid, strag = heat_matrix(doc)
    (s,) = doc["cross_rank"]["steps"]
    assert ranks == [0, 1] and grid.shape == (2, 1)
    assert grid[:, 0].tolist() == [p["host_wait_ns"] / 1e6 for p in s["per_rank"]]
    assert grid[1, 0] > grid[0, 0]  # the late host
    assert strag.tolist() == [1]


def test_split_trace_sets(tmp_path):
    d = rank_dir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text("{}")
    assert split_trace_sets([str(run), str(d), "x.json"]) == ([str(d)], [str(run), "x.json"])


def test_report_has_the_rank_section(tmp_path):
    d = rank_dir(tmp_path)
    out = tmp_path / "r.html"
    r = CliRunner().invoke(cli, ["report", str(d), "-o", str(out), "--json", "-q"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    (ts,) = data["trace_sets"]
    assert ts["figure"] == "fig-ranks-0" and [x["rank"] for x in ts["ranks"]] == [0, 1]
    assert ts["heatmap"]["straggler_row"] == [1]
    text = out.read_text()
    assert "id='trace-set-0'" in text and "id='fig-ranks-0'" in text and "<svg" in text
    assert "rank1.json" in text and "ranks taken from the file names" in text
