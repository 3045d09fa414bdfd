"""docs/attribution.md's Python API section runs as written, through ``import hostgap``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "attribution.md"


def _python_api_snippet() -> str:
    section = DOC.read_text().split("\n## Python API\n", 1)[1]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "docs/attribution.md: no python block under 'Python API'"
    return m.group(1)


def test_the_python_api_snippet_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = _python_api_snippet()
    assert "hostgap.attribution.fit(" in code and "import hostgap\n" in code
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)
    assert (tmp_path / "model.json").exists() and (tmp_path / "run.requests.parquet").exists()
    fitted, held, scored = ns["fitted"], ns["held"], ns["scored"]
    assert fitted.n_train + fitted.n_held == len(ns["steps"]) == 600
    assert held.n_steps == scored.n_steps == fitted.n_held  # eval scores what fit held out
    assert scored.n_excluded == fitted.n_train
    one, out = ns["one"], ns["out"]
    assert one.shares.share_ns.sum() == pytest.approx(one.shares.predicted_ns[0], rel=1e-9)
    assert out.share_ns.sum() == pytest.approx(out.predicted_ns, rel=1e-9)


def test_hostgap_attribution_is_the_model_package_loaded_on_first_use():
    code = (
        "import sys, hostgap\n"
        "assert 'hostgap.model.attribution' not in sys.modules\n"
        "A = hostgap.attribution\n"
        "assert A is sys.modules['hostgap.model.attribution'] and 'attribution' in hostgap.__all__\n"
        "assert all(hasattr(A, n) for n in A.__all__)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
