"""The batch lever on a CPU run (the run's own compute growth, bracketed), on a watched run (the
watch's calibration lines), the bracket's interval, and a watch row's top lever: by hand."""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.model.levers import arithmetic as A
from hostgap.model.levers import device as D
from hostgap.model.levers import ranked as L
from hostgap.model.levers.baseline import GROWTH_MIN_STEPS, baseline, compute_growth, from_run, from_watch_rows

MS, US = 1e6, 1e3


def growth_rows(n: int = 8, first: int = 2, g0: float = 1000.0, per_ctx: float = 10.0) -> list[dict]:
    return [{"index": i, "gpu_active_ns": g0 + per_ctx * i} for i in range(first, first + n)]


def summary(idx, prefill: float | None) -> dict:
    return {"steady": {"indices": list(idx)}, "prefill": {"gpu_active_ns": {"median": prefill}}}


def test_compute_growth_by_hand():
    rows = growth_rows()
    # steady steps 2..9: compute 1020..1090, median 1055; 10 ns per step (per token of context)
    g = compute_growth(rows, summary(range(2, 10), 1055.0 + 127 * 10.0), 128, 1)
    assert g is not None
    assert g["decode_ns"] == 1055.0 and g["context_slope_ns"] == pytest.approx(10.0)
    assert g["row_ns"] == pytest.approx(10.0)  # (2325 - 1055) / (128 - 1)
    assert g["context"] == pytest.approx(128 + 5.5) and g["steps"] == 8
    # batch 2: the prefill holds 2 x 128 rows, a decode step 2
    g2 = compute_growth(rows, summary(range(2, 10), 1055.0 + 254 * 10.0), 128, 2)
    assert g2 is not None and g2["row_ns"] == pytest.approx(10.0) and g2["prefill_rows"] == 256
    # an outlier step (a preemption) does not move the Theil-Sen slope
    spiky = [dict(r) for r in rows]
    spiky[3]["gpu_active_ns"] += 50_000
    assert compute_growth(spiky, summary(range(2, 10), 2325.0), 128, 1)["context_slope_ns"] == pytest.approx(10.0)
    # a prefill cheaper than a decode step, a falling context: never a negative cost
    neg = compute_growth(growth_rows(per_ctx=-5.0), summary(range(2, 10), 10.0), 128, 1)
    assert neg["row_ns"] == 0.0 and neg["context_slope_ns"] == 0.0


def test_compute_growth_needs_a_prefill_and_enough_steady_steps():
    rows = growth_rows()
    assert compute_growth(rows, summary(range(2, 10), None), 128, 1) is None
    few = GROWTH_MIN_STEPS - 1
    assert compute_growth(rows, summary(range(2, 2 + few), 2325.0), 128, 1) is None
    assert compute_growth(rows, summary(range(2, 2 + GROWTH_MIN_STEPS), 2325.0), 128, 1) is not None
    assert compute_growth(rows, summary(range(2, 10), 2325.0), 1, 1) is None  # one prompt row: no slope


def test_theil_sen_subsamples_evenly_and_ignores_equal_x():
    from hostgap.model.levers.baseline import _theil_sen

    x = np.arange(1000.0)
    assert _theil_sen(x, 3 * x + 1, most=50) == pytest.approx(3.0)
    assert np.isnan(_theil_sen(np.ones(5), np.arange(5.0)))


def cpu_base(**kw) -> A.Baseline:
    growth = {
        "decode_ns": 2 * MS,
        "decode_rows": 1.0,
        "prefill_ns": 2 * MS + 127 * 50 * US,
        "prefill_rows": 128.0,
        "row_ns": 50 * US,
        "context_slope_ns": 4 * US,
        "context": 200.0,
    }
    growth.update(kw.pop("growth", {}))
    s = A.Steps(*(np.array([v]) for v in (3 * MS, 2 * MS, 1 * MS, 0.0, np.nan, 0.0, 0.0, 163.0)))
    return A.Baseline(
        source="hand",
        gpu=False,
        steps=s,
        wall_ci=kw.pop("wall_ci", None),
        batch=kw.pop("batch", 1.0),
        engine="hf",
        facts={"compute_growth": growth},
    )


