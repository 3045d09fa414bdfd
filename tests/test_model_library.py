"""The model commands' library: one way to build a setup (scenarios.build_setup), the prediction
beside measured runs (prediction), the regime map (regimes) and fitting from sources
(fit_sources); each as a plain function with exact answers."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from hostgap.anatomy.verdict import DEVICE_BOUND_MAX, HOST_BOUND_MIN
from hostgap.errors import HostgapError
from hostgap.model import cell as cell_model
from hostgap.model import prediction, regimes
from hostgap.model.fitting import measured as fitting
from hostgap.model.fitting import sources as fit_sources
from hostgap.model.roofline import OpSamples, default_model
from hostgap.model.stepmodel import DEFAULT_DEVICE_SCALE, DEFAULT_HOST
from hostgap.model.tp import AllReduceModel
from hostgap.model.whatif import registry as scenarios
from test_model_stepmodel import _results, _write

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A model fitted on hf runs of llama-3.2-1b on an H100, its file, and the runs' files."""
    d = tmp_path_factory.mktemp("fitted")
    docs = _results(batches=(1, 4, 16), prompts=(128, 512), noise=0.01)
    model = fitting.fit(docs)
    path = d / "m.json"
    fitting.write_model(model, path)
    return model, str(path), _write(d, docs)


def _model_file(tmp_path, **kw):
    path = tmp_path / "m.json"
    fitting.write_model(fitting.FittedModel((), {"data_sha256": "0" * 64}, **kw), path)
    return str(path)


# -- scenarios.build_setup ------------------------------------------------------------------


def test_default_setup_is_build_setup_without_a_model():
    for kw in ({}, {"device": "a100", "batch": 8, "tp": 2, "mode": "graph", "engine": "hf", "capture": "full"}):
        assert scenarios.default_setup("llama-3.1-8b", **kw) == scenarios.build_setup("llama-3.1-8b", **kw)[0]
    s, basis = scenarios.build_setup("llama-3.1-8b", context=4096, dtype="fp8", kernels_per_step=321.0)
    assert (s.cell.context, s.cell.dtype, s.cell.q_tokens, s.kernels_per_step) == (4096, "fp8", 1, 321.0)
    assert s.device_scale == DEFAULT_DEVICE_SCALE["h100-sxm"] and s.roofline == default_model("h100-sxm")
    assert s.all_reduce is None and s.tp_form == "overlap"
    assert basis == (
        "no fitted model: default efficiencies and host term (docs/models.md); default efficiencies x 0.864 "
        "(h100-sxm level from the published 8B step); launch floor 4.707 us (default:H100 (TaxBreak paper "
        "null-kernel mean))"
    )
    a100, basis = scenarios.build_setup("llama-3.1-8b", device="a100", engine="hf")
    assert a100.device_scale == 1.0 and " x " not in basis and "launch floor 4.600 us" in basis
    assert a100.host.serial_ns == DEFAULT_HOST["hf"].serial_ns


