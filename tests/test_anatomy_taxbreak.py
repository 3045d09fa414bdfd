"""TaxBreak per launch, per step and per trace on hand-built timelines (METHOD.md §5).

All expected values are worked out by hand in the docstrings (µs; one host thread).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from anatomy_builders import A100, H100, H200, US, Timeline
from hostgap.anatomy.floor import GENERIC_FLOOR_NS, launch_floor
from hostgap.anatomy.steps import AnalysisOptions, analyze
from hostgap.anatomy.taxbreak import base_name, is_library_kernel
from hostgap.errors import HostgapError

FLOOR = AnalysisOptions(launch_floor_ns=4500.0)

FLASH = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 64, 64, 4, false, "
    "false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 64, 4, cutlass::bfloat16_t> >, "
    "false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
MUL = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor>>()"
XMMA = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
CUTLASS = (
    "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)"
)
NVJET = "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTT"
CIJK = "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x256_MI16x16x1_SN_LDSB1_AFC1_AFEM1"
GEMVX = (
    "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, "
    "__nv_bfloat16, float, false, true, true, false, 6, false, cublasGemvParamsEx<int, __nv_bfloat16 const*, "
    "__nv_bfloat16 const*, __nv_bfloat16*, float const*> >(cublasGemvParamsEx<int, __nv_bfloat16 const*, "
    "__nv_bfloat16 const*, __nv_bfloat16*, float const*>)"
)


def rows_by_launch(a) -> list[dict]:
    """Per-launch terms in launch order, as plain ints (µs where exact)."""
    k = a.kernels
    order = np.argsort(k.launch_row)
    return [
        {
            f: (getattr(k, f)[i].item())
            for f in (
                "t_py_ns",
                "t_dispatch_ns",
                "t_launch_ns",
                "dft_ns",
                "dct_ns",
                "i_lib",
                "queued",
                "first_in_unit",
                "dkt_fw_ns",
                "step",
            )
        }
        for i in order
    ]


# -- an op with several kernels, a frame with several ops -----------------------------------


def nested() -> Timeline:
    """::

        marker ProfilerStep#1 [0, 100]
        frame F1 model.py(10): forward [2, 60]
          op A aten::linear [5, 25]           T_py = 5 - 2 = 3
            op aten::addmm [6, 24]
              L1 [8, 10]  -> K1 [30, 35]      T_dispatch = 8 - 5 = 3 (op start)
              L2 [13, 15] -> K2 [36, 41]      T_dispatch = 13 - 10 = 3 (previous launch end)
              L3 [20, 22] -> K3 [42, 47]      T_dispatch = 20 - 15 = 5
          op B aten::relu [30, 40]            T_py = 30 - max(2, 25) = 5
              L4 [33, 35] -> K4 [48, 51]      T_dispatch = 3
        frame F2 <built-in function add> [65, 80]
          op C aten::add [68, 76]             T_py = 68 - max(65, 40) = 3
              L5 [70, 72] -> K5 [80, 82]      T_dispatch = 2

    All kernels native: T_dispatch_base = median(3, 3, 5, 3, 2) = 3.
    Host time covered by TaxBreak intervals: [2, 22] + [25, 35] + [65, 72] = 37 µs; the step's
    CPU window is [0, 100], so unattributed = 63 µs.
    """
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.frame("model.py(10): forward", 2, 58)
    t.op("aten::linear", 5, 20)
    t.op("aten::addmm", 6, 18)
    t.launch_kernel(8, 2, MUL, 30, 5)
    t.launch_kernel(13, 2, MUL, 36, 5)
    t.launch_kernel(20, 2, MUL, 42, 5)
    t.op("aten::relu", 30, 10)
    t.launch_kernel(33, 2, ADD, 48, 3)
    t.frame("<built-in function add>", 65, 15)
    t.op("aten::add", 68, 8)
    t.launch_kernel(70, 2, ADD, 80, 2)
    return t


def test_op_with_several_kernels_and_frame_with_several_ops(tmp_path):
    a = analyze(nested().load(tmp_path), FLOOR)
    r = rows_by_launch(a)
    assert [x["t_py_ns"] for x in r] == [3 * US, 0, 0, 5 * US, 3 * US]  # T_py once per op
    assert [x["t_dispatch_ns"] for x in r] == [3 * US, 3 * US, 5 * US, 3 * US, 2 * US]
    assert [x["t_launch_ns"] for x in r] == [22 * US, 23 * US, 22 * US, 15 * US, 10 * US]
    assert [x["first_in_unit"] for x in r] == [True, False, False, True, True]
    assert a.kernels.dispatch_base_ns == 3 * US
    assert [x["dft_ns"] for x in r] == [6 * US, 3 * US, 5 * US, 8 * US, 5 * US]
    assert all(x["dct_ns"] == 0 and x["i_lib"] == 0 for x in r)
    tb = a.steps[0]["taxbreak"]
    assert tb["py_ns"] == 11 * US and tb["dispatch_ns"] == 16 * US
    assert tb["ft_ns"] == 27 * US and tb["ct_ns"] == 0
    assert tb["kt_ns"] == 5 * 4500
    assert tb["unattributed_ns"] == 63 * US
    assert tb["device_active_ns"] == 20 * US
    assert tb["orchestrate_ns"] == 27 * US + 5 * 4500
    assert tb["hdbi"] == pytest.approx(20 * US / (20 * US + 27 * US + 5 * 4500))


def test_per_kernel_intervals_never_overlap(tmp_path):
    tr = nested().load(tmp_path)
    k = analyze(tr, FLOOR).kernels
    lr = k.launch_row
    spans = []
    for i in range(len(k)):
        spans += [
            (k.py_start_ns[i], k.py_end_ns[i]),
            (k.dispatch_start_ns[i], k.dispatch_end_ns[i]),
            (tr.events.start_ns[lr[i]], tr.events.end_ns[lr[i]]),
        ]
    spans = sorted((s, e) for s, e in spans if e > s)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:]))
    assert sum(e - s for s, e in spans) == 37 * US


def test_top_ops_and_frames_rank_host_time(tmp_path):
    a = analyze(nested().load(tmp_path), FLOOR)
    ops = {r["name"]: r["host_ns"] for r in a.top_ops}
    assert ops == {"aten::linear": 14 * US, "aten::relu": 8 * US, "aten::add": 5 * US}
    assert a.top_ops[0]["name"] == "aten::linear" and a.top_ops[0]["launches"] == 3
    frames = {r["name"]: r["host_ns"] for r in a.top_frames}
    assert frames == {"model.py(10): forward": 22 * US, "<built-in function add>": 5 * US}
    assert sum(r["share"] for r in a.top_ops) == pytest.approx(1.0)


# -- library vs framework-native kernels -----------------------------------------------------


@pytest.mark.parametrize(
    "name, lib",
    [
        (FLASH, False),
        (ADD, False),
        (MUL, False),
        ("triton_poi_fused_add_0", False),
        ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*)", False),
        (XMMA, True),
        (CUTLASS, True),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(x)", True),
        (NVJET, True),
        (CIJK, True),
        ("ampere_sgemm_128x64_nn", True),
        ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false>(x)", True),
        ("void splitKreduce_kernel<float, float, float, float, true, false, false>(x)", True),
    ],
)
def test_library_base_names(name, lib):
    assert is_library_kernel(name) is lib


def test_base_name_strips_void_templates_and_parameters():
    assert base_name(FLASH) == "pytorch_flash::flash_fwd_kernel"
    assert base_name(CUTLASS) == "cutlass::Kernel"
    assert base_name("gemm(int)") == "gemm"


def test_cublas_gemvx_with_enable_if_return_type_is_library():
    assert is_library_kernel(GEMVX)


def library_mix() -> Timeline:
    """One op per launch, no Python frames (T_py measured from the previous op's end; the first
    from the step start), each op 10 µs after the previous one ends::

        op                          launch at   T_dispatch  kernel    I_lib
        aten::_flash_attention_fwd  [10,20] 13      3       flash     0
        aten::add                   [30,40] 35      5       add       0
        aten::mul                   [50,60] 54      4       mul       0
        aten::mm                    [70,90] 82      12      xmma      1
        aten::addmm                 [100,110] 102   2       cutlass   1
        aten::mm                    [120,140] 130   10      nvjet     1
        aten::mm                    [150,170] 159   9       Cijk      1

    T_dispatch_base = median(3, 5, 4) = 4; T_py = 10 for every op.
    ΔFT = 13, 15, 14, then 10 + 4 = 14 for each library kernel: Σ = 98.
    ΔCT = max(0, T_dispatch - 4) for library kernels: 8 + 0 + 6 + 5 = 19.
    """
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 200)
    plan = [
        ("aten::_flash_attention_forward", 10, 10, 13, FLASH),
        ("aten::add", 30, 10, 35, ADD),
        ("aten::mul", 50, 10, 54, MUL),
        ("aten::mm", 70, 20, 82, XMMA),
        ("aten::addmm", 100, 10, 102, CUTLASS),
        ("aten::mm", 120, 20, 130, NVJET),
        ("aten::mm", 150, 20, 159, CIJK),
    ]
    for op, ts, dur, at, kname in plan:
        t.op(op, ts, dur)
        t.launch_kernel(at, 1, kname, at + 5, 2)
    return t


def test_library_and_native_exact_terms(tmp_path):
    a = analyze(library_mix().load(tmp_path), FLOOR)
    r = rows_by_launch(a)
    assert [x["i_lib"] for x in r] == [0, 0, 0, 1, 1, 1, 1]
    assert [x["t_py_ns"] for x in r] == [10 * US] * 7
    assert [x["t_dispatch_ns"] for x in r] == [3 * US, 5 * US, 4 * US, 12 * US, 2 * US, 10 * US, 9 * US]
    assert a.kernels.dispatch_base_ns == 4 * US
    assert [x["dft_ns"] for x in r] == [13 * US, 15 * US, 14 * US, 14 * US, 14 * US, 14 * US, 14 * US]
    assert [x["dct_ns"] for x in r] == [0, 0, 0, 8 * US, 0, 6 * US, 5 * US]
    tb = a.taxbreak
    assert tb["ft_ns"] == 98 * US and tb["ct_ns"] == 19 * US
    assert tb["library_launches"] == 4
    assert tb["dispatch_base_ns"] == 4 * US
    assert tb["kt_ns"] == 7 * 4500
    assert tb["device_active_ns"] == 14 * US
    assert tb["orchestrate_ns"] == 98 * US + 19 * US + 7 * 4500
    assert tb["hdbi"] == pytest.approx(14 / (14 + 117 + 31.5))


# -- queued kernels: no launch-path excess ---------------------------------------------------


def test_queued_kernels_pay_no_launch_excess(tmp_path):
    """L1 [1, 2] -> K1 [10, 50]; L2 [4, 5] -> K2 [50, 55] (stream busy with K1 when L2 was
    called: queued); L3 [60, 61] on the idle stream -> K3 [66, 70].
    ΔKT_fw: K1 = 9 - 4.5 = 4.5; K2 excluded; K3 = 6 - 4.5 = 1.5 → Σ 6 µs over 2 samples."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.launch_kernel(1, 1, "k1", 10, 40)
    t.launch_kernel(4, 1, "k2", 50, 5)
    t.launch_kernel(60, 1, "k3", 66, 4)
    a = analyze(t.load(tmp_path), FLOOR)
    r = rows_by_launch(a)
    assert [x["queued"] for x in r] == [False, True, False]
    assert r[0]["dkt_fw_ns"] == 4500 and np.isnan(r[1]["dkt_fw_ns"]) and r[2]["dkt_fw_ns"] == 1500
    assert r[1]["t_launch_ns"] == 46 * US  # queueing is still in T_launch
    tb = a.taxbreak
    assert tb["kt_fw_ns"] == 6 * US and tb["kt_fw_samples"] == 2
    assert tb["queued_launches"] == 1
    assert a.steps[0]["taxbreak"]["kt_fw_ns"] == 6 * US
    assert tb["kt_ns"] == 3 * 4500  # the floor itself is paid by every launch


