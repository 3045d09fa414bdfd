"""`regimes --published` (model/published.py) and the speculation reconciliation
(model/whatif/spec_residual.py): every figure has a row with a prediction and an error, or a reason;
the arithmetic of the rows pinned by hand."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hostgap.cli import cli
from hostgap.model import cell as cell_model
from hostgap.model import published
from hostgap.model.stepmodel import DEFAULT_HOST
from hostgap.model.whatif import paper as whatif
from hostgap.model.whatif import registry as scenarios
from hostgap.model.whatif import spec_residual as spec_reconcile


def _cli(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_error_against_a_value_and_a_range():
    assert published.error_against(1.1, 1.0, 1.0) == pytest.approx(0.1)
    assert published.error_against(0.5, 1.0, 1.0) == pytest.approx(-0.5)
    assert published.error_against(3.0, 1.36, 5.40) == 0.0
    assert published.error_against(1.0, 1.36, 5.40) == pytest.approx(1.0 / 1.36 - 1)
    assert published.error_against(6.0, 1.36, 5.40) == pytest.approx(6.0 / 5.40 - 1)


def test_every_figure_has_a_prediction_and_error_or_a_reason():
    rows = {r["id"]: r for r in published.table()}
    assert set(rows) == {
        "sglang_overlap",
        "vllm_10634_gap",
        "vllm_10634_async",
        "cores_ttft",
        "vllm_8147",
        "taxbreak_cpu",
        "sglang_29960",
        "vllm_graph_b200",
        "mpk",
        "paper_spec_cycle",
        "vllm_v06_api",
        "vllm_v06_sched",
        "hf_cb_async",
        "hf_cb_idle",
        "sglang_half_cpu",
    }
    for r in rows.values():
        if r["status"] == "predicted":
            assert r["predicted"] is not None and r["error"] is not None and not r["reason"], r["id"]
            assert r["predicted"] >= 0
        else:
            assert r["status"] == "outside the model" and len(r["reason"]) > 40 and r["error"] is None, r["id"]
        assert r["cell"] and r["source"]
    assert {i for i, r in rows.items() if r["status"] != "predicted"} == {"vllm_8147", "vllm_v06_api"}


def test_rows_by_hand():
    rows = {r["id"]: r for r in published.table()}
    h = DEFAULT_HOST["vllm"]
    # #10634 cell, graph mode batch 256: the GPU step hides the orchestration, the serial part is
    # the host: 222.5 us + 256 x 5.74 us = 1.692 ms; error against 5-6 ms: 1.692 / 5 - 1
    serial = (h.serial_ns + 256 * h.per_seq_ns) / 1e6
    assert rows["vllm_10634_gap"]["predicted"] == pytest.approx(serial)
    assert rows["vllm_10634_gap"]["error"] == pytest.approx(serial / 5.0 - 1)
    # with overlap that serial part is hidden: 0 ms, -100 % against the 0.2 ms end of the target
    assert rows["vllm_10634_async"]["predicted"] == 0.0 and rows["vllm_10634_async"]["error"] == -1.0
    # #8147: a 70 % GPU-busy step gains at most 1 / 0.7
    assert rows["vllm_8147"]["predicted"] == pytest.approx(1 / 0.7)
    s = scenarios.default_setup("llama-3.1-8b", batch=64, mode="graph")
    base = cell_model.predict(s)
    new_total = max(base.orchestration_ns + base.serial_ns, base.device_ns)
    assert rows["sglang_overlap"]["predicted"] == pytest.approx(base.total_ns / new_total)
    assert rows["vllm_v06_sched"]["predicted"] == pytest.approx(
        100
        * serial
        * 1e6
        / cell_model.predict(scenarios.default_setup("llama-3.1-8b", batch=256, mode="graph")).total_ns
    )
    # the two Blackwell graph launches: each predicted by the fit on the other points only
    assert rows["sglang_29960"]["cell"].endswith("(per-node cost fitted on vllm_b200 + trace_mi300x only)")
    assert abs(rows["sglang_29960"]["error"]) < 0.05 and abs(rows["vllm_graph_b200"]["error"]) < 0.2


def test_spec_candidates_by_hand():
    c = {r["condition"].split(" (E =")[0]: r for r in spec_reconcile.candidates()}
    h = DEFAULT_HOST["vllm"]
    # graph mode, batch 1: the verify step's orchestration hides; the serial part is the host:
    # 222.5 + 5.74 = 228.24 us, whatever the capture
    for k in ("graph (piecewise capture), per cycle", "graph (full capture), per cycle"):
        assert c[k]["host_ms"] == pytest.approx((h.serial_ns + h.per_seq_ns) / 1e6)
    eager = c["eager, per cycle"]["host_ms"]
    assert 5.5 < eager < 6.5
    # per emitted token: the eager cycle over E = 6.15 / 0.98 tokens
    assert c["eager, per emitted token"]["host_ms"] == pytest.approx(eager / (6.15 / 0.98))
    best = spec_reconcile.paper_condition()
    assert best["error"] == min((r["error"] for r in c.values()), key=abs)
    assert best["host_ms"] == pytest.approx(0.944, abs=0.01)


def test_regimes_published_cli_text_json_csv():
    r = _cli("regimes", "--published")
    assert r.exit_code == 0
    assert "vllm_8147" in r.output and "outside the model" in r.output and "error" in r.output
    j = json.loads(_cli("regimes", "--published", "--json").output)
    assert len(j["figures"]) == len(published.FIGURES)
    assert j["graph_launch"]["per_device"]["b200"]["per_node_ns"] == pytest.approx(930.0, abs=1)
    assert len(j["graph_launch"]["leave_one_out"]) == 3
    csv = _cli("regimes", "--published", "--csv").output.splitlines()
    assert csv[0] == "id,unit,published,predicted,error,status,regime" and len(csv) == 1 + len(published.FIGURES)


def test_predict_json_carries_each_new_scenario():
    r = _cli(
        "predict",
        "llama-3.1-8b",
        "--mode",
        "graph",
        "--batch",
        "64",
        "--what-if",
        "overlap",
        "--what-if",
        "cpu:cores=2,load=1",
        "--what-if",
        "megakernel",
        "--json",
    )
    d = json.loads(r.stdout)
    names = [w["name"] for w in d["what_ifs"]]
    assert names == ["overlap", "cpu", "megakernel"]
    for w in d["what_ifs"]:
        assert {"total_ns", "host_ns", "device_ns"} <= set(w["scenario"])
        assert w["scenario"]["host_ns"] >= 0
    assert d["what_ifs"][0]["scenario"]["ttft_added_ns"] == d["what_ifs"][0]["scenario"]["total_ns"]


def test_predict_bad_what_if_is_one_line_exit_2():
    r = CliRunner().invoke(cli, ["predict", "llama-3.1-8b", "--what-if", "cpu:cores=0"])
    assert r.exit_code == 2 and "cores must be in" in r.output and "Traceback" not in r.output


def test_rows_that_search_or_take_extremes_by_hand():
    rows = {r["id"]: r for r in published.table()}
    assert rows["cores_ttft"]["published"] == [1.36, 5.40] and rows["mpk"]["published"] == 1.7
    assert rows["vllm_8147"]["regime"] == "host-bound" and rows["vllm_8147"]["host_fraction"] == 0.3
    # TTFT on one core / baseline, 70B at TP 2, 4, 8 (2 + TP busy threads on one core): the largest
    ratios = []
    for tp in (2, 4, 8):
        w = scenarios.run(scenarios.default_setup("llama-3.1-70b", tp=tp), "cpu:cores=1")
        assert w.extra["slowdown"] == 2 + tp
        ratios.append(w.extra["ttft_ns"] / w.extra["ttft_base_ns"])
    assert rows["cores_ttft"]["predicted"] == pytest.approx(max(ratios)) and max(ratios) > min(ratios)
    # TaxBreak: the host speed found cuts orchestration by 29 %; the row is the step's change there
    s = scenarios.default_setup("llama-3.2-1b", batch=4, engine="hf")
    speed = float(rows["taxbreak_cpu"]["cell"].split("host ")[1].split("x faster")[0])
    base = cell_model.predict(s)
    at = cell_model.predict(s, host_speed=speed)
    assert 1 - at.orchestration_ns / base.orchestration_ns == pytest.approx(0.29, abs=0.003)
    assert rows["taxbreak_cpu"]["predicted"] == pytest.approx(100 * (1 - at.total_ns / base.total_ns), rel=0.01)
    assert rows["taxbreak_cpu"]["error"] == pytest.approx(rows["taxbreak_cpu"]["predicted"] / 14.0 - 1)
    # MPK: the largest megakernel-over-graphs gain of the three presets, and its cell names it
    gains = {
        p: scenarios.run(scenarios.default_setup(p), "megakernel").extra["speedup_vs_graphs"]
        for p in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b")
    }
    best = max(gains, key=lambda p: gains[p])
    assert rows["mpk"]["predicted"] == pytest.approx(gains[best]) and rows["mpk"]["cell"].startswith(best)
    assert rows["mpk"]["error"] == pytest.approx(gains[best] / 1.7 - 1)
    # the largest host fraction over the grid, in %
    fr = {
        (p, b): cell_model.predict(scenarios.default_setup(p, batch=b)).host_fraction
        for p in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b")
        for b in (1, 4, 16, 64)
    }
    (bp, bb) = max(fr, key=lambda k: fr[k])
    assert rows["sglang_half_cpu"]["predicted"] == pytest.approx(100 * fr[bp, bb])
    assert f"({bp}, batch {bb})" in rows["sglang_half_cpu"]["cell"]
    assert rows["sglang_overlap"]["regime"] == "device-bound"


def test_spec_best_condition_error_and_note():
    best = spec_reconcile.paper_condition()
    assert best["error"] == pytest.approx((best["host_ms"] - 0.768) / 0.768)
    assert best["cell"].endswith(
        "eager, per emitted token (E = 6.15 x 1.020 = 6.28 tokens per cycle from the paper's speed-ups)"
    )
    assert best["note"].startswith("nearest of the conditions the figure could be; the others: eager, per cycle: ")
    assert "graph (full capture), per cycle: 0.228 ms" in best["note"]
    assert best["note"].endswith(
        "whatever the tokens per cycle, the paper's figures put the residual at 0.63 of the GPU time, "
        "the model's verify cycle at 0.92 (docs/models.md §9)"
    )
    assert len(best["candidates"]) == 4


def test_the_papers_speculation_figures_imply_a_longer_verify_cycle():
    """By hand from the paper's numbers (12.19 ms wall, 6.41 ms GPU per plain step; 6.15x and
    0.98x per token; 0.768 ms per token): E = 6.15 / 0.98 = 6.2755 tokens per cycle, wall per
    token 12.19 / 6.15 = 1.98211 ms, GPU per token 1.98211 - 0.768 = 1.21411 ms."""
    c = spec_reconcile.implied_cycle()
    e = 6.15 / 0.98
    assert c["tokens_per_cycle"] == pytest.approx(e)
    assert c["min_gamma"] == 6  # 5 draft tokens could emit at most 6 < 6.2755
    assert c["cycle_wall_ms"] == pytest.approx(12.19 / 0.98)
    assert c["cycle_gpu_ms"] == pytest.approx((12.19 / 6.15 - 0.768) * e)
    assert c["cycle_host_ms"] == pytest.approx(0.768 * e) and c["cycle_host_ms"] == pytest.approx(4.8196, abs=1e-4)
    assert c["gpu_growth"] == pytest.approx(7.61918 / 6.41 - 1, abs=1e-5)
    assert c["host_drop"] == pytest.approx(1 - 4.81959 / 5.78, abs=1e-5)
    # the model's verify step over gamma + 1 = 5 tokens: memory-bound, within 2 % of a step
    assert 0 <= c["model_gpu_growth"] < 0.02


def test_the_papers_residual_to_gpu_ratio_holds_for_any_tokens_per_cycle():
    """The per-token residual over per-token GPU time is the cycle's ratio whatever E is:
    0.768 / (12.19 / 6.15 - 0.768) = 0.768 / 1.214114 = 0.63256, against the plain step's
    (12.19 - 6.41) / 6.41 = 0.90172; the model's verify cycle (gamma 4, eager) meets it only with
    a lower residual at its GPU time or more GPU time at its residual."""
    c = spec_reconcile.implied_cycle()
    assert c["residual_per_gpu"] == pytest.approx(0.63256, abs=1e-5)
    assert c["step_residual_per_gpu"] == pytest.approx(0.90172, abs=1e-5)
    w = whatif.run(scenarios.default_setup("llama-3.1-8b"), "spec:gamma=4,alpha=0.9")
    gpu, host = w.scenario.gpu_ns / 1e6, w.extra["host_per_cycle_ns"] / 1e6
    assert c["model_residual_per_gpu"] == pytest.approx(host / gpu)
    assert c["host_needed_ms"] == pytest.approx(0.63256 * gpu, rel=1e-5)
    assert c["tokens_if_host_lower"] == pytest.approx(0.63256 * gpu / 0.768, rel=1e-5)
    assert c["gpu_needed_ms"] == pytest.approx(host / 0.63256, rel=1e-5)
    assert c["tokens_if_gpu_higher"] == pytest.approx(host / 0.768)
    # the model's verify cycle is a host-heavy eager step: its ratio is the plain step's, not the paper's cycle's
    assert 0.85 < c["model_residual_per_gpu"] < 1.0
    # the two ways bracket the E read from the paper's speed-ups (6.28)
    assert c["tokens_if_host_lower"] < c["tokens_per_cycle"] < c["tokens_if_gpu_higher"]