def test_cpu_batch_is_bracketed_by_the_rows_and_nothing_shared():
    b = cpu_base()
    mid, (lo, hi), words = D.cpu_batch_outcome(b, 4)
    # low: 1 + 3 x 50/2000 = 1.075; high: 4 (each added sequence a whole step's 2 ms);
    # point: 1 + 3 x (50 + 4 x 200 / 2)/2000 = 1.675
    host = 1 * MS + 3 * 2 * US  # host-exposed + hf's 2 us per added sequence
    assert lo(b.steps).wall[0] == pytest.approx(2 * MS * 1.075 + host)
    assert hi(b.steps).wall[0] == pytest.approx(2 * MS * 4 + host)
    assert mid(b.steps).wall[0] == pytest.approx(2 * MS * 1.675 + host)
    assert mid(b.steps).device[0] == pytest.approx(2 * MS * 1.675)
    assert mid(b.steps).tokens_ratio == 4.0
    assert "CPU compute x1.675" in words and "bounds x1.075" in words and "to x4.000" in words
    assert "50.0 us per row" in words and "4.00 us per context token x 200 tokens" in words
    assert "the prefill's 8.350 ms over 128 rows beyond a decode step's 2.000 ms" in words
    assert "host-exposed + 2.0 us per added sequence (stepmodel.DEFAULT_HOST[hf].per_seq_ns)" in words
    # at batch 2 today: the KV work per sequence is the context slope over 2 sequences; the high end 8/2
    b2 = cpu_base(batch=2.0, growth={"decode_rows": 2.0})
    m2, (_lo, hi2), words2 = D.cpu_batch_outcome(b2, 8)
    assert m2(b2.steps).device[0] == pytest.approx(2 * MS * (1 + 6 * (50 + 4 * 200 / 2 / 2) / 2000))
    assert hi2(b2.steps).device[0] == pytest.approx(2 * MS * 4)
    assert m2(b2.steps).tokens_ratio == 4.0  # 8 sequences per step after, 2 before
    assert "/ 2 sequences" in words2
    # a context growth beyond a whole step per sequence: the point stops at the high end
    huge = cpu_base(growth={"context_slope_ns": 100 * US})
    m3, (_l3, h3), _w = D.cpu_batch_outcome(huge, 4)
    assert m3(huge.steps).wall[0] == pytest.approx(h3(huge.steps).wall[0])


def test_cpu_batch_lever_interval_runs_from_the_low_end_to_the_high_end():
    b = cpu_base(wall_ci=(2.7 * MS, 3.3 * MS))
    lever = A.evaluate(b, L.batch(b, 4))
    assert lever.applicable and lever.target == {"batch": 4}
    host = 1 * MS + 6 * US
    # low end at 0.9 x the step, high end at 1.1 x (every time scaled together)
    low = 0.9 * (2 * MS * 1.075 + 1 * MS) + 6 * US
    high = 1.1 * (2 * MS * 4 + 1 * MS) + 6 * US
    assert lever.step_ns == pytest.approx(2 * MS * 1.675 + host)
    assert lever.step_ns_ci == pytest.approx((low, high))
    # the gain is per token: 4 tokens per step after, 1 before
    assert lever.gain == pytest.approx(1 - (lever.step_ns / 4) / (3 * MS))
    assert "needs the run's compute growth" in L.batch(cpu_base(growth={"decode_ns": 0}), 4).reason


def test_a_trace_interval_with_ends_takes_the_order_statistics_of_each_end():
    n = 7
    walls = np.array([8, 9, 10, 11, 12, 10, 10.0]) * MS
    s = A.Steps(walls, walls / 2, np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n))
    b = A.Baseline(source="hand", gpu=False, steps=s)
    lo = lambda x: A.Outcome(x.wall * 0.5, x.device)  # noqa: E731
    hi = lambda x: A.Outcome(x.wall * 2.0, x.device)  # noqa: E731
    # 7 steps: [min, max] of each end's steps
    assert A.interval(b, hi, (lo, hi)) == pytest.approx((4 * MS, 24 * MS))


