"""Attribution numbers a changed operator would get wrong (mutation audit of
model/attribution/, bench/mutation.sh): R² and relative errors on three steps, the token
baseline per class, the held-out selection from a stored split, the training-range note, and
the guards on model files, and the fit's own guards (the least steps per segment, the rank
tolerance, fit_class's defaults). Every model and step table is written by hand, or drawn from a
seeded generator where only its structure matters; every expected value follows from them in
the comments."""

from __future__ import annotations

import base64
import dataclasses
import json
import math

import numpy as np
import pytest

from hostgap.errors import HostgapError
from hostgap.model import attribution as A
from hostgap.model.attribution.heldout import _encode_rows
from hostgap.model.steptable.rows import Steps

INF = math.inf


def steps(wall, n_requests, sum_p, sum_c, *, n_prefill=None, host=None, source_idx=None, sources=("hand",)):
    """A step table from per-step sums; a decode step (p = 1 per request) has Σp² = Σp and
    Σp·c = Σc, a prefill step gets Σp² = Σp·p̄ and Σp·c = Σc·p̄ (one mean chunk), which no test
    here reads."""
    n = len(wall)
    f = lambda v: np.asarray(v, dtype=float)  # noqa: E731
    sum_p, sum_c, n_req = f(sum_p), f(sum_c), f(n_requests)
    mean_p = sum_p / n_req
    return Steps(
        sources=sources,
        source_idx=np.zeros(n, np.int32) if source_idx is None else np.asarray(source_idx, np.int32),
        step=np.arange(n, dtype=np.int64),
        wall_ns=f(wall),
        gpu_active_ns=np.full(n, np.nan) if host is None else f(wall) - f(host),
        host_exposed_ns=np.full(n, np.nan) if host is None else f(host),
        host_wait_ns=np.full(n, np.nan),
        queued=np.zeros(n, bool),
        n_requests=n_req,
        n_prefill=np.zeros(n) if n_prefill is None else f(n_prefill),
        sum_p=sum_p,
        sum_c=sum_c,
        sum_pp=sum_p * mean_p,
        sum_pc=sum_c * mean_p,
        origin="hand",
    )


def decode_model(beta=0.0, a2=0.0, a4=0.0, baseline=(0.0, 0.0), **provenance) -> A.Model:
    """A decode-only model with one segment: T = β + a2·Σc + a4·|B|."""
    cm = A.ClassModel("decode", (0, 4, 2), (A.Segment(INF, (beta, 0.0, a2, 0.0, a4, 0.0)),), 30, 0.01)
    return A.Model("wall_ns", "relative", {"decode": cm}, {"decode": baseline}, provenance=provenance)


# -- evaluation: R², relative errors, gains ----------------------------------------------


def test_r2_relative_errors_and_gains_on_three_steps_by_hand():
    # T̂ = 1000 ns per KV token: 12, 19, 33 µs against measured 10, 20, 30 µs.
    # Baseline T = 5 µs + 5 µs per token, Σp = |B| = 1, 2, 3: 10, 15, 20 µs.
    # Host exposed 5, 1, 1.5 µs: fractions 0.5, 0.05, 0.05, median 0.05 (device-bound, < 0.10).
    s = steps([10e3, 20e3, 30e3], [1, 2, 3], [1, 2, 3], [12, 19, 33], host=[5e3, 1e3, 1.5e3])
    m = decode_model(a2=1000.0, baseline=(5e3, 5e3))
    ev = A.evaluate(m, s)
    assert (ev.n_steps, ev.n_excluded) == (3, 0)
    (g,) = ev.groups  # one source, decode only: no prefill or "all" row
    assert (g.source, g.step_class, g.n_steps) == ("hand", "decode", 3)
    # mean 20 µs: SS = 10² + 0² + 10² = 200 µs²; SSE = 2² + 1² + 3² = 14 µs²; R² = 1 − 14/200
    assert g.r2 == pytest.approx(0.93, abs=1e-12)
    # baseline SSE = 0² + 5² + 10² = 125 µs²: R² = 1 − 125/200
    assert g.baseline_r2 == pytest.approx(0.375, abs=1e-12)
    # |T̂ − T| / T = 0.2, 0.05, 0.1; sorted 0.05, 0.1, 0.2: p50 0.1, p90 at rank 1.8 = 0.1 + 0.8 ×
    # 0.1, p99 at rank 1.98 = 0.1 + 0.98 × 0.1
    np.testing.assert_allclose(g.rel_err, (0.1, 0.18, 0.198), rtol=1e-12)
    # baseline 0, 0.25, 1/3: p50 0.25, p90 0.25 + 0.8/12, p99 0.25 + 0.98/12
    np.testing.assert_allclose(g.baseline_rel_err, (0.25, 0.25 + 0.8 / 12, 0.25 + 0.98 / 12), rtol=1e-12)
    np.testing.assert_allclose(g.improvement, (2.5, (0.25 + 0.8 / 12) / 0.18, (0.25 + 0.98 / 12) / 0.198), rtol=1e-12)
    assert g.host_fraction_median == pytest.approx(0.05)
    assert g.regime == "device-bound" and g.note == ""


