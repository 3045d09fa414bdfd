"""Harvest tables without vLLM: workload mix, composition join, table contract, trace mode, CLI."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from budget import examples
from conftest import annotation, corpus_path, cpu_op, kernel, launch
from hostgap.anatomy.markers import composition
from hostgap.capture.engines import harvest_live as hv
from hostgap.cli import cli
from hostgap.errors import HostgapError


def vllm_annotation(record: list) -> str:
    """The detailed step annotation vLLM's Worker writes (vllm/v1/worker/gpu_worker.py,
    ``annotate_profile``), rebuilt from one StepRecorder record."""
    acc = {p: [0, 0, 0, 0, 0] for p in ("ctx", "gen")}  # requests, q, s, qq, qs
    for _rid, q, computed, ctx in record[2]:
        s = computed + q
        a = acc["ctx" if ctx else "gen"]
        for i, v in enumerate((1, q, s, q * q, q * s)):
            a[i] += v
    c, g = acc["ctx"], acc["gen"]
    return (
        f"execute_{c[1] + g[1]}_context_{c[0]}(sq{c[1]}sk{c[2]}sqsq{c[3]}sqsk{c[4]})"
        f"_generation_{g[0]}(sq{g[1]}sk{g[2]}sqsq{g[3]}sqsk{g[4]})"
    )


request_row = st.tuples(st.integers(1, 300), st.integers(0, 4000), st.booleans())


@st.composite
def records(draw):
    reqs = draw(st.lists(request_row, min_size=0, max_size=12))
    return [0, 1, [[f"hg{i}-ab12", q, c, ctx] for i, (q, c, ctx) in enumerate(reqs)]]


@given(records())
@settings(**examples(200), deadline=None)
def test_log_composition_matches_the_annotation_parser(rec):
    kind, fields = composition(vllm_annotation(rec))
    assert fields == hv.log_composition(rec)
    n_ctx = sum(1 for r in rec[2] if r[3])
    n_gen = len(rec[2]) - n_ctx
    assert kind == ("mixed" if n_ctx and n_gen else "prefill" if n_ctx else "decode" if n_gen else "unknown")


def test_make_requests_are_mixed_and_within_range():
    reqs = hv.make_requests(200, (8, 512), (4, 48), seed=3)
    assert [r.index for r in reqs] == list(range(200))
    assert all(8 <= r.prompt_len <= 512 and 4 <= r.output_len <= 48 for r in reqs)
    assert len({r.prompt_len for r in reqs}) > 50 and len({r.output_len for r in reqs}) > 20
    short = sum(r.prompt_len < 64 for r in reqs)
    assert 0.2 * 200 < short < 0.6 * 200  # log-uniform: log(64/8)/log(512/8) = 1/2
    assert hv.make_requests(200, (8, 512), (4, 48), seed=3) == reqs


def _micro_steps(recs: list, kineto_trace):
    """A CPU micro trace with one vLLM annotation and one compute op per record."""
    events, t = [], 0.0
    for rec in recs:
        events.append(annotation(vllm_annotation(rec), ts=t, dur=50.0))
        events.append(cpu_op("aten::mm", ts=t + 10.0, dur=20.0))
        t += 100.0
    return kineto_trace(events)


def test_trace_and_worker_records_join_per_request(kineto_trace):
    recs = [
        [0, 1, [["hg1-x", 100, 0, True], ["hg2-y", 28, 0, True]]],
        [0, 1, [["hg1-x", 1, 100, False], ["hg2-y", 1, 28, False], ["hg3-z", 126, 0, True]]],
        [0, 1, []],  # vLLM's empty iteration: dropped on both sides
        [0, 1, [["hg1-x", 1, 101, False], ["hg3-z", 40, 126, True]]],
    ]
    path = _micro_steps(recs, kineto_trace)
    rows, dropped = hv.step_rows(hv.analyze_trace(path), "t", {"concurrency": 3})
    assert dropped == 1 and [r["kind"] for r in rows] == ["prefill", "mixed", "mixed"]
    assert [r["ctx_q"] for r in rows] == [128, 126, 40] and rows[2]["gen_s"] == 102
    ids = {f"hg{i}": hv.Request(i - 1, p, o) for i, p, o in ((1, 100, 5), (2, 28, 3), (3, 166, 9))}
    req = hv.join_requests(rows, recs, ids, "t")
    assert len(req) == 7
    last = [r for r in req if r["step"] == rows[2]["step"]]
    assert {(r["request"], r["phase"], r["q"], r["s"]) for r in last} == {
        (0, "decode", 1, 102),
        (2, "prefill", 40, 166),
    }
    # per step, the request rows add up to the step's composition
    for row in rows:
        mine = [r for r in req if r["step"] == row["step"]]
        assert sum(r["q"] for r in mine if r["phase"] == "prefill") == row["ctx_q"]
        assert sum(r["s"] for r in mine if r["phase"] == "decode") == row["gen_s"]
    for r in rows:
        assert r["wall_ns"] >= r["gpu_active_ns"] >= 0
        assert r["host_exposed_ns"] == r["wall_ns"] - r["gpu_active_ns"]


def test_join_refuses_a_shifted_record(kineto_trace):
    recs = [[0, 1, [["a", 10, 0, True]]], [0, 1, [["a", 1, 10, False]]]]
    rows, _ = hv.step_rows(hv.analyze_trace(_micro_steps(recs, kineto_trace)), "t")
    with pytest.raises(HostgapError, match="differs"):
        hv.join_requests(rows, recs[::-1], {}, "t")
    with pytest.raises(HostgapError, match="recorded 1"):
        hv.join_requests(rows, recs[:1], {}, "t")


def test_table_contract_columns_types_and_csv(tmp_path, kineto_trace):
    recs = [[0, 1, [["a", 10, 0, True]]], [0, 1, [["a", 1, 10, False]]]]
    rows, _ = hv.step_rows(
        hv.analyze_trace(_micro_steps(recs, kineto_trace)), "src", {"concurrency": 1, "chunked_prefill": True}
    )
    out = hv.write_table(rows, tmp_path / "s.parquet", hv.STEP_COLUMNS + hv.EXTRA_COLUMNS, {"x": 1})
    t = pq.read_table(out)
    assert t.column_names[: len(hv.STEP_COLUMNS)] == list(hv.STEP_COLUMNS)
    assert str(t.schema.field("wall_ns").type) == "int64" and str(t.schema.field("kind").type) == "string"
    assert t.column("schema_version").to_pylist() == [hv.HARVEST_SCHEMA_VERSION] * 2
    assert b"hostgap" in t.schema.metadata
    csv = hv.write_table(rows, tmp_path / "s.csv", hv.STEP_COLUMNS + hv.EXTRA_COLUMNS, {})
    assert pacsv.read_csv(csv).column_names == t.column_names
    assert hv.requests_path(tmp_path / "s.parquet").name == "s.requests.parquet"
    assert not list(tmp_path.glob(".*"))  # no temp files left


def test_harvest_of_the_mi300x_vllm_trace(tmp_path):
    path = corpus_path("tracelens/mi300x_vllm_decode_fullgraph.json.gz", vendored=True)
    out = tmp_path / "mi.parquet"
    s = hv.harvest_traces([str(path)], out)
    (row,) = pq.read_table(out).to_pylist()
    assert s["rows"] == 1 and row["kind"] == "decode" and row["activity"] == "gpu"
    assert (row["gen_requests"], row["gen_q"], row["gen_s"], row["gen_qs"]) == (32, 32, 55086, 55086)
    assert row["ctx_requests"] == 0
    assert row["wall_ns"] == row["gpu_active_ns"] + row["host_exposed_ns"]
    assert 0 < row["gpu_active_ns"] < row["wall_ns"]


def test_cli_harvest_trace_mode_and_bad_input(tmp_path, kineto_trace):
    recs = [[0, 1, [["a", 10, 0, True]]], [0, 1, [["a", 1, 10, False]]]]
    path = _micro_steps(recs, kineto_trace)
    runner = CliRunner()
    res = runner.invoke(cli, ["harvest", str(path), "-o", str(tmp_path / "x.parquet"), "--csv"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "x.csv").exists() and "2 steps (decode 1, prefill 1)" in res.output
    plain = kineto_trace([cpu_op("aten::mm", ts=0, dur=5)])
    for args, needle in [
        ([str(plain)], "no engine step annotations"),
        ([str(tmp_path / "missing.json")], "no such file"),
        ([str(path), "-o", str(tmp_path / "x.txt")], "must end in .parquet or .csv"),
        (["--concurrency", "0"], "--concurrency"),
        (["--prompt-len", "9:3"], "--prompt-len"),
        (["--chunked", "maybe"], "--chunked"),
    ]:
        res = runner.invoke(
            cli, ["harvest", *args, "-o", str(tmp_path / "y.parquet")] if "-o" not in args else ["harvest", *args]
        )
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.output and res.output.count("\n") == 1 and "Traceback" not in res.output
    assert not (tmp_path / "y.parquet").exists()


def test_gpu_micro_trace_steps_use_launch_time_assignment(kineto_trace):
    """A step's kernels are the ones it launched, even when they run after its marker."""
    rec = [0, 1, [["a", 1, 10, False]]]
    events = [
        annotation(vllm_annotation(rec), ts=0, dur=20),
        launch(ts=5, dur=2, corr=1),
        kernel("k", ts=30, dur=40, corr=1),
        annotation(vllm_annotation(rec), ts=100, dur=20),
        launch(ts=105, dur=2, corr=2),
        kernel("k", ts=125, dur=10, corr=2),
    ]
    rows, _ = hv.step_rows(hv.analyze_trace(kineto_trace(events)), "g")
    assert [r["gpu_active_ns"] for r in rows] == [40_000, 10_000]
    assert rows[0]["wall_ns"] == 100_000


