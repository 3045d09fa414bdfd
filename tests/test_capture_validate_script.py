"""bench/gpu/validate.sh runs end to end on CPU with the tiny preset (--cpu-test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from hostgap.capture.protocol.stacks import find_pyspy  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu" / "validate.sh"


@pytest.mark.slow
def test_validate_cpu_test(tmp_path):
    out = tmp_path / "val"
    env = dict(os.environ, PYTHON=sys.executable)
    p = subprocess.run(
        ["bash", str(SCRIPT), "--cpu-test", "--out", str(out)], capture_output=True, text=True, env=env, timeout=600
    )
    assert p.returncode == 0, p.stderr[-2000:]
    floor = json.loads((out / "floor-cpu.json").read_text())
    assert floor["kind"] == "launch_floor" and floor["samples"] == 200
    all_rows = json.loads((out / "runs.json").read_text())
    cells = json.loads((SCRIPT.parent / "cells-cpu.json").read_text())
    rows = [r for r in all_rows if r["n2"] == cells[0]["n2"]]
    assert len(rows) == len(cells)
    stacks = [r for r in all_rows if r["n2"] != cells[0]["n2"]]  # the py-spy run, when installed
    if find_pyspy() is not None:
        assert len(stacks) == 1 and "host samples (py-spy)" in (out / "stacks.txt").read_text()
    assert {(r["mode"], r["batch"]) for r in rows} == {(c["mode"], c["batch"]) for c in cells}
    for r in rows:  # a number in range, or marked invalid with its reasons: never both wrong
        if r["valid"]:
            assert 0 <= r["host_fraction"] <= 1 and 0 <= r["g_step_ns"] <= r["t_step_ns"]
        else:
            assert (
                r["invalid_reasons"]
                and f"invalid: {r['invalid_reasons'].splitlines()[0]}" in (out / "summary.md").read_text()
            )
    summary = (out / "summary.md").read_text()
    assert summary.count("| tiny |") == len(all_rows)
    # rerunning resumes: every cell is already done
    again = subprocess.run(
        ["bash", str(SCRIPT), "--cpu-test", "--out", str(out)], capture_output=True, text=True, env=env, timeout=600
    )
    assert again.returncode == 0
    assert f"0 measured, {len(cells)} already done" in again.stdout + again.stderr
