"""The short summary of a run: label / value / confidence-interval rows from ``results.json``.

Pure formatting (no terminal code): the CLI renders these rows with rich; tests read them.
"""

from __future__ import annotations

from hostgap.analysis import cb_split
from hostgap.analysis.vllm_split import table_rows
from hostgap.checks import is_valid
from hostgap.stats.differencing import ACTIVITY_LABEL


def ms(ns: float | None, digits: int = 3) -> str:
    return "-" if ns is None else f"{ns / 1e6:.{digits}f} ms"


def pct(x: float | None, digits: int = 1, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x * 100:+.{digits}f} %" if signed else f"{x * 100:.{digits}f} %"


def _edge(ci: dict, key: str) -> str:
    """Why the point lies on its interval's edge, when it does (``ci.edge``), after the interval."""
    why = (ci.get("edge") or {}).get(key)
    return f"  point on its edge: {why}" if why else ""


def _ci_ms(ci: dict, key: str) -> str:
    v = ci.get(key)
    return f"[{v[0] / 1e6:.3f}, {v[1] / 1e6:.3f}]{_edge(ci, key)}" if v else ""


def _ci_pct(ci: dict, key: str) -> str:
    v = ci.get(key)
    return f"[{v[0] * 100:.1f}, {v[1] * 100:.1f}]{_edge(ci, key)}" if v else ""


def title(r: dict) -> str:
    threads = f" · {r.get('threads')} thread(s)" if r.get("device") == "cpu" else ""
    return (
        f"{r.get('preset') or r.get('model_path')} · {r.get('engine')} {r.get('mode')} · "
        f"{r.get('device')} ({r.get('device_name')}) · batch {r.get('batch')} · "
        f"prompt {r.get('prompt_len')} · {r.get('dtype')}{threads}"
    )


def _in_range(x: float | None, lo: float | None, hi: float | None, text: str) -> str:
    """``text``, or "out of range" for a value that cannot be a result (never shown as one)."""
    if x is None or (lo is not None and x < lo) or (hi is not None and x > hi):
        return "out of range" if x is not None else "-"
    return text


def verdict_text(r: dict) -> tuple[str, str]:
    """(verdict, basis); ``("invalid", <first reason>)`` in place of the verdict when invalid."""
    v = r.get("verdict") or {}
    if not is_valid(r):
        why = r.get("invalid_reasons") or v.get("reasons") or ["checks failed"]
        return "invalid", why[0]
    return str(v.get("verdict") or "-"), str(v.get("basis", ""))


def step_rows(r: dict) -> list[tuple[str, str, str]]:
    """Per-decode-step rows: (label, value, CI); one verdict, from the differencing split."""
    d = r["differencing"]
    ci = d.get("ci") or {}
    act = d.get("activity", "gpu")
    label = ACTIVITY_LABEL.get(act, act)
    kernels = "kernels" if act == "gpu" else "CPU compute ops"
    hdbi = r.get("hdbi")
    t, g, h, f = d["t_step_ns"], d["g_step_ns"], d["h_step_ns"], d["host_fraction"]
    rows = [
        ("wall", _in_range(t, 0, None, ms(t)), _ci_ms(ci, "t_step_ns")),
        (label, _in_range(g, 0, t, ms(g)), _ci_ms(ci, "g_step_ns")),
        ("host-exposed", _in_range(h, 0, t, ms(h)), _ci_ms(ci, "h_step_ns")),
        ("host fraction", _in_range(f, 0, 1, pct(f)), _ci_pct(ci, "host_fraction")),
    ]
    rows += _anatomy_rows(r)
    rows += [
        (f"{kernels} per step", f"{d['k_step']:.1f}", ""),
        ("HDBI", "n/a (GPU only)" if act != "gpu" else (f"{hdbi:.3f}" if hdbi is not None else "-"), ""),
        ("verdict", *verdict_text(r)),
    ]
    if not is_valid(r):
        why = r.get("invalid_reasons") or []
        rows += [("", "", w) for w in why[1:]]
    return rows + _process_rows(r)


def agreement_note(r: dict) -> str | None:
    """The agreement check in words when the two estimates disagree (None when they agree)."""
    a = r.get("agreement") or {}
    return None if not a or a.get("agree") else a.get("note")


def _process_rows(r: dict) -> list[tuple[str, str, str]]:
    """vLLM: the step split across the engine's processes (``engine_facts.process_split``);
    transformers' continuous batching: the loop's split (``engine_facts.cb_split``)."""
    facts = r.get("engine_facts") or {}
    if facts.get("engine") == "vllm":
        return table_rows(facts)
    if str(facts.get("engine", "")).startswith("hf-cb"):
        return cb_rows(facts, r.get("n2"))
    return []


