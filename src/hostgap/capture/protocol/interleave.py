"""The measuring phases for one engine or several measured together, interleaved.

Engines compared side by side (``hostgap measure --engine hf,vllm``) must see the same machine:
measured one after the other, a burst of other work or a slow drift lands on one engine only and
shows up as a difference between them. So every engine is built and warmed up first, and then
each untraced run is taken for every engine back to back, the engines' order alternating from
one run to the next (A B, B A, A B, ...: a drift within a pair cancels over two pairs), over one
shuffled order of token counts shared by all engines; the traced runs are interleaved the same
way. Each engine's runs feed its own differencing, contention check and validity rules
(:mod:`hostgap.capture.protocol.validity`), exactly as when it is measured alone; while any engine's runs
were contended, all engines are measured again (``retries``).

With one engine this is the protocol of :mod:`hostgap.capture.protocol.orchestrate` unchanged.
"""

from __future__ import annotations

import functools
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostgap.capture.protocol.engine import Engine
from hostgap.capture.protocol.results import RESULTS_SCHEMA_VERSION, trace_stats
from hostgap.capture.protocol.validity import contention_of, disturbed, in_thread
from hostgap.model.arch import Arch
from hostgap.store.rundir import RunDir


@dataclass
class Side:
    """One engine's part of a measurement: its resolved config, engine, plan
    (:func:`hostgap.capture.protocol.orchestrate.plan`) and run directory."""

    cfg: Any  # a resolved MeasureConfig (hostgap.capture.protocol.orchestrate, which imports this module)
    engine: Engine
    plan: dict
    run: RunDir
    run_id: str
    arch: Arch | None = None
    build_s: float = 0.0
    state: dict = field(default_factory=dict)  # the current attempt's runs
    meter: Any = None  # hostgap.energy.counters.Meter read around every untraced run (None: no counter)


def pair_order(k: int, i: int) -> list[int]:
    """The order in which ``k`` engines take their run ``i``: rotated by one each run, so with
    two engines A B, B A, A B ... (each engine goes first equally often).

    >>> [pair_order(2, i) for i in range(3)]
    [[0, 1], [1, 0], [0, 1]]
    """
    return [(j + i) % k for j in range(k)]


def run_phases(sides: list[Side], tally, start: float | None = None) -> list[tuple[object, dict]]:
    """Every phase for every side, interleaved, then more rounds while the checks ask for them
    and the budget allows (``start``: :func:`time.monotonic` when the budget began, default
    now); per side (its loaded N2 trace, raw timings)."""
    start = time.monotonic() if start is None else start
    for s in sides:
        tally.set_phase("warm-up" if len(sides) == 1 else f"warm-up [{s.cfg.engine}]")
        _warm_up(s, tally)
    first = sides[0].cfg
    # Rounds: each a run of every N in a shuffled order, one order shared by every engine (the
    # round structure carries the wall's interval, hostgap.stats.rounds).
    rng = random.Random(first.seed)
    order, rounds = [], []
    for k in range(first.repeats):
        ns = list(first.sweep)
        rng.shuffle(ns)
        order += ns
        rounds += [k] * len(ns)
    for s in sides:
        s.state = {
            "untraced": {n: [] for n in s.cfg.sweep},
            "thread": {n: [] for n in s.cfg.sweep},
            "other": {n: [] for n in s.cfg.sweep},
            "traced": {n: [] for n in s.cfg.sweep},
            "round": {n: [] for n in s.cfg.sweep},
            "seq": {n: [] for n in s.cfg.sweep},
            "energy": {n: [] for n in s.cfg.sweep},  # per run: domain -> µJ (None: reset, unreadable)
            "anatomy_trace": None,
            "loaded_n2": None,
        }
    from hostgap.stats import noise

    snaps = [noise.snapshot()]
    tally.set_phase("untraced W(N)")
    schedule: list[list] = []  # (engine, N) of every untraced run, in the order they ran
    t0 = time.monotonic()
    _untraced_pass(sides, order, schedule, tally, rounds)
    untraced_s = (time.monotonic() - t0) / max(1, first.repeats)
    # Only where the decode runs on this thread: a device or a multi-process engine (vLLM) makes
    # the thread sleep legitimately, and its CPU time says nothing about preemption.
    extra = {id(s): (_top_up(s, tally) if in_thread(s.cfg) else []) for s in sides}
    snaps.append(noise.snapshot())
    tally.set_phase("traced G(N), K(N)")
    traced = list(sides[0].plan["traced"])
    random.Random(first.seed + 1).shuffle(traced)  # slow periods must not line up with N
    t0 = time.monotonic()
    _traced_pass(sides, traced, tally)
    traced_s = (time.monotonic() - t0) * len({n for n, _r in traced}) / max(1, len(traced))
    snaps.append(noise.snapshot())
    conv = _converge(sides, order, extra, schedule, tally, untraced_s, traced_s, snaps, start)
    snaps.append(noise.snapshot())
    out = []
    for s in sides:
        stacks = None
        if s.cfg.stacks:
            tally.set_phase("py-spy stacks" if len(sides) == 1 else f"py-spy stacks [{s.cfg.engine}]")
            from hostgap.capture.protocol.stacks import sample_during

            stacks = sample_during(functools.partial(s.engine.generate, s.cfg.n2), s.run.path / "stacks")
            tally.add(s.cfg.n2)
        raw = _raw(s, order, extra[id(s)], stacks)
        raw["machine"] = noise.machine_noise(snaps)
        raw["convergence"] = conv
        if len(sides) > 1:
            raw["interleaved"] = {"engines": [x.cfg.engine for x in sides], "untraced_schedule": schedule}
        out.append((s.state["loaded_n2"], raw))
    return out