def test_r2_is_none_for_one_step_or_no_spread_and_gain_none_for_a_perfect_model():
    # one step: no R²; two steps of equal time: SS = 0, no R²
    m = decode_model(a2=1000.0, baseline=(5e3, 5e3))
    (one,) = A.evaluate(m, steps([10e3], [1], [1], [12])).groups
    assert one.r2 is None and one.baseline_r2 is None
    (flat,) = A.evaluate(m, steps([20e3, 20e3], [1, 2], [1, 2], [20, 19])).groups
    assert flat.r2 is None and flat.baseline_r2 is None
    # T̂ = T exactly: every error 0, so the gain is not a number (baseline / 0)
    (exact,) = A.evaluate(m, steps([10e3, 20e3], [1, 2], [1, 2], [10, 20])).groups
    assert exact.r2 == 1.0 and exact.rel_err == (0.0, 0.0, 0.0) and exact.improvement == (None, None, None)
    # baseline 10, 15 µs: errors 0 and 0.25, so p50 0.125
    assert exact.baseline_rel_err[0] == pytest.approx(0.125)


def test_host_dominated_and_unknown_host_notes():
    m = decode_model(a2=1000.0, baseline=(5e3, 5e3))
    (g,) = A.evaluate(m, steps([10e3, 20e3], [1, 2], [1, 2], [10, 20], host=[5e3, 10e3])).groups
    # host fraction 0.5 in both steps: at the threshold, host-dominated
    assert g.host_fraction_median == 0.5 and g.regime == "host-bound"
    assert g.note.startswith("host-dominated (median host fraction 50%)")
    (u,) = A.evaluate(m, steps([10e3, 20e3], [1, 2], [1, 2], [10, 20])).groups
    assert u.host_fraction_median is None and u.regime is None
    assert u.note == "host fraction unknown (no host_exposed_ns)"


# -- the token baseline, per class --------------------------------------------------------


def test_baseline_uses_each_class_own_line():
    # prefill T = 1000 + 10·Σp, decode T = 500 + 50·Σp
    base = {"prefill": (1000.0, 10.0), "decode": (500.0, 50.0)}
    m = A.Model("wall_ns", "relative", {}, base)
    # step 0: a 100-token chunk and one decode (Σp 101, prefill class); step 1: 4 decodes
    s = steps([3e3, 1e3], [2, 4], [101, 4], [300, 400], n_prefill=[1, 0])
    assert s.is_prefill.tolist() == [True, False]
    # 1000 + 10·101 = 2010; 500 + 50·4 = 700
    np.testing.assert_array_equal(A.predict_baseline(m, s), [2010.0, 700.0])
    # a class without a baseline predicts nothing (NaN), not the other class's line
    only = A.Model("wall_ns", "relative", {}, {"decode": (500.0, 50.0)})
    out = A.predict_baseline(only, s)
    assert np.isnan(out[0]) and out[1] == 700.0


# -- held out: stored train rows, stored split --------------------------------------------


def _table(n=40):
    """n decode steps with distinct contents (batch 1-4, Σc rising)."""
    k = np.arange(n)
    b = 1 + k % 4
    return steps(1e6 + 1e4 * k, b, b, 100 * (k + 1))


def test_held_out_from_a_stored_split_without_train_rows():
    s = _table()
    sha = s.data_sha256()
    # test_fraction 1: every hash / 2⁶⁴ < 1, so every step was held out of training
    everything = decode_model(split={"test_fraction": 1.0, "seed": 0}, data_sha256_all=sha)
    assert A.held_out(everything, s).all()
    # test_fraction 0: none held out, every step trained the model
    assert not A.held_out(decode_model(split={"test_fraction": 0.0, "seed": 0}, data_sha256_all=sha), s).any()
    # any other fraction: the stored fraction and seed, not the defaults
    half = decode_model(split={"test_fraction": 0.5, "seed": 7}, data_sha256_all=sha)
    want = A.split_mask(s, 0.5, 7)
    assert 0 < want.sum() < len(s) and not np.array_equal(want, A.split_mask(s, 0.5, 0))
    np.testing.assert_array_equal(A.held_out(half, s), want)
    # other data than the model saw: every step is new to it
    assert A.held_out(decode_model(split={"test_fraction": 0.0, "seed": 0}, data_sha256_all="0" * 64), s).all()
    # no split stored at all: fraction 0, nothing held out of the data it was fitted on
    assert not A.held_out(decode_model(data_sha256_all=sha), s).any()


def test_held_out_from_a_stored_split_of_one_source():
    # two sources, the model fitted on "b" only: "a" is all new, "b" follows the split of its rows
    s = _table()
    two = steps(s.wall_ns, s.n_requests, s.sum_p, s.sum_c, source_idx=np.arange(len(s)) % 2, sources=("a", "b"))
    b = two.subset(two.source_idx == 1)
    m = decode_model(split={"test_fraction": 0.5, "seed": 3}, data_sha256_all=b.data_sha256(), fit_source="b")
    got = A.held_out(m, two)
    assert got[two.source_idx == 0].all()
    np.testing.assert_array_equal(got[two.source_idx == 1], A.split_mask(b, 0.5, 3))
    # the source is not in these steps: nothing here trained the model
    gone = decode_model(split={"test_fraction": 0.0, "seed": 0}, data_sha256_all=b.data_sha256(), fit_source="c")
    assert A.held_out(gone, two).all()


def test_held_out_by_stored_train_rows_and_lax_text_refused():
    s = _table(12)
    hashes = A.row_hashes(s)
    trained = decode_model(train_rows=_encode_rows(hashes[:5]))
    np.testing.assert_array_equal(A.held_out(trained, s), np.arange(12) >= 5)
    # 5 hashes (40 bytes) and 4 stray bytes: the whole hashes count, the rest is ignored
    raw = np.unique(hashes[:5]).astype("<u8").tobytes() + b"\x01\x02\x03\x04"
    ragged = decode_model(train_rows=base64.b64encode(raw).decode())
    np.testing.assert_array_equal(A.held_out(ragged, s), np.arange(12) >= 5)
    # text that is not strict base64 is no list of rows: the file-content rule decides, and
    # with no stored data hash every step counts as new (a lax decoder would drop the "!" and
    # read all 12 as trained)
    text = _encode_rows(hashes)
    bad = decode_model(train_rows=text[:8] + "!" + text[8:])
    assert A.held_out(bad, s).all()
    assert A.held_out(decode_model(train_rows=12), s).all()  # not text: ignored too


