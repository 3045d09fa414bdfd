"""Every lever of one input, ranked (docs/advise.md): the words of each (target, basis,
validated, why not) around the arithmetic of arithmetic.py and device.py."""

from __future__ import annotations

import numpy as np

from hostgap.errors import HostgapError
from hostgap.model import graphlaunch
from hostgap.model.levers import arithmetic as A
from hostgap.model.levers import device as D
from hostgap.model.levers.arithmetic import Baseline, Lever, LeverSpec, Outcome, Steps

NAMES = ("graphs", "async", "cpu", "batch", "fp8", "tp", "spec", "fusion", "megakernel")

NOT_ON_GPU = "not validated on a GPU yet"
VALIDATED = {
    "graphs": "the eager -> graph rule against the differencing paper's H100 eager/graph cells (docs/advise.md); "
    + NOT_ON_GPU
    + " on a trace's own launches",
    "async": "the overlap rule against transformers' async batching (-22 % wall) and SGLang's overlap (~1.1x) "
    "(docs/advise.md); on a CPU: hf-cb vs hf-cb-async (bench/results/advise_validation.md)",
    "cpu": "against TaxBreak's faster-CPU figures (docs/advise.md); the cores target on a CPU: a vLLM run on one "
    "core vs two (bench/results/advise_validation.md); " + NOT_ON_GPU,
    "batch": "on a CPU: tiny hf and vLLM at batch 1 vs measured batches 4 and 8 (bench/results/advise_validation.md); "
    + NOT_ON_GPU,
    "fp8": "the fp8 what-if against the differencing paper's W8A8 cells (docs/models.md); " + NOT_ON_GPU,
    "tp": "the tp what-if against the differencing paper's TP-2/TP-4 cells (docs/models.md); " + NOT_ON_GPU,
    "spec": "the spec what-if against the differencing paper's per-cycle host residual (docs/models.md); " + NOT_ON_GPU,
    "fusion": NOT_ON_GPU + " (no published figure for the share fused)",
    "megakernel": "against the Mirage persistent kernel's 1.7x (docs/advise.md); " + NOT_ON_GPU,
}


def _med(x: np.ndarray) -> float:
    v = x[np.isfinite(x)]
    return float(np.median(v)) if len(v) else float("nan")


def _no(name: str, target: dict, reason: str, basis: str = "") -> LeverSpec:
    return LeverSpec(name, target, basis, VALIDATED[name], None, reason)


def _launch_known(b: Baseline) -> bool:
    return bool(np.isfinite(b.steps.orchestrate).any())


def _launch_why(b: Baseline) -> str:
    return b.facts.get("launches_why") or "needs the launches' costs: TaxBreak does not apply to this input"


def graphs(b: Baseline) -> LeverSpec:
    t = {"capture": "full"}
    s = b.steps
    if not b.gpu:
        return _no("graphs", t, A.CPU_RUN)
    eager, glaunch, kernels = _med(s.launches), _med(s.graph_launches), _med(s.kernels)
    if glaunch > 0 and eager <= A.FULL_GRAPH_EAGER_SHARE * max(kernels, 1.0):
        return _no(
            "graphs",
            t,
            f"already replayed as a FULL graph ({glaunch:g} graph launch(es) per step replay "
            f"{kernels - eager:g} of {kernels:g} kernels; {eager:g} launched eagerly)",
        )
    if b.unfaithful:
        return _no("graphs", t, "the input's launch evidence does not hold: " + "; ".join(b.unfaithful))
    if not _launch_known(b):
        return _no("graphs", t, _launch_why(b))
    cost = graphlaunch.for_device(b.device_name or "a GPU the input does not name")
    per = _med(A.per_launch_ns(s))
    basis = (
        f"{b.source}: {eager:g} eager launches per step x {A.us(per)} (ΔFT+ΔCT+ΔKT, this input's TaxBreak) "
        f"-> one graph launch {A.us(cost.fixed_ns)} + {A.us(cost.per_node_ns)} per node (model/graphlaunch.py: "
        f"{cost.source}); saving bounded by the host-caused idle inside the step, median {A.ms(_med(A.inside_wait(s)))} "
        "(model/levers/arithmetic.py, stepmodel's wall = serial + max(orchestration, device))"
    )
    return LeverSpec("graphs", t, basis, VALIDATED["graphs"], lambda x: A.graphs_full(x, cost))


