"""The coverage table of docs/measure.md: how often each printed 95 % interval covers the truth in
1,000 simulated measurements per case (the draws of tests/test_capture_coverage_noise.py: the
default protocol's shape and run order, one noise sequence through all runs).

    .venv/bin/python bench/coverage_table.py            # about a minute

Prints one Markdown row per noise model and basis.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hostgap.stats.noise import NoiseModel  # noqa: E402
from test_capture_coverage_noise import _coverage, _models  # noqa: E402


def main() -> None:
    models = {**_models(), "iid-normal-8%": NoiseModel(0.08)}
    cases = [(name, m, 0.01) for name, m in models.items()] + [("fitted, own 3 %", models["fitted"], 0.03)]
    print("| noise | basis | t_step | g_step | h_step | host fraction |")
    print("|---|---|---:|---:|---:|---:|")
    for name, model, own in cases:
        for activity, basis in (("gpu", "GPU"), ("cpu-compute", "CPU")):
            if own != 0.01 and activity == "gpu":
                continue
            c = _coverage(model, activity, seed=12 if activity != "gpu" else 11, own_sd=own)
            cells = " | ".join(f"{100 * c[k]:.1f}%" for k in ("t_step_ns", "g_step_ns", "h_step_ns", "host_fraction"))
            print(f"| {name} | {basis} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