# -- the training range ------------------------------------------------------------------


def test_range_note_by_hand():
    rng = {"decode": {"batch size": [1.0, 8.0], "Σq": [1.0, 8.0], "Σs": [100.0, 5000.0]}}
    m = decode_model(train_range=rng)
    # step 0 inside; step 1 Σs 6000 > 5000; step 2 batch 16 and Σq 16 > 8; step 3 Σs 50 < 100
    s = steps([1e6] * 4, [4, 2, 16, 1], [4, 2, 16, 1], [300, 6000, 2000, 50])
    assert A.range_note(m, s) == (
        "3 of 4 step(s) outside the training range (decode batch size 16..16 vs trained 1..8; "
        "decode Σq 16..16 vs trained 1..8; decode Σs 50..6000 vs trained 100..5000): the model extrapolates there"
    )
    assert A.range_note(m, s.subset(np.array([True, False, False, False]))) is None
    # fractional bounds keep three significant digits
    half = decode_model(train_range={"decode": {"Σs": [0.5, 2.25]}})
    assert A.range_note(half, s.subset(np.array([True, False, False, False]))) == (
        "1 of 1 step(s) outside the training range (decode Σs 300..300 vs trained 0.5..2.25): "
        "the model extrapolates there"
    )


def test_range_note_none_without_a_stored_range():
    s = steps([1e6, 1e6], [1, 64], [1, 64], [100, 1e6])
    assert A.range_note(decode_model(), s) is None  # a model saved before the range was stored
    assert A.range_note(decode_model(train_range=[1, 2]), s) is None  # not a range
    # a class the range does not name, or a bound it does not give, is not checked
    assert A.range_note(decode_model(train_range={"prefill": {"Σq": [1.0, 2.0]}}), s) is None
    assert A.range_note(decode_model(train_range={"decode": {"Σq": [1.0, 64.0]}}), s) is None
    empty = decode_model(train_range={"decode": {"Σq": [1.0, 2.0]}})
    assert A.range_note(empty, s.subset(np.zeros(2, bool))) is None


# -- model files: what is refused, what is written -----------------------------------------


def _model_file(tmp_path, edit):
    d = A.to_json(decode_model(beta=5e6, a2=30.0, a4=60e3, baseline=(6e6, 100e3)))
    edit(d)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(d))
    return str(path)


def test_a_hand_model_reads_back_with_its_numbers(tmp_path):
    m = A.load_model(_model_file(tmp_path, lambda d: None))
    cm = m.classes["decode"]
    assert cm.terms == (0, 4, 2) and cm.n_train == 30 and cm.train_rel_err_p90 == 0.01
    assert cm.segments == (A.Segment(INF, (5e6, 0.0, 30.0, 0.0, 60e3, 0.0)),)
    assert m.baseline == {"decode": (6e6, 100e3)}
    # 4 decodes, Σc 1000: 5 ms + 30 µs + 240 µs
    assert A.predict(m, steps([1e6], [4], [4], [1000])).tolist() == [5e6 + 30e3 + 240e3]


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["classes"]["decode"]["segments"][0].update(a2_ns_per_kv_token=-1.0),
        lambda d: d["classes"]["decode"]["segments"][0].update(beta_ns=-5.0),
        lambda d: d["classes"]["decode"].update(segments=[]),
    ],
    ids=["negative a2 beside positive terms", "negative beta", "no segments"],
)
def test_negative_coefficient_or_no_segment_is_refused(tmp_path, edit):
    path = _model_file(tmp_path, edit)
    with pytest.raises(HostgapError, match="malformed attribution model: class decode: no segments or a negative"):
        A.load_model(path)


def test_negative_component_coefficient_is_refused(tmp_path):
    def edit(d):
        seg = dict(d["classes"]["decode"]["segments"][0], a4_ns_per_request=-3.0)
        d["components"] = {"host": {"decode": {**d["classes"]["decode"], "segments": [seg]}}}

    with pytest.raises(HostgapError, match="negative coefficient"):
        A.load_model(_model_file(tmp_path, edit))


def test_a_model_with_nan_is_not_written(tmp_path):
    path = tmp_path / "m.json"
    bad = decode_model(beta=5e6, a2=30.0, baseline=(float("nan"), 1.0))
    with pytest.raises(ValueError, match="not JSON compliant"):
        A.save_model(bad, str(path))
    assert list(tmp_path.iterdir()) == []  # neither the model nor its temporary file
    # unknown numbers of a fit are written as null, never as NaN or Infinity tokens
    ok = decode_model(beta=5e6, a2=30.0, baseline=(1.0, 1.0))
    A.save_model(ok, str(path))
    d = json.loads(path.read_text(), parse_constant=lambda t: pytest.fail(f"{t} in the model file"))
    assert d["classes"]["decode"]["segments"][0]["sum_p_max"] is None


# -- the breakpoint search ----------------------------------------------------------------