def cb_rows(facts: dict, n2: int | None) -> list[tuple[str, str, str]]:
    """The continuous-batching loop's split, its async mode and its forward steps per call."""
    rows = cb_split.rows(facts.get("cb_split"))
    mode = str(facts.get("async_mode") or "off")
    if mode.startswith("forced"):
        rows.append(("async batching", "forced on CPU", mode.partition(": ")[2]))
    elif mode == "on":
        rows.append(("async batching", "on", "batch N+1 prepared while batch N computes"))
    steps = (facts.get("forward_steps_per_call") or {}).get(str(n2))
    if steps is not None and n2:
        extra = steps - n2
        why = "one prefill + N - 1 decode steps" if extra == 0 else f"{extra:+d}: the async loop's wasted step"
        rows.append(("forward steps per call", f"{steps} for N2 = {n2}", why))
    return rows


def _anatomy_rows(r: dict) -> list[tuple[str, str, str]]:
    """Cross-checks from the traced N2 run: the per-step anatomy's host fraction beside the
    differencing one (the agreement check), and TaxBreak host work."""
    rows = []
    steady = (r.get("anatomy_summary") or {}).get("steady") or {}
    hf = (steady.get("host_fraction") or {}).get("median")
    wall = (steady.get("wall_ns") or {}).get("median")
    a = r.get("agreement") or {}
    if hf is not None and wall is not None:
        rows.append(
            (
                "host fraction, traced anatomy",
                _in_range(hf, 0, 1, pct(hf)),
                f"host-exposed / wall, median of {steady.get('count')} steady traced steps (median wall {ms(wall)})",
            )
        )
    if a:
        word = "agree" if a.get("agree") else "DISAGREE"
        rows.append(
            (
                "anatomy - differencing",
                f"{a['difference'] * 100:+.1f} pts",
                f"{word} (tolerance ±{a['tolerance'] * 100:.0f} pts)",
            )
        )
    tb = r.get("taxbreak") or {}
    if tb.get("applicable") and r.get("n2"):
        n = r["n2"]
        rows.append(
            (
                "TaxBreak host work / step",
                f"FT {ms(tb['ft_ns'] / n)} · CT {ms(tb['ct_ns'] / n)} · KT {ms(tb['kt_ns'] / n)}",
                "host work, exposed or hidden; not stacked into host-exposed",
            )
        )
    return rows


def _noisy_note(d: dict) -> str:
    """Which fits passed as noisy lines: off the R² or residual limit, within the repeats' spread."""
    from hostgap.checks import fit_reason, noisy_line

    out = []
    for name, key in (("wall", "fit_wall"), ("device", "fit_gpu")):
        f = d.get(key)
        if f and fit_reason(name, f, strict=True) and noisy_line(f):
            out.append(f"{name}: noisy line, within its repeats' spread (lack-of-fit p {f['lack_of_fit_p']:.2f})")
    return ("; " + "; ".join(out)) if out else ""


def check_rows(r: dict) -> list[tuple[str, str, str]]:
    """The validation checks (METHOD.md §4): linearity, agreement, sum vs union, copies,
    profiler inflation."""
    d = r["differencing"]
    act = d.get("activity", "gpu")
    copies = d.get("copies_per_step")
    copy_txt = (
        "-"
        if copies is None
        else (
            f"{copies:.2f} (H2D {d.get('h2d_bytes_per_step') or 0:.0f} B, D2H {d.get('d2h_bytes_per_step') or 0:.0f} B)"
        )
    )
    r2w, r2g = d.get("r2_wall"), d.get("r2_gpu")
    sweep = r.get("sweep") or []
    return (
        [
            (
                "linearity R² wall / device",
                f"{_f4(r2w)} / {_f4(r2g)}",
                (f"N = {sweep[0]}..{sweep[-1]} ({len(sweep)} values)" if sweep else "") + _noisy_note(d),
            ),
            ("two-point vs fitted slope", pct(d.get("slope_agreement"), 2), "wall"),
            ("kernel sum - union", ms(d.get("sum_minus_union_step_ns"), 4), "per step"),
            ("copies per step", copy_txt if act == "gpu" else "n/a (CPU)", ""),
            ("profiler inflation", pct(d.get("profiler_inflation"), 1, signed=True), "traced / untraced wall - 1"),
        ]
        + _cpu_rows(d)
        + _noise_rows(d)
        + _stack_rows(r)
    )