def _untraced_pass(sides: list[Side], order: list[int], schedule: list[list], tally, rounds: list[int]) -> None:
    for i, (n, k) in enumerate(zip(order, rounds)):
        for j in pair_order(len(sides), i):
            _untraced(sides[j], n, tally, k)
            schedule.append([sides[j].cfg.engine, n])


def _traced_pass(sides: list[Side], runs: list[tuple[int, int]], tally) -> None:
    for i, (n, r) in enumerate(runs):
        for j in pair_order(len(sides), i):
            _traced(sides[j], n, r, tally)


def _status(s: Side, order: list[int], extra: list[int]):
    """The convergence status of one side's runs so far (:func:`hostgap.capture.protocol.converge.status_of`);
    a contended side asks for nothing more (that is the retry's business)."""
    from hostgap.capture.protocol.converge import Status, status_of
    from hostgap.capture.protocol.validity import repeat_spread
    from hostgap.stats.differencing import difference, series_from_raw

    raw = _raw(s, order, extra, None)
    if contention_of(s.cfg, raw)["contended"]:
        return Status(contended=True)
    cfg = s.cfg
    first: dict = next((v[0] for v in s.state["traced"].values() if v), {})
    d = difference(
        series_from_raw(raw),
        cfg.n1,
        cfg.n2,
        estimator=cfg.estimator,
        activity=first.get("activity", "gpu"),
        n_boot=200,
        seed=cfg.seed,
        prompt_len=cfg.prompt_len,
    )
    return status_of(d.to_dict(), repeat_spread(s.state["untraced"]))