def test_split_search_sse_does_not_depend_on_column_scaling():
    # min over x >= 0 of |A·D·x − b|² is min over x' = D·x >= 0 of |A·x' − b|² for any positive
    # diagonal D, and each side's Gram matrix is scaled by its own diagonal: the search needs no
    # normalised columns (fit.py hands it the weighted rows as they are)
    rng = np.random.default_rng(4)
    n = 60
    X = np.column_stack([np.ones(n), rng.uniform(1, 64, n), rng.uniform(1e2, 1e5, n)])
    y = X @ [5e6, 60e3, 30.0] * rng.uniform(0.97, 1.03, n)
    order = np.argsort(X[:, 1])
    Ao, bo = X[order] / y[order, None], np.ones(n)
    plain = A._SplitSearch(Ao, bo)
    scaled = A._SplitSearch(Ao * [1e-6, 1.0, 1e6], bo)
    for m in (12, 30, 48):
        direct = A._nnls_fit(X[order][:m], y[order][:m], y[order][:m], [0, 1, 2])[1]
        direct += A._nnls_fit(X[order][m:], y[order][m:], y[order][m:], [0, 1, 2])[1]
        assert plain.sse(m) == pytest.approx(direct, rel=1e-6)
        assert scaled.sse(m) == pytest.approx(plain.sse(m), rel=1e-9)


def test_a_split_side_is_unidentifiable_when_its_normalised_gram_is_singular_to_1e12():
    # each side's Gram matrix, scaled to a unit diagonal, is refused when its smallest eigenvalue
    # is at most 1e-12 of its largest: here [[1, c], [c, 1]] (eigenvalues 1 - c and 1 + c) scaled
    # by columns of norm 2 and 3, so the scaling is undone before the test
    from hostgap.model.attribution.fit import _gram_nnls

    d = np.array([2.0, 3.0])
    for gap, refused in ((1.5e-12, True), (2.5e-12, False), (1e-9, False)):
        c = 1.0 - gap
        G = np.outer(d, d) * np.array([[1.0, c], [c, 1.0]])
        sse = _gram_nnls(G, np.array([1.0, 1.0]), 10.0)
        assert (sse is None) is refused, (gap, sse)
        assert refused or sse >= 0.0
    assert _gram_nnls(np.diag([4.0, 0.0]), np.array([1.0, 0.0]), 1.0) is None  # an empty column


def test_a_model_that_cannot_be_written_says_why_in_one_line(tmp_path):
    m = decode_model(beta=5e6, a2=30.0, baseline=(1.0, 1.0))
    # the folder does not exist: the system's reason, without the errno and path around it
    with pytest.raises(HostgapError) as e:
        A.save_model(m, str(tmp_path / "no" / "m.json"))
    assert e.value.problem == "cannot write: No such file or directory"
    # the path is a folder: the temporary file is written, the rename fails, the file is removed
    (tmp_path / "m.json").mkdir()
    with pytest.raises(HostgapError) as e:
        A.save_model(m, str(tmp_path / "m.json"))
    assert e.value.problem == "cannot write: Is a directory"
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


# -- step content hashes and finiteness ---------------------------------------------------


def test_row_hash_reads_minus_zero_as_zero_and_every_nan_alike():
    base = steps([1e6, 2e6], [1, 2], [1, 2], [100, 200], host=[0.0, 5e5])
    minus = dataclasses.replace(base, host_exposed_ns=np.array([-0.0, 5e5]))
    other_nan = np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)[0]
    nan_a = dataclasses.replace(base, host_wait_ns=np.array([np.nan, 1.0]))
    nan_b = dataclasses.replace(base, host_wait_ns=np.array([other_nan, 1.0]))
    np.testing.assert_array_equal(A.row_hashes(minus), A.row_hashes(base))
    np.testing.assert_array_equal(A.row_hashes(nan_a), A.row_hashes(nan_b))
    # any content change is another step; so is another seed
    queued = dataclasses.replace(base, queued=np.array([True, False]))
    assert (A.row_hashes(queued) != A.row_hashes(base)).tolist() == [True, False]
    assert (A.row_hashes(base, seed=1) != A.row_hashes(base)).all()


@pytest.mark.parametrize(
    "field, label",
    [("wall_ns", "wall_ns"), ("n_requests", "requests"), ("sum_p", "Σq"), ("sum_c", "Σs"), ("sum_pp", "Σq²")],
)
def test_a_nan_in_a_required_sum_is_refused(field, label):
    s = steps([1e6, 2e6], [1, 2], [1, 2], [100, 200])
    v = getattr(s, field).copy()
    v[1] = np.nan
    with pytest.raises(HostgapError, match=f"{label} is nan at step 1 of hand: every value must be finite"):
        A.check_finite(dataclasses.replace(s, **{field: v}))


def test_unmeasured_times_and_sum_pc_may_be_nan_never_inf():
    s = steps([1e6, 2e6], [1, 2], [1, 2], [100, 200])
    A.check_finite(dataclasses.replace(s, sum_pc=np.array([np.nan, 1.0])))  # no error
    with pytest.raises(HostgapError, match="Σq·s is inf at step 0"):
        A.check_finite(dataclasses.replace(s, sum_pc=np.array([np.inf, 1.0])))


@pytest.mark.parametrize("gpu", [[5e5, np.nan], [5e5, 0.0], [np.nan, np.nan]])
def test_gpu_active_target_needs_a_positive_time_in_every_step(gpu):
    s = dataclasses.replace(steps([1e6, 2e6], [1, 2], [1, 2], [100, 200]), gpu_active_ns=np.array(gpu))
    with pytest.raises(HostgapError, match="--target gpu_active needs a positive gpu_active_ns"):
        A.measured(s, "gpu_active_ns")
    np.testing.assert_array_equal(A.measured(s, "wall_ns"), [1e6, 2e6])  # the wall target ignores it


# -- shares by hand -----------------------------------------------------------------------


def one_segment(name, coef, brk=None, hi=None):
    segs = (A.Segment(INF, coef),) if brk is None else (A.Segment(brk, coef), A.Segment(INF, hi))
    return A.ClassModel(name, (0, 1, 2, 3, 4, 5), segs, 30, 0.01)


