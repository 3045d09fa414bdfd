"""The mutants issue 22 found surviving, each re-applied and run against the test that now kills it.

Usage (project root, clean ``src/``, .venv built)::

    .venv/bin/python bench/named_mutants.py          # every mutant: one line each, exit 1 if any lives

For each row below the script checks that the named test passes on the source as it is, writes
the one-operator change over the module (the old text must occur exactly once, so a restructure
that moves the code fails loudly instead of testing nothing), runs that test alone and expects it
to fail, then restores the module. Unlike ``bench/mutation.sh`` (a random sample per module), this
is a fixed list: the twelve mutants the issue named (anatomy/steps.py x4, verdict, taxbreak, the
queued-step rule, the validation helper, the TP what-if, the ring bandwidth, the collective count,
the MoE expert FLOPs), four siblings of the same kind (the host term and D_1 divided by k in
the other TP forms, the MoE quant FLOPs) and the three of issue 29 (the by-class TaxBreak's
orchestration sum, the bootstrap interval's lower end, the Kineto int64 guard), each of which
must stay caught by a named test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = "tests/test_anatomy_pinned.py::"
MODEL = "tests/test_model_pins.py::"

# (module under src/hostgap, old text, mutated text, the test that must fail, what the mutant does)
MUTANTS = [
    (
        "anatomy/steps.py",
        "return win_e - win.start_ns - covered_each(",
        "return win_e - win.start_ns + covered_each(",
        PIN + "test_unattributed_host_time_is_the_window_minus_covered_time",
        "unattributed host time adds the covered time instead of subtracting it",
    ),
    (
        "anatomy/steps.py",
        "float(total[j] / n_steps)",
        "float(total[j] * n_steps)",
        PIN + "test_cpu_top_ops_exact_table",
        "top-ops host time per step multiplied by the step count",
    ),
    (
        "anatomy/steps.py",
        "grand = max(float(total.sum()), 1.0)",
        "grand = min(float(total.sum()), 1.0)",
        PIN + "test_cpu_top_ops_exact_table",
        "top-ops shares taken against min(total, 1)",
    ),
    (
        "anatomy/steps.py",
        "    if not len(tops):\n",
        "    if len(tops):\n",
        PIN + "test_cpu_top_ops_exact_table",
        "CPU top-ops table empty whenever it has rows",
    ),
    (
        "anatomy/verdict.py",
        'if not s["queued"]] or pool)',
        'if not s["queued"]] and pool)',
        PIN + "test_verdict_pool_drops_a_queued_minority",
        "verdict pool keeps a queued minority",
    ),
    (
        "anatomy/taxbreak.py",
        "lane_prev_end(trace, op_rows, np.maximum(gpu_row, 0)) > l_start",
        "lane_prev_end(trace, op_rows, np.maximum(gpu_row, 0)) >= l_start",
        PIN + "test_launch_exactly_at_the_lane_end_is_not_queued",
        "launch at the lane's end counted as queued",
    ),
    (
        "anatomy/flags.py",
        "busy_before >= fo - w.start_ns",
        "busy_before >= fo + w.start_ns",
        PIN + "test_queued_when_the_first_op_waited_behind_earlier_work",
        "queued-step rule with fo + start",
    ),
    (
        "events.py",
        "    if not condition:\n        raise HostgapError",
        "    if condition:\n        raise HostgapError",
        PIN + "test_require_raises_only_when_the_condition_fails",
        "validation helper raises when the condition holds",
    ),
    (
        "model/whatif/paper.py",
        "p1.total_ns / k + pk.collective_ns",
        "p1.total_ns * k + pk.collective_ns",
        "tests/test_model_pins_whatif.py::test_form_totals_by_hand",
        "TP what-if multiplies the TP-1 step by k",
    ),
    (
        "model/whatif/paper.py",
        '"host_over_k": gk + h1 / k',
        '"host_over_k": gk + h1 * k',
        "tests/test_model_pins_whatif.py::test_form_totals_by_hand",
        "TP what-if multiplies the host term by k",
    ),
    (
        "model/tp.py",
        "k / (2 * (k - 1))",
        "k / (2 * (k + 1))",
        MODEL + "test_default_all_reduce_is_a_ring_at_half_the_link",
        "ring bus bandwidth k / (2 (k + 1))",
    ),
    (
        "model/tp.py",
        "float(dt.collective_ops * ar.time_ns(",
        "float(dt.collective_ops / ar.time_ns(",
        MODEL + "test_paper_reference_check_by_hand",
        "collective time divided by the collective count",
    ),
    (
        "model/tp.py",
        "return D1 / k + C, (1.0 / k)",
        "return D1 * k + C, (1.0 / k)",
        MODEL + "test_tp_forms_by_hand",
        "compute_comm form multiplies D_1 by k",
    ),
    (
        "model/tp.py",
        "dk = (d1 - floor) / k + floor",
        "dk = (d1 - floor) * k + floor",
        "tests/test_model_tp.py::test_fitting_picks_the_form_that_generated_the_data",
        "synthetic TP cells multiply the scalable device time by k",
    ),
    (
        "model/accounting.py",
        '"gemm", L, 2.0 * T * top * 3 * h',
        '"gemm", L, 2.0 * T / top * 3 * h',
        MODEL + "test_moe_expert_flops_bytes_and_quant_by_hand",
        "MoE expert FLOPs divide by top-k",
    ),
    (
        "model/accounting.py",
        '"quant", L, 2.0 * T * top * h,',
        '"quant", L, 2.0 * T * top / h,',
        MODEL + "test_moe_expert_flops_bytes_and_quant_by_hand",
        "MoE quant FLOPs 2 T top / h",
    ),
    # the three issue 29's seeded sample found alive
    (
        "anatomy/steps.py",
        '"orchestrate_ns": s.ft_ns + s.ct_ns + s.kt_ns,',
        '"orchestrate_ns": s.ft_ns + s.ct_ns - s.kt_ns,',
        "tests/test_anatomy_comm.py::test_taxbreak_by_launch_class",
        "by-class TaxBreak subtracts the launch path",
    ),
    (
        "stats/differencing.py",
        "[50 * (1 - level), 50 * (1 + level)]",
        "[50 * (1 + level), 50 * (1 + level)]",
        "tests/test_capture_differencing.py::test_percentile_interval_by_hand",
        "bootstrap interval of zero width",
    ),
    (
        "readers/kineto/schema.py",
        "if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63:",
        "if isinstance(v, int) or not isinstance(v, bool) or -(2**63) <= v < 2**63:",
        "tests/test_load_pins_ints.py::test_int_or_none_reads_only_int64_integers",
        "int-range guard lets a bool, a float or a 2**70 id through",
    ),
]


def run_test(nodeid: str) -> bool:
    """True when the test passes."""
    cmd = [str(ROOT / ".venv/bin/python"), "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", nodeid]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=900).returncode == 0


def main() -> int:
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    if dirty:
        print("named_mutants.py: src/ has uncommitted changes; it needs a clean tree", file=sys.stderr)
        return 2
    bad = 0
    for module, old, new, test, what in MUTANTS:
        path = ROOT / "src/hostgap" / module
        src = path.read_text()
        if src.count(old) != 1:
            print(f"MOVED   {module}: {old.strip()!r} occurs {src.count(old)} times; update this list")
            bad += 1
            continue
        if not run_test(test):
            print(f"BROKEN  {test} fails on the unmutated source")
            bad += 1
            continue
        try:
            path.write_text(src.replace(old, new))
            alive = run_test(test)
        finally:
            path.write_text(src)
        bad += alive
        print(f"{'SURVIVES' if alive else 'caught  '} {module}: {what}  <- {test.split('::')[1]}", flush=True)
    print(f"{len(MUTANTS) - bad} of {len(MUTANTS)} named mutants caught by their test")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
