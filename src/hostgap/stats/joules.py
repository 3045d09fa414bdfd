"""The decomposed energy model, measured (METHOD.md §9, docs/energy.md): energy differenced over
the output length N exactly as wall time is (:mod:`hostgap.stats.differencing`).

For every untraced run, the energy counters' difference around it ``E`` (J) beside its wall
``W``. With batch B and output length N::

    E(N) = E_fixed + N * e_step          (one batched window: prefill and set-up, then N steps)
    request_j = E_window(N) / B = E_fixed / B + N * e_step / B
    token_j   = E_window(N) / (B * N)
    power_w   = E / W of the median run;  step_power_w = e_step / t_step

``e_step`` is the slope of E against N by the wall's own estimator (with ``theil-sen``: the runs'
rounds, run order and slow periods, :func:`hostgap.stats.rounds.wall_estimate`), with its
interval and the wall's linearity check (:func:`hostgap.checks.fit_reason`). ``E_fixed`` and
``E_window(N)`` are the line's value at 0 and at N: the median of the runs' ``E - e_step (n - N)``
(the Theil-Sen intercept moved to N), so request and token energy follow the decomposition
exactly. Their interval joins two intervals at half the error each (Bonferroni): the slope's,
and the distribution-free interval of a median (order statistics), taken at every slope inside
the slope's interval (the extremes lie at its ends or where two runs' lines cross, so those are
the slopes tried), so it holds the line's value at the stated level. A value below 0 or an
interval that would reach below 0 is cut at 0: an energy is never negative, and a value the
noise makes negative is not shown (None, with the reason).

Pure numpy: arrays in, dicts out.
"""

from __future__ import annotations

import numpy as np

from hostgap.checks import fit_reason
from hostgap.stats.confidence import Slope, mover_ratio
from hostgap.stats.order import half_binomial_quantile

UJ = 1e-6
"""Joules per microjoule (the counters' raw unit in the timings)."""


