"""STEPS input: harvest and generic layouts, cross-checks, refusals, vLLM annotations."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from conftest import TRACES, VENDORED
from hostgap.errors import HostgapError
from hostgap.model import attribution as A
from hostgap.model.steptable.files import composition_from_vllm_annotation, load_steps, write_steps
from hostgap.model.synth import synth_steps

VLLM = "tracelens/mi300x_vllm_decode_fullgraph.json.gz"
VLLM_TRACE = TRACES / VLLM if (TRACES / VLLM).exists() else VENDORED / VLLM  # the trimmed copy keeps the step


@pytest.fixture(scope="module")
def data():
    return synth_steps(120, seed=7, noise=0.01)


@pytest.mark.parametrize("ext", [".parquet", ".csv"])
def test_harvest_layout_round_trip(data, tmp_path, ext):
    path = str(tmp_path / f"run{ext}")
    written = write_steps(data.steps, path)
    assert written[1].endswith(f"run.requests{ext}")
    back = load_steps(path)
    assert back.data_sha256() == data.steps.data_sha256()
    assert back.requests is not None and len(back.requests.p) == len(data.steps.requests.p)


def test_harvest_without_requests_keeps_aggregates(data, tmp_path):
    path = str(tmp_path / "run.parquet")
    write_steps(data.steps, path)
    (tmp_path / "run.requests.parquet").unlink()
    back = load_steps(path)
    assert back.requests is None
    for f in ("n_requests", "sum_p", "sum_c", "sum_pp", "sum_pc"):
        np.testing.assert_array_equal(getattr(back, f), getattr(data.steps, f))


def _harvest_table(path, **override):
    t = pq.read_table(path).to_pydict()
    t.update(override)
    return t


def test_requests_that_disagree_with_the_steps_are_refused(data, tmp_path):
    path = str(tmp_path / "run.parquet")
    write_steps(data.steps, path)
    t = _harvest_table(path)
    t["gen_s"] = [v + 7 for v in t["gen_s"]]
    pq.write_table(pa.table(t), path)
    with pytest.raises(HostgapError, match="requests disagree"):
        load_steps(path)


def test_steps_without_composition_are_refused(tmp_path):
    path = tmp_path / "bare.csv"
    path.write_text("source,step,kind,wall_ns,ctx_requests,gen_requests\na,0,decode,1000,,\na,1,decode,1100,,\n")
    with pytest.raises(HostgapError, match="no batch composition"):
        load_steps(str(path))


def test_zero_request_steps_are_refused(tmp_path):
    path = tmp_path / "idle.csv"
    cols = "source,step,kind,wall_ns," + ",".join(
        f"{p}_{k}" for p in ("ctx", "gen") for k in ("requests", "q", "s", "qq", "qs")
    )
    path.write_text(cols + "\n" + "a,0,decode,1000,0,0,0,0,0,2,2,300,2,300\n" + "a,1,decode,900,0,0,0,0,0,0,0,0,0,0\n")
    with pytest.raises(HostgapError, match="no requests"):
        load_steps(str(path))


def test_kind_must_match_composition(tmp_path):
    path = tmp_path / "k.csv"
    cols = "source,step,kind,wall_ns," + ",".join(
        f"{p}_{k}" for p in ("ctx", "gen") for k in ("requests", "q", "s", "qq", "qs")
    )
    path.write_text(cols + "\n" + "a,0,decode,1000,1,64,64,4096,4096,2,2,300,2,300\n")
    with pytest.raises(HostgapError, match="kind 'decode'"):
        load_steps(str(path))
    # speculative verification: a decode step with q > 1 per request is accepted and goes to
    # the general (prefill-containing) form
    path.write_text(cols + "\n" + "a,0,decode,1000,0,0,0,0,0,2,6,300,18,900\n")
    s = load_steps(str(path))
    assert s.is_prefill[0] and s.n_prefill[0] == 0


def test_generic_layout_mixed_rows(tmp_path):
    path = tmp_path / "generic.csv"
    path.write_text("step,q,s,time_ms\n0,1,100,\n0,1,300,\n0,,,5.5\n1,128,128,\n1,1,50,\n1,,,9.25\n")
    s = load_steps(str(path))
    assert s.sources == ("generic",)
    np.testing.assert_array_equal(s.wall_ns, [5.5e6, 9.25e6])
    np.testing.assert_array_equal(s.n_requests, [2, 2])
    np.testing.assert_array_equal(s.sum_c, [400, 178])
    np.testing.assert_array_equal(s.is_prefill, [False, True])
    assert np.isnan(s.host_exposed_ns).all()


def test_generic_layout_time_on_every_request_row(tmp_path):
    path = tmp_path / "denorm.parquet"
    pq.write_table(
        pa.table(
            {
                "source": ["x"] * 3,
                "step": [4, 4, 5],
                "q": [1, 1, 1],
                "s": [10, 20, 30],
                "wall_ns": [7e6, 7e6, 6e6],
                "host_exposed_ns": [2e6, 2e6, 1e6],
            }
        ),
        path,
    )
    s = load_steps(str(path))
    np.testing.assert_array_equal(s.step, [4, 5])
    np.testing.assert_array_equal(s.wall_ns, [7e6, 6e6])
    np.testing.assert_array_equal(s.host_exposed_ns, [2e6, 1e6])


def test_generic_layout_conflicting_times(tmp_path):
    path = tmp_path / "clash.csv"
    path.write_text("step,q,s,wall_ns\n0,1,10,1000\n0,1,20,2000\n")
    with pytest.raises(HostgapError, match="disagree"):
        load_steps(str(path))


@pytest.mark.parametrize(
    "body,match",
    [
        ("step,q,s,wall_ns\n0,4,2,1000\n", "s < q"),
        ("step,q,s,wall_ns\n0,0,2,1000\n", "q must be >= 1"),
        ("step,q,s\n0,1,2\n", "wall_ns or time_ms"),
        ("step,q,s,wall_ns\n0,1,2,\n", "no positive measured time"),
        ("a,b\n1,2\n", "not a STEPS table"),
    ],
)
def test_bad_generic_tables(tmp_path, body, match):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(HostgapError, match=match):
        load_steps(str(path))


def test_unknown_format_and_missing_file(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{}")
    with pytest.raises(HostgapError, match="unknown table format"):
        load_steps(str(p))
    with pytest.raises(HostgapError, match="no such file"):
        load_steps(str(tmp_path / "nope.parquet"))


def test_short_vllm_annotation_lacks_context():
    assert composition_from_vllm_annotation("execute_context_1(7)_generation_3(3)") is None


def test_real_vllm_decode_step_parses_and_is_too_little_to_fit(tmp_path):
    with gzip.open(VLLM_TRACE, "rt") as f:
        events = json.load(f)["traceEvents"]
    marks = [e for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_")]
    assert len(marks) == 1
    comp = composition_from_vllm_annotation(marks[0]["name"])
    assert comp["gen_requests"] == 32 and comp["gen_q"] == 32 and comp["ctx_requests"] == 0
    assert comp["gen_s"] == 55086
    row = {
        "schema_version": [1],
        "source": ["mi300x"],
        "step": [0],
        "kind": ["decode"],
        "wall_ns": [round(marks[0]["dur"] * 1000)],
        **{k: [v] for k, v in comp.items()},
    }
    path = tmp_path / "one.csv"
    pcsv.write_csv(pa.table(row), str(path))
    steps = load_steps(str(path))
    assert steps.n_requests[0] == 32 and steps.sum_c[0] == 55086 and not steps.is_prefill[0]
    with pytest.raises(HostgapError, match="too few"):
        A.fit(steps)


def test_harvest_extras_partial_and_blank_steps(tmp_path):
    """As the harvest writes it: extra columns, int request ids, a partial first step, a step
    whose annotation had no composition, kind 'unknown'."""
    comp = ("ctx_requests", "ctx_q", "ctx_s", "ctx_qq", "ctx_qs", "gen_requests", "gen_q", "gen_s", "gen_qq", "gen_qs")
    rows = [
        # step 0: partial (left out), step 1: decode of 2, step 2: no composition, step 3 mixed
        (0, "decode", 9e6, (0, 0, 0, 0, 0, 1, 1, 10, 1, 10), True),
        (1, "decode", 5e6, (0, 0, 0, 0, 0, 2, 2, 30, 2, 30), False),
        (2, "unknown", 4e6, (None,) * 10, False),
        (3, "mixed", 7e6, (1, 8, 8, 64, 64, 1, 1, 21, 1, 21), False),
    ]
    table = {
        "schema_version": [1] * 4,
        "source": ["cpu"] * 4,
        "step": [r[0] for r in rows],
        "kind": [r[1] for r in rows],
        "wall_ns": [r[2] for r in rows],
        "gpu_active_ns": [1e6] * 4,
        "host_exposed_ns": [r[2] - 1e6 for r in rows],
        "host_wait_ns": [0] * 4,
        "partial": [r[4] for r in rows],
        "queued": [False] * 4,
        "concurrency": [4] * 4,
    }
    for j, k in enumerate(comp):
        table[k] = pa.array([r[3][j] for r in rows], pa.int64())
    pq.write_table(pa.table(table), tmp_path / "h.parquet")
    s = load_steps(str(tmp_path / "h.parquet"))
    np.testing.assert_array_equal(s.step, [1, 3])
    assert any("partial" in n for n in s.notes) and any("composition" in n for n in s.notes)
    req = {
        "schema_version": [1] * 6,
        "source": ["cpu"] * 6,
        "step": [0, 1, 1, 2, 3, 3],
        "request": [7, 7, 8, 7, 7, 9],
        "phase": ["decode"] * 4 + ["prefill", "decode"],
        "q": [1, 1, 1, 1, 8, 1],
        "s": [10, 10, 20, 11, 8, 21],
        "prompt_len": [9] * 6,
    }
    pq.write_table(pa.table(req), tmp_path / "h.requests.parquet")
    s = load_steps(str(tmp_path / "h.parquet"))
    # with requests, step 2 gets its composition from them; step 0 stays out (partial)
    np.testing.assert_array_equal(s.step, [1, 2, 3])
    np.testing.assert_array_equal(s.n_requests, [2, 1, 2])
    assert list(s.requests.request) == ["7", "8", "7", "7", "9"]
    assert s.is_prefill.tolist() == [False, False, True]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from budget import examples  # noqa: E402


@settings(**examples(25), deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(1, 600), st.integers(0, 5000)), min_size=1, max_size=12), min_size=1, max_size=15
    )
)
def test_generic_rows_aggregate_exactly(tmp_path_factory, batches):
    lines = ["step,q,s,wall_ns"]
    for k, reqs in enumerate(batches):
        lines += [f"{k},{q},{q + extra}," for q, extra in reqs]
        lines.append(f"{k},,,{1000 + k}")
    path = tmp_path_factory.mktemp("g") / "g.csv"
    path.write_text("\n".join(lines) + "\n")
    s = load_steps(str(path))
    for k, reqs in enumerate(batches):
        q = np.array([a for a, _ in reqs], float)
        c = q + np.array([b for _, b in reqs], float)
        assert s.n_requests[k] == len(reqs) and s.sum_p[k] == q.sum()
        assert s.sum_c[k] == c.sum() and s.sum_pp[k] == (q * q).sum()
        assert s.sum_pc[k] == (q * c).sum() and s.wall_ns[k] == 1000 + k


def test_text_columns_of_a_csv_are_read_as_text(tmp_path):
    """pyarrow reads a CSV's text as ``string`` (a Parquet file may hold ``large_string``): both
    are kept as text, empty where missing, never cast to numbers, digits included (the column's
    declared type wins: a text id "0012" stays "0012")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from hostgap.model.steptable.files import read_columns

    p = tmp_path / "t.csv"
    p.write_text("kind,wall_ns\ndecode,1000\nprefill,2500\n")
    cols = read_columns(str(p))
    assert list(cols["kind"]) == ["decode", "prefill"] and cols["kind"].dtype == object
    assert list(cols["wall_ns"]) == [1000.0, 2500.0]
    q = tmp_path / "t.parquet"
    pq.write_table(pa.table({"kind": pa.array(["decode", None], pa.large_string()), "wall_ns": [1, 2]}), q)
    assert list(read_columns(str(q))["kind"]) == ["decode", ""]
    for text in (pa.string(), pa.large_string()):
        pq.write_table(pa.table({"id": pa.array(["0012", "7"], text)}), q)
        assert list(read_columns(str(q))["id"]) == ["0012", "7"]
