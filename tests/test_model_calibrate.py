"""The paper-cell calibration's arithmetic (hostgap.model.fitting.calibrate) on tiny hand-made shapes and
host models, every expected value worked out by hand in the comments (ns)."""

from __future__ import annotations

import json

import pytest

from hostgap.errors import HostgapError
from hostgap.model.fitting import calibrate
from hostgap.model.fitting.calibrate import PaperCell, Row, Shape, device_scale, evaluate
from hostgap.model.stepmodel import DEFAULT_HOST, HostModel

H = HostModel(
    serial_ns=100, per_seq_ns=10, per_kernel_ns=5, launch_floor_ns=2, graph_launch_ns=50, per_rank_ns=20, dispatch_ns=30
)


def test_shape_device_level_scaled_floored_or_measured():
    """raw 1000, floor 1500, 4 kernels, batch 2, eager. serial = 100 + 10 x 2 = 120;
    orchestration = 30 + 4 x ((5 - 2) + 2) = 50. Device: max(2 x 1000, 1500) = 2000 at scale 2,
    the floor 1500 at scale 1, the measured 3000 when given."""
    a = Shape(1000, 1500, 0, 4, 2, 1, "eager")
    p = a.predict(H, 2.0)
    assert (p.device_ns, p.serial_ns, p.orchestration_ns, p.total_ns) == (2000, 120, 50, 2120)
    assert a.predict(H, 1.0).total_ns == 1620
    assert Shape(1000, 1500, 0, 4, 2, 1, "eager", gpu_ns=3000).predict(H, 2.0).total_ns == 3120


def cell(kind, *shapes):
    return PaperCell("c", kind, "fit", {}, shapes, {}, "src")


# B: raw 10 (scale 1), 100 kernels, batch 1: serial 110; eager orchestration 30 + 100 x 5 = 530,
# total 110 + 530 = 640; graph (3 graphs, 7 kernels launched outside them): dispatch 30 + 3 x 50
# + 7 x 5 = 215, total 110 + max(215, 10) = 325.
B = Shape(10, 0, 0, 100, 1, 1, "eager")
B_GRAPH = Shape(10, 0, 0, 7, 1, 1, "graph", graphs=3)
# C: the same at TP 2 with 5 ns of collectives: serial 100 + 10 + 20 = 130, total 130 + 530 = 660
C = Shape(10, 0, 5, 100, 1, 2, "eager")


def test_evaluate_each_kind():
    assert evaluate(cell("step", B), H, 1.0) == {"wall_ms": pytest.approx(640e-6), "host_ms": pytest.approx(630e-6)}
    assert evaluate(cell("graphs_gain", B, B_GRAPH), H, 1.0) == {"speedup": pytest.approx(640 / 325)}
    assert evaluate(cell("tp_speedup", B, C), H, 1.0) == {"speedup": pytest.approx(640 / 660)}
    assert evaluate(cell("fp8_speedup", C, B), H, 1.0) == {"speedup": pytest.approx(660 / 640)}
    # spec_cycle: the host part of one verify step: 640 - GPU 10 = 630
    assert evaluate(cell("spec_cycle", B), H, 1.0) == {"host_ms": pytest.approx(630e-6)}


def test_device_scale_is_the_geometric_mean_over_the_scale_cells():
    """Ratios 200/100 = 2 and 800/100 = 8: sqrt(16) = 4. A cell outside the ids (ratio 100) and
    a shape without a measured time are ignored; no scale cell: 1."""
    s = lambda g: Shape(100, 0, 0, 1, 1, 1, "eager", gpu_ns=g)  # noqa: E731
    cells = [
        PaperCell("a", "step", "fit", {}, (s(200),), {}, ""),
        PaperCell("b", "step", "fit", {}, (s(800), Shape(100, 0, 0, 1, 1, 1, "eager")), {}, ""),
        PaperCell("z", "step", "fit", {}, (s(10_000),), {}, ""),
    ]
    assert device_scale(cells, ("a", "b")) == pytest.approx(4.0)
    assert device_scale(cells, ()) == 1.0