def test_build_setup_errors_name_the_preset_then_the_device_then_the_model(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(HostgapError, match="^nosuch: unknown preset"):
        scenarios.build_setup("nosuch", device="nosuch", model=str(bad))
    with pytest.raises(HostgapError, match="^nosuch: unknown device"):
        scenarios.build_setup("tiny", device="nosuch", model=str(bad))
    with pytest.raises(HostgapError, match="bad.json: not valid JSON"):
        scenarios.build_setup("tiny", model=str(bad))
    with pytest.raises(HostgapError, match="bad.json: not valid JSON"):
        scenarios.build_setup("tiny", device_file=str(bad))


def test_build_setup_with_the_model_s_group(fitted):
    model, path, _ = fitted
    (g,) = model.groups
    s, basis = scenarios.build_setup("llama-3.2-1b", device=H100, engine="hf", model=path, kernels_per_step=9.0)
    assert (s.roofline, s.device_scale, s.host) == (g.roofline, g.device_scale, g.host)
    assert (s.all_reduce, s.tp_form, s.kernels_per_step) == (model.all_reduce, model.tp_form, 9.0)
    assert basis == (
        f"fitted model {path} ({H100}/hf/TP-1, 6 cells, held-out MAPE {g.heldout.mape * 100:.1f} %, "
        f"max {g.heldout.max_error * 100:.1f} %)"
    )


def test_build_setup_with_a_model_without_the_cell_s_group(fitted, tmp_path):
    _, path, _ = fitted
    s, basis = scenarios.build_setup("llama-3.2-1b", device=H100, engine="vllm", model=path)
    assert basis.startswith(f"{path} has no group for h100-sxm/vllm/TP-1: default efficiencies and host term; ")
    assert s.device_scale == DEFAULT_DEVICE_SCALE["h100-sxm"] and s.host.serial_ns == DEFAULT_HOST["vllm"].serial_ns
    ar = AllReduceModel("a100-80gb", {2: 1e4}, {2: 1e11}, 3e11, "test")
    rl = replace(default_model("a100-80gb"), source="kernel times")
    own = _model_file(tmp_path, rooflines=(rl,), all_reduce=ar, tp_form="additive")
    s, basis = scenarios.build_setup("llama-3.1-8b", device="a100", tp=2, model=own)
    assert s.roofline == rl and s.device_scale == 1.0 and s.all_reduce == ar and s.tp_form == "additive"
    assert basis.startswith(
        f"{own}: efficiencies fitted for a100-80gb (kernel times); no measured runs for a100-80gb/vllm/TP-2: "
        "default host term; launch floor"
    )
    s, basis = scenarios.build_setup("llama-3.1-8b", device="h100", model=own)
    assert s.roofline == rl and s.device_scale == 1.0 and " x " not in basis
    assert basis.startswith(
        f"{own}: efficiencies fitted on a100-80gb applied to h100-sxm (same fractions of h100-sxm's datasheet "
        "peaks and bandwidth, same t_min); default host term; launch floor 4.707 us"
    )


# -- prediction -------------------------------------------------------------------------------


def _doc(**kw):
    d = _results(batches=(4,), prompts=(512,), noise=0.0)[0]
    d.update(kw)
    return d


def test_measured_match_takes_only_the_same_cell():
    s = scenarios.build_setup("llama-3.2-1b", device=H100, engine="hf", batch=4, context=544)[0]
    ok = _doc()
    assert [c.run_id for c in prediction.measured_match([ok], s, "eager", "bfloat16")] == [ok["run_id"]]
    for other in (
        _doc(batch=8),
        _doc(preset="llama-3.2-3b", arch=None),
        _doc(mode="graph"),
        _doc(engine="vllm"),
        _doc(dtype="fp8"),
        _doc(device_name="NVIDIA A100-SXM4-80GB"),
        _doc(device_name="no such gpu", device="cuda"),
        _doc(tp=2),
        _doc(prompt_len=512 + 100),
        _doc(differencing={}),
    ):
        assert prediction.measured_match([other], s, "eager", "bfloat16") == [], other
    near = _doc(prompt_len=512 + 60)  # within 64 tokens
    assert len(prediction.measured_match([near], s, "eager", "bfloat16")) == 1
    unset = _doc(mode=None, dtype=None, engine=None)  # unset: eager, vLLM, the asked dtype
    assert prediction.measured_match([unset], s, "eager", "bfloat16") == []
    vllm = scenarios.build_setup("llama-3.2-1b", device=H100, batch=4, context=544)[0]
    assert len(prediction.measured_match([unset], vllm, "eager", "bfloat16")) == 1
    long = scenarios.build_setup("llama-3.2-1b", device=H100, engine="hf", batch=4, context=4000)[0]
    far = _doc(prompt_len=4000 - 32 - 150)  # 5 % of 4000 is 200 tokens
    assert len(prediction.measured_match([far], long, "eager", "bfloat16")) == 1


def test_predict_cell_places_measured_runs_and_takes_their_kernels(tmp_path):
    runs = [_doc(), _doc(run_id="g", mode="graph"), _doc(run_id="f", dtype="fp8")]
    runs[0]["differencing"]["k_step"] = 400.0
    files = _write(tmp_path, runs)
    kw = dict(device=H100, engine="hf", batch=4, context=544)
    p = prediction.predict_cell("llama-3.2-1b", what_ifs=("graphs", "fp8", "host=0.5"), **kw)
    assert p.measured == () and p.what_if_measured == ((), (), ()) and p.setup.kernels_per_step is None
    p = prediction.predict_cell("llama-3.2-1b", what_ifs=("graphs", "fp8", "host=0.5"), **kw, results=files)
    assert [c.run_id for c in p.measured] == [runs[0]["run_id"]]
    assert [[c.run_id for c in m] for m in p.what_if_measured] == [["g"], ["f"], []]
    assert p.setup.kernels_per_step == 400.0 and p.basis.endswith("; kernels per step 400 from 1 measured run(s)")
    assert p.step == cell_model.predict(p.setup) and p.what_ifs[0] == scenarios.run(p.setup, "graphs")
    c = p.measured[0]
    d = p.to_dict()
    assert d["measured"][0]["error_total"] == (p.step.total_ns - c.t_step_ns) / c.t_step_ns
    assert d["what_ifs"][0]["measured"][0]["run_id"] == "g" and d["what_ifs"][2]["measured"] == []
    fixed = prediction.predict_cell("llama-3.2-1b", kernels_per_step=300, **kw, results=files)
    assert fixed.setup.kernels_per_step == 300 and "measured run" not in fixed.basis
    graph = prediction.predict_cell("llama-3.2-1b", mode="graph", what_ifs=("graphs",), **kw, results=files)
    assert [c.run_id for c in graph.measured] == ["g"] and graph.what_if_measured == ((),)
    fp8 = prediction.predict_cell("llama-3.2-1b", dtype="fp8", what_ifs=("fp8",), **kw, results=files)
    assert [c.run_id for c in fp8.measured] == ["f"] and fp8.what_if_measured == ((),)


def test_predict_cell_checks_every_what_if_first_and_says_what_it_rests_on(fitted, tmp_path):
    with pytest.raises(HostgapError, match="unknown what-if 'warp'"):
        prediction.predict_cell("tiny", what_ifs=("graphs", "warp"), results=[str(tmp_path / "absent.json")])
    p = prediction.predict_cell("tiny", tp=2, tp_form="additive")
    assert p.setup.tp_form == "additive" and p.on_defaults and p.model is None
    _, path, _ = fitted
    own = prediction.predict_cell("llama-3.2-1b", device=H100, engine="hf", model=path)
    assert not own.on_defaults and own.model == path
    other = prediction.predict_cell("llama-3.2-1b", device=H100, model=path)  # no vLLM group: defaults
    assert other.on_defaults
    assert prediction.predict_cell("tiny", db=None).measured == ()


def test_predict_cell_reads_the_database_when_asked(tmp_path):
    from hostgap.store.database import RunsDB

    db = tmp_path / "runs.sqlite"
    with RunsDB(db) as d:
        d.add(_doc())
    p = prediction.predict_cell("llama-3.2-1b", device=H100, engine="hf", batch=4, context=544, db=str(db))
    assert len(p.measured) == 1


# -- regimes -------------------------------------------------------------------------------


def test_validity_judges_each_run():
    good = _doc(run_id="good")
    old_bad = _doc(run_id="old-bad")
    old_bad["differencing"]["host_fraction"] = -1.5  # no "valid" key: judged by its numbers
    stored_bad = _doc(run_id="stored-bad", valid=False, invalid_reasons=[])
    stored_ok = _doc(run_id="stored-ok", valid=True, invalid_reasons=["ignored"])
    stored_ok["differencing"]["host_fraction"] = -1.5  # stored verdict wins over the numbers
    busy = _doc(run_id="busy")
    busy["differencing"]["contended"] = True
    invalid, contended = regimes.validity([good, old_bad, stored_bad, stored_ok, busy])
    assert set(invalid) == {"old-bad", "stored-bad", "stored-ok"} and contended == {"busy"}
    assert any("host fraction" in r for r in invalid["old-bad"]) and invalid["stored-bad"] == ["checks failed"]
    assert invalid["stored-ok"] == ["ignored"]


def test_regime_map_of_runs_files_and_the_default_database(monkeypatch, tmp_path):
    docs = _results(batches=(1, 4, 16, 64), prompts=(512,), noise=0.0)
    for d, hf in zip(docs, (0.6, 0.4, 0.2, 0.05)):
        d["differencing"]["host_fraction"] = hf
    bad = _doc(run_id="bad")
    bad["differencing"]["host_fraction"] = 3.0
    paths = _write(tmp_path, [*docs, bad])
    m = regimes.regime_map(paths)
    assert [c.regime for c in m.cells] == ["host-bound", "host-bound", "balanced", "device-bound"]
    assert list(m.invalid) == ["bad"] and m.busy == frozenset() and not m.predicted
    assert [b.crossing for b in m.boundaries if b.axis == "batch"] == [pytest.approx(2**3.5)]
    doc = m.to_dict()
    assert doc["thresholds"] == {"host_bound_min": HOST_BOUND_MIN, "device_bound_max": DEVICE_BOUND_MAX}
    assert [c["contended"] for c in doc["cells"]] == [False] * 4 and doc["invalid"][0]["run_id"] == "bad"
    monkeypatch.setattr(fitting, "default_db", lambda: None)
    with pytest.raises(HostgapError, match="^--results: no measured cell"):
        regimes.regime_map()
    from hostgap.store.database import RunsDB

    db = tmp_path / "runs.sqlite"
    with RunsDB(db) as d:
        for x in docs:
            d.add(x)
    monkeypatch.setattr(fitting, "default_db", lambda: str(db))
    assert len(regimes.regime_map().cells) == 4  # nothing given: the default database
    assert len(regimes.regime_map(paths[:1]).cells) == 1  # files given: the database unread


def test_regime_map_predicts_each_cell(fitted, tmp_path):
    m = regimes.regime_map(paper_cells=True, predict=True)
    assert m.predicted and m.invalid == {} and all(c.run_id.startswith("published:") for c in m.cells)
    for c in m.cells:
        s = scenarios.build_setup(c.model, device=c.device, batch=c.batch, context=c.context, tp=c.tp, dtype=c.dtype)
        f = cell_model.predict(replace(s[0], mode=c.mode)).host_fraction
        assert c.predicted_host_fraction == pytest.approx(f)
    _, path, files = fitted
    cells = regimes.regime_map(files, predict=True, model=path).cells
    for c in cells:
        s = scenarios.build_setup(
            "llama-3.2-1b", device=H100, engine="hf", batch=c.batch, context=c.context, model=path
        )[0]
        assert c.predicted_host_fraction == cell_model.predict(s).host_fraction
        assert c.predicted_regime is not None
    plain = regimes.regime_map(files).cells
    assert all(c.predicted_host_fraction != c.predicted_host_fraction for c in plain)


def test_predicted_maps_unknown_engines_and_modes_and_leaves_unknown_cells_alone():
    from hostgap.model.fitting.measured import RegimeCell

    c = RegimeCell("llama-3.1-8b", "h100", "?", "?", 4, 100, 0.5, "host-bound", "r", None, 1, "bfloat16")
    p = regimes.predicted(c)
    s = scenarios.build_setup("llama-3.1-8b", batch=4, context=100)[0]
    assert p.predicted_host_fraction == cell_model.predict(s).host_fraction
    g = regimes.predicted(replace(c, engine="hf", mode="graph", context=300))
    s = scenarios.build_setup("llama-3.1-8b", batch=4, context=300, engine="hf", mode="graph")[0]
    assert g.predicted_host_fraction == cell_model.predict(s).host_fraction
    assert regimes.predicted(replace(c, model="nosuch")) == replace(c, model="nosuch")
    assert regimes.predicted(c, "/absent/model.json") == c


def test_published_document():
    d = regimes.published_document()
    assert set(d) == {"schema_version", "figures", "graph_launch", "energy"} and len(d["figures"]) > 5
    json.dumps(d, default=float)


# -- fit_sources -----------------------------------------------------------------------------


def test_default_model_path(monkeypatch, tmp_path):
    monkeypatch.setenv("HOSTGAP_MODEL", str(tmp_path / "x.json"))
    assert fit_sources.default_model_path() == tmp_path / "x.json"
    monkeypatch.delenv("HOSTGAP_MODEL")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert fit_sources.default_model_path() == tmp_path / "data" / "hostgap" / "model.json"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fit_sources.default_model_path() == tmp_path / "home" / ".local" / "share" / "hostgap" / "model.json"
    model = fitting.FittedModel((), {"data_sha256": "0" * 64})
    where = fit_sources.write_model(model)
    assert where == tmp_path / "home" / ".local" / "share" / "hostgap" / "model.json" and where.is_file()
    given = str(tmp_path / "given.json")
    assert fit_sources.write_model(model, given) == given and json.loads(open(given).read())["kind"]


def test_fit_sources_refuses_what_it_cannot_fit(monkeypatch, tmp_path, fitted):
    _, _, files = fitted
    monkeypatch.setattr(fitting, "default_db", lambda: None)
    for kw, msg in (
        ({}, "^--results: no measured runs given"),
        ({"results": files, "test_mlp": ["t.csv"]}, "^--test-mlp: needs --vidur-mlp"),
        ({"results": files, "test_device": "a100"}, "^--device: needs --vidur-mlp files"),
        ({"results": files, "device": "a100"}, "^--device: needs --vidur-mlp or --all-reduce"),
        ({"vidur_mlp": ["a.csv"]}, "^--vidur-mlp: needs --device: the GPU"),
        ({"results": files, "all_reduce": "ar.csv"}, "^--all-reduce: needs --device"),
        ({"results": files[:1]}, "^--results: no \\(device, engine, TP\\) group has two usable cells"),
    ):
        with pytest.raises(HostgapError, match=msg):
            fit_sources.fit_sources(**kw)
    broken = _results(batches=(1,), prompts=(128,))[0]
    del broken["differencing"]["k_step"]
    bad = _write(tmp_path, [broken])
    with pytest.raises(HostgapError, match="missing differencing.k_step"):
        fit_sources.fit_sources([*files, *bad])  # files: strict


def test_fit_sources_on_runs(fitted, tmp_path, monkeypatch):
    model, _, files = fitted
    o = fit_sources.fit_sources(files)
    (g,) = o.model.groups
    assert g.host == model.groups[0].host and o.kernel_files == 0 and o.kernel_device is None
    assert o.report["heldout_files"] == [] and o.report["tests"] == []
    (rg,) = o.report["groups"]
    assert rg == {
        "device": "h100-sxm", "engine": "hf", "tp": 1, "n_cells": 6,
        "heldout": g.heldout.to_dict(), "heldout_host_only": g.heldout_host_only.to_dict(),
    }  # fmt: skip
    d = o.to_dict()
    assert list(d) == ["schema_version", "heldout_files", "tests", "groups", "model"]
    from hostgap.store.database import RunsDB

    db = tmp_path / "runs.sqlite"
    with RunsDB(db) as r:
        for p in files:
            r.add(json.loads(open(p).read()))
    broken = json.loads(open(files[0]).read())
    del broken["differencing"]["k_step"]
    broken["run_id"] = "broken"
    with RunsDB(db) as r:
        r.add(broken)
    monkeypatch.setattr(fitting, "default_db", lambda: str(db))
    o = fit_sources.fit_sources()  # the database: a run lacking a key is skipped, not an error
    assert o.model.groups[0].n_cells == 6 and any(s.startswith("broken: missing") for s in o.model.skipped)


def _ops(n, seed):
    rng = np.random.default_rng(seed)
    keys = np.array(["attn_q", "mlp_up", "rmsnorm"] * (n // 3))
    flops = rng.uniform(1e9, 1e11, len(keys))
    nbytes = rng.uniform(1e6, 1e8, len(keys))
    time_ns = nbytes / 1e12 * 1e9 + flops / 5e14 * 1e9 + 3000
    return OpSamples(
        keys, flops, nbytes, np.ones(len(keys)), np.full(len(keys), 1e15), np.full(len(keys), 2e12), time_ns,
        keys, np.full(len(keys), 16),
    )  # fmt: skip


def test_fit_kernel_times_scores_each_file_by_the_others(monkeypatch):
    from hostgap.model import devices, vidur

    samples = {"a.csv": _ops(30, 0), "dir/b.csv": _ops(30, 1), "t.csv": _ops(12, 2)}
    monkeypatch.setattr(vidur, "read_mlp", lambda p, dev: p)
    monkeypatch.setattr(vidur, "as_hostgap_ops", lambda p: samples[str(p)])
    monkeypatch.setattr(vidur, "GEMM_KEYS", ("attn_q", "mlp_up"))
    monkeypatch.setattr(fitting, "file_hash", lambda p: f"hash of {p}")
    dev, h100 = devices.find_device("a100"), devices.find_device("h100")
    kernel_data: dict = {}
    report: dict = {"heldout_files": [], "tests": []}
    rl = fit_sources.fit_kernel_times(["a.csv", "dir/b.csv"], dev, ["t.csv"], h100, kernel_data, report)
    assert kernel_data == {"a.csv": "hash of a.csv", "dir/b.csv": "hash of dir/b.csv"}
    assert rl.device == "a100-80gb" and rl.source == "vidur kernel times a.csv, b.csv measured on a100-80gb"
    a, b = report["heldout_files"]
    assert (a["file"], b["file"], a["device"], a["rows"]) == ("a.csv", "b.csv", "a100-80gb", 30)
    from hostgap.model import roofline

    held = samples["a.csv"]
    only_b = roofline.fit(samples["dir/b.csv"], "a100-80gb")
    rel = np.abs(roofline.predict(only_b, held) - held.time_ns) / held.time_ns
    gemm = held.key != "rmsnorm"
    assert a["op_mape_pct"] == pytest.approx(rel.mean() * 100) and a["max_err_pct"] == pytest.approx(rel.max() * 100)
    assert a["gemm_mape_pct"] == pytest.approx(rel[gemm].mean() * 100)
    (t,) = report["tests"]
    test = samples["t.csv"]
    rel = np.abs(roofline.predict(rl, test) - test.time_ns) / test.time_ns
    assert (t["file"], t["device"], t["rows"]) == ("t.csv", "h100-sxm", 12)
    assert t["op_mape_pct"] == pytest.approx(rel.mean() * 100)
    one: dict = {"heldout_files": [], "tests": []}
    fit_sources.fit_kernel_times(["a.csv"], dev, [], dev, {}, one)
    assert one == {"heldout_files": [], "tests": []}  # one file: nothing to hold out


def test_fit_paper_is_the_shipped_cells():
    from hostgap.model.fitting import calibrate

    o = fit_sources.fit_paper()
    host, scale, rows = calibrate.paper_fit()
    assert o.paper is not None and o.paper.host == host and o.paper.device_scale == scale
    (g,) = o.model.groups
    fit_rows = [r for r in rows if r.use == "fit"]
    assert (g.device, g.engine, g.device_scale, g.host, g.n_cells) == ("h100-sxm", "vllm", scale, host, len(fit_rows))
    loo = np.array([r.loo for r in fit_rows])
    pub = np.array([r.published for r in fit_rows])
    assert g.heldout.mape == pytest.approx(np.mean(np.abs(loo - pub) / pub))
    assert o.model.provenance["n_cells"] == len(fit_rows) and o.model.provenance["source"] == "paper_cells.json"
    assert o.report == {"host": host.to_dict(), "device_scale": scale, "cells": [r.to_dict() for r in rows]}
    assert list(o.to_dict()) == ["schema_version", "host", "device_scale", "cells", "model"]


def test_fit_sources_wires_kernel_times_and_the_all_reduce(monkeypatch, fitted):
    from hostgap.model import tp, vidur

    _, _, files = fitted
    samples = {"a.csv": _ops(30, 0), "b.csv": _ops(30, 1), "t.csv": _ops(12, 2)}
    monkeypatch.setattr(vidur, "read_mlp", lambda p, dev: p)
    monkeypatch.setattr(vidur, "as_hostgap_ops", lambda p: samples[str(p)])
    monkeypatch.setattr(vidur, "GEMM_KEYS", ("attn_q", "mlp_up"))
    monkeypatch.setattr(vidur, "read_all_reduce", lambda p: f"rows of {p}")
    ar = AllReduceModel("a100-80gb", {2: 1e4}, {2: 1e11}, 3e11, "test")
    seen = []
    monkeypatch.setattr(tp, "fit_all_reduce", lambda rows, dev: seen.append((rows, dev.name)) or ar)
    monkeypatch.setattr(fitting, "file_hash", lambda p: f"hash of {p}")
    o = fit_sources.fit_sources(vidur_mlp=["a.csv", "b.csv"], device="a100", test_mlp=["t.csv"], test_device="h100")
    assert (o.kernel_files, o.kernel_device, o.test_device) == (2, "a100-80gb", "h100-sxm")
    assert o.model.groups == () and o.model.rooflines[0].device == "a100-80gb" and o.model.all_reduce is None
    assert len(o.report["heldout_files"]) == 2 and o.report["tests"][0]["device"] == "h100-sxm"
    assert o.model.provenance["kernel_data_sha256"] == {"a.csv": "hash of a.csv", "b.csv": "hash of b.csv"}
    same = fit_sources.fit_sources(vidur_mlp=["a.csv"], device="a100", test_mlp=["t.csv"])
    assert same.test_device == same.kernel_device == "a100-80gb" and same.report["heldout_files"] == []
    o = fit_sources.fit_sources(files, device="a100", all_reduce="ar.csv")
    assert seen == [("rows of ar.csv", "a100-80gb")] and o.model.all_reduce == ar
    assert (o.kernel_files, o.kernel_device, o.test_device) == (0, None, None) and len(o.model.groups) == 1
    assert o.model.provenance["kernel_data_sha256"] == {"ar.csv": "hash of ar.csv"}