def test_launch_without_op_is_its_own_unit(tmp_path):
    """A bare launch (no enclosing op, no frame) in a step starting at 0: T_py counts from the
    step start (here 0 -> 5); T_dispatch is 0 (the unit is the launch itself)."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.launch_kernel(5, 2, "k", 10, 5)
    r = rows_by_launch(analyze(t.load(tmp_path), FLOOR))
    assert r[0]["t_dispatch_ns"] == 0
    assert r[0]["t_py_ns"] == 5 * US


# -- trace-level keys --------------------------------------------------------------------------


TRACE_KEYS = {
    "ft_ns",
    "ct_ns",
    "kt_ns",
    "kt_fw_ns",
    "unattributed_ns",
    "device_active_ns",
    "orchestrate_ns",
    "hdbi",
    "kernels_per_step",
    "kernels_per_token",
    "launch_floor_ns",
    "floor_source",
}
STEP_KEYS = {
    "index",
    "kind",
    "device",
    "wall_ns",
    "gpu_active_ns",
    "kernel_union_ns",
    "kernel_sum_ns",
    "host_exposed_ns",
    "host_wait_ns",
    "host_fraction",
    "kernel_count",
    "launches",
    "graph_launches",
    "queued",
    "partial",
    "taxbreak",
    "ctx_requests",
    "ctx_q",
    "ctx_s",
    "ctx_qq",
    "ctx_qs",
    "gen_requests",
    "gen_q",
    "gen_s",
    "gen_qq",
    "gen_qs",
}


def test_json_contract_keys(tmp_path):
    doc = analyze(nested().load(tmp_path), FLOOR).to_dict()
    assert TRACE_KEYS <= set(doc["taxbreak"])
    assert STEP_KEYS <= set(doc["steps"][0])
    json.dumps(doc)  # plain JSON types only
    assert doc["taxbreak"]["kernels_per_step"] == 5 and doc["taxbreak"]["kernels_per_token"] == 5
    assert doc["taxbreak"]["unique_kernels"] == 2 and doc["taxbreak"]["unique_ratio"] == pytest.approx(2 / 5)


# -- launch floor sources ---------------------------------------------------------------------


def floor_file(tmp_path, **doc) -> str:
    p = tmp_path / "floor.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_floor_sources(tmp_path):
    assert launch_floor(["NVIDIA H100 80GB HBM3"]).ns == 4707.0
    assert launch_floor(["NVIDIA H200"]).ns == 4503.0
    generic = launch_floor(["NVIDIA A100-SXM4-80GB"])
    assert generic.ns == GENERIC_FLOOR_NS and "generic" in generic.source
    assert launch_floor(["NVIDIA H100"], floor_us=3.25) == launch_floor([], floor_us=3.25)
    assert launch_floor([], floor_us=3.25).ns == 3250.0 and launch_floor([], floor_us=3.25).source == "cli"
    f = floor_file(tmp_path, kind="launch_floor", device="cuda", mean_ns=5123.5)
    got = launch_floor(["NVIDIA H100"], floor_file=f)
    assert got.ns == 5123.5 and f in got.source
    # the CLI value wins over a file
    assert launch_floor([], floor_us=2.0, floor_file=f).source == "cli"


@pytest.mark.parametrize(
    "props, ns, word", [(H100, 4707.0, "H100"), (H200, 4503.0, "H200"), (A100, GENERIC_FLOOR_NS, "generic")]
)
def test_floor_default_from_trace_device(tmp_path, props, ns, word):
    t = Timeline(props=props)
    t.annotation("ProfilerStep#1", 0, 10)
    t.launch_kernel(1, 1, "k", 3, 1)
    tb = analyze(t.load(tmp_path)).taxbreak
    assert tb["launch_floor_ns"] == ns and word in tb["floor_source"]
    assert tb["kt_ns"] == round(ns)


def test_floor_file_used_by_analyze(tmp_path):
    f = floor_file(tmp_path, kind="launch_floor", device="cuda", mean_ns=6000)
    tb = analyze(library_mix().load(tmp_path), AnalysisOptions(floor_file=f)).taxbreak
    assert tb["launch_floor_ns"] == 6000 and tb["floor_source"] == f"file:{f}"
    assert tb["kt_ns"] == 7 * 6000


@pytest.mark.parametrize(
    "content, word",
    [
        ("{not json", "not JSON"),
        (json.dumps({"kind": "something_else", "mean_ns": 5}), "not a launch-floor"),
        (json.dumps({"kind": "launch_floor", "device": "cuda"}), "mean_ns"),
        (json.dumps({"kind": "launch_floor", "device": "cuda", "mean_ns": -1}), "mean_ns"),
        (json.dumps({"kind": "launch_floor", "device": "cpu", "mean_ns": 900}), "CPU"),
        (json.dumps([1, 2]), "not a launch-floor"),
    ],
)
def test_bad_floor_file(tmp_path, content, word):
    p = tmp_path / "floor.json"
    p.write_text(content)
    with pytest.raises(HostgapError) as e:
        launch_floor([], floor_file=str(p))
    assert word in str(e.value) and str(p) in str(e.value)


def test_missing_floor_file_and_bad_cli_floor(tmp_path):
    with pytest.raises(HostgapError, match="cannot read"):
        launch_floor([], floor_file=str(tmp_path / "absent.json"))
    with pytest.raises(HostgapError, match="positive"):
        launch_floor([], floor_us=-1.0)


# -- CPU-only traces ---------------------------------------------------------------------------


def cpu_only() -> Timeline:
    """Two steps, no device: leaf compute ops are the CPU analogue of kernels::

    step 0 [0, 50]:  aten::linear [5, 25] > aten::addmm [6, 24] (leaf);
                     aten::view [30, 31] (metadata only, not compute)
    step 1 [50, 100]: aten::mul [60, 70] (leaf)
    """
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.op("aten::linear", 5, 20)
    t.op("aten::addmm", 6, 18)
    t.op("aten::view", 30, 1)
    t.op("aten::mul", 60, 10)
    return t


def test_cpu_only_taxbreak_not_applicable(tmp_path):
    doc = analyze(cpu_only().load(tmp_path)).to_dict()
    assert doc["activity"] == "cpu-compute"
    tb = doc["taxbreak"]
    assert tb["applicable"] is False
    for key in (
        "ft_ns",
        "ct_ns",
        "kt_ns",
        "kt_fw_ns",
        "hdbi",
        "launch_floor_ns",
        "floor_source",
        "device_active_ns",
        "orchestrate_ns",
    ):
        assert tb[key] is None, key  # not applicable, never 0
    assert all(s["taxbreak"] is None for s in doc["steps"])
    s0, s1 = doc["steps"]
    # CPU-compute analogue: the leaf op addmm [6, 24]; view is metadata only
    assert s0["gpu_active_ns"] == 18 * US and s0["kernel_count"] == 1
    assert s1["gpu_active_ns"] == 10 * US
    assert s0["host_exposed_ns"] == 32 * US and s0["host_fraction"] == pytest.approx(32 / 50)
    assert doc["verdict"]["hdbi"] is None


# -- zero-length ops (integer-µs traces have many) -----------------------------------------------


def zero_length_child() -> Timeline:
    """aten::mean [0, 30] holds a zero-length aten::as_strided [5, 5] and then a launch
    [20, 24] -> kernel [30, 35]. The launch's op is aten::mean: T_dispatch = 20 - 0 = 20 µs.
    (The same shape occurs in hta/a100_deep_queue_rank0, integer-µs timestamps.)"""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 50)
    t.op("aten::mean", 0, 30)
    t.op("aten::as_strided", 5, 0)
    t.launch_kernel(20, 4, "reduce", 30, 5)
    return t


def test_launch_after_a_zero_length_child_op_keeps_its_op(tmp_path):
    from hostgap.anatomy.link import link
    from hostgap.events import Kind

    trace = zero_length_child().load(tmp_path)
    links = link(trace)
    launch = int(np.flatnonzero(trace.events.kind == Kind.LAUNCH)[0])
    top = int(links.top_op_of[launch])
    assert top >= 0 and trace.name_of(top) == "aten::mean"
    (r,) = rows_by_launch(analyze(trace, FLOOR))
    assert r["t_dispatch_ns"] == 20 * US


def test_top_ten_by_default(tmp_path):
    """Twelve ops, op j charged (j + 1) µs of dispatch: the ten most expensive are shown."""
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 1000)
    for j in range(12):
        base = 50 * j
        t.op(f"aten::op{j}", base + 10, 20)
        t.launch_kernel(base + 10 + j + 1, 1, "k", base + 40, 1)
    a = analyze(t.load(tmp_path), FLOOR)
    assert [r["name"] for r in a.top_ops] == [f"aten::op{j}" for j in range(11, 1, -1)]
    few = analyze(t.load(tmp_path), AnalysisOptions(launch_floor_ns=4500.0, top=3))
    assert len(few.top_ops) == 3


def test_cpu_only_taxbreak_has_the_gpu_key_set(tmp_path):
    gpu = analyze(nested().load(tmp_path), FLOOR).taxbreak
    cpu = analyze(cpu_only().load(tmp_path)).taxbreak
    assert set(gpu) - {"note"} <= set(cpu)
    assert all(
        cpu[k] is None
        for k in set(gpu)
        - {
            "applicable",
            "kernels_per_step",
            "kernels_per_token",
            "unique_kernels",
            "total_kernels",
            "unique_ratio",
            "note",
        }
    )


def test_base_name_keeps_anonymous_namespaces():
    assert (
        base_name(
            "void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out"
            "(c10::Scalar const&)::{lambda()#1}>(int, float*)"
        )
        == "(anonymous namespace)::elementwise_kernel_with_index"
    )
    assert (
        base_name(
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous "
            "namespace)::OpaqueType<2u>, unsigned int, 3, 128, 1>(at::native::(anonymous namespace)::"
            "OpaqueType<2u>*, int)"
        )
        == "at::native::(anonymous namespace)::CatArrayBatchedCopy"
    )


# -- method.md §5 as implemented: wrappers, synchronising calls, a second thread ------------------


def wrapper_sync_threads() -> Timeline:
    """One step [0, 100] (marker on thread 1), no Python frames::

        thread 1  aten::linear [5, 30] > aten::t [6, 8], aten::addmm [10, 28]
                     L1 [20, 22] -> cuBLAS kernel [25, 27]
                  cudaStreamSynchronize [32, 38]
                  aten::relu [40, 50] > L2 [43, 45] -> [46, 48]
        thread 2  aten::add [60, 70] > L3 [63, 65] -> [66, 68]
                  aten::mul [75, 80] > L4 [76, 78] -> [79, 80]

    Native T_dispatch: relu 3, add 3, mul 1 -> base 3.
    L1 (library): T_py 5 (step start 0 -> 5), T_dispatch 15, of which the wrapper linear -> addmm
    5 (ΔFT) and addmm -> L1 10: ΔCT = 10 - 3 = 7, ΔFT = 5 + 5 + 3 = 13.
    L2: T_py = 40 - 30 - 6 (the sync call is its own part) = 4; ΔFT = 4 + 3 = 7.
    L3: thread 2's first op of the step: no T_py (the thread was idle, not translating); ΔFT 3.
    L4: T_py = 75 - 70 = 5 (its previous op in the step), ΔFT = 5 + 1 = 6.
    """
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.op("aten::linear", 5, 25)
    t.op("aten::t", 6, 2)
    t.op("aten::addmm", 10, 18)
    t.launch_kernel(20, 2, XMMA, 25, 2)
    t.runtime("cudaStreamSynchronize", 32, 6)
    t.op("aten::relu", 40, 10)
    t.launch_kernel(43, 2, ADD, 46, 2)
    t.op("aten::add", 60, 10, tid=2)
    t.launch_kernel(63, 2, ADD, 66, 2, tid=2)
    t.op("aten::mul", 75, 5, tid=2)
    t.launch_kernel(76, 2, MUL, 79, 1, tid=2)
    return t


def test_wrapper_time_is_framework_not_library_translation(tmp_path):
    a = analyze(wrapper_sync_threads().load(tmp_path), FLOOR)
    r = rows_by_launch(a)
    assert a.kernels.dispatch_base_ns == 3 * US
    assert [x["i_lib"] for x in r] == [True, False, False, False]
    assert list(a.kernels.t_wrapper_ns[np.argsort(a.kernels.launch_row)]) == [5 * US, 0, 0, 0]
    assert [x["dct_ns"] for x in r] == [7 * US, 0, 0, 0]
    assert [x["dft_ns"] for x in r] == [13 * US, 7 * US, 3 * US, 6 * US]


def test_synchronising_call_is_neither_framework_nor_library_time(tmp_path):
    a = analyze(wrapper_sync_threads().load(tmp_path), FLOOR)
    r = rows_by_launch(a)
    assert [x["t_py_ns"] for x in r] == [5 * US, 4 * US, 0, 5 * US]
    tb = a.steps[0]["taxbreak"]
    assert tb["sync_ns"] == 6 * US and a.taxbreak["sync_ns"] == 6 * US
    assert tb["ft_ns"] == (13 + 7 + 3 + 6) * US and tb["ct_ns"] == 7 * US


def test_second_thread_first_op_is_not_charged_the_step_start(tmp_path):
    a = analyze(wrapper_sync_threads().load(tmp_path), FLOOR)
    r = rows_by_launch(a)
    assert (r[2]["t_py_ns"], r[3]["t_py_ns"]) == (0, 5 * US)
    assert a.steps[0]["taxbreak"]["ft_ns"] <= a.steps[0]["wall_ns"]


def test_intervals_stay_inside_the_launch_step(tmp_path):
    """Steps [0, 50] and [50, 100]; aten::big [40, 70] launches at [60, 62] (step 1). Its T_py
    and T_dispatch are clipped to step 1: T_py 0, T_dispatch 60 - 50 = 10 (not 20); the 10 µs
    of the op inside step 0 are step 0's unattributed time (window [0, 50], nothing covered)."""
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 50)
    t.annotation("ProfilerStep#2", 50, 50)
    t.op("aten::big", 40, 30)
    t.launch_kernel(60, 2, ADD, 63, 2)
    a = analyze(t.load(tmp_path), FLOOR)
    (r,) = rows_by_launch(a)
    assert (r["step"], r["t_py_ns"], r["t_dispatch_ns"]) == (1, 0, 10 * US)
    assert a.steps[0]["taxbreak"]["unattributed_ns"] == 50 * US
    assert a.steps[1]["taxbreak"]["ft_ns"] == 10 * US


def test_first_bare_launch_outside_every_step_has_no_python_time(tmp_path):
    """A bare launch at [5, 7] before the only step [20, 50]: no frame, no step start and no
    earlier unit on its thread, so its T_py starts at the unit itself: 0 (not the time since 0)."""
    t = Timeline(props=H100)
    t.launch_kernel(5, 2, ADD, 8, 1)
    t.annotation("ProfilerStep#1", 20, 30)
    t.launch_kernel(25, 2, ADD, 28, 1)
    r = rows_by_launch(analyze(t.load(tmp_path), FLOOR))
    assert [(x["step"], x["t_py_ns"]) for x in r] == [(-1, 0), (0, 5 * US)]