def test_from_run_computes_the_growth_of_an_older_results_document():
    rows = growth_rows(n=8)
    doc = {
        "run_id": "r",
        "batch": 1,
        "prompt_len": 128,
        "engine": "hf",
        "device": "cpu",
        "differencing": {"t_step_ns": 3 * MS, "g_step_ns": 2 * MS, "h_step_ns": 1 * MS, "activity": "cpu-compute"},
        "anatomy_summary": summary(range(2, 10), 2325.0),
        "steps_decode": rows,
    }
    assert from_run(doc).facts["compute_growth"]["row_ns"] == pytest.approx(10.0)
    # the run's batch reaches the growth: batch 2's prefill holds 2 x 128 rows
    two = {**doc, "batch": 2, "anatomy_summary": summary(range(2, 10), 1055.0 + 254 * 10.0)}
    assert from_run(two).facts["compute_growth"]["prefill_rows"] == 256
    assert from_run(two).facts["compute_growth"]["row_ns"] == pytest.approx(10.0)
    assert from_run({**doc, "steps_decode": {"trimmed": True}}).facts == {}
    stored = {**doc, "compute_growth": {"decode_ns": 7.0}}
    assert from_run(stored).facts["compute_growth"] == {"decode_ns": 7.0}


CAL = {
    "source": "attach run A",
    "batches": [1, 4],
    "gpu_intercept_s": 0.004,
    "gpu_slope_s": 0.001,
    "host_intercept_s": 0.003,
    "host_slope_s": 0.0005,
    "block_rel_err": 0.05,
    "activity": "gpu",
}


def watch_row(period: float = 0.01, gpu: float = 0.005, batch: float = 1.0, **kw) -> dict:
    return {
        "engine": "vllm",
        "step_period_s": period,
        "gpu_s_per_step": gpu,
        "seqs_per_step": batch,
        "host_share": 1 - gpu / period,
        **kw,
    }


def test_a_watched_intervals_baseline_and_its_batch_lever_from_the_calibration():
    b = from_watch_rows([watch_row()], CAL, "w")
    assert b.steps.wall[0] == 10 * MS and b.steps.device[0] == 5 * MS and b.steps.host_wait[0] == 5 * MS
    assert b.batch == 1.0 and b.gpu and b.engine == "vllm"
    mid, (lo, hi), words = D.watch_batch_outcome(b, 4)
    # device x (4 + 4)/(4 + 1) = 1.6; host x (3 + 2)/(3 + 0.5) = 1.4286; batch 4 inside [1, 4]: +-5 %
    out = mid(b.steps)
    assert out.device[0] == pytest.approx(5 * MS * 1.6)
    assert out.wall[0] == pytest.approx(5 * MS * 1.6 + 5 * MS * 5 / 3.5)
    assert lo(b.steps).device[0] == pytest.approx(5 * MS * 1.6 * 0.95)
    assert hi(b.steps).device[0] == pytest.approx(5 * MS * 1.6 * 1.05)
    assert "x1.600" in words and "+-5%" in words
    # beyond the calibrated batches: the extrapolation bound widens the ends (8 vs 4: +50 %)
    _m, (lo8, _h), words8 = D.watch_batch_outcome(b, 8)
    assert lo8(b.steps).device[0] == pytest.approx(5 * MS * (4 + 8) / 5 * (1 - 0.55))
    assert "extrapolated beyond batch 4" in words8


def test_a_host_line_that_reaches_zero_leaves_the_host_term_unchanged():
    # host 3 ms - 1 ms per sequence: 2 ms at batch 1, none at 4 (a line fitted on a few batches)
    falling = {**CAL, "host_slope_s": -0.001}
    b = from_watch_rows([watch_row()], falling, "w")
    mid, _ends, words = D.watch_batch_outcome(b, 4)
    assert mid(b.steps).wall[0] == pytest.approx(5 * MS * 1.6 + 5 * MS)  # host x1, not negative
    assert "host term x1.000" in words
    b2 = from_watch_rows([watch_row(batch=2.0)], CAL, "w")
    assert D.watch_batch_outcome(b2, 8)[0](b2.steps).tokens_ratio == 4.0


def test_the_gpu_batch_lever_counts_tokens_per_step_from_todays_batch():
    b = A.Baseline(
        source="hand",
        gpu=True,
        steps=A.Steps(*(np.array([v]) for v in (10 * MS, 4 * MS, 5 * MS, 1 * MS, 3 * MS, 100.0, 0.0, 100.0))),
        batch=2.0,
        preset="llama-3.2-1b",
        device_name="h100-sxm",
        engine="vllm",
    )
    assert D.batch_ratios(b, 8).tokens == 4.0


