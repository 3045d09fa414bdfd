"""`hostgap measure` (tiny preset, CPU) with a fake powercap counter rising at a known 20 W,
through wraps: the terminal's energy lines (docs/energy.md, "Checked without the hardware").

    .venv/bin/python bench/energy_fake_counter.py [OUT_DIR]

The counter is the one tests/test_measure_energy.py uses (read from the clock when read; every
other run starts 1 µJ below its top, so that run's reading wraps). Prints the run's output and
20 W x the measured wall per step beside the measured energy per step.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from click.testing import CliRunner  # noqa: E402

import test_measure_energy as t  # noqa: E402
from hostgap.cli import cli  # noqa: E402
from hostgap.energy import powercap as pc  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="hostgap-energy-"))
    z = out / "powercap" / "intel-rapl:0"
    z.mkdir(parents=True, exist_ok=True)
    (z / "name").write_text("package-0\n")
    (z / "energy_uj").write_text("0\n")
    (z / "max_energy_range_uj").write_text(f"{t.RANGE_UJ}\n")
    pc._read_int = t.ClockCounter(pc._read_int)  # type: ignore[assignment]
    os.environ["HOSTGAP_POWERCAP_ROOT"] = str(out / "powercap")
    args = [a for a in t.ARGS if a not in ("--json", "-q")]
    r = CliRunner().invoke(cli, [*args, "--out", str(out / "runs")], catch_exceptions=False)
    print(r.output)
    run = max((out / "runs").iterdir())
    res = json.loads((run / "results.json").read_text())
    t_step = res["differencing"]["t_step_ns"] * 1e-9
    print(
        f"20 W x wall per step {t_step * 1e3:.3f} ms = {t.POWER_W * t_step:.4f} J; measured {res['energy']['step_j']:.4f} J"
    )


if __name__ == "__main__":
    main()