def _converge(
    sides: list[Side],
    order: list[int],
    extra: dict,
    schedule: list[list],
    tally,
    untraced_s: float,
    traced_s: float,
    snaps: list[dict],
    start: float,
) -> dict:
    """More rounds until the checks pass or the budget is spent (:mod:`hostgap.capture.protocol.converge`);
    untraced rounds extend ``order`` (the run order recorded in the timings)."""
    from hostgap.capture.protocol import converge as cv
    from hostgap.stats import noise

    cfg = sides[0].cfg
    rng = random.Random(cfg.seed + 2)
    sweep = list(cfg.sweep)

    def check():
        return cv.worst([_status(s, order, extra[id(s)]) for s in sides])

    def measure(r) -> None:
        k = len(sides) * sum(sweep) * (int(r.untraced) + int(r.traced))
        tally.total += k
        if r.untraced:
            tally.set_phase("measuring more: untraced round")
            ns = list(sweep)
            rng.shuffle(ns)
            nxt = 1 + max(x for v in sides[0].state["round"].values() for x in v)
            _untraced_pass(sides, ns, schedule, tally, [nxt] * len(ns))
            order.extend(ns)
        if r.traced:
            tally.set_phase("measuring more: traced round")
            ns = list(sweep)
            rng.shuffle(ns)
            _traced_pass(sides, [(n, len(sides[0].state["traced"][n])) for n in ns], tally)
        snaps.append(noise.snapshot())

    budget = _budget(sides)
    out = cv.converge(check, measure, time.monotonic, start, budget, cv.Costs(untraced_s, traced_s))
    return out.to_dict()


def _raw(s: Side, order: list[int], extra: list[int], stacks) -> dict:
    st = s.state
    raw = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "untraced_wall_ns": {str(n): v for n, v in st["untraced"].items()},
        "untraced_thread_ns": {str(n): v for n, v in st["thread"].items()},
        "untraced_rounds": {str(n): v for n, v in st["round"].items()},
        "untraced_seq": {str(n): v for n, v in st["seq"].items()},
        "untraced_order": order + extra,
        "untraced_extra": extra,
        "traced": {str(n): v for n, v in st["traced"].items()},
        "anatomy_trace": s.run.rel(st["anatomy_trace"]) if st["anatomy_trace"] else None,
        "stacks": stacks,
    }
    if s.meter is not None:
        from hostgap.capture.protocol.energy_run import raw_energy

        raw.update(raw_energy(s.meter, st["energy"]))
    other = st["other"]
    if all(len(v) == len(st["untraced"][n]) and all(x is not None for x in v) for n, v in other.items()):
        raw["untraced_other_cpu_ns"] = {str(n): v for n, v in other.items()}
    return raw


def _warm_up(s: Side, tally) -> None:
    for n in s.plan["warmup"]:
        s.engine.generate(n)
        tally.add(n)
    tmp = s.run.path / "traces" / ".warmup"
    _w, wpath = s.engine.generate_traced(2, tmp)
    Path(wpath).unlink(missing_ok=True)
    if tmp.exists() and not any(tmp.iterdir()):
        tmp.rmdir()
    tally.add(2)


def _untraced(s: Side, n: int, tally, round_index: int = -1) -> None:
    st = s.state
    before = s.meter.read() if s.meter is not None else None
    st["untraced"][n].append(int(s.engine.generate(n)))
    if s.meter is not None:  # the counters around the run, as its wall is timed around it
        st["energy"][n].append(s.meter.delta_uj(before, s.meter.read()))
    st["round"][n].append(round_index)  # -1: a repair run outside the rounds
    st["seq"][n].append(sum(len(v) for v in st["seq"].values()))  # position in run order
    st["thread"][n].append(int(getattr(s.engine, "last_thread_ns", 0)))
    other = getattr(s.engine, "last_other_cpu_ns", None)
    st["other"][n].append(None if other is None else int(other))
    tally.add(n)


def _top_up(s: Side, tally) -> list[int]:
    """On a CPU, repeat the N whose runs were mostly preempted until half of its repeats are
    clean, at most ``repeats`` extra runs per N. Every run is kept; the estimator sees them all."""
    st, cfg = s.state, s.cfg
    want = (cfg.repeats + 1) // 2
    extra = []
    for n in cfg.sweep:
        for _ in range(cfg.repeats):
            clean = sum(not disturbed(w, t) for w, t in zip(st["untraced"][n], st["thread"][n]))
            if clean >= want:
                break
            _untraced(s, n, tally)  # a repair run, after the shared schedule
            extra.append(n)
    return extra