def test_attribute_step_by_hand_with_each_token_term_alone():
    p, c = np.array([100.0, 1.0]), np.array([100.0, 500.0])

    def shares(coef):
        m = A.Model(
            "wall_ns", "relative", {"prefill": one_segment("prefill", coef)}, {}, host_fraction={"prefill": 0.25}
        )
        return A.attribute_step(m, p, c)

    # β 1000, a1 10, a4 100: a4 + β/2 = 600 each, + a1·p = 1000 and 10
    out = shares((1000.0, 10.0, 0.0, 0.0, 100.0, 0.0))
    np.testing.assert_allclose(out.share_ns, [1600.0, 610.0])
    np.testing.assert_allclose(out.host_ns, [400.0, 152.5])  # the class's training median 0.25
    np.testing.assert_allclose(out.device_ns, [1200.0, 457.5])
    assert out.predicted_ns == 2210.0
    # + a2 1, a3 2: a2·c + 600 = 700, 1100; + (a1 + a3·p)·p = 21000, 12
    np.testing.assert_allclose(shares((1000.0, 10.0, 1.0, 2.0, 100.0, 0.0)).share_ns, [21700.0, 1112.0])
    # a5 0.5 alone: a5·c·p = 0.5 · 100 · 100, 0.5 · 500 · 1
    np.testing.assert_allclose(shares((0.0, 0.0, 0.0, 0.0, 0.0, 0.5)).share_ns, [5000.0, 250.0])
    # a3 alone: a3·p² = 2 · 100², 2 · 1
    np.testing.assert_allclose(shares((0.0, 0.0, 0.0, 2.0, 0.0, 0.0)).share_ns, [20000.0, 2.0])


def test_attribute_step_picks_class_segment_and_host_fraction():
    # decode: β 640, a4 10 up to Σp = 64; β 0, a4 100 above
    dec = one_segment("decode", (640.0, 0, 0, 0, 10.0, 0), brk=64.0, hi=(0.0, 0, 0, 0, 100.0, 0))
    m = A.Model("wall_ns", "relative", {"decode": dec}, {}, host_fraction={"decode": 0.5})
    at = A.attribute_step(m, np.ones(64), np.full(64, 10.0))  # Σp = 64: the low segment
    np.testing.assert_allclose(at.share_ns, 10.0 + 640.0 / 64)
    above = A.attribute_step(m, np.ones(65), np.full(65, 10.0), host_fraction=0.1)
    np.testing.assert_allclose(above.share_ns, 100.0)
    np.testing.assert_allclose(above.host_ns, 10.0)  # the fraction given, not the model's 0.5
    np.testing.assert_allclose(at.host_ns, 10.0)  # the model's 0.5 of 20
    unknown = A.Model("wall_ns", "relative", {"decode": dec}, {})
    assert (A.attribute_step(unknown, np.ones(2), np.ones(2)).host_ns == 0).all()
    # a token count above 1 makes a prefill step, which this model cannot price
    with pytest.raises(HostgapError, match="the model has no prefill fit"):
        A.attribute_step(m, np.array([1.0, 8.0]), np.array([10.0, 8.0]))
    # unless the caller says it is a decode step: a4 + β/2 each
    np.testing.assert_allclose(
        A.attribute_step(m, np.array([1.0, 8.0]), np.array([10.0, 8.0]), prefill=False).share_ns, 330.0
    )


def with_requests(s: Steps, per_step) -> Steps:
    """``s`` with request rows: ``per_step[k]`` lists step k's (q, s, prefill)."""
    from hostgap.model.steptable.rows import Requests

    rows = [r for step in per_step for r in step]
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in per_step])]).astype(np.int64)
    ids = np.array([f"r{i}" for i in range(len(rows))], dtype=object)
    p, c, pre = (np.array([r[i] for r in rows]) for i in range(3))
    return dataclasses.replace(s, requests=Requests(offsets, ids, p.astype(float), c.astype(float), pre.astype(bool)))


def test_attribute_fills_an_unmeasured_host_fraction_with_the_class_median():
    # decode: β 1000, a2 1, a4 100; step 0: 2 requests, c 100 and 300; step 1: 1 request, c 50
    m = decode_model(beta=1000.0, a2=1.0, a4=100.0)
    s = steps([2e3, 1.2e3], [2, 1], [2, 1], [400, 50], host=[1e3, np.nan])
    s = with_requests(s, [[(1, 100, False), (1, 300, False)], [(1, 50, False)]])
    filled = A.attribute(dataclasses.replace(m, host_fraction={"decode": 0.2}), s)
    # a4 + β/2 + a2·c = 700, 900; a4 + β + a2·c = 1150
    np.testing.assert_allclose(filled.share_ns, [700.0, 900.0, 1150.0])
    np.testing.assert_allclose(filled.host_fraction, [0.5, 0.2])  # measured 1/2; the median 0.2
    np.testing.assert_allclose(filled.host_ns, [350.0, 450.0, 230.0])
    # alone: a4 + β + a2·c
    np.testing.assert_allclose(filled.alone_ns, [1200.0, 1400.0, 1150.0])
    blank = A.attribute(m, s)  # no median either: the host part is unknown, not 0
    assert np.isnan(blank.host_fraction[1]) and np.isnan(blank.host_ns[2])
    assert blank.host_ns[0] == 350.0


