"""Attribution on hostile or shifted input: non-finite values refused, held-out steps found by
content (never by file name), a range note when the model extrapolates, unknown host parts
reported as unknown, strict JSON."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.errors import HostgapError
from hostgap.model import attribution as A
from hostgap.model.steptable.files import write_steps
from hostgap.model.synth import synth_steps


def strict_loads(text: str):
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def data():
    return synth_steps(400, seed=3).steps


# -- finiteness ---------------------------------------------------------------------------


def test_inf_in_a_request_s_is_refused(data):
    r = data.requests
    c = r.c.copy()
    c[5] = np.inf
    bad = dataclasses.replace(data, requests=dataclasses.replace(r, c=c))
    for call in (lambda: A.fit(bad), lambda: A.attribute(A.fit(data), bad)):
        with pytest.raises(HostgapError, match=r"s = inf .*must be finite"):
            call()


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_non_finite_wall_is_refused_by_fit_and_eval(tmp_path, data, value):
    wall = data.wall_ns.copy()
    wall[7] = value
    paths = write_steps(dataclasses.replace(data, wall_ns=wall), str(tmp_path / "bad.parquet"))
    r = run("attribute", "fit", paths[0], "-o", tmp_path / "m.json")
    assert r.exit_code == 2 and "wall_ns" in r.output and "Traceback" not in r.output
    good = write_steps(data, str(tmp_path / "good.parquet"))
    assert run("attribute", "fit", good[0], "-o", tmp_path / "m.json").exit_code == 0
    r = run("attribute", "eval", tmp_path / "m.json", paths[0], "--json")
    assert r.exit_code == 2 and "wall_ns" in r.output and "Traceback" not in r.output


def test_inf_host_exposed_is_refused_nan_is_unknown(data):
    host = data.host_exposed_ns.copy()
    host[3] = np.inf
    with pytest.raises(HostgapError, match="host_exposed_ns is inf"):
        A.fit(dataclasses.replace(data, host_exposed_ns=host))


# -- held out by content ------------------------------------------------------------------


def test_copy_of_the_training_file_is_not_held_out(tmp_path, data):
    train = write_steps(data, str(tmp_path / "train.parquet"))[0]
    r = run("attribute", "fit", train, "-o", tmp_path / "m.json", "--test-fraction", "0.25", "--json")
    assert r.exit_code == 0, r.output
    n_held = sum(g["n_steps"] for g in strict_loads(r.stdout)["held_out"]["groups"] if g["class"] != "all")
    shutil.copy(train, tmp_path / "copy.parquet")
    for req in tmp_path.glob("train.requests.*"):
        shutil.copy(req, tmp_path / req.name.replace("train", "copy"))
    scored = []
    for path in (train, tmp_path / "copy.parquet"):
        r = run("attribute", "eval", tmp_path / "m.json", path, "--json")
        assert r.exit_code == 0, r.output
        out = strict_loads(r.stdout)
        scored.append((out["n_steps"], out["n_excluded_training_steps"]))
    # the copy scores exactly the held-out steps, like the original: none that trained the model
    assert scored[0] == scored[1] == (n_held, len(data) - n_held)


def test_split_ignores_file_name_and_row_order(data):
    renamed = dataclasses.replace(data, sources=tuple(f"{s}-renamed" for s in data.sources))
    order = np.arange(len(data))[::-1]
    reordered = data.subset(np.ones(len(data), bool))
    reordered = dataclasses.replace(
        reordered,
        **{f: getattr(data, f)[order] for f in A._ROW_FIELDS},
        source_idx=data.source_idx[order],
        requests=None,
    )
    a = A.split_mask(data, 0.3, seed=5)
    assert np.array_equal(a, A.split_mask(renamed, 0.3, seed=5))
    assert np.array_equal(a[order], A.split_mask(reordered, 0.3, seed=5))
    assert 0.2 < a.mean() < 0.4  # about the fraction asked for
    assert not np.array_equal(a, A.split_mask(data, 0.3, seed=6))  # the seed matters


def test_held_out_rows_are_those_not_trained_on(data):
    test = A.split_mask(data, 0.25, 1)
    model = A.fit(data.subset(~test))
    shuffled = np.random.default_rng(0).permutation(len(data))
    moved = dataclasses.replace(
        data,
        sources=("elsewhere",),
        **{f: getattr(data, f)[shuffled] for f in A._ROW_FIELDS},
        source_idx=np.zeros(len(data), np.int32),
        requests=None,
    )
    assert np.array_equal(A.held_out(model, moved), test[shuffled])


# -- range note ---------------------------------------------------------------------------


def test_range_note_when_evaluating_outside_the_training_range(data):
    decode = ~data.is_prefill
    small = data.subset(~decode | (data.n_requests <= 16))
    model = A.fit(small)
    assert A.range_note(model, small) is None  # in range: no note
    big = data.subset(decode & (data.n_requests > 16))
    dec = ~small.is_prefill
    lo_b, hi_b = small.n_requests[dec].min(), small.n_requests[dec].max()
    lo_q, hi_q = small.sum_p[dec].min(), small.sum_p[dec].max()
    lo_s, hi_s = small.sum_c[dec].min(), small.sum_c[dec].max()
    outside = (
        (big.n_requests < lo_b)
        | (big.n_requests > hi_b)
        | (big.sum_p < lo_q)
        | (big.sum_p > hi_q)
        | (big.sum_c < lo_s)
        | (big.sum_c > hi_s)
    )
    note = A.range_note(model, big)
    assert note.startswith(f"{int(outside.sum())} of {len(big)} step(s) outside the training range")
    assert (
        f"decode batch size {int(big.n_requests.min())}..{int(big.n_requests.max())} vs trained {int(lo_b)}..{int(hi_b)}"
        in note
    )


def test_range_note_reaches_eval_and_explain(tmp_path, data):
    decode = ~data.is_prefill
    small = write_steps(data.subset(~decode | (data.n_requests <= 16)), str(tmp_path / "small.parquet"))[0]
    big_steps = data.subset(decode & (data.n_requests > 16))
    big = write_steps(big_steps, str(tmp_path / "big.parquet"))[0]
    assert run("attribute", "fit", small, "-o", tmp_path / "m.json", "--test-fraction", "0").exit_code == 0
    out = strict_loads(run("attribute", "eval", tmp_path / "m.json", big, "--json").stdout)
    assert "outside the training range" in out["note"]
    step = int(big_steps.step[0])
    r = run("attribute", "explain", tmp_path / "m.json", big, "--step", step, "--json")
    assert r.exit_code == 0, r.output
    assert "outside the training range" in strict_loads(r.stdout)["range_note"]


# -- unknown host part --------------------------------------------------------------------


def test_unknown_host_part_is_null_not_zero(tmp_path, data):
    nan = np.full(len(data), np.nan)
    unknown = dataclasses.replace(data, host_exposed_ns=nan, gpu_active_ns=nan, host_wait_ns=nan)
    path = write_steps(unknown, str(tmp_path / "nohost.parquet"))[0]
    assert run("attribute", "fit", path, "-o", tmp_path / "m.json").exit_code == 0
    step = int(unknown.step[0])
    r = run("attribute", "explain", tmp_path / "m.json", path, "--step", step, "--json")
    assert r.exit_code == 0, r.output
    out = strict_loads(r.stdout)
    assert out["host_fraction"] is None
    assert all(row["host_ns"] is None and row["device_ns"] is None for row in out["requests_shares"])
    text = run("attribute", "explain", tmp_path / "m.json", path, "--step", step).output
    assert "unknown" in text and "host fraction 0.0%" not in text