def _traced(s: Side, n: int, r: int, tally) -> None:
    from hostgap.analysis.trace import analyse_trace

    cfg, st, run = s.cfg, s.state, s.run
    wall, path = s.engine.generate_traced(n, run.path / "traces")
    thread_ns = int(getattr(s.engine, "last_thread_ns", 0))
    ranks = getattr(s.engine, "rank_traces", {}).pop(str(path), None)  # tensor parallel: every rank's trace
    path = run.rename_trace(Path(path), f"trace_n{n}_r{r}")
    if ranks is not None:
        ranks = _rename_ranks(Path(ranks), path.name.split(".")[0])
    loaded = analyse_trace(path).trace
    stats = trace_stats(path, loaded)
    first_n2 = n == cfg.n2 and r == 0
    if first_n2:
        st["loaded_n2"] = loaded  # analysed after the runs, without loading it again
        st["anatomy_trace"] = path
        chose = getattr(s.engine, "chose_anatomy_trace", None)
        if chose is not None:  # an engine that derives more from the analysed trace (vLLM's split)
            chose(path)
    del loaded
    keep = cfg.keep_traces == "all" or (cfg.keep_traces == "ends" and r == 0 and n in (cfg.n1, cfg.n2))
    stats.update({"wall_ns": int(wall), "thread_ns": thread_ns, "trace": run.rel(path) if keep or first_n2 else None})
    if ranks is not None:
        stats["rank_traces"] = run.rel(ranks) if keep or first_n2 else None
    st["traced"][n].append(stats)
    if not keep and not first_n2:
        path.unlink(missing_ok=True)
        if ranks is not None:
            shutil.rmtree(ranks, ignore_errors=True)
    tally.add(n)


def _rename_ranks(ranks: Path, stem: str) -> Path:
    """Move a traced run's rank traces to ``traces/ranks/<stem>/`` (the stem of its rank-0
    trace), replacing what an earlier attempt left there."""
    dst = ranks.parent / stem
    if dst != ranks:
        shutil.rmtree(dst, ignore_errors=True)
        shutil.move(ranks, dst)
    return dst


def _budget(sides: list[Side]) -> float:
    """The measurement's budget: the largest of the sides' (engines measured together share one)."""
    from hostgap.capture.protocol.converge import default_budget

    return max(
        float(b)
        if (b := getattr(s.cfg, "budget", None)) is not None
        else default_budget(getattr(s.cfg, "engine", "hf"))
        for s in sides
    )


def measure_until_quiet(sides: list[Side], tally) -> list[tuple[object, dict]]:
    """Run every phase; while any side's runs were contended, run them all again (every side:
    the comparison needs them measured together), at most ``retries`` times. Returns the last
    attempt's per-side results, with ``attempts`` (each attempt's contention flags) in the raw
    timings."""
    from hostgap.capture.protocol.converge import RESERVE_S

    retries = sides[0].cfg.retries
    budget = _budget(sides)
    start = time.monotonic()
    attempts: list[list[dict]] = [[] for _ in sides]
    while True:
        t0 = time.monotonic()
        outs = run_phases(sides, tally, start)
        took = time.monotonic() - t0
        conts = [contention_of(s.cfg, raw) for s, (_t, raw) in zip(sides, outs)]
        for a, c in zip(attempts, conts):
            a.append(c)
        # another attempt only when it can finish within the budget (one as long as this one)
        spent = time.monotonic() - start + took + 1.0 + RESERVE_S > budget
        if not any(c["contended"] for c in conts) or len(attempts[0]) > retries or spent:
            if any(c["contended"] for c in conts) and spent and len(attempts[0]) <= retries:
                for c in conts:
                    c["budget_spent"] = True
            for (_t, raw), a in zip(outs, attempts):
                raw["attempts"] = a
            return outs
        del outs
        tally.total += sum(s.plan["tokens"] for s in sides)
        tally.set_phase(f"machine busy, measuring again ({len(attempts[0]) + 1}/{retries + 1})")
        time.sleep(1.0)  # let a passing burst of other work end
