"""The step-model fit's bookkeeping (hostgap.model.fitting.measured) on hand-made results documents:
what a cell reads, the regime boundary interpolation, the model file's checks. Expected values
are worked out by hand in the comments."""

from __future__ import annotations

import json
import math

import pytest

import hostgap
from hostgap.errors import HostgapError
from hostgap.model.fitting import measured as fitting
from hostgap.model.fitting.measured import (
    Boundary,
    RegimeCell,
    _crossing,
    boundaries,
    cell_from_results,
    data_hash,
    load_model,
    regime_cells,
    tp_label,
)


def doc(**kw) -> dict:
    base = {
        "run_id": "r1",
        "preset": "llama-3.1-8b",
        "device": "h100-sxm",
        "engine": "vllm",
        "mode": "eager",
        "batch": 4,
        "prompt_len": 100,
        "n1": 3,
        "n2": 4,
        "differencing": {"t_step_ns": 9e6, "g_step_ns": 6e6, "h_step_ns": 3e6, "k_step": 400, "host_fraction": 0.3},
        "taxbreak": {"orchestrate_ns": 1200.0, "kernels_per_step": 4, "launch_floor_ns": 4500, "hdbi": 0.6},
        "steps_decode": [{}, {}, {}],
    }
    base.update(kw)
    return base


def test_cell_reads_the_results_and_derives_per_kernel_and_context():
    """orchestration 1200 over 3 steps x 4 kernels: 100 ns per kernel; context = prompt 100 +
    (N1 + N2 - 1) / 2 = 100 + 3 = 103; TP 1 when the file does not say."""
    c = cell_from_results(doc())
    assert c.orch_per_kernel_ns == 100.0 and c.context == 103 and c.tp == 1
    assert (c.host_fraction, c.hdbi, c.launch_floor_ns, c.batch) == (0.3, 0.6, 4500.0, 4)
    assert c.usable and c.missing == []
    # no steps: no per-kernel figure; a count instead of a list works too
    assert math.isnan(cell_from_results(doc(steps_decode=0)).orch_per_kernel_ns)
    assert cell_from_results(doc(steps_decode=6)).orch_per_kernel_ns == 50.0
    assert cell_from_results(doc(tp=2)).tp == 2
    assert cell_from_results(doc(prompt_len=None)).context is None


def test_cell_falls_back_to_the_verdict_for_host_fraction_and_hdbi():
    d = doc(
        differencing={"t_step_ns": 9e6, "g_step_ns": 6e6, "k_step": 400},
        taxbreak={},
        verdict={"host_fraction": 0.42, "hdbi": 0.7, "verdict": "host-bound"},
    )
    c = cell_from_results(d)
    assert (c.host_fraction, c.hdbi, c.verdict) == (0.42, 0.7, "host-bound")


def test_cell_names_what_a_fit_misses():
    d = doc(preset=None, batch=None, differencing={"t_step_ns": "x", "g_step_ns": 0, "k_step": 5})
    c = cell_from_results(d)
    assert c.missing == ["arch (or a known preset)", "batch", "differencing.t_step_ns", "differencing.g_step_ns"]
    assert not c.usable


def test_crossing_interpolates_in_log2():
    """f 0.5 at x = 1, 0.0 at x = 4: the line in log2 x (0 -> 2) reaches 0.25 half way: x = 2."""
    assert _crossing([1, 4], [0.5, 0.0], 0.25) == pytest.approx(2.0)
    assert _crossing([1, 4, 16], [0.5, 0.4, 0.1], 0.25) == pytest.approx(2 ** (2 + 0.15 / 0.3 * 2))
    assert _crossing([1, 4], [0.3, 0.3], 0.25) is None
    assert _crossing([1, 4], [0.1, 0.2], 0.25) is None


def rc(batch, prompt, f, model="m", tp=1):
    return RegimeCell(model, "dev", "vllm", "eager", batch, prompt, f, None, "r", tp=tp)


