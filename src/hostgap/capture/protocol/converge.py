"""Measure until the answer is good enough, within a time budget.

After the default runs (R untraced repeats of every N of the sweep, traced runs at every N), the
sweep's line may not yet be a line: one N drawn during a slow period (a virtual machine's jitter,
a frequency change) lies off it, or the repeats are spread. When the machine is not contended
(:mod:`hostgap.capture.protocol.validity`), that is answered by **measuring more**, not by giving up:

* the untraced wall W(N) fails its linearity check (R² or one N off the robust line), its
  repeats are spread beyond :data:`hostgap.capture.protocol.validity.SPREAD_LIMIT`, or slow periods left
  too few rounds of quiet runs (:func:`slow_reason`) -> one more **untraced round**: one run of
  every N of the sweep, in a shuffled order;
* the traced device-time G(N) fails its linearity check, or the host-fraction interval is wider
  than :data:`WIDTH_TARGET` -> one more **traced round**: one traced run of every N (shuffled);
  on a GPU, where that interval also rests on the wall's, an untraced round with it.

A round covers every N, never just the N that looks off: runs added at one N only would be
taken at another time than its neighbours and carry that time's drift into the slope. The per-N
estimate the line is checked on is the median of that N's runs, so after a round or two one slow
run no longer moves it; the slope itself is the Theil-Sen slope over every run.

Rounds are asked for by the linearity limits themselves (R² and the per-N residual,
:data:`hostgap.checks.LINEARITY_R2`); when the budget ends them first, a line off those limits
is still valid when its departure is no more than the spread of its own repeats explains (the
lack-of-fit F test, :func:`hostgap.checks.noisy_line`): on a jittery virtual machine a run's
pace moves by 10-25 %, so six per-N medians of two to five runs miss R² 0.99 by noise alone,
and that noise is carried by the intervals, not mistaken for a bend.

Rounds continue until every check passes (and the interval is within target) or the next round
would not finish within the **budget** (``--budget`` seconds for the whole measurement from the
start of the runs, default :data:`DEFAULT_BUDGET_S`; a round's cost is predicted from the rounds
and phases measured so far, plus :data:`RESERVE_S` for the analysis), at most :data:`MAX_ROUNDS`
rounds of each kind. Only then is a measurement declared invalid, naming the check that failed
and how much more budget to give it.

The loop (:func:`converge`) is pure logic over three callables (check the state, measure a
round, read the clock), so it is tested with simulated sequences, never with real timing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

DEFAULT_BUDGET_S = 40.0
"""Default budget (s) from the first warm-up run to the analysis: with start-up (imports,
building the model, ~8-12 s on a 2-core machine) the default run stays under 60 s."""
ENGINE_BUDGET_S = {"vllm": 300.0}
"""Default budgets of engines whose runs take longer: vLLM on a CPU spends 4-16 s stopping its
profiler after each traced run (docs/vllm.md), so one traced round alone takes 30-100 s."""
RESERVE_S = 4.0
"""Time (s) kept for the analysis after the last round (the N2 trace's anatomy and the split)."""
MAX_ROUNDS = 8
"""Most extra rounds of each kind, whatever the budget."""
WIDTH_TARGET = 0.20
"""Target width of the host fraction's 95 % interval (fraction points): wider, and the budget
allows it, the traced runs are measured again."""


@dataclass(frozen=True)
class Status:
    """What the checks say about the runs so far (one engine, or the worst of several)."""

    wall_ok: bool = True  # untraced W(N) linear and its repeats not spread
    device_ok: bool = True  # traced G(N) linear
    width: float | None = None  # host fraction interval width (None: no interval)
    why: tuple[str, ...] = ()  # the failing checks in words
    contended: bool = False  # the machine was busy: more rounds would not help (a retry may)
    wide_needs_wall: bool = False  # GPU: the host fraction's interval depends on the wall's too

    @property
    def done(self) -> bool:
        return self.contended or (
            self.wall_ok and self.device_ok and (self.width is None or self.width <= WIDTH_TARGET)
        )


@dataclass(frozen=True)
class Round:
    """One re-measurement: an untraced and/or a traced pass over every N."""

    untraced: bool
    traced: bool


def default_budget(engine: str) -> float:
    """The budget (s) when ``--budget`` is not given.

    >>> default_budget("hf"), default_budget("vllm")
    (40.0, 300.0)
    """
    return ENGINE_BUDGET_S.get(engine, DEFAULT_BUDGET_S)


def wanted(status: Status) -> Round | None:
    """The round the status asks for; None when it asks for none.

    >>> wanted(Status(wall_ok=False))
    Round(untraced=True, traced=False)
    >>> wanted(Status(width=0.3))
    Round(untraced=False, traced=True)
    >>> wanted(Status(width=0.1)) is None
    True
    """
    if status.contended:
        return None
    wide = status.width is not None and status.width > WIDTH_TARGET
    r = Round(untraced=not status.wall_ok or (wide and status.wide_needs_wall), traced=not status.device_ok or wide)
    return r if (r.untraced or r.traced) else None


@dataclass
class Costs:
    """Predicted seconds of one untraced and one traced round: the slowest seen so far (a
    round's cost is learned from the phases already run, then from each round)."""

    untraced_s: float
    traced_s: float

    def of(self, r: Round) -> float:
        return (self.untraced_s if r.untraced else 0.0) + (self.traced_s if r.traced else 0.0)


@dataclass
class Outcome:
    """What the loop did: the rounds run, why it stopped (``"checks pass"``, ``"budget"``,
    ``"rounds"``, ``"contended"``), the seconds used and the budget."""

    rounds: list[dict] = field(default_factory=list)
    stopped: str = "checks pass"
    elapsed_s: float = 0.0
    budget_s: float = DEFAULT_BUDGET_S
    needed_s: float | None = None  # when stopped by the budget: the round it could not afford
    why: list[str] = field(default_factory=list)  # the checks still failing when it stopped

    def to_dict(self) -> dict:
        return asdict(self)


def converge(
    check: Callable[[], Status],
    measure: Callable[[Round], None],
    clock: Callable[[], float],
    start: float,
    budget_s: float,
    costs: Costs,
    max_rounds: int = MAX_ROUNDS,
) -> Outcome:
    """Measure rounds until ``check()`` is done or the budget (``start + budget_s`` on
    ``clock``, less :data:`RESERVE_S`) cannot pay for the next one; ``measure(round)`` runs a
    round. Each round's measured cost updates ``costs`` (the larger of prediction and
    measurement, so a slowing machine is not overcommitted)."""
    out = Outcome(budget_s=budget_s)
    counts = {"untraced": 0, "traced": 0}
    while True:
        status = check()
        want = wanted(status)
        out.elapsed_s = clock() - start
        if want is None:
            out.stopped = "contended" if status.contended else "checks pass"
            break
        want = Round(
            untraced=want.untraced and counts["untraced"] < max_rounds,
            traced=want.traced and counts["traced"] < max_rounds,
        )
        if not (want.untraced or want.traced):
            out.stopped = "rounds"
            out.why = list(status.why)
            break
        need = costs.of(want)
        if out.elapsed_s + need + RESERVE_S > budget_s:
            out.stopped = "budget"
            out.needed_s = need
            out.why = list(status.why)
            break
        t0 = clock()
        measure(want)
        took = clock() - t0
        if want.untraced and not want.traced:
            costs.untraced_s = max(costs.untraced_s, took)
        elif want.traced and not want.untraced:
            costs.traced_s = max(costs.traced_s, took)
        elif took > costs.of(want):  # both: scale both predictions by the overrun
            k = took / costs.of(want)
            costs.untraced_s *= k
            costs.traced_s *= k
        counts["untraced"] += want.untraced
        counts["traced"] += want.traced
        out.rounds.append(
            {"untraced": want.untraced, "traced": want.traced, "seconds": round(took, 3), "why": list(status.why)}
        )
    out.elapsed_s = clock() - start
    return out


def status_of(d: dict, spread: float | None) -> Status:
    """:class:`Status` from a differencing dict (``Differencing.to_dict()``) and the untraced
    repeat spread."""
    from hostgap.capture.protocol.validity import SPREAD_LIMIT
    from hostgap.checks import fit_reason
    from hostgap.stats.differencing import LinearFit, linear_enough

    def fit(key: str) -> LinearFit | None:
        f = d.get(key)
        return LinearFit(**f) if f else None

    why = []
    wall_fit_ok = linear_enough(fit("fit_wall"), strict=True)
    spread_ok = spread is None or spread <= SPREAD_LIMIT
    dev_ok = linear_enough(fit("fit_gpu"), strict=True)
    for name, key in (("wall", "fit_wall"), ("device time", "fit_gpu")):
        r = fit_reason(name, d.get(key), strict=True)
        if r:
            why.append(r)
    if not spread_ok:
        why.append(f"repeat spread {spread:.0%} (limit {SPREAD_LIMIT:.0%})")
    slow = slow_reason((d.get("ci") or {}).get("wall"))
    if slow:
        why.append(slow)
    ci = (d.get("ci") or {}).get("host_fraction")
    width = float(ci[1] - ci[0]) if ci else None
    if width is not None and width > WIDTH_TARGET:
        why.append(f"host fraction interval {width * 100:.0f} points wide (target {WIDTH_TARGET * 100:.0f})")
    return Status(
        wall_ok=wall_fit_ok and spread_ok and not slow,
        device_ok=dev_ok,
        width=width,
        why=tuple(why),
        wide_needs_wall=d.get("activity") == "gpu",
    )


def slow_reason(wall: dict | None) -> str | None:
    """Why slow periods ask for an untraced round: runs were left out of the wall's estimate
    (:func:`hostgap.stats.rounds.slow_runs`) and fewer than
    :data:`hostgap.stats.rounds.MIN_ROUNDS` usable rounds remain, so its interval falls back to
    Sen's; None otherwise. More rounds bring quiet runs once the slow period has passed.

    >>> slow_reason({"left_out": 9, "runs": 21, "rounds": 2})
    'slow periods: 9 of 30 untraced runs left out, 2 usable round(s) remain (need 3)'
    >>> slow_reason({"left_out": 4, "runs": 26, "rounds": 4}) is None
    True
    """
    from hostgap.stats.rounds import MIN_ROUNDS

    if not wall or not wall.get("left_out") or wall.get("rounds", 0) >= MIN_ROUNDS:
        return None
    every = wall["left_out"] + wall["runs"]
    return (
        f"slow periods: {wall['left_out']} of {every} untraced runs left out, "
        f"{wall['rounds']} usable round(s) remain (need {MIN_ROUNDS})"
    )


def worst(statuses: list[Status]) -> Status:
    """Several engines measured together: a round is needed when any engine needs it."""
    widths = [s.width for s in statuses if s.width is not None]
    return Status(
        wall_ok=all(s.wall_ok for s in statuses),
        device_ok=all(s.device_ok for s in statuses),
        width=max(widths) if widths else None,
        why=tuple(w for s in statuses for w in s.why),
        contended=any(s.contended for s in statuses),
        wide_needs_wall=any(s.wide_needs_wall for s in statuses),
    )


def budget_hint(conv: dict | None) -> str | None:
    """The advice appended to an invalid measurement when the budget ran out first.

    >>> budget_hint({"stopped": "budget", "budget_s": 40.0, "elapsed_s": 38.0, "needed_s": 6.0,
    ...              "rounds": [{}, {}]})
    'budget of 40 s spent after 2 more round(s) (the next needed ~6 s): try --budget 80'
    """
    if not conv or conv.get("stopped") != "budget":
        return None
    more = max(2 * conv["budget_s"], conv["elapsed_s"] + (conv.get("needed_s") or 0) + RESERVE_S)
    return (
        f"budget of {conv['budget_s']:.0f} s spent after {len(conv.get('rounds') or [])} more round(s) "
        f"(the next needed ~{conv.get('needed_s') or 0:.0f} s): try --budget {int(round(more))}"
    )
