"""``hostgap kernels`` rows (hostgap.anatomy.kernels.kernel_rows) on a hand-built step: an eager
launch inside an op, an orphan launch, a graph launch and a queued launch, field by field."""

from __future__ import annotations

from anatomy_builders import H100, US, Timeline
from hostgap.anatomy.kernels import kernel_rows
from hostgap.anatomy.steps import AnalysisOptions, analyze

FLOOR = AnalysisOptions(launch_floor_ns=4500.0)


def one_step() -> Timeline:
    """ProfilerStep#1 [0, 100], no Python frames, one stream::

        aten::mm [10, 20] > cudaLaunchKernel [12, 14] -> gemm [16, 19]   T_launch 4
        cudaLaunchKernel [30, 31] (no op) -> k2 [40, 42]                    T_launch 10
        cudaGraphLaunch [50, 52] -> g1 [55, 57], g2 [58, 61]               T_launch 5, 2 ops, 5 µs
        cudaLaunchKernel [62, 63] -> k3 [65, 72]   stream free since 61 <= 62   T_launch 3
        cudaLaunchKernel [66, 67] -> k4 [72, 74]   the stream is busy until 72 > 66: queued

    ΔKT_fw = max(0, T_launch - 4.5): 0, 5.5, 0.5, 0; none for the queued launch.
    """
    t = Timeline(props=H100)
    t.annotation("ProfilerStep#1", 0, 100)
    t.op("aten::mm", 10, 10)
    t.launch_kernel(12, 2, "gemm", 16, 3)
    t.launch_kernel(30, 1, "k2", 40, 2)
    t.graph_launch(50, 2, [("g1", 55, 2), ("g2", 58, 3)])
    t.launch_kernel(62, 1, "k3", 65, 7)
    t.launch_kernel(66, 1, "k4", 72, 2)
    return t


def test_kernel_rows_field_by_field(tmp_path):
    tr = one_step().load(tmp_path)
    rows = kernel_rows(tr, analyze(tr, FLOOR))
    pick = (
        "launch_api",
        "graph",
        "kernel",
        "gpu_ops",
        "device_ns",
        "op",
        "inner_op",
        "frame",
        "launch_start_ns",
        "launch_dur_ns",
        "kernel_start_ns",
        "t_launch_ns",
        "queued",
        "dkt_fw_ns",
    )
    got = [tuple(r[k] for k in pick) for r in rows]
    assert got == [
        (
            "cudaLaunchKernel",
            False,
            "gemm",
            1,
            3 * US,
            "aten::mm",
            "aten::mm",
            "",
            12 * US,
            2 * US,
            16 * US,
            4 * US,
            False,
            0.0,
        ),
        ("cudaLaunchKernel", False, "k2", 1, 2 * US, "", "", "", 30 * US, 1 * US, 40 * US, 10 * US, False, 5500.0),
        (
            "cudaGraphLaunch",
            True,
            "graph replay (2 ops)",
            2,
            5 * US,
            "",
            "",
            "",
            50 * US,
            2 * US,
            55 * US,
            5 * US,
            False,
            500.0,
        ),
        ("cudaLaunchKernel", False, "k3", 1, 7 * US, "", "", "", 62 * US, 1 * US, 65 * US, 3 * US, False, 0.0),
        ("cudaLaunchKernel", False, "k4", 1, 2 * US, "", "", "", 66 * US, 1 * US, 72 * US, 6 * US, True, None),
    ]
    assert all(r["step"] == 0 and r["dkt_ns"] == 4500.0 and r["first_in_op"] for r in rows)


def test_kernel_rows_empty_on_a_cpu_trace(tmp_path):
    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 10)
    t.op("aten::mm", 1, 2)
    tr = t.load(tmp_path)
    assert kernel_rows(tr, analyze(tr)) == []
