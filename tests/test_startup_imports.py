"""What ``hostgap analyze --json`` and ``steps --json`` load: the analysis path imports numpy,
msgspec and click, never the packages only other commands or outputs need (the terminal tables,
figures, Arrow tables, the models, servers, capture). Checked by module names in a fresh
process, not by timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TRACE = Path(__file__).parent / "data" / "corpus" / "hta" / "a100_deep_queue_rank0.json.gz"

HEAVY = (
    "rich",
    "scipy",
    "pyarrow",
    "matplotlib",
    "pandas",
    "torch",
    "transformers",
    "sklearn",
    "ray",
    "prometheus_client",
    "hostgap.model",  # steps --json; analyze --json carries the levers (below)
    "hostgap.server",
    "hostgap.capture",
    "hostgap.report.figures",
    "hostgap.store",
)
"""Packages (and hostgap's own heavy parts) the trace verbs' ``--json`` path must not import."""

SCRIPT = r"""
import contextlib, io, json, runpy, sys
sys.argv = ["hostgap", *sys.argv[1:]]
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        runpy.run_module("hostgap", run_name="__main__")
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "printed": len(out.getvalue()), "modules": sorted(sys.modules)}))
"""


def loaded(*args: str, tmp_path: Path) -> list[str]:
    env = {"HOSTGAP_NO_CACHE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=env, check=True)
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["code"] in (0, None) and res["printed"] > 100, p.stderr
    return res["modules"]


LEVERS = ("hostgap.model",)
"""``analyze --json`` carries the levers (docs/advise.md): the models they predict with load, but
never what only fitting needs (scipy: imported where a model is fitted) nor attribution."""


@pytest.mark.parametrize("verb", ["analyze", "steps"])
def test_the_json_path_imports_no_heavy_package(verb, tmp_path):
    mods = loaded(verb, "--json", "--quiet", str(TRACE), tmp_path=tmp_path)
    assert "numpy" in mods and "hostgap.readers.kineto" in mods  # it did analyse the trace
    allowed = LEVERS if verb == "analyze" else ()
    heavy = sorted(
        m
        for m in mods
        if any(m == h or m.startswith(h + ".") for h in HEAVY)
        and not (
            any(m == a or m.startswith(a + ".") for a in allowed) and not m.startswith("hostgap.model.attribution")
        )
    )
    assert heavy == []
    if verb == "analyze":
        assert "hostgap.model.levers.ranked" in mods  # the levers were computed


def test_the_check_sees_a_heavy_import(tmp_path):
    # the same probe on the terminal table, which needs rich: the check can fail
    mods = loaded("analyze", "--quiet", str(TRACE), tmp_path=tmp_path)
    assert "hostgap.readers.kineto" in mods and "rich" in mods


def test_the_levers_interval_needs_no_scipy(tmp_path):
    """With six steps or more the levers carry a 95 % interval (an order statistic of the steps):
    its binomial tail is computed without ``scipy.stats`` (0.6-0.8 s of start-up)."""
    from test_examples import decode_trace

    trace = decode_trace(tmp_path / "t.json.gz", 40.0, steps=12)
    mods = loaded("analyze", "--json", "--quiet", str(trace), tmp_path=tmp_path)
    assert "hostgap.model.levers.arithmetic" in mods and "hostgap.stats.order" in mods
    assert not [m for m in mods if m == "scipy" or m.startswith("scipy.")]
    from hostgap.api import analyze

    rows = analyze(str(trace)).to_dict()["levers"]
    assert rows and all(r["step_ns_ci"] is not None for r in rows if r["applicable"])
