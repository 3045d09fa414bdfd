"""The short summary of a run: label / value / confidence-interval rows from ``results.json``.

Pure formatting (no terminal code): the CLI renders these rows with rich; tests read them.
"""

from __future__ import annotations

from hostgap.capture.results import ACTIVITY_LABEL


def ms(ns: float | None, digits: int = 3) -> str:
    return "-" if ns is None else f"{ns / 1e6:.{digits}f} ms"


def pct(x: float | None, digits: int = 1, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:+.{digits}f} %" if signed else f"{x * 100:.{digits}f} %"


def _ci_ms(ci: dict, key: str) -> str:
    v = ci.get(key)
    return f"[{v[0] / 1e6:.3f}, {v[1] / 1e6:.3f}]" if v else ""


def _ci_pct(ci: dict, key: str) -> str:
    v = ci.get(key)
    return f"[{v[0] * 100:.1f}, {v[1] * 100:.1f}]" if v else ""


def title(r: dict) -> str:
    threads = f" · {r.get('threads')} thread(s)" if r.get("device") == "cpu" else ""
    return (f"{r.get('preset') or r.get('model_path')} · {r.get('engine')} {r.get('mode')} · "
            f"{r.get('device')} ({r.get('device_name')}) · batch {r.get('batch')} · "
            f"prompt {r.get('prompt_len')} · {r.get('dtype')}{threads}")


def step_rows(r: dict) -> list[tuple[str, str, str]]:
    """Per-decode-step rows: (label, value, CI)."""
    d = r["differencing"]
    ci = d.get("ci") or {}
    act = d.get("activity", "gpu")
    label = ACTIVITY_LABEL.get(act, act)
    kernels = "kernels" if act == "gpu" else "CPU compute ops"
    hdbi = r.get("hdbi")
    v = r.get("verdict") or {}
    rows = [
        ("wall", ms(d["t_step_ns"]), _ci_ms(ci, "t_step_ns")),
        (label, ms(d["g_step_ns"]), _ci_ms(ci, "g_step_ns")),
        ("host-exposed", ms(d["h_step_ns"]), _ci_ms(ci, "h_step_ns")),
        ("host fraction", pct(d["host_fraction"]), _ci_pct(ci, "host_fraction")),
        (f"{kernels} per step", f"{d['k_step']:.1f}", ""),
        ("HDBI", "n/a (GPU only)" if act != "gpu" else (f"{hdbi:.3f}" if hdbi is not None else "-"), ""),
        ("verdict", str(v.get("verdict") or "-"), v.get("basis", "")),
    ]
    return rows + _anatomy_rows(r) + _process_rows(r)


def _process_rows(r: dict) -> list[tuple[str, str, str]]:
    """vLLM: the step split across the engine's processes (``engine_facts.process_split``)."""
    facts = r.get("engine_facts") or {}
    if facts.get("engine") != "vllm":
        return []
    from hostgap.capture.vllm_split import table_rows

    return table_rows(facts)


def _anatomy_rows(r: dict) -> list[tuple[str, str, str]]:
    """Cross-checks from the traced N2 run: per-step anatomy medians and TaxBreak host work."""
    rows = []
    steady = (r.get("anatomy_summary") or {}).get("steady") or {}
    hf = (steady.get("host_fraction") or {}).get("median")
    wall = (steady.get("wall_ns") or {}).get("median")
    if hf is not None and wall is not None:
        rows.append(("per-step anatomy (traced)", f"{pct(hf)} of {ms(wall)}",
                     f"median over {steady.get('count')} steady decode steps"))
    tb = r.get("taxbreak") or {}
    if tb.get("applicable") and r.get("n2"):
        n = r["n2"]
        rows.append(("TaxBreak host work / step",
                     f"FT {ms(tb['ft_ns'] / n)} · CT {ms(tb['ct_ns'] / n)} · KT {ms(tb['kt_ns'] / n)}",
                     "host work, exposed or hidden; not stacked into host-exposed"))
    return rows


def check_rows(r: dict) -> list[tuple[str, str, str]]:
    """The validation checks (METHOD.md §4): linearity, agreement, sum vs union, copies,
    profiler inflation."""
    d = r["differencing"]
    act = d.get("activity", "gpu")
    copies = d.get("copies_per_step")
    copy_txt = "-" if copies is None else (
        f"{copies:.2f} (H2D {d.get('h2d_bytes_per_step') or 0:.0f} B, D2H {d.get('d2h_bytes_per_step') or 0:.0f} B)"
    )
    r2w, r2g = d.get("r2_wall"), d.get("r2_gpu")
    sweep = r.get("sweep") or []
    return [
        ("linearity R² wall / device", f"{_f4(r2w)} / {_f4(r2g)}",
         f"N = {sweep[0]}..{sweep[-1]} ({len(sweep)} values)" if sweep else ""),
        ("two-point vs fitted slope", pct(d.get("slope_agreement"), 2), "wall"),
        ("kernel sum - union", ms(d.get("sum_minus_union_step_ns"), 4), "per step"),
        ("copies per step", copy_txt if act == "gpu" else "n/a (CPU)", ""),
        ("profiler inflation", pct(d.get("profiler_inflation"), 1, signed=True), "traced / untraced wall - 1"),
    ] + _cpu_rows(d) + _stack_rows(r)


def _cpu_rows(d: dict) -> list[tuple[str, str, str]]:
    """On a shared CPU: how many runs were preempted, and t_step from thread CPU time."""
    share = d.get("preempted_share")
    if share is None:
        return []
    rows = [("preempted runs", pct(share, 0), "wall - thread time > 5 %: other work on this CPU")]
    if d.get("thread_t_step_ns") is not None:
        rows.append(("wall per step from thread time", ms(d["thread_t_step_ns"]),
                     f"R² {_f4(d.get('r2_thread'))}; cross-check, not the estimate"))
    return rows


def _stack_rows(r: dict) -> list[tuple[str, str, str]]:
    st = (r.get("stacks") or {}).get("main_thread")
    if not st or not st.get("samples"):
        return []
    txt = (f"compute {pct(st['compute_share'], 0)}, waiting {pct(st['waiting_share'], 0)}, "
           f"other {pct(st['other_share'], 0)}")
    return [("host samples (py-spy)", txt, f"{st['samples']} samples, decode thread")]


def _f4(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def footnote(r: dict) -> str:
    d = r["differencing"]
    ci = d.get("ci") or {}
    rep = ci.get("repeats_untraced") or [r.get("repeats")] * 2
    lines = [
        f"per decode step: N1={r['n1']}, N2={r['n2']}; {d.get('note', '')}; "
        f"{d.get('estimator', 'min')} of {rep[-1]} untraced repeats; CI {int(100 * ci.get('level', 0.95))} % bootstrap",
    ]
    if d.get("activity") == "cpu-compute":
        lines.append("CPU run: device-active = CPU compute analogue (union of compute ops); "
                     "the rest of the step is framework and Python time")
    return "\n".join(lines)