def test_boundaries_per_axis_with_repeats_averaged():
    """prompt 128: batch 1 (0.6 and 0.4: mean 0.5), batch 4 (0.0): crossing at batch 2.
    prompt 512: 0.3 at batch 1, 0.1 at 4: 0.25 is a quarter of the way, batch 2 ** 0.5. Along
    prompt_len at batch 1:
    0.5 and 0.3 (both above); at batch 4: 0.0 and 0.1 (both below)."""
    cells = [rc(1, 128, 0.6), rc(1, 128, 0.4), rc(4, 128, 0.0), rc(1, 512, 0.3), rc(4, 512, 0.1)]
    b = boundaries(cells)
    by = {(x.axis, x.fixed): x for x in b}
    assert set(by) == {("batch", 128), ("batch", 512), ("prompt_len", 1), ("prompt_len", 4)}
    assert by[("batch", 128)].crossing == pytest.approx(2.0)
    assert "crosses 0.25 at batch ~ 2" in by[("batch", 128)].note
    assert by[("batch", 512)].crossing == pytest.approx(2 ** (0.05 / 0.2 * 2))
    assert by[("prompt_len", 1)].crossing is None
    assert by[("prompt_len", 1)].note.startswith("host-bound at every prompt_len measured (128-512")
    assert by[("prompt_len", 4)].note.startswith("below 0.25 at every prompt_len measured")
    assert all(isinstance(x, Boundary) and x.model == "m (dev, vllm eager)" for x in b)
    assert boundaries([rc(1, 128, 0.5, tp=2), rc(4, 128, 0.0, tp=2)])[0].model == "m (dev, vllm eager, TP-2)"
    assert (tp_label(1), tp_label(4)) == ("", ", TP-4")


def test_regime_cells_skip_runs_without_a_host_fraction():
    d_no = doc(run_id="r2", differencing={"t_step_ns": 1}, verdict={})
    cells = regime_cells([doc(), d_no])
    assert len(cells) == 1
    c = cells[0]
    assert (c.model, c.host_fraction, c.regime, c.context, c.batch) == ("llama-3.1-8b", 0.3, "host-bound", 103, 4)


def test_measured_median_ignores_unknown_and_non_positive_values():
    cs = [cell_from_results(doc(taxbreak={"launch_floor_ns": v})) for v in (3000, None, 0, 5000, -1, 4000)]
    assert fitting._measured_median(cs, "launch_floor_ns") == 4000.0
    assert fitting._measured_median(cs[1:3], "launch_floor_ns") is None


def test_data_hash_ignores_run_order_but_not_content():
    a, b = {"run_id": "a", "x": 1}, {"run_id": "b", "x": 2}
    assert data_hash([a, b]) == data_hash([b, a])
    assert data_hash([a, b]) != data_hash([a, {"run_id": "b", "x": 3}])
    assert data_hash([a], {"k.csv": "00"}) != data_hash([a])


def test_model_file_checks(tmp_path):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"kind": "other"}))
    with pytest.raises(HostgapError, match="not a hostgap step model"):
        load_model(p)
    p.write_text(json.dumps({"kind": fitting.MODEL_KIND, "schema_version": -1}))
    with pytest.raises(HostgapError, match="schema_version -1"):
        load_model(p)
    p.write_text(json.dumps({"kind": fitting.MODEL_KIND, "schema_version": hostgap.SCHEMA_VERSION, "groups": [{}]}))
    with pytest.raises(HostgapError, match="malformed model"):
        load_model(p)
    p.write_text("{")
    with pytest.raises(HostgapError, match="not valid JSON"):
        load_model(p)
    with pytest.raises(HostgapError, match="cannot read model"):
        load_model(tmp_path / "none.json")
    ok = {"kind": fitting.MODEL_KIND, "schema_version": hostgap.SCHEMA_VERSION, "groups": [], "tp_form": "serial"}
    p.write_text(json.dumps(ok))
    m = load_model(p)
    assert (m.groups, m.tp_form, m.all_reduce, m.rooflines) == ((), "serial", None, ())
    assert m.group_for("dev", "vllm") is None and m.roofline_for("dev") is None


def test_fit_uses_the_given_roofline_only_for_groups_on_its_device():
    """Two cells on an H100 (one group); a roofline fitted on the H100 is the group's, one
    fitted on an A100 is not (the group keeps the documented defaults) but is kept in the file."""
    from hostgap.model.roofline import DEFAULT_EFFICIENCY, Efficiency, RooflineModel

    docs = [
        doc(run_id="a", batch=1),
        doc(
            run_id="b",
            batch=8,
            differencing={"t_step_ns": 12e6, "g_step_ns": 8e6, "h_step_ns": 4e6, "k_step": 400, "host_fraction": 1 / 3},
        ),
    ]
    h100 = RooflineModel("h100-sxm", {"gemm": Efficiency(1000.0, 0.9, 0.9)}, "fitted", "family")
    (g,) = fitting.fit(docs, rl=h100).groups
    assert g.device == "h100-sxm" and g.roofline is h100
    a100 = RooflineModel("a100-80gb", {"gemm": Efficiency(1000.0, 0.9, 0.9)}, "fitted", "family")
    m = fitting.fit(docs, rl=a100)
    assert m.groups[0].roofline.efficiencies == DEFAULT_EFFICIENCY and m.rooflines == (a100,)
    assert m.provenance["devices"] == ["a100-80gb", "h100-sxm"]