def median_rank(n: int, level: float = 0.95) -> int | None:
    """The rank k of a median's distribution-free interval over n values: the largest k with
    ``P(Bin(n, 1/2) < k) <= (1 - level) / 2``; None when even k = 1 (the extremes) falls short.

    >>> median_rank(9), median_rank(5), median_rank(30)
    (2, None, 10)
    """
    k = min(half_binomial_quantile(n, (1.0 - level) / 2.0) + 1, n // 2 + 1)
    return k if k >= 1 else None


def median_interval(values, level: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free interval of a median: the order statistics ``x_(k)``, ``x_(n-k+1)``
    (:func:`median_rank`); None with too few values.

    >>> median_interval([5, 1, 4, 2, 3, 9, 7, 6, 8])  # 9 values: k = 2 (coverage 96.1 %)
    (2.0, 8.0)
    >>> median_interval([1, 2, 3, 4, 5]) is None  # 5 values: min..max covers only 93.8 %
    True
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    k = median_rank(len(x), level)
    if k is None:
        return None
    return float(x[k - 1]), float(x[len(x) - k])


def line_value_interval(x, y, slope_lo: float, slope_hi: float, at: float, level: float) -> tuple[float, float] | None:
    """The interval of the line's value at ``at`` (module doc): over every slope b in
    [slope_lo, slope_hi], the median interval of ``y - b (x - at)`` at ``level``; None where the
    median has none.

    >>> line_value_interval([1, 1, 1, 2, 2, 2, 3, 3, 3], [11, 12, 13, 21, 22, 23, 31, 32, 33], 10, 10, 0, 0.95)
    (1.0, 3.0)
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = len(x)
    k = median_rank(n, level)
    if k is None:
        return None
    i, j = np.triu_indices(n, k=1)
    dx = x[j] - x[i]
    cross = (y[j] - y[i])[dx != 0] / dx[dx != 0]  # where two runs' residual lines cross
    bs = np.concatenate([[slope_lo, slope_hi], cross[(cross > slope_lo) & (cross < slope_hi)]])
    r = np.sort(y[None, :] - bs[:, None] * (x[None, :] - at), axis=1)
    return float(r[:, k - 1].min()), float(r[:, n - k].max())


def rounds_value_interval(x, y, rnd, at: float, level: float) -> tuple[float, float] | None:
    """The line's value at ``at`` by batch means over rounds, as the wall's rounds basis takes
    its slope (:mod:`hostgap.stats.rounds`): each round's Theil-Sen line through its own runs
    (rounds with at least three distinct N; a round below 0 is no round), its value at ``at``,
    and Student's interval of their mean; None with fewer than three such rounds. Runs
    correlated within a round (a slow period) move that round's value only.

    >>> lo, hi = rounds_value_interval([1, 2, 3] * 3, [3, 5, 7, 4, 6, 8, 2, 4, 6], [0] * 3 + [1] * 3 + [2] * 3, 0, 0.95)
    >>> round(lo, 4), round(hi, 4)  # intercepts 1, 2, 0: mean 1, sd 1, t(0.975, 2) = 4.3027
    (-1.4841, 3.4841)
    """
    from scipy.stats import t

    from hostgap.stats.rounds import _line

    xa, ya, ra = (np.asarray(v, dtype=np.float64) for v in (x, y, rnd))
    vals = []
    for k in np.unique(ra[ra >= 0]):
        m = ra == k
        if len(np.unique(xa[m])) >= 3:
            b, a = _line(xa[m], ya[m])
            vals.append(a + b * at)
    if len(vals) < 3:
        return None
    v = np.asarray(vals)
    q = float(t.ppf(0.5 * (1 + level), len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return float(v.mean()) - q, float(v.mean()) + q


def _union(a: tuple[float, float] | None, b: tuple[float, float] | None) -> tuple[float, float] | None:
    """The smallest interval holding both (each alone where the other is None)."""
    if a is None or b is None:
        return a or b
    return min(a[0], b[0]), max(a[1], b[1])


def _runs(energy: dict[int, list], n1: int, n2: int) -> tuple[np.ndarray, np.ndarray]:
    ns = [n for n in energy if n1 <= n <= n2]
    x = np.concatenate([np.full(len(energy[n]), float(n)) for n in ns] or [np.zeros(0)])
    y = np.concatenate([np.asarray(energy[n], dtype=np.float64) for n in ns] or [np.zeros(0)])
    return x, y


def _slope(
    energy: dict[int, list], rounds: dict, seq: dict, n1: int, n2: int, estimator: str, level: float
) -> Slope | None:
    """e_step by the wall's estimator (:func:`hostgap.stats.differencing.difference`)."""
    from hostgap.stats.differencing import slope_with_interval
    from hostgap.stats.rounds import wall_estimate

    if estimator == "theil-sen":
        w = wall_estimate(energy, rounds, seq, n1, n2, level)
        return Slope(w.value, w.lo, w.hi) if w is not None else None
    if not (energy.get(n1) and energy.get(n2)):
        return None
    return slope_with_interval(energy, n1, n2, estimator, level=level)


def _cut(iv: tuple[float, float] | None) -> list[float] | None:
    """An energy's interval cut at 0 (none where it lies wholly below)."""
    if iv is None or iv[1] < 0:
        return None
    return [max(0.0, iv[0]), iv[1]]


def _scaled(iv: list[float] | None, by: float) -> list[float] | None:
    return None if iv is None else [iv[0] / by, iv[1] / by]


def decompose(
    energy_uj: dict[int, list],
    wall_ns: dict[int, list],
    n1: int,
    n2: int,
    *,
    batch: int,
    at: int | None = None,
    rounds: dict | None = None,
    seq: dict | None = None,
    estimator: str = "theil-sen",
    level: float = 0.95,
    t_step: Slope | None = None,
) -> dict:
    """The energy model of one domain from its per-run energies (µJ; None where a counter reset
    or could not be read: that run is left out here) and the same runs' walls (ns). ``at``: the
    output length N of ``request_j`` and ``token_j`` (default ``n2``); ``t_step``: the wall's per
    step slope (ns), for the power during decode steps."""
    from hostgap.stats.differencing import _fit

    at = n2 if at is None else at
    rounds, seq = rounds or {}, seq or {}
    e: dict[int, list[float]] = {}
    w: dict[int, list[float]] = {}
    r: dict[int, list[int]] = {}
    s: dict[int, list[int]] = {}
    for n, vals in energy_uj.items():
        keep = [i for i, v in enumerate(vals) if v is not None]
        e[n] = [float(vals[i]) * UJ for i in keep]
        w[n] = [float(wall_ns[n][i]) for i in keep if i < len(wall_ns.get(n, []))]
        r[n] = [rounds[n][i] for i in keep if i < len(rounds.get(n, []))]
        s[n] = [seq[n][i] for i in keep if i < len(seq.get(n, []))]
    left_out = sum(len(v) for v in energy_uj.values()) - sum(len(v) for v in e.values())
    out: dict = {"batch": batch, "at_tokens": at, "runs": sum(len(v) for v in e.values()), "runs_left_out": left_out}
    notes: list[str] = []
    slope = _slope(e, r, s, n1, n2, estimator, level)
    if slope is None:
        return {**out, "available": False, "reason": "too few runs with an energy reading at two token counts"}
    x, y = _runs(e, n1, n2)
    rx, rr = _runs({n: v for n, v in r.items() if len(v) == len(e[n])}, n1, n2)
    half = 1.0 - (1.0 - level) / 2.0  # each of the two intervals joined at half the error
    wide = _slope(e, r, s, n1, n2, estimator, half) or slope
    fixed = float(np.median(y - slope.value * x))
    window = fixed + at * slope.value
    # the rounds' interval joined in (where every run has its round): it carries a slow period
    # that the runs' order statistics, taken as independent, do not
    by_round = len(rx) == len(x)
    ci_fixed = _cut(
        _union(
            line_value_interval(x, y, wide.lo, wide.hi, 0.0, half),
            rounds_value_interval(x, y, rr, 0.0, level) if by_round else None,
        )
    )
    ci_window = _cut(
        _union(
            line_value_interval(x, y, wide.lo, wide.hi, float(at), half),
            rounds_value_interval(x, y, rr, float(at), level) if by_round else None,
        )
    )
    est = "median" if estimator == "theil-sen" else estimator
    measured: dict = {n: v for n, v in e.items() if v}  # energies in J: floats, as _fit accepts
    fit = _fit(measured, est)
    why = fit_reason("energy", fit.to_dict() if fit else None)
    step = slope.value if slope.value > 0 else None
    if step is None:
        notes.append("energy per step not above 0 (the counter's resolution or noise is larger than it): not shown")
    if fixed < 0:
        notes.append("fixed energy below 0 (noise larger than it): not shown")
    win = window if window > 0 and step is not None else None
    p = [ei / (wi * 1e-9) for n in e for ei, wi in zip(e[n], w[n]) if wi > 0]
    power = float(np.median(p)) if p else None
    step_power = None
    ci_step_power = None
    if step is not None and t_step is not None and t_step.value > 0:
        sec = Slope(t_step.value * 1e-9, t_step.lo * 1e-9, t_step.hi * 1e-9)
        step_power = step / sec.value
        ratio = mover_ratio(slope, sec)
        ci_step_power = _cut((ratio.lo, ratio.hi)) if ratio else None
    ci_window_b = _scaled(ci_window, batch)
    out.update(
        available=True,
        step_j=step,
        fixed_j=fixed if fixed >= 0 else None,
        window_j=win,
        request_j=win / batch if win is not None else None,
        token_j=win / (batch * at) if win is not None else None,
        power_w=power,
        step_power_w=step_power,
        ci={
            "level": level,
            "step_j": _cut((slope.lo, slope.hi)) if step is not None else None,
            "fixed_j": ci_fixed if fixed >= 0 else None,
            "window_j": ci_window if win is not None else None,
            "request_j": ci_window_b if win is not None else None,
            "token_j": _scaled(ci_window_b, at) if win is not None else None,
            "power_w": _cut(median_interval(p, level)) if p else None,
            "step_power_w": ci_step_power,
        },
        fit=fit.to_dict() if fit else None,
        linear=why is None,
        notes=notes + ([why] if why else []),
    )
    return out