def async_(b: Baseline) -> LeverSpec:
    t = {"async_scheduling": True}
    s = b.steps
    if not b.gpu:
        return _no(
            "async",
            t,
            A.CPU_RUN + ": the forward runs on the loop's own core, so the next batch's preparation cannot "
            "overlap it (the step is unchanged)",
        )
    if b.unfaithful:
        return _no("async", t, "the input's host-caused idle is not trusted: " + "; ".join(b.unfaithful))
    between = _med(np.minimum(s.between, s.host_wait))
    if not np.isfinite(s.between).any():
        return _no("async", t, "needs the engine loop's time between steps: the input does not carry it")
    if not between > 0:
        return _no("async", t, "no host-caused wait between steps to overlap (the engine loop is already hidden)")
    basis = (
        f"{b.source}: host-caused wait between steps, median {A.ms(between)} (the engine loop after the step's "
        f"marker), moved under the previous step's device time; rule step = max(min(O, M) + S, M) "
        "(model/whatif/overlap.py on this input's parts; O = ΔFT+ΔCT+ΔKT of the step's launches)"
    )
    return LeverSpec("async", t, basis, VALIDATED["async"], A.overlap)


def cores(b: Baseline, target: int | None = None) -> LeverSpec | None:
    """The ``cpu`` lever where the run's busy host processes outnumbered the cores it could use:
    the cores it lacked (docs/advise.md); None where they did not. Busy: the measuring process at
    its measured share of the step (its thread's CPU per step over the step), each engine
    process for the whole step (vLLM's EngineCore and Worker poll while they wait)."""
    c = b.facts.get("cores")
    if not c:
        return None
    thread = c.get("thread_cpu_step_ns")
    step = _med(b.steps.wall)
    own = min(1.0, thread / step) if thread is not None and step > 0 else 1.0
    busy = c["processes"] - 1 + own
    if busy <= c["usable"]:
        return None
    need = int(np.ceil(busy - 1e-9))
    if target is None:
        target = min(need, c["logical"]) if (c.get("logical") or 0) > c["usable"] else need
    t = {"cores": int(target)}
    if b.unfaithful:
        return _no("cpu", t, "the input's host time is not trusted: " + "; ".join(b.unfaithful))
    lo_fn, hi_fn = A.more_cores(b, c["usable"], target, busy, thread)
    basis = (
        f"{b.source}: {busy:.2f} busy host processes ({c['processes'] - 1} engine process(es) for the whole step, "
        f"this process {own:.0%} of it) on {c['usable']} usable core(s) -> {target}: at most each one's fair share "
        f"of a core grows {min(1.0, c['usable'] / busy):.2f} -> {min(1.0, target / busy):.2f} of the step's "
        f"{'host-exposed time' if b.gpu else 'time'} (model/whatif/cpu.py's fair share), at least this process's "
        f"own CPU per step, {A.ms(thread or 0.0)}, leaves the shared core; the middle of the two "
        "(model/levers/arithmetic.py more_cores)"
    )

    def mid(x: Steps) -> Outcome:
        lo, hi = lo_fn(x), hi_fn(x)
        return Outcome((lo.wall + hi.wall) / 2, (lo.device + hi.device) / 2)

    return LeverSpec("cpu", t, basis, VALIDATED["cpu"], mid, ends=(lo_fn, hi_fn))