def test_cli_live_without_vllm_is_one_line(tmp_path):
    """In an environment without vLLM, a live harvest says how to install it (exit 2)."""
    code = (
        "import sys; sys.modules['vllm'] = None\n"
        "from hostgap.cli import main; sys.argv = ['hostgap', 'harvest', '-o', %r]; main()"
        % str(tmp_path / "h.parquet")
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "vLLM is not installed" in lines[0] and "install-vllm.sh" in lines[0]


def test_sglang_and_short_vllm_annotations_leave_unknown_fields_null(tmp_path, kineto_trace):
    sg = kineto_trace(
        [
            annotation("step[forward_mode=decode bs=8]", ts=0, dur=30),
            cpu_op("aten::mm", ts=5, dur=10),
            annotation("step[forward_mode=extend bs=2]", ts=100, dur=30),
            cpu_op("aten::mm", ts=105, dur=20),
        ]
    )
    short = kineto_trace(
        [annotation("execute_context_1(40)_generation_3(3)", ts=0, dur=30), cpu_op("aten::mm", ts=5, dur=10)]
    )
    out = tmp_path / "t.parquet"
    s = hv.harvest_traces([str(sg), str(short)], out)
    rows = pq.read_table(out).to_pylist()
    assert s["rows"] == 3 and [r["engine"] for r in rows] == ["sglang", "sglang", "vllm"]
    dec, ext, mix = rows
    assert (dec["kind"], dec["gen_requests"], dec["gen_q"], dec["gen_s"]) == ("decode", 8, 8, None)
    assert (ext["kind"], ext["ctx_requests"], ext["ctx_q"]) == ("prefill", 2, None)
    assert (mix["kind"], mix["ctx_q"], mix["gen_q"], mix["ctx_s"]) == ("mixed", 40, 3, None)
    assert len({r["source"] for r in rows}) == 2