def test_model_split_by_hand():
    # device model: β 600, a2 1; host model: β 300, a4 50. Step of 2 decodes, c 100 and 300:
    # d = a2·c + β/2 = 400, 600; h = a4 + β/2 = 200, 200; host part = share · h / (d + h)
    m = decode_model(beta=1000.0, a2=1.0, a4=100.0)
    dev = A.ClassModel("decode", (0, 4, 2), (A.Segment(INF, (600.0, 0, 1.0, 0, 0, 0)),), 30, 0.01)
    host = A.ClassModel("decode", (0, 4, 2), (A.Segment(INF, (300.0, 0, 0, 0, 50.0, 0)),), 30, 0.01)
    zero = A.ClassModel("decode", (0, 4, 2), (A.Segment(INF, (0.0,) * 6),), 30, 0.01)
    s = with_requests(steps([2e3], [2], [2], [400]), [[(1, 100, False), (1, 300, False)]])
    split = A.attribute(
        dataclasses.replace(m, components={"device": {"decode": dev}, "host": {"decode": host}}), s, split="model"
    )
    np.testing.assert_allclose(split.host_ns, [700.0 / 3, 900.0 / 4])
    np.testing.assert_allclose(split.device_ns, [1400.0 / 3, 675.0])
    # both component models zero: no ratio to take, the host part is 0
    none = A.attribute(
        dataclasses.replace(m, components={"device": {"decode": zero}, "host": {"decode": zero}}), s, split="model"
    )
    assert (none.host_ns == 0).all()
    with pytest.raises(HostgapError, match="model split needs device/host component models"):
        A.attribute(m, s, split="model")
    with pytest.raises(HostgapError, match="unknown split 'halves'"):
        A.attribute(m, s, split="halves")
    # a device-time model has no host part
    gpu = A.attribute(
        dataclasses.replace(m, target="gpu_active_ns"), dataclasses.replace(s, gpu_active_ns=np.array([1e3]))
    )
    assert (gpu.host_ns == 0).all() and (gpu.device_ns == gpu.share_ns).all()


# -- the workflow's selections ------------------------------------------------------------------


def test_select_step_picks_the_named_sources_step_and_says_where_it_looked():
    s = steps(
        [1e6, 2e6, 3e6, 4e6],
        [1, 2, 3, 4],
        [1, 2, 3, 4],
        [100, 200, 300, 400],
        source_idx=[0, 0, 1, 1],
        sources=("a", "b"),
    )
    s = dataclasses.replace(s, step=np.array([7, 8, 7, 9], dtype=np.int64))
    one = A.select_step(s, 7, source="b")
    assert (one.wall_ns.tolist(), one.source_idx.tolist()) == ([3e6], [1])
    assert A.select_step(s, 7, source="a").wall_ns.tolist() == [1e6]
    assert A.select_step(s, 9).wall_ns.tolist() == [4e6]
    with pytest.raises(HostgapError, match=r"^--step: step 9 not in source 'a' of hand$"):
        A.select_step(s, 9, source="a")
    with pytest.raises(HostgapError, match=r"^--step: step 5 not in hand$"):
        A.select_step(s, 5)
    with pytest.raises(HostgapError, match="step 7 exists in several sources; pick one with --source"):
        A.select_step(s, 7)


def test_the_held_out_fit_records_the_steps_path():
    rng = np.random.default_rng(0)
    n = 80
    p = rng.integers(1, 64, n).astype(float)
    c = rng.uniform(100, 4000, n) * p
    s = steps(2e6 + 40e3 * p + 30.0 * c, p, p, c)
    assert A.fit_held_out(s).model.provenance["steps_path"] == "hand"
    anonymous = dataclasses.replace(s, origin="")
    assert A.fit_held_out(anonymous).model.provenance["steps_path"] is None


def _independent_prefill_features(n: int, seed: int) -> np.ndarray:
    """Six step features (1, Σp, Σc, Σp², |B|, Σp·c) drawn independently, Σp distinct and
    increasing: every term identifiable, every split position a change of Σp."""
    rng = np.random.default_rng(seed)
    sum_p = np.cumsum(rng.uniform(50.0, 150.0, n))
    return np.column_stack(
        [
            np.ones(n),
            sum_p,
            rng.uniform(0.0, 4000.0, n),
            sum_p * rng.uniform(20.0, 200.0, n),
            rng.integers(1, 9, n).astype(float),
            rng.uniform(0.0, 5e5, n),
        ]
    )


@pytest.mark.parametrize("change_at", [12, 48], ids=["low side", "high side"])
def test_a_segment_holds_three_steps_per_fitted_term(change_at):
    # 60 steps, all six terms identifiable: a segment needs MIN_STEPS_PER_TERM x 6 = 18 steps.
    # The costs change sharply after the 12 lowest Σp (or before the 12 highest), so a split
    # there fits exactly; it leaves 12 < 18 steps on one side and must not be taken (a floor of
    # 8 would take the first, a filter on the low side only the second)
    X = _independent_prefill_features(60, seed=5)
    low, high = np.array([2e6, 900.0, 15.0, 0.02, 3e4, 0.004]), np.array([5e5, 100.0, 40.0, 0.1, 9e4, 0.02])
    y = np.where(np.arange(60) < change_at, X @ low, X @ high)
    cm = A.fit_class("prefill", X, y, y)
    assert cm.terms == (0, 1, 2, 3, 4, 5), cm.notes
    need = A.MIN_STEPS_PER_TERM * len(cm.terms)
    assert need == 18
    edges = [-INF] + [s.sum_p_max for s in cm.segments]
    sizes = [int(((X[:, 1] > a) & (X[:, 1] <= b)).sum()) for a, b in zip(edges, edges[1:])]
    assert sum(sizes) == 60 and min(sizes) >= need, sizes


