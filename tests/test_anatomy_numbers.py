"""More numbers of the step anatomy that a wrong operator would change (mutation audit,
bench/mutation.sh): trace-level TaxBreak counts, step windows, marker choice and composition,
the kernels table, idle causes and the verdict's pool, each on a hand-built timeline.

Every expected value is worked out by hand in the docstring (µs; the builder's unit).
"""

from __future__ import annotations

import pytest

from anatomy_builders import H100, US, Timeline
from hostgap.anatomy.markers import hostgap_step_name
from hostgap.anatomy.steps import AnalysisOptions, analyze

FLOOR = AnalysisOptions(launch_floor_ns=4500.0)


def run(t: Timeline, tmp_path, config: AnalysisOptions = FLOOR) -> dict:
    return analyze(t.load(tmp_path), config).to_dict()


# -- trace-level kernel counts -------------------------------------------------------------------


def prefill_then_partial_decode() -> Timeline:
    """hostgap markers, 100 µs apart (markers 60 µs long)::

        step 0 prefill   3 kernels
        step 1 prefill   3 kernels
        step 2 decode    1 kernel
        step 3 decode    1 kernel + a launch with no GPU op (the capture ended): partial

    kernels_per_step is the median over decode steps that are not partial: [1] -> 1 (with the
    prefill or partial steps in the pool it would be median(3, 3, 1, 1) = 2). 8 kernels in 4
    steps: 2 per token; one kernel name: unique ratio 1/8.
    """
    t = Timeline(props=H100)
    kinds = ["prefill", "prefill", "decode", "decode"]
    for i, kind in enumerate(kinds):
        b0 = 100 * i
        t.annotation(hostgap_step_name(i, kind, 1, 8 if kind == "prefill" else 1, 8 + i), b0, 60)
        for j in range(3 if kind == "prefill" else 1):
            t.launch_kernel(b0 + 2 + 10 * j, 2, "k", b0 + 5 + 10 * j, 4)
    t.runtime("cudaLaunchKernel", 350, 2, corr=99)
    return t


def test_kernels_per_step_counts_complete_decode_steps_only(tmp_path):
    doc = run(prefill_then_partial_decode(), tmp_path)
    assert [s["partial"] for s in doc["steps"]] == [False, False, False, True]
    assert [s["kernel_count"] for s in doc["steps"]] == [3, 3, 1, 1]
    tb = doc["taxbreak"]
    assert tb["kernels_per_step"] == 1.0
    assert tb["total_kernels"] == 8 and tb["kernels_per_token"] == 2.0
    assert tb["unique_kernels"] == 1 and tb["unique_ratio"] == pytest.approx(1 / 8)


def test_anatomy_repr_leaves_out_the_launch_table(tmp_path):
    """The per-launch table can hold millions of rows: the result's repr does not print it."""
    a = analyze(prefill_then_partial_decode().load(tmp_path), FLOOR)
    assert a.kernels is not None and len(a.kernels) == 9 - 1
    assert "KernelTaxes" not in repr(a) and "launch_row" not in repr(a)


def test_step_orchestrate_adds_all_three_terms(tmp_path):
    """tests/test_anatomy_taxbreak.py::library_mix, one step: ΔFT 98, ΔCT 19 (library kernels),
    ΔKT 7 launches x 4.5 = 31.5 µs; the step's T_Orchestrate = 148.5 µs, its HDBI
    14 / (14 + 148.5) (kernels 7 x 2 µs)."""
    from test_anatomy_taxbreak import library_mix

    (s,) = run(library_mix(), tmp_path)["steps"]
    tb = s["taxbreak"]
    assert (tb["ft_ns"], tb["ct_ns"], tb["kt_ns"]) == (98 * US, 19 * US, 31_500)
    assert tb["orchestrate_ns"] == 148_500
    assert tb["device_active_ns"] == 14 * US
    assert tb["hdbi"] == pytest.approx(14 / (14 + 148.5))


# -- TaxBreak: a library launch inside a framework wrapper ---------------------------------------


def wrapped_library_launch() -> Timeline:
    """No Python frames, one step [0, 100]::

        aten::linear [10, 40]                      the unit (T_py from the step start: 10)
          cudaStreamSynchronize [12, 15]           host blocked 3 µs inside the wrapper part
          aten::addmm [20, 35]                     the innermost op: ΔCT starts here
            cudaLaunchKernel [25, 27] -> cutlass kernel [30, 32]   (library: I_lib = 1)

    T_dispatch = 25 - 10 - 3 (sync) = 12; wrapper = (20 - 10) - 3 = 7; no native kernel, so
    T_dispatch_base = 0. ΔFT = T_py + wrapper + base = 10 + 7 = 17; ΔCT = 12 - 7 - 0 = 5;
    sync 3.
    """
    from test_anatomy_taxbreak import CUTLASS

    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.op("aten::linear", 10, 30)
    t.runtime("cudaStreamSynchronize", 12, 3)
    t.op("aten::addmm", 20, 15)
    t.launch_kernel(25, 2, CUTLASS, 30, 2)
    return t