def cpu(b: Baseline) -> LeverSpec:
    more = cores(b)
    if more is not None:
        return more
    t = {"speed": A.CPU_SPEED}
    floor = b.launch_floor_ns
    if b.gpu and b.unfaithful:
        return _no("cpu", t, "the input's host-caused idle is not trusted: " + "; ".join(b.unfaithful))
    where = (
        f"the host-caused idle, median {A.ms(_med(b.steps.host_wait))}, less its launch floor "
        f"({A.us(floor or 0)} per launch: no faster on a faster core), / {A.CPU_SPEED:g}"
        if b.gpu
        else "the whole step (framework and compute both run on the core) / "
        f"{A.CPU_SPEED:g}: median {A.ms(_med(b.steps.wall))}"
    )
    if b.gpu and b.facts.get("launches_why"):
        where = (
            f"the host-exposed time, median {A.ms(_med(b.steps.host_wait))}, / {A.CPU_SPEED:g} (no launch counts in "
            "the input: the launch floor, no faster on a faster core, is not taken off; an upper bound on the gain)"
        )
    basis = (
        f"{b.source}: {where}; target {A.CPU_SPEED:g}x single-thread (model/levers/arithmetic.py CPU_SPEED: the speed "
        "cutting orchestration 29 %, top of TaxBreak's range, METHOD.md §7)"
    )
    return LeverSpec("cpu", t, basis, VALIDATED["cpu"], lambda x: A.faster_host(x, A.CPU_SPEED, floor, b.gpu))


def batch(b: Baseline, target: int | None = None, gpu: str | None = None) -> LeverSpec:
    tb = int(target or max(round(b.batch * D.BATCH_FACTOR), 2))
    t = {"batch": tb}
    if not b.batch_known:
        return _no("batch", t, "needs the step's batch: the input's step markers do not carry it")
    if b.facts.get("watch_calibration"):
        try:
            apply, ends, words = D.watch_batch_outcome(b, tb)
        except HostgapError as e:
            return _no("batch", t, str(e).split(": ", 1)[-1])
        basis = f"{b.source} at batch {b.batch:g}: {words}; per-token gain (model/levers/device.py)"
        return LeverSpec("batch", t, basis, VALIDATED["batch"], apply, ends=ends)
    if b.facts.get("launches_why"):
        return _no("batch", t, "needs the watch's calibration (its lines in the batch): this watch has none")
    if not b.gpu:
        try:
            apply, ends, words = D.cpu_batch_outcome(b, tb)
        except HostgapError as e:
            return _no("batch", t, str(e).split(": ", 1)[-1])
        basis = f"{b.source} at batch {b.batch:g}: {words}; per-token gain (model/levers/device.py)"
        return LeverSpec("batch", t, basis, VALIDATED["batch"], apply, ends=ends)
    if b.preset is None:
        return _no("batch", t, "needs the model's architecture (the device time at a larger batch): --preset")
    try:
        apply, words = D.batch_outcome(b, tb, gpu)
    except HostgapError as e:
        return _no("batch", t, str(e).split(": ", 1)[-1])
    basis = f"{b.source} at batch {b.batch:g}: {words}; per-token gain (model/levers/device.py)"
    return LeverSpec("batch", t, basis, VALIDATED["batch"], apply)


def device_side(b: Baseline, gpu: str | None = None) -> list[LeverSpec]:
    targets: dict[str, dict] = {
        "fp8": {"dtype": "fp8"},
        "tp": {"tp": D.TP_TARGET},
        "spec": {"spec": "ngram", "gamma": D.SPEC_GAMMA, "alpha": D.SPEC_ALPHA},
    }
    out = []
    for name, (r, why) in D.device_levers(b, gpu).items():
        if r is None:
            out.append(_no(name, targets[name], why))
            continue
        basis = (
            f"{b.source}: device-active x{r.device:.3f}, host-exposed x{r.host:.3f}, tokens per step x{r.tokens:.3f} "
            f"from the {name} what-if of preset {b.preset} (model/whatif/paper.py: {r.words})"
        )
        out.append(LeverSpec(name, targets[name], basis, VALIDATED[name], _ratio_fn(r)))
    return out


def _ratio_fn(r: D.Ratios):
    def apply(x: Steps) -> Outcome:
        return D.apply_ratios(x, r)

    return apply