def test_a_watched_runs_levers_say_what_the_metrics_do_not_carry():
    b = from_watch_rows([watch_row(), watch_row(period=0.012), {"host_share": None}], CAL, "w")
    assert len(b.steps) == 2 and b.source == "w (2 intervals)"
    assert from_watch_rows([watch_row()], CAL, "w").source == "w (1 interval)"
    rows = {lv.lever: lv for lv in L.levers(b)}
    for name in ("graphs", "fusion", "megakernel"):
        assert not rows[name].applicable and "an engine's metrics carry none" in rows[name].reason
    assert not rows["async"].applicable and "between steps" in rows["async"].reason
    assert rows["cpu"].applicable and "upper bound" in rows["cpu"].basis
    assert rows["batch"].applicable and rows["batch"].target == {"batch": 4}
    nocal = {lv.lever: lv for lv in L.levers(from_watch_rows([watch_row()], None, "w"))}
    assert not nocal["batch"].applicable and "calibration" in nocal["batch"].reason
    with pytest.raises(Exception, match="no watched interval"):
        from_watch_rows([{"host_share": None}], CAL, "w")


def test_a_watch_document_is_advised_on_its_intervals():
    stored = {"run_id": "w1", "kind": "watch", "watch": {"intervals": [watch_row()], "calibration": CAL}}
    b = baseline(stored)
    assert b.source.startswith("watched run w1") and b.facts["watch_calibration"] == CAL
    printed = {"url": "http://127.0.0.1:1/metrics", "intervals": [watch_row()], "calibration": None}
    assert baseline(printed).facts["watch_calibration"] is None


def test_top_lever_names_the_best_gain():
    b = from_watch_rows([watch_row()], CAL, "w")
    t = L.top(b)
    best = max((lv for lv in L.levers(b) if lv.applicable), key=lambda lv: lv.gain)
    assert t == {"lever": best.lever, "target": best.target, "gain": best.gain, "step_s": best.step_ns / 1e9}
    # a step the device fills: no lever gains, none named
    busy = from_watch_rows([watch_row(period=0.005, gpu=0.005, batch=4.0)], {**CAL, "batches": [4]}, "w")
    assert L.top(busy)["lever"] == "batch"  # no host time: the faster core gains nothing, batching per token does
    assert L.top(from_watch_rows([watch_row(period=0.005, gpu=0.005, batch=4.0)], None, "w")) is None


def cores_base(
    gpu: bool = False, usable: int = 1, logical: int = 2, processes: int = 3, thread: float | None = 0.1 * MS
):
    s = A.Steps(*(np.array([v]) for v in (3 * MS, 1 * MS, 2 * MS, 0.0, np.nan, 0.0, 0.0, 100.0)))
    cores = {"usable": usable, "logical": logical, "processes": processes, "thread_cpu_step_ns": thread}
    return A.Baseline(
        source="hand", gpu=gpu, steps=s, wall_ci=(2.9 * MS, 3.1 * MS), engine="vllm", facts={"cores": cores}
    )


def test_more_cores_by_hand():
    b = cores_base()
    most, least = A.more_cores(b, 1, 2, 3, 0.1 * MS)
    # fair share 1/3 of a core -> 2/3: the CPU run's whole step x 0.5; the frontend's 0.1 ms leaves
    assert most(b.steps).wall[0] == pytest.approx(1.5 * MS) and most(b.steps).device[0] == pytest.approx(0.5 * MS)
    assert least(b.steps).wall[0] == pytest.approx(2.9 * MS) and least(b.steps).device[0] == 1 * MS
    g = cores_base(gpu=True)
    most_g, _ = A.more_cores(g, 1, 3, 3, None)
    # a GPU run: only the host-exposed 2 ms shrinks, to a third
    assert most_g(g.steps).wall[0] == pytest.approx(1 * MS + 2 * MS / 3)
    # already one core per process: nothing to gain
    same, _ = A.more_cores(b, 3, 4, 3, None)
    assert same(b.steps).wall[0] == pytest.approx(3 * MS)