def _noise_rows(d: dict) -> list[tuple[str, str, str]]:
    from hostgap.stats.noise import check_rows

    return _slow_rows(d) + check_rows(d.get("machine"), d.get("convergence"))


def _slow_rows(d: dict) -> list[tuple[str, str, str]]:
    """The slow periods the run order showed (``ci.wall``, :mod:`hostgap.stats.rounds`)."""
    w = (d.get("ci") or {}).get("wall")
    if not w or w.get("evidence") is None:
        return []
    if not w.get("left_out"):
        return [("slow periods", "none found", "run-order levels vs AR(1) noise (BIC): interference only slows")]
    every = w["runs"] + w["left_out"]
    reading = f" (every run: {ms(w['every'])} per step)" if w.get("every") is not None else ""
    return [
        (
            "slow periods",
            f"{w['left_out']} of {every} runs",
            "left out of the wall's estimate (run-order levels fit better than AR(1) noise, BIC "
            f"+{w['evidence']:.0f}); its interval reaches up to every run's{reading}",
        )
    ]


def _cpu_rows(d: dict) -> list[tuple[str, str, str]]:
    """On a shared CPU: how many runs were preempted, and t_step from thread CPU time."""
    rows = []
    if d.get("compute_share") is not None:
        iv = _ci_pct(d.get("ci") or {}, "compute_share")
        rows.append(
            (
                "compute share (traced)",
                pct(d["compute_share"]),
                (f"{iv}; " if iv else "") + "applied to the untraced wall: CPU compute = share x wall",
            )
        )
    share = d.get("preempted_share")
    if d.get("repeat_spread") is not None:
        rows.append(("repeat spread", pct(d["repeat_spread"], 1), "IQR / median of untraced repeats"))
    if d.get("contended") is not None:
        flags = d.get("contention_flags") or []
        rows.append(
            (
                "machine busy",
                "yes" if d["contended"] else "no",
                "; ".join(flags) if flags else f"{d.get('attempts', 1)} attempt(s)",
            )
        )
    if share is None:
        return rows
    how = (
        "other processes' CPU time > 5 % of the run's wall"
        if d.get("preempted_basis") == "other-cpu"
        else "wall - thread time > 5 %: other work on this CPU"
    )
    rows.append(("preempted runs", pct(share, 0), how))
    if d.get("traced_preempted_share") is not None:
        rows.append(("preempted traced runs", pct(d["traced_preempted_share"], 0), ""))
    if d.get("thread_t_step_ns") is not None:
        rows.append(
            (
                "wall per step from thread time",
                ms(d["thread_t_step_ns"]),
                f"R² {_f4(d.get('r2_thread'))}; cross-check, not the estimate",
            )
        )
    return rows


def _stack_rows(r: dict) -> list[tuple[str, str, str]]:
    st = (r.get("stacks") or {}).get("main_thread")
    if not st or not st.get("samples"):
        return []
    txt = (
        f"compute {pct(st['compute_share'], 0)}, waiting {pct(st['waiting_share'], 0)}, "
        f"other {pct(st['other_share'], 0)}"
    )
    return [("host samples (py-spy)", txt, f"{st['samples']} samples, decode thread")]


def _f4(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def footnote(r: dict) -> str:
    d = r["differencing"]
    ci = d.get("ci") or {}
    rep = ci.get("repeats_untraced") or [r.get("repeats")] * 2
    est = d.get("estimator", "min")
    how = (
        "Theil-Sen slope over every run, Sen's interval"
        if est == "theil-sen"
        else f"{est} of {rep[-1]} untraced repeats, bootstrap interval"
    )
    if "batch means" in str(ci.get("method", "")):
        how = "Theil-Sen slope over every run; wall interval from the rounds' slopes"
        if (ci.get("wall") or {}).get("rho") is not None:
            how += ", widened for their correlation in run order"
    lines = [
        f"per decode step: N1={r['n1']}, N2={r['n2']}; {d.get('note', '')}; {how}; "
        f"CI {int(100 * ci.get('level', 0.95))} %",
    ]
    if d.get("activity") == "cpu-compute":
        lines.append(
            "CPU run: device-active = CPU compute analogue (union of compute ops), its share "
            "measured in the traced runs and applied to the untraced wall"
        )
    if not is_valid(r):
        lines.append("invalid measurement: the numbers above are not a result (docs/measure.md, Validity)")
    return "\n".join(lines)
