"""Cost per request of attribution at batch 1, 32 and 256, against a random forest's predict.

    .venv/bin/python bench/attribution_speed.py [--repeats 7]

Times three things on the same rows (one batch of B requests):
- ``attribute_step``: the per-step call a scheduler loop makes;
- ``attribute``: the vectorised call over 200 steps of B requests each (cost per request);
- ``RandomForestRegressor.predict`` (scikit-learn, 100 trees, n_jobs=1) on the B rows of the
  step's per-request features (p, c, p², p·c, |B|), the usual learned alternative.
Prints min / median / p90 over repeats (each repeat a mean over many calls) and the ratio of
the forest's cost to attribute_step's. Needs scikit-learn (``pip install scikit-learn``).
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
    from hostgap.model.steps_table import Requests, Steps

    p = np.ones(b * n_steps)
    c = np.round(np.exp(rng.uniform(np.log(64), np.log(32768), b * n_steps)))
    si = np.repeat(np.arange(n_steps), b)
    z = np.zeros(n_steps)
    req = Requests(np.arange(0, b * n_steps + 1, b), np.array(["r"] * len(p), dtype=object),
                   p, c, np.zeros(len(p), bool))
    return Steps(("bench",), np.zeros(n_steps, np.int32), np.arange(n_steps), np.full(n_steps, 1e7),
                 z, np.full(n_steps, 3e6), np.full(n_steps, np.nan), np.zeros(n_steps, bool),
                 np.full(n_steps, float(b)), z, np.full(n_steps, float(b)),
                 np.bincount(si, c), np.full(n_steps, float(b)), np.bincount(si, c), req)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    from sklearn import __version__ as skv
    from sklearn.ensemble import RandomForestRegressor

    data = synth_steps(2000, seed=0, noise=0.01)
    model = A.fit(data.steps)
    r = data.steps.requests
    si = r.step_index
    feats = np.column_stack([r.p, r.c, r.p ** 2, r.p * r.c, data.steps.n_requests[si]])
    share = A.attribute(model, data.steps).share_ns
    forest = RandomForestRegressor(n_estimators=100, n_jobs=1, random_state=0).fit(feats, share)
    rng = np.random.default_rng(1)
    print(f"python {platform.python_version()}, numpy {np.__version__}, scikit-learn {skv}, "
          f"{args.repeats} repeats; ns per request: min / median / p90")
    print(f"{'batch':>5}  {'attribute_step':>26}  {'attribute (200 steps)':>26}  "
          f"{'RandomForest.predict':>28}  {'forest/step':>11}")
    for b in BATCHES:
        p, c = _batch(rng, b)
        rows = np.column_stack([p, c, p * p, p * c, np.full(b, float(b))])
        steps = _steps_of(b, 200, rng)
        step_s, vec_s, rf_s = [], [], []
        for _ in range(args.repeats):
            step_s.append(_per_call_ns(lambda: A.attribute_step(model, p, c, prefill=False)) / b)
            vec_s.append(_per_call_ns(lambda: A.attribute(model, steps)) / (200 * b))
            rf_s.append(_per_call_ns(lambda: forest.predict(rows), 0.2) / b)
        s, v, f = _stats(step_s), _stats(vec_s), _stats(rf_s)
        fmt = lambda t: f"{t[0]:8.1f} {t[1]:8.1f} {t[2]:8.1f}"  # noqa: E731
        print(f"{b:>5}  {fmt(s):>26}  {fmt(v):>26}  {fmt(f):>28}  {f[1] / s[1]:>10.0f}×")
    print("target: <= 1000 ns per request at batch 256 (attribute_step, median)")


if __name__ == "__main__":
    main()