def test_host_from_the_fitted_vector_keeps_the_floor_below_the_per_kernel_cost():
    h = calibrate._host([1, 2, 3, 4, 5], 7.0, "src")
    assert (h.serial_ns, h.per_seq_ns, h.per_rank_ns, h.dispatch_ns, h.per_kernel_ns) == (1, 2, 3, 4, 5)
    assert h.launch_floor_ns == 5 and h.source == "src"
    assert h.graph_launch_ns == DEFAULT_HOST["vllm"].graph_launch_ns
    assert calibrate._host([1, 2, 3, 4, 5], 3.0, "").launch_floor_ns == 3


def test_row_errors_are_relative_to_the_published_value():
    r = Row("c", "wall_ms", "fit", 2.0, 3.0, 1.0)
    assert (r.error, r.loo_error) == (0.5, -0.5)
    d = r.to_dict()
    assert (d["published"], d["default"], d["leave_one_out"], d["error"], d["loo_error"]) == (2.0, 3.0, 1.0, 0.5, -0.5)


def test_unreadable_or_unknown_cells_are_user_errors(tmp_path):
    with pytest.raises(HostgapError, match="cannot read the paper cells"):
        calibrate.load_cells(str(tmp_path / "missing.json"))
    doc = json.loads(calibrate.CELLS_FILE.read_text())
    preset = doc["cells"][0]["preset"]
    bad = {
        "defaults": doc["defaults"],
        "device_scale_cells": [],
        "cells": [{"id": "x", "kind": "weird", "use": "fit", "published": {}, "source": "s", "preset": preset}],
    }
    p = tmp_path / "cells.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(HostgapError, match="cell x: unknown kind 'weird'"):
        calibrate.load_cells(str(p))


def test_cells_become_the_shapes_their_kind_compares(tmp_path):
    """Each kind's shapes are the steps it compares: a step (with its measured GPU time), eager
    vs graph, bf16 vs fp8, TP k vs TP k', and a speculative cycle = one verify step over
    gamma + 1 tokens per sequence (context + gamma, every position's logits kept)."""
    from hostgap.model.accounting import Cell
    from hostgap.model.arch import get_preset
    from hostgap.model.devices import find_device

    defaults = {
        "device": "h100-sxm",
        "engine": "vllm",
        "mode": "eager",
        "dtype": "bfloat16",
        "batch": 2,
        "context": 1000,
        "tp": 1,
    }
    common = {"preset": "llama-3.1-8b", "use": "check", "source": "s", "published": {"x": 1.0}}
    doc = {
        "defaults": defaults,
        "device_scale_cells": [],
        "cells": [
            {"id": "step", "kind": "step", "gpu_ms": 5.0, **common},
            {"id": "graphs", "kind": "graphs_gain", **common},
            {"id": "fp8", "kind": "fp8_speedup", **common},
            {"id": "tp", "kind": "tp_speedup", "tp_to": 4, **common},
            {"id": "spec", "kind": "spec_cycle", "gamma": 3, "mode": "graph", **common},
        ],
    }
    p = tmp_path / "cells.json"
    p.write_text(json.dumps(doc))
    cells, scale_ids, device = calibrate.load_cells(str(p))
    assert scale_ids == () and device == "h100-sxm"
    arch, dev = get_preset("llama-3.1-8b"), find_device("h100-sxm")
    base = Cell(batch=2, context=1000)
    shape = lambda cell, mode, gpu_ms=None: calibrate._shape(arch, cell, dev, mode, gpu_ms)  # noqa: E731
    by = {c.id: c for c in cells}
    assert by["step"].shapes == (shape(base, "eager", 5.0),) and by["step"].shapes[0].gpu_ns == 5e6
    assert by["graphs"].shapes == (shape(base, "eager"), shape(base, "graph"))
    # vLLM piecewise graphs: 32 layers -> 33 pieces; outside them 32 KV writes + 32 attentions
    # + 1 LM head + 6 sampling kernels = 71 (eager: 329 launches)
    g = by["graphs"].shapes[1]
    assert (g.graphs, g.kernels, by["graphs"].shapes[0].kernels, by["graphs"].shapes[0].graphs) == (33, 71, 329, 1)
    assert by["fp8"].shapes == (shape(base, "eager"), shape(Cell(batch=2, context=1000, dtype="fp8"), "eager"))
    assert by["tp"].shapes == (shape(base, "eager"), shape(Cell(batch=2, context=1000, tp=4), "eager"))
    verify = Cell(batch=2, q_tokens=4, context=1003, logits_kept=8)
    assert by["spec"].shapes == (shape(verify, "graph"),) and by["spec"].gamma == 3
    assert by["spec"].setting["mode"] == "graph" and by["step"].setting["mode"] == "eager"