def test_fit_class_fits_the_pc_term_by_default_like_fit():
    # fit_class is public: called with its defaults it fits a5 (Σp·c) where the data has it, as
    # fit does; without it, a5 is left out and said so. The note is said only then: not for a
    # prefill model that fits a5, and not for decode, which never has a5 among its terms
    X = _independent_prefill_features(40, seed=6)
    y = X @ np.array([1e6, 200.0, 20.0, 0.05, 5e4, 0.01])
    fitted = A.fit_class("prefill", X, y, y)
    assert 5 in fitted.terms and not any("a5 not fitted" in n for n in fitted.notes)
    without = A.fit_class("prefill", X, y, y, use_pc=False)
    assert 5 not in without.terms and any("a5 not fitted" in n for n in without.notes)
    decode = A.fit_class("decode", X, y, y)
    assert 5 not in decode.terms and not any("a5 not fitted" in n for n in decode.notes)


def test_a_term_closer_to_the_others_than_the_rank_tolerance_is_merged():
    # _identifiable keeps a unit-normed column while the rank, at tolerance 1e-8 x sqrt(n),
    # grows: 1e-7 at n = 100. Σc here is the constant column plus delta x r (r a unit vector
    # orthogonal to it): the two unit columns meet at an angle of delta / sqrt(n), so their
    # smaller singular value is delta / sqrt(2n): 1e-8 (merged) and 3e-7 (kept) below
    from hostgap.model.attribution.fit import _identifiable

    n = 100
    r = np.random.default_rng(7).standard_normal(n)
    r -= r.mean()
    r /= np.linalg.norm(r)
    X = np.zeros((n, 6))
    X[:, 0] = 1.0
    for sigma, kept in ((1e-8, False), (3e-7, True)):
        X[:, 2] = 1.0 + sigma * math.sqrt(2 * n) * r
        assert np.linalg.svd(X[:, [0, 2]] / np.linalg.norm(X[:, [0, 2]], axis=0), compute_uv=False)[-1] == (
            pytest.approx(sigma, rel=1e-3)
        )
        terms, notes = _identifiable(X, [0, 2])
        assert terms == ([0, 2] if kept else [0]), (sigma, notes)
        assert kept or "linear combination" in notes[0]


def test_identifiability_does_not_depend_on_a_features_units():
    # each column is normed before the rank test, kept or tried: the same terms are kept and
    # merged when a feature is scaled by 1e-6 or 1e6 (Σc near-collinear with the constant
    # column at a singular value of 1e-8, Σp independent)
    from hostgap.model.attribution.fit import _identifiable

    n = 100
    rng = np.random.default_rng(8)
    r = rng.standard_normal(n)
    r -= r.mean()
    r /= np.linalg.norm(r)
    X = np.zeros((n, 6))
    X[:, 0] = 1.0
    X[:, 1] = rng.uniform(10.0, 500.0, n)
    X[:, 2] = 1.0 + 1e-8 * math.sqrt(2 * n) * r
    assert _identifiable(X, [0, 1, 2])[0] == [0, 1]
    for j in (0, 1, 2):
        for scale in (1e-6, 1e6):
            Xs = X.copy()
            Xs[:, j] *= scale
            assert _identifiable(Xs, [0, 1, 2])[0] == [0, 1], (j, scale)


def test_train_error_is_the_90th_percentile_of_relative_misfit():
    # y off a linear model by +-3 % on alternate steps: no fit of the six terms removes that,
    # and train_rel_err_p90 is the 90th percentile of |T̂ - T| / T over the training steps
    from hostgap.model.attribution.fit import _predict_rows

    X = _independent_prefill_features(40, seed=6)
    y = X @ np.array([1e6, 200.0, 20.0, 0.05, 5e4, 0.01]) * np.where(np.arange(40) % 2, 1.03, 0.97)
    cm = A.fit_class("prefill", X, y, y)
    rel = np.abs(_predict_rows(X, cm.segments) - y) / y
    assert cm.train_rel_err_p90 == pytest.approx(np.percentile(rel, 90), rel=1e-12)
    assert 0.005 < cm.train_rel_err_p90 < 0.06


def test_component_models_need_three_measured_steps_per_term():
    # the device/host models refit the main model's terms on the steps with gpu_active_ns:
    # prefill's five or six terms need 15 or 18 of them; one fewer and the components are
    # refused with the reason, exactly enough and they are fitted
    from hostgap.model.synth import synth_steps

    s = synth_steps(400, seed=4, noise=0.005, decode_fraction=0.5).steps
    k = len(A.fit(s).classes["prefill"].terms)
    assert k >= 5
    pre = np.flatnonzero(s.is_prefill & ~s.queued)
    for measured, fitted in ((3 * k - 1, False), (3 * k, True)):
        gpu, host = s.gpu_active_ns.copy(), s.host_exposed_ns.copy()
        gpu[pre[measured:]] = np.nan
        host[pre[measured:]] = np.nan
        m = A.fit(dataclasses.replace(s, gpu_active_ns=gpu, host_exposed_ns=host))
        assert bool(m.components) is fitted, m.notes
        assert fitted or any("too few unqueued prefill steps" in n for n in m.notes)


def test_a_split_that_only_removes_misfit_below_the_noise_floor_is_not_taken():
    # BIC reads each side's SSE (of relative misfit) no lower than 1e-18 per step: a hinge in
    # the data that costs one segment less than that in all (here 1e-17 over 40 steps) is
    # numerical noise, and the same hinge at 1e-12 is a split. The two-segment fit is exact
    from hostgap.model.attribution.fit import _fit_segments, _nnls_fit

    n = 40
    X = np.zeros((n, 6))
    X[:, 0] = 1.0
    X[:, 1] = np.arange(1, n + 1) * 100.0
    hinge = np.maximum(X[:, 1] - 2050.0, 0.0)
    y1 = 1e6 + 2e3 * X[:, 1] + hinge
    _, unit = _nnls_fit(X, y1, y1, [0, 1])
    for sse, split in ((1e-17, False), (1e-12, True)):
        y = 1e6 + 2e3 * X[:, 1] + math.sqrt(sse / unit) * hinge
        assert _nnls_fit(X, y, y, [0, 1])[1] == pytest.approx(sse, rel=1e-3)
        segs, notes = _fit_segments(X, y, y, [0, 1])
        assert len(segs) == (2 if split else 1), (sse, notes)


