"""Attribution model: recovery of known coefficients, conservation, baseline, refusals."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hostgap
from budget import examples
from hostgap.errors import HostgapError
from hostgap.model import attribution as A
from hostgap.model.steptable.files import Steps
from hostgap.model.synth import synth_steps


@pytest.fixture(scope="session")
def exact():
    data = synth_steps(800, seed=0, noise=0.0)
    return data, A.fit(data.steps)


@pytest.fixture(scope="session")
def noisy():
    data = synth_steps(1000, seed=3, noise=0.01)
    test = A.split_mask(data.steps, 0.3, seed=0)
    model = A.fit(data.steps.subset(~test))
    return data, model, data.steps.subset(test)


def _gap_of(steps: Steps, prefill: bool, truth_break: float) -> tuple[float, float]:
    """Σp values of the training steps either side of the true break (any split in between
    is the same partition)."""
    sp = steps.sum_p[steps.is_prefill == prefill]
    return sp[sp <= truth_break].max(), sp[sp > truth_break].min()


def test_noise_free_recovers_every_coefficient_and_the_break(exact):
    data, model = exact
    for name in A.CLASSES:
        cm = model.classes[name]
        assert len(cm.segments) == 2, cm.notes
        lo, hi = _gap_of(data.steps, name == "prefill", data.truth[name][0][0])
        assert lo <= cm.segments[0].sum_p_max < hi
        for seg, (_, coef) in zip(cm.segments, data.truth[name]):
            # rounding to whole ns is the only noise: 1e-4 relative covers it
            np.testing.assert_allclose(seg.coef, coef, rtol=2e-3, atol=1e-6)


def test_decode_fits_one_per_request_constant(exact):
    _, model = exact
    cm = model.classes["decode"]
    assert [A.TERMS[j] for j in cm.terms] == ["beta_ns", "a4_ns_per_request", "a2_ns_per_kv_token"]
    for seg in cm.segments:
        assert seg.coef[1] == 0 and seg.coef[3] == 0 and seg.coef[5] == 0


def test_noisy_recovery_within_tolerance_where_identifiable(noisy):
    data, model, _ = noisy
    # With 1 % noise, β, a1, a2, a4 (and the decode constant) are well determined; a3 and a5
    # carry a few % of a step at most and are checked only on noise-free data.
    checks = {"prefill": (0, 1, 2, 4), "decode": (0, 2, 4)}
    for name, idx in checks.items():
        for seg, (_, coef) in zip(model.classes[name].segments, data.truth[name]):
            got, want = np.array(seg.coef)[list(idx)], np.array(coef)[list(idx)]
            np.testing.assert_allclose(got, want, rtol=0.12)


def test_shares_add_up_to_prediction_and_are_non_negative(noisy):
    _, model, test = noisy
    sh = A.attribute(model, test)
    per_step = np.bincount(sh.step_index, weights=sh.share_ns, minlength=len(test))
    np.testing.assert_allclose(per_step, A.predict(model, test), rtol=1e-12)
    assert (sh.share_ns >= 0).all() and (sh.host_ns >= 0).all() and (sh.device_ns >= 0).all()
    np.testing.assert_allclose(sh.device_ns + sh.host_ns, sh.share_ns, rtol=1e-12)


def test_rescaled_shares_add_up_to_measured(noisy):
    _, model, test = noisy
    sh = A.attribute(model, test, rescale=True)
    per_step = np.bincount(sh.step_index, weights=sh.share_ns, minlength=len(test))
    np.testing.assert_allclose(per_step, test.wall_ns, rtol=1e-12)


def test_fraction_split_uses_measured_host_fraction(noisy):
    _, model, test = noisy
    sh = A.attribute(model, test)
    host = np.bincount(sh.step_index, weights=sh.host_ns, minlength=len(test))
    np.testing.assert_allclose(host / sh.predicted_ns, test.host_exposed_ns / test.wall_ns, rtol=1e-9)


def test_model_split_finds_the_per_request_host_cost(noisy):
    data, model, test = noisy
    sh = A.attribute(model, test, split="model")
    host_step = np.bincount(sh.step_index, weights=sh.host_ns, minlength=len(test))
    b, per_req = data.host_truth
    truth = b + per_req * test.n_requests
    # split="model" scales host-model shares into T̂; per step it tracks the true host time
    assert np.median(np.abs(host_step / truth - 1)) < 0.05
    # host cost does not grow with context length: decode requests of one step share it evenly
    dec = ~test.is_prefill & (test.n_requests > 8)
    k = int(np.flatnonzero(dec)[0])
    h = sh.host_ns[sh.step_index == k]
    assert h.std() / h.mean() < 0.05


def test_baseline_loses_where_context_lengths_vary(noisy):
    _, model, test = noisy
    m = A.evaluate(model, test)
    g = {x.step_class: x for x in m.groups}
    for name in A.CLASSES:
        assert g[name].rel_err[1] * 3 < g[name].baseline_rel_err[1]
        assert g[name].improvement[1] > 3
        assert g[name].r2 > g[name].baseline_r2


def test_fixed_context_merges_the_context_term():
    data = synth_steps(600, seed=5, noise=0.0, context="fixed", decode_fraction=1.0)
    model = A.fit(data.steps)
    cm = model.classes["decode"]
    assert 2 not in cm.terms  # Σc = 1024·|B|: a2 cannot be told from the per-request constant
    assert any("a2_ns_per_kv_token" in n for n in cm.notes)
    assert "prefill" not in model.classes


def test_no_cache_prefill_merges_context_terms():
    data = synth_steps(400, seed=2, noise=0.0, decode_fraction=0.0)
    r = data.steps.requests
    c = r.p.copy()  # s = q: nothing cached, no co-batched decodes
    keep = r.prefill
    steps = _rebuild(data.steps, keep, c)
    model = A.fit(steps)
    notes = " ".join(model.classes["prefill"].notes)
    assert "a2_ns_per_kv_token" in notes and "a5" in notes
    sh = A.attribute(model, steps)
    assert (sh.share_ns >= 0).all()


def _rebuild(steps: Steps, keep: np.ndarray, c: np.ndarray) -> Steps:
    from hostgap.model.steptable.files import Requests

    r = steps.requests
    si = r.step_index[keep]
    p, c = r.p[keep], c[keep]
    n = len(steps)
    counts = np.bincount(si, minlength=n)
    req = Requests(np.concatenate([[0], np.cumsum(counts)]), r.request[keep], p, c, r.prefill[keep])
    return replace(
        steps,
        requests=req,
        n_requests=counts.astype(float),
        n_prefill=counts.astype(float),
        sum_p=np.bincount(si, p, n),
        sum_c=np.bincount(si, c, n),
        sum_pp=np.bincount(si, p * p, n),
        sum_pc=np.bincount(si, p * c, n),
    )


def test_aggregates_alone_fit_the_same_model(exact):
    data, model = exact
    agg = replace(data.steps, requests=None)
    m2 = A.fit(agg)
    for name in A.CLASSES:
        for s1, s2 in zip(model.classes[name].segments, m2.classes[name].segments):
            np.testing.assert_allclose(s1.coef, s2.coef, rtol=1e-9)
    with pytest.raises(HostgapError, match="per-request"):
        A.attribute(m2, agg)


def test_one_batch_size_is_refused():
    data = synth_steps(300, seed=1, noise=0.0, decode_fraction=1.0, max_batch=1)
    with pytest.raises(HostgapError, match="same batch size"):
        A.fit(data.steps)


def test_too_few_steps_is_refused():
    data = synth_steps(30, seed=1, decode_fraction=0.9)
    with pytest.raises(HostgapError, match="too few"):
        A.fit(data.steps)
    m = A.fit(data.steps, classes=("decode",))  # the other class alone still fits
    assert set(m.classes) == {"decode"}
    with pytest.raises(HostgapError, match="no prefill fit"):
        A.predict(m, data.steps)


def test_single_segment_when_no_break_in_truth():
    flat = ((np.inf, (6.0e6, 0.0, 30.0, 0.0, 80.0e3, 0.0)),)
    data = synth_steps(500, seed=4, noise=0.01, decode_fraction=1.0, decode_truth=flat)
    cm = A.fit(data.steps).classes["decode"]
    assert len(cm.segments) == 1 and "BIC" in " ".join(cm.notes)


def test_attribute_step_matches_vectorised(noisy):
    _, model, test = noisy
    sh = A.attribute(model, test)
    r = test.requests
    for k in (0, 1, 2, 5, 8):
        sl = slice(r.offsets[k], r.offsets[k + 1])
        one = A.attribute_step(model, r.p[sl], r.c[sl], prefill=bool(test.is_prefill[k]))
        np.testing.assert_allclose(one.share_ns, sh.share_ns[sl], rtol=1e-12)


@settings(**examples(60), deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 65536)), min_size=1, max_size=300), st.floats(0, 1))
def test_step_shares_conserve_and_stay_non_negative(model_rows, f):
    model = _MODEL[0]
    p = np.array([q for q, _ in model_rows], float)
    c = p + np.array([s for _, s in model_rows], float)
    out = A.attribute_step(model, p, c, host_fraction=f)
    assert (out.share_ns >= 0).all() and (out.host_ns >= 0).all() and (out.device_ns >= 0).all()
    np.testing.assert_allclose(out.share_ns.sum(), out.predicted_ns, rtol=1e-12)
    np.testing.assert_allclose(out.host_ns.sum(), f * out.predicted_ns, rtol=1e-9, atol=1e-6)


_MODEL = [A.fit(synth_steps(500, seed=11, noise=0.01).steps)]


def test_json_round_trip_keeps_predictions(noisy, tmp_path):
    _, model, test = noisy
    d = A.to_json(model)
    assert d["schema_version"] == hostgap.SCHEMA_VERSION
    assert d["provenance"]["data_sha256"] and d["provenance"]["numpy"]
    path = tmp_path / "m.json"
    A.save_model(model, str(path))
    back = A.load_model(str(path))
    np.testing.assert_allclose(A.predict(back, test), A.predict(model, test), rtol=1e-12)
    np.testing.assert_allclose(
        A.attribute(back, test, split="model").host_ns, A.attribute(model, test, split="model").host_ns, rtol=1e-12
    )
    d["schema_version"] = 999
    path.write_text(json.dumps(d))
    with pytest.raises(HostgapError, match="schema_version"):
        A.load_model(str(path))
    path.write_text('{"kind": "something else"}')
    with pytest.raises(HostgapError, match="not a hostgap attribution model"):
        A.load_model(str(path))


def test_host_dominated_data_is_flagged():
    data = synth_steps(400, seed=6, noise=0.01)
    s = data.steps
    cpu = replace(s, gpu_active_ns=np.zeros(len(s)), host_exposed_ns=s.wall_ns.copy())
    m = A.fit(cpu)
    ev = A.evaluate(m, cpu)
    assert all("host-dominated" in g.note for g in ev.groups)
    assert all(g.regime == "host-bound" for g in ev.groups)
    with pytest.raises(HostgapError, match="gpu_active"):
        A.fit(cpu, target="gpu_active_ns")


def test_split_mask_is_deterministic_and_held_out_respects_training(noisy):
    data, model, _ = noisy
    a = A.split_mask(data.steps, 0.3, seed=0)
    assert (a == A.split_mask(data.steps, 0.3, seed=0)).all()
    assert 0.2 < a.mean() < 0.4
    assert not (a == A.split_mask(data.steps, 0.3, seed=1)).all()
    prov = {**model.provenance, "data_sha256_all": data.steps.data_sha256(), "split": {"test_fraction": 0.3, "seed": 0}}
    m2 = replace(model, provenance=prov)
    assert (A.held_out(m2, data.steps) == a).all()
    other = synth_steps(50, seed=99).steps
    assert A.held_out(m2, other).all()


def test_pc_term_pays_off_when_chunk_and_depth_pair():
    """Chunked prefill over deep caches: attention work ~ q·s. Without Σp·c the model must
    spread it over Σp, Σc and Σp², and loses accuracy (METHOD.md §8's blind spot)."""
    strong = tuple((b, (c[0], c[1], c[2], c[3], c[4], 0.5)) for b, c in synth_steps.__kwdefaults__["prefill_truth"])
    data = synth_steps(900, seed=8, noise=0.005, decode_fraction=0.0, prefill_truth=strong)
    test = A.split_mask(data.steps, 0.3)
    train, held = data.steps.subset(~test), data.steps.subset(test)
    with_pc = A.evaluate(A.fit(train), held).groups[0]
    without = A.evaluate(A.fit(train, use_pc=False), held).groups[0]
    assert with_pc.rel_err[1] * 2 < without.rel_err[1]


def test_gpu_active_target_and_absolute_loss(noisy):
    data, _, test = noisy
    train = data.steps.subset(~A.split_mask(data.steps, 0.3, seed=0))
    dev = A.fit(train, target="gpu_active_ns")
    assert not dev.components
    sh = A.attribute(dev, test)
    assert (sh.host_ns == 0).all()
    per = np.bincount(sh.step_index, weights=sh.share_ns, minlength=len(test))
    assert np.median(np.abs(per / test.gpu_active_ns - 1)) < 0.02
    ab = A.fit(train, loss="absolute")
    g = {x.step_class: x for x in A.evaluate(ab, test).groups}
    assert g["all"].r2 > 0.99
    with pytest.raises(HostgapError, match="loss"):
        A.fit(train, loss="l1")


def test_gram_split_search_matches_direct_fits():
    data = synth_steps(300, seed=12, noise=0.02, decode_fraction=1.0)
    s = data.steps
    X = A.step_features(s)
    y = s.wall_ns
    kept = [0, 4, 2]
    order = np.argsort(X[:, 1], kind="stable")
    Xo, yo = X[order], y[order]
    Ao = Xo[:, kept] / yo[:, None]
    search = A._SplitSearch(Ao / np.linalg.norm(Ao, axis=0), np.ones(len(yo)))
    for m in (40, 120, 200):
        direct = A._nnls_fit(Xo[:m], yo[:m], yo[:m], kept)[1] + A._nnls_fit(Xo[m:], yo[m:], yo[m:], kept)[1]
        assert search.sse(m) == pytest.approx(direct, rel=1e-6, abs=1e-12)
