"""Cost per request of attribution at batch 1, 32 and 256, against a random forest's predict.

    .venv/bin/python bench/attribution_speed.py [--repeats 7]

Times three things on the same rows (one batch of B requests):
- ``attribute_step``: the per-step call a scheduler loop makes;
- ``attribute``: the vectorised call over 200 steps of B requests each (cost per request);
- ``RandomForestRegressor.predict`` (scikit-learn, 100 trees, n_jobs=1) on the B rows of the
  step's per-request features (p, c, p², p·c, |B|), the usual learned alternative.
Prints min / median / p90 over repeats (each repeat a mean over many calls) and the ratio of
the forest's cost to attribute_step's. Then, for learned models of several sizes (a single tree
of depth 8 and 12, forests of 10 and 100 trees) trained to reproduce the attribution's shares on
half the steps: their error on the other half (p50/p90 of |predicted / attributed - 1|) and
their predict cost, so a ratio is read beside the accuracy it buys. Needs scikit-learn
(``pip install scikit-learn``).
Wall times on a shared machine jitter 1.5-2×; read the ratios.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from hostgap.model import attribution as A
from hostgap.model.synth import synth_steps

BATCHES = (1, 32, 256)


def _per_call_ns(fn, min_time_s: float = 0.05) -> float:
    n = 1
    while True:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        dt = time.perf_counter_ns() - t0
        if dt >= min_time_s * 1e9:
            return dt / n
        n *= 2


def _stats(samples) -> tuple[float, float, float]:
    a = np.asarray(samples)
    return float(a.min()), float(np.median(a)), float(np.percentile(a, 90))


def _batch(rng, b: int):
    p = np.ones(b)
    c = np.round(np.exp(rng.uniform(np.log(64), np.log(32768), b)))
    return p, c


def _steps_of(b: int, n_steps: int, rng):
    from hostgap.model.steptable.files import Requests, Steps

    p = np.ones(b * n_steps)
    c = np.round(np.exp(rng.uniform(np.log(64), np.log(32768), b * n_steps)))
    si = np.repeat(np.arange(n_steps), b)
    z = np.zeros(n_steps)
    req = Requests(
        np.arange(0, b * n_steps + 1, b), np.array(["r"] * len(p), dtype=object), p, c, np.zeros(len(p), bool)
    )
    return Steps(
        ("bench",),
        np.zeros(n_steps, np.int32),
        np.arange(n_steps),
        np.full(n_steps, 1e7),
        z,
        np.full(n_steps, 3e6),
        np.full(n_steps, np.nan),
        np.zeros(n_steps, bool),
        np.full(n_steps, float(b)),
        z,
        np.full(n_steps, float(b)),
        np.bincount(si, c),
        np.full(n_steps, float(b)),
        np.bincount(si, c),
        req,
    )


def learned_models():
    """The learned alternatives, cheapest first: (name, unfitted scikit-learn regressor)."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.tree import DecisionTreeRegressor

    return [
        ("tree depth 8", DecisionTreeRegressor(max_depth=8, random_state=0)),
        ("tree depth 12", DecisionTreeRegressor(max_depth=12, random_state=0)),
        ("forest 10 trees", RandomForestRegressor(n_estimators=10, n_jobs=1, random_state=0)),
        ("forest 100 trees", RandomForestRegressor(n_estimators=100, n_jobs=1, random_state=0)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    from sklearn import __version__ as skv

    data = synth_steps(2000, seed=0, noise=0.01)
    model = A.fit(data.steps)
    r = data.steps.requests
    si = r.step_index
    feats = np.column_stack([r.p, r.c, r.p**2, r.p * r.c, data.steps.n_requests[si]])
    share = A.attribute(model, data.steps).share_ns
    # each learned model is trained to reproduce the attribution's shares on the steps of one
    # half and scored on the other: its accuracy is how closely it stands in for attribution
    test = (si % 2) == 1
    learned = []
    for name, reg in learned_models():
        reg.fit(feats[~test], share[~test])
        err = np.abs(reg.predict(feats[test]) / share[test] - 1)
        learned.append((name, reg, float(np.percentile(err, 50)), float(np.percentile(err, 90))))
    forest = learned[-1][1]
    rng = np.random.default_rng(1)
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, scikit-learn {skv}, "
        f"{args.repeats} repeats; ns per request: min / median / p90"
    )
    print(
        f"{'batch':>5}  {'attribute_step':>26}  {'attribute (200 steps)':>26}  "
        f"{'RandomForest.predict':>28}  {'forest/step':>11}"
    )
    medians = {}
    for b in BATCHES:
        p, c = _batch(rng, b)
        rows = np.column_stack([p, c, p * p, p * c, np.full(b, float(b))])
        steps = _steps_of(b, 200, rng)
        step_s, vec_s, rf_s = [], [], []
        other = {name: [] for name, *_ in learned[:-1]}
        for _ in range(args.repeats):
            step_s.append(_per_call_ns(lambda p=p, c=c: A.attribute_step(model, p, c, prefill=False)) / b)
            vec_s.append(_per_call_ns(lambda steps=steps: A.attribute(model, steps)) / (200 * b))
            rf_s.append(_per_call_ns(lambda rows=rows: forest.predict(rows), 0.2) / b)
            for name, reg, *_ in learned[:-1]:
                other[name].append(_per_call_ns(lambda reg=reg, rows=rows: reg.predict(rows)) / b)
        s, v, f = _stats(step_s), _stats(vec_s), _stats(rf_s)
        medians[b] = {"attribute_step": s[1], **{n: _stats(x)[1] for n, x in other.items()}, "forest 100 trees": f[1]}
        fmt = lambda t: f"{t[0]:8.1f} {t[1]:8.1f} {t[2]:8.1f}"  # noqa: E731
        print(f"{b:>5}  {fmt(s):>26}  {fmt(v):>26}  {fmt(f):>28}  {f[1] / s[1]:>10.0f}×")
    print("target: <= 1000 ns per request at batch 256 (attribute_step, median)")
    print()
    print("learned models trained on the attribution's shares (half the steps), scored on the other half;")
    print("predict cost per request (median) and its ratio to attribute_step's, per batch size")
    head = "".join(f"  {'b=' + str(b) + ' ns':>11} {'×':>6}" for b in BATCHES)
    print(f"{'model':<18} {'p50 err':>8} {'p90 err':>8}{head}")
    for name, _, p50, p90 in learned:
        cells = "".join(
            f"  {medians[b][name]:>11.1f} {medians[b][name] / medians[b]['attribute_step']:>5.0f}×" for b in BATCHES
        )
        print(f"{name:<18} {100 * p50:>7.2f}% {100 * p90:>7.2f}%{cells}")


if __name__ == "__main__":
    main()