def test_each_class_keeps_the_median_host_fraction_of_its_own_steps():
    # the model's host_fraction per class is the median over that class's training steps:
    # prefill steps here spend 10-20 % of their wall time on the host, decode steps 40-60 %
    rng = np.random.default_rng(4)
    n_pre, n_dec = 30, 24
    n_req = np.concatenate([rng.integers(1, 5, n_pre), rng.integers(2, 9, n_dec)]).astype(float)
    sum_p = np.concatenate([np.cumsum(rng.uniform(50, 150, n_pre)), n_req[n_pre:]])
    sum_c = rng.uniform(100, 4000, n_pre + n_dec) * n_req
    wall = 2e6 + 40e3 * sum_p + 30.0 * sum_c + 5e4 * n_req
    share = np.concatenate([rng.uniform(0.1, 0.2, n_pre), rng.uniform(0.4, 0.6, n_dec)])
    n_prefill = np.concatenate([np.ones(n_pre), np.zeros(n_dec)])
    m = A.fit(steps(wall, n_req, sum_p, sum_c, n_prefill=n_prefill, host=share * wall))
    assert m.host_fraction["prefill"] == pytest.approx(np.median(share[:n_pre]))
    assert m.host_fraction["decode"] == pytest.approx(np.median(share[n_pre:]))


def test_the_other_class_is_suggested_only_where_it_has_steps_and_was_asked_for():
    """The refusal of too few steps suggests fitting the other class only when that class has
    steps in the data and is among the requested classes (``and``, not ``or``)."""
    from hostgap.model.synth import synth_steps

    data = synth_steps(30, seed=1, decode_fraction=0.9)  # 5 prefill steps: too few (need 18)
    bare = "5 prefill step(s) are too few to fit the prefill model (need >= 18); collect more steps"
    with pytest.raises(HostgapError) as e:
        A.fit(data.steps, classes=("prefill",))  # decode has steps, but was not asked for
    assert e.value.problem == bare
    only_prefill = data.steps.subset(data.steps.is_prefill)
    with pytest.raises(HostgapError) as e:
        A.fit(only_prefill)  # decode is asked for (the default), but has no steps
    assert e.value.problem == bare


def test_the_split_search_refines_a_coarse_grid_instead_of_trying_every_cut():
    """On 1,000 candidate cuts with one minimum the search finds it while evaluating a small
    fraction of them: a coarse grid of at most _COARSE_BREAKS cuts, refined between the best
    point's neighbours (what keeps fitting fast on long harvests)."""
    import importlib

    F = importlib.import_module("hostgap.model.attribution.fit")  # the package's `fit` is the function

    class Counting:
        calls = 0

        def sse(self, cut: int) -> float:
            Counting.calls += 1
            return float((cut - 637) ** 2)

    cuts = np.arange(1000)
    assert F._search_cuts(Counting(), cuts) == 637
    assert 0 < Counting.calls <= 6 * F._COARSE_BREAKS < len(cuts) / 2


def test_a_kept_term_whose_column_is_all_zero_gets_a_zero_coefficient():
    """NNLS runs on unit-norm columns; a column of zeros keeps the norm 1 (not 0), so its
    coefficient is 0, not 0/0 (the survivor of `norms[norms == 0] = 1.0` -> `!=`)."""
    import importlib

    F = importlib.import_module("hostgap.model.attribution.fit")
    rng = np.random.default_rng(3)
    X = np.zeros((12, 6))
    X[:, 0], X[:, 1] = 1.0, rng.uniform(1, 50, 12)  # β and Σp; the Σc column (2) is all zero
    y = 5.0 + 2.0 * X[:, 1]
    coef, sse = F._nnls_fit(X, y, np.ones(12), [0, 1, 2])
    assert np.isfinite(coef).all() and coef[2] == 0.0
    assert coef[:2] == pytest.approx([5.0, 2.0], rel=1e-9) and sse == pytest.approx(0.0, abs=1e-12)


def test_the_split_search_sse_is_the_two_segments_own_least_squares_error():
    """_SplitSearch's SSE of a split (from prefix sums of Gram matrices, A·b and b²) is the sum
    of the two segments' NNLS errors refitted on their rows, also where b is far from 1 (absolute
    loss): the b² sums are part of it (the survivor `bb = b * b` -> `b / b`)."""
    import importlib

    F = importlib.import_module("hostgap.model.attribution.fit")
    rng = np.random.default_rng(5)
    n = 40
    A = np.column_stack([np.ones(n), np.sort(rng.uniform(1, 30, n))])
    b = np.where(A[:, 1] < 15, 3.0 + 0.5 * A[:, 1], 1.0 + 2.0 * A[:, 1]) + rng.normal(0, 0.3, n)
    search = F._SplitSearch(A, b)
    for m in (10, 20, 30):
        direct = F._nnls_fit(A[:m], b[:m], np.ones(m), [0, 1])[1] + F._nnls_fit(A[m:], b[m:], np.ones(n - m), [0, 1])[1]
        assert search.sse(m) == pytest.approx(direct, rel=1e-6, abs=1e-9)