def test_the_cpu_lever_asks_for_the_cores_the_processes_lacked():
    lever = A.evaluate(cores_base(), L.cpu(cores_base()))
    assert lever.target == {"cores": 2}  # the machine's 2 logical cores
    # the middle of 1.5 and 2.9 ms; its interval from the most-gain end at 0.9 x to the least at 1.1 x
    assert lever.step_ns == pytest.approx(2.2 * MS)
    lo, hi = lever.step_ns_ci
    assert lo == pytest.approx(2.9 * MS * 0.5)
    assert hi == pytest.approx(3.1 * MS - 0.1 * MS)
    # busy: the 2 engine processes and this process's 0.1 of 3 ms
    assert "2.03 busy host processes (2 engine process(es) for the whole step, this process 3% of it)" in lever.basis
    assert "on 1 usable core(s) -> 2" in lever.basis and "fair share of a core grows 0.49 -> 0.98" in lever.basis
    # the middle's device time: the compute at the most-gain end (x 0.5 of 1 ms) and at the least (1 ms)
    assert L.cpu(cores_base()).apply(cores_base().steps).device[0] == pytest.approx(0.75 * MS)
    # no more cores on the machine: one per busy process
    assert L.cpu(cores_base(logical=1)).target == {"cores": 3}
    # two cores for 2.03 busy processes: the fair share grows 2/2.033 -> 1, a 1.6 % saving, which
    # bounds the frontend's 0.1 ms too: both ends the same
    two = cores_base(usable=2)
    near = A.evaluate(two, L.cpu(two))
    assert near.target == {"cores": 3}
    assert near.step_ns == pytest.approx(3 * MS * 2 / (2 + 0.1 / 3))
    # enough cores already (the measuring thread not counted busy beyond its share), or no evidence
    assert L.cpu(cores_base(usable=3)).target == {"speed": A.CPU_SPEED}
    assert L.cpu(cores_base(usable=2, processes=2)).target == {"speed": A.CPU_SPEED}
    # without the thread's CPU the measuring process counts as busy for the whole step
    assert "3.00 busy host processes" in L.cpu(cores_base(thread=None)).basis
    no = cores_base()
    assert L.cpu(A.Baseline(source="h", gpu=False, steps=no.steps)).target == {"speed": A.CPU_SPEED}
    bad = cores_base()
    from dataclasses import replace

    withheld = L.cpu(replace(bad, unfaithful=("flagged",)))
    assert withheld.apply is None and "not trusted" in withheld.reason


def test_from_run_reads_the_cores_and_counts_the_engine_processes():
    doc = {
        "run_id": "r",
        "batch": 1,
        "engine": "vllm",
        "device": "cpu",
        "differencing": {"t_step_ns": 3 * MS, "g_step_ns": 1 * MS, "h_step_ns": 2 * MS, "activity": "cpu-compute"},
        "cores": {"usable": 1, "logical": 2, "thread_cpu_step_ns": 1e5},
        "engine_facts": {"engine_processes": {"1": "EngineCore", "2": "Worker"}},
    }
    assert from_run(doc).facts["cores"] == {"usable": 1, "logical": 2, "thread_cpu_step_ns": 1e5, "processes": 3}
    hf = {**doc, "engine": "hf", "engine_facts": {}}
    assert from_run(hf).facts["cores"]["processes"] == 1
    assert "cores" not in from_run({**doc, "cores": {"usable": 0}}).facts


def test_the_results_cores_and_the_measuring_threads_cpu_per_step():
    import os

    from hostgap.capture.protocol.results import cores_of

    raw = {"untraced_thread_ns": {"1": [1000, 1100], "11": [2000, 2100], "21": [3000, 9000]}}
    c = cores_of(raw, "vllm")
    assert c["thread_cpu_step_ns"] == pytest.approx(100.0)  # Theil-Sen: the outlier at 21 does not move it
    assert c["usable"] == len(os.sched_getaffinity(0)) and c["logical"] == os.cpu_count()
    assert cores_of({"untraced_thread_ns": {"1": [5, 6]}}, "hf")["thread_cpu_step_ns"] is None


def test_the_document_says_todays_step_and_rate():
    b = from_watch_rows([watch_row(batch=4.0)], CAL, "w")
    today = L.document(b)["today"]
    assert today["tokens_per_s"] == pytest.approx(4 * 1e9 / (10 * MS))  # 4 sequences every 10 ms
    assert today["step_ns"] == 10 * MS and today["batch"] == 4.0 and today["source"] == "w (1 interval)"