def test_library_launch_wrapper_time_is_framework_time_less_its_sync(tmp_path):
    k = analyze(wrapped_library_launch().load(tmp_path), FLOOR).kernels
    assert len(k) == 1 and bool(k.i_lib[0])
    assert int(k.t_py_ns[0]) == 10 * US and int(k.t_dispatch_ns[0]) == 12 * US
    assert int(k.t_wrapper_ns[0]) == 7 * US and int(k.sync_ns[0]) == 3 * US
    assert k.dispatch_base_ns == 0.0
    assert (int(k.dft_ns[0]), int(k.dct_ns[0])) == (17 * US, 5 * US)


# -- the verdict's pool when most steps are queued ------------------------------------------------


def vstep(i, wall, host, dep=0, queued=False, partial=False, kind="decode"):
    causes = {"host_ns": host, "dependency_ns": dep, "outside_ns": 0, "unexplained_ns": 0}
    return {
        "index": i,
        "kind": kind,
        "partial": partial,
        "queued": queued,
        "wall_ns": wall,
        "host_wait_ns": host,
        "host_fraction": (wall - 10) / wall if wall else None,
        "idle_causes": causes,
    }


def test_verdict_pool_is_the_queued_steps_when_they_are_most():
    """Two of three steps queued (2 x 2 > 3): the pool keeps all three. Host shares 0.05, 0.05,
    0.5: median 0.05; dependency 0.3, 0.3, 0: median 0.3 >= 0.25 -> dependency-bound, the note
    saying the host ran ahead first."""
    from hostgap.anatomy.verdict import step_verdict

    steps = [vstep(0, 100, 5, 30, queued=True), vstep(1, 100, 5, 30, queued=True), vstep(2, 100, 50)]
    v = step_verdict(steps, [], None)
    assert v["steps_used"] == 3 and v["host_wait_share"] == pytest.approx(0.05)
    assert v["verdict"] == "dependency-bound"
    assert v["note"].startswith("host ran ahead of the GPU (queued steps); GPU waiting on dependencies")
    steps = [vstep(0, 100, 5, queued=True), vstep(1, 100, 5, queued=True), vstep(2, 100, 50)]
    v = step_verdict(steps, [], None)
    assert v["verdict"] == "device-bound"
    assert v["note"] == "host ran ahead of the GPU (queued steps): the GPU rarely waited on the host"


def test_verdict_queued_and_hidden_host_notes_join():
    """Queued majority, device-bound, HDBI 0.3: both notes, joined by '; '."""
    from hostgap.anatomy.verdict import step_verdict

    steps = [vstep(0, 100, 5, queued=True), vstep(1, 100, 5, queued=True), vstep(2, 100, 5)]
    v = step_verdict(steps, [], 0.3)
    assert v["note"] == (
        "host ran ahead of the GPU (queued steps): the GPU rarely waited on the host; "
        "HDBI 0.30: host orchestration exceeds GPU time but is hidden behind it"
    )


def test_verdict_skips_zero_wall_steps_in_the_shares():
    """A zero-wall step has no share: the medians are over the other step (host 30/100)."""
    from hostgap.anatomy.verdict import step_verdict

    v = step_verdict([vstep(0, 0, 0), vstep(1, 100, 30)], [], None)
    assert v["host_wait_share"] == pytest.approx(0.3) and v["host_fraction"] == pytest.approx(0.9)
    assert v["verdict"] == "host-bound" and v["steps_used"] == 2


def test_verdict_warmup_and_partial_steps_leave_the_pool():
    """Step 0 warm-up (host 0.9), step 1 partial (0.9), step 2 prefill (0.9) and step 3 decode
    (0.05): only step 3 is used -> device-bound."""
    from hostgap.anatomy.verdict import step_verdict

    steps = [vstep(0, 100, 90), vstep(1, 100, 90, partial=True), vstep(2, 100, 90, kind="prefill"), vstep(3, 100, 5)]
    v = step_verdict(steps, [0], None)
    assert (v["steps_used"], v["verdict"], v["host_wait_share"]) == (1, "device-bound", 0.05)
    none = step_verdict([], [], None)
    assert none["verdict"] is None and none["steps_used"] == 0