def fusion(b: Baseline) -> LeverSpec:
    t = {"launches_fused": A.FUSION_SHARE}
    if b.gpu and b.unfaithful:
        return _no("fusion", t, "the input's launch evidence does not hold: " + "; ".join(b.unfaithful))
    if b.gpu and not _launch_known(b):
        return _no("fusion", t, _launch_why(b))
    what = (
        f"{A.FUSION_SHARE:g} of {_med(b.steps.launches):g} eager launches x {A.us(_med(A.per_launch_ns(b.steps)))} "
        "(ΔFT+ΔCT+ΔKT, this input's TaxBreak), bounded by the host-caused idle inside the step"
        if b.gpu
        else f"{A.FUSION_SHARE:g} of the host time between compute ops (framework work per op), median "
        f"{A.ms(_med(b.steps.wall - b.steps.device))}"
    )
    basis = f"{b.source}: {what}; device work unchanged (model/levers/arithmetic.py FUSION_SHARE, an assumption)"
    return LeverSpec("fusion", t, basis, VALIDATED["fusion"], lambda x: A.fused(x, A.FUSION_SHARE, b.gpu))


def megakernel(b: Baseline, gpu: str | None = None) -> LeverSpec:
    t = {"kernels_per_step": 1}
    if not b.gpu:
        return _no("megakernel", t, "a GPU persistent kernel: not for a CPU run")
    if b.unfaithful:
        return _no("megakernel", t, "the input's launch evidence does not hold: " + "; ".join(b.unfaithful))
    if not _launch_known(b):
        return _no("megakernel", t, _launch_why(b))
    try:
        bound = D.megakernel_device_ns(b, gpu)
    except HostgapError:
        bound = None
    dev = (
        f"device time at the bytes-at-78 %-bandwidth bound {A.ms(bound)} (model/whatif/megakernel.py)"
        if bound is not None
        else "device time held (no architecture: --preset for the bandwidth bound)"
    )
    basis = (
        f"{b.source}: every launch's ΔFT+ΔCT+ΔKT but one (median {A.ms(_med(b.steps.orchestrate))} per step) leaves "
        f"the critical path, bounded by the host-caused idle inside the step; {dev}; the engine loop stays"
    )

    def apply(x: Steps) -> Outcome:
        return A.megakernel(x, None if bound is None else np.full(len(x), bound))

    return LeverSpec("megakernel", t, basis, VALIDATED["megakernel"], apply)


def specs(b: Baseline, gpu: str | None = None) -> list[LeverSpec]:
    invalid = [u for u in b.unfaithful if u.startswith("invalid measurement")]
    if invalid:  # the numbers are not a result: nothing to calibrate on
        return [
            _no(n, {}, "invalid measurement: no lever rests on it (notes; docs/measure.md, Validity)") for n in NAMES
        ]
    dev = {s.lever: s for s in device_side(b, gpu)}
    return [
        graphs(b),
        async_(b),
        cpu(b),
        batch(b, gpu=gpu),
        dev["fp8"],
        dev["tp"],
        dev["spec"],
        fusion(b),
        megakernel(b, gpu),
    ]


def levers(b: Baseline, gpu: str | None = None) -> list[Lever]:
    """Every lever of the input, ranked by predicted gain (advise.rank)."""
    return A.rank([A.evaluate(b, s) for s in specs(b, gpu)])


def top(b: Baseline, gpu: str | None = None) -> dict | None:
    """The best applicable lever predicted to gain (``lever``, ``target``, ``gain``, ``step_s``),
    or None: what a watch row names."""
    best = next((lv for lv in levers(b, gpu) if lv.applicable and (lv.gain or 0.0) > 0), None)
    if best is None or best.step_ns is None:
        return None
    return {"lever": best.lever, "target": best.target, "gain": best.gain, "step_s": best.step_ns / 1e9}


def document(b: Baseline, gpu: str | None = None) -> dict:
    """The ``levers`` list and what it rests on: today's step with its interval, the notes."""
    rows = levers(b, gpu)
    ci = A.today_interval(b)
    return {
        "today": {
            "step_ns": _med(b.steps.wall),
            "step_ns_ci": list(ci) if ci else None,
            "device_ns": _med(b.steps.device),
            "host_wait_ns": _med(b.steps.host_wait),
            "batch": b.batch,
            "tokens_per_s": b.batch * 1e9 / _med(b.steps.wall),
            "source": b.source,
        },
        "notes": list(b.notes) + (["unfaithful input: " + "; ".join(b.unfaithful)] if b.unfaithful else []),
        "levers": [r.to_dict() for r in rows],
    }