def test_regime_cells_host_fraction_from_the_published_numbers():
    """Straight from paper_cells.json: f = host / wall, or host / (host + measured GPU) when the
    wall is not published; only step cells with a host figure."""
    from hostgap.anatomy.verdict import classify

    doc = json.loads(calibrate.CELLS_FILE.read_text())
    want = {}
    for c in doc["cells"]:
        p = c["published"]
        if c["kind"] != "step" or "host_ms" not in p or not ("wall_ms" in p or c.get("gpu_ms")):
            continue
        wall = p["wall_ms"] if "wall_ms" in p else p["host_ms"] + c["gpu_ms"]
        want[f"published:{c['id']}"] = p["host_ms"] / wall
    got = {r.run_id: r for r in calibrate.regime_cells()}
    assert set(got) == set(want) and len(want) >= 2
    for k, f in want.items():
        assert got[k].host_fraction == pytest.approx(f, rel=1e-12)
        assert got[k].regime == classify(f)


def test_leave_one_out_refits_without_the_cell_and_check_cells_are_never_fitted(tmp_path):
    """Two fit cells and one check cell (published wall times): a fit cell's held-out value is
    the model refitted on the other cells only (recomputed here from the parts); a check cell's
    is its default prediction (the fit never saw it)."""
    from hostgap.model.devices import find_device, launch_floor_ns

    defaults = {
        "device": "h100-sxm",
        "engine": "vllm",
        "mode": "eager",
        "dtype": "bfloat16",
        "batch": 1,
        "context": 1024,
        "tp": 1,
    }
    cell = lambda i, use, batch, wall: {
        "id": i,
        "kind": "step",
        "preset": "llama-3.1-8b",
        "use": use,  # noqa: E731
        "batch": batch,
        "source": "s",
        "published": {"wall_ms": wall},
    }
    doc = {
        "defaults": defaults,
        "device_scale_cells": [],
        "cells": [cell("a", "fit", 1, 9.0), cell("b", "fit", 8, 11.0), cell("c", "check", 4, 10.0)],
    }
    p = tmp_path / "cells.json"
    p.write_text(json.dumps(doc))
    host, scale, rows = calibrate.paper_fit(str(p))
    assert scale == 1.0 and [r.cell for r in rows] == ["a", "b", "c"]
    cells, _, _ = calibrate.load_cells(str(p))
    floor, _ = launch_floor_ns(find_device("h100-sxm"))
    for r, c in zip(rows, cells):
        assert r.default == pytest.approx(evaluate(c, host, 1.0)["wall_ms"])
        if c.use == "fit":
            rest = [x for x in cells if x.id != c.id]
            alone = calibrate.fit_paper(rest, 1.0, floor)
            assert r.loo == pytest.approx(evaluate(c, alone, 1.0)["wall_ms"])
        else:
            assert r.loo == r.default
