"""Analyse traces and put their steps side by side in pandas.

    python examples/steps_in_pandas.py TRACE [TRACE ...]

Each trace (a PyTorch profiler / Kineto JSON, or an Nsight Systems SQLite export) is analysed
as ``hostgap analyze`` does; its steps come back as an Arrow table, one row per engine step.
Needs pandas (``pip install 'hostgap[pandas]'``).
"""

import sys

import pandas as pd

import hostgap

frames = []
for path in sys.argv[1:]:
    result = hostgap.analyze(path)
    print(f"{path}: {result.verdict['verdict']}, host fraction {result.verdict['host_fraction']:.1%}")
    steps = result.steps.to_pandas()
    steps["trace"] = path
    frames.append(steps)

steps = pd.concat(frames, ignore_index=True)
per_trace = steps.groupby("trace")[["wall_ns", "gpu_active_ns", "host_exposed_ns"]].median() / 1e6
print(per_trace.round(3).to_string())
