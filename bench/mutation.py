"""Mutation audit in CI-sized time: each mutant runs only the tests that execute its line, under a
timeout derived from those tests' own time.

    .venv/bin/python bench/mutation.py src/hostgap/model/attribution/fit.py --all
    .venv/bin/python bench/mutation.py MODULE... -n 1 --seed 7 --json out.json

The mutants are those of ``../shared/tools/mutate.py --strong`` (its ``points`` and ``mutate``, the
same flips in the same seeded order, so a sample here is the sample there). What changes is how
each one is judged:

1. **Coverage picks the tests.** The module's test pool (``bench/mutation.sh --tests-for``) runs
   once under coverage with one context per test (pytest-cov ``--cov-context=test``); a mutant
   then runs only the tests that executed its line. A line run while the module was imported
   (no test's context) runs the whole pool.
2. **A hang is a catch.** Each mutant's run gets ``--factor`` (default 5) times the unmutated
   time of the tests it runs (their durations from the coverage run, plus pytest's start-up
   measured in the same run), at least ``--min-timeout`` seconds; a mutant past it made the
   tests hang or crawl (an NNLS that no longer converges) and counts as caught, ``timeout``.
3. **Survivors are confirmed wide.** A mutant no selected test notices runs against the whole
   fast suite (``-m "not slow and not vllm"``) with the same rule, as mutate.py does; only what
   survives that is a survivor.

Needs a clean src/ (the module is rewritten in place and restored after every mutant, also on
Ctrl-C), .venv with pytest-cov (requirements/lock.txt) and ../shared beside the project.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT.parent / "shared" / "tools" / "mutate.py"
FAST = ("-m", "not slow and not vllm")


def load_tool():
    """The shared tool's ``points`` and ``mutate``, imported from its file."""
    if not TOOL.is_file():
        sys.exit(f"mutation.py: {TOOL} not found (needs ../shared beside the project)")
    spec = importlib.util.spec_from_file_location("shared_mutate", TOOL)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def pool_for(module: str) -> list[str]:
    """The module's test files, as bench/mutation.sh maps them."""
    out = subprocess.run(
        ["bash", str(ROOT / "bench" / "mutation.sh"), "--tests-for", module], capture_output=True, text=True, check=True
    ).stdout.split()
    return sorted({str(p.relative_to(ROOT)) for t in out for p in sorted(ROOT.glob(t))} or {"tests"})


def pytest_cmd(py: str, tests: list[str], extra: tuple[str, ...] = ()) -> list[str]:
    return [py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--hypothesis-seed=0", *FAST, *extra, *tests]


@dataclass
class Coverage:
    """Which tests ran each line of the module, and how long each test took unmutated."""

    by_line: dict[int, set[str]]
    durations: dict[str, float]
    startup_s: float
    pool: list[str]

    def tests_for(self, line: int) -> list[str] | None:
        """Node ids of the tests that ran ``line``; None when only the import ran it."""
        ids = self.by_line.get(line)
        return sorted(ids) if ids else None

    def budget(self, tests: list[str] | None) -> float:
        """Unmutated seconds of a run of these tests (None: the whole pool)."""
        chosen = self.durations.values() if tests is None else (self.durations.get(t, 0.0) for t in tests)
        return self.startup_s + sum(chosen)


def _nodeid(context: str) -> str:
    # pytest-cov names a context "<nodeid>|setup", "|run" or "|teardown"
    return context.rsplit("|", 1)[0]


def measure_coverage(py: str, module: Path, pool: list[str]) -> Coverage:
    """Run the pool once under coverage with per-test contexts and a JUnit file for durations."""
    from coverage import CoverageData

    dotted = ".".join(module.with_suffix("").parts[1:])  # src/hostgap/x/y.py -> hostgap.x.y
    with tempfile.TemporaryDirectory() as tmp:
        data_file, junit = Path(tmp) / "cov", Path(tmp) / "junit.xml"
        env_cov = f"--cov={dotted}"
        t0 = time.perf_counter()
        cmd = pytest_cmd(py, pool, (env_cov, "--cov-context=test", "--cov-report=", f"--junitxml={junit}"))
        run = subprocess.run(cmd, capture_output=True, text=True, env=_env(data_file))
        wall = time.perf_counter() - t0
        if run.returncode != 0:
            sys.exit(f"mutation.py: the unmutated pool fails or errors ({module}):\n{run.stdout[-2000:]}")
        data = CoverageData(basename=str(data_file))
        data.read()
        measured = [f for f in data.measured_files() if Path(f).resolve() == module.resolve()]
        by_line: dict[int, set[str]] = {}
        if measured:
            for line, contexts in data.contexts_by_lineno(measured[0]).items():
                ids = {_nodeid(c) for c in contexts if c}
                if ids:
                    by_line[line] = ids
        durations = _durations(junit)
    startup = max(1.0, wall - sum(durations.values()))
    return Coverage(by_line, durations, startup, pool)


def _env(data_file: Path) -> dict:
    import os

    env = dict(os.environ)
    env["COVERAGE_FILE"] = str(data_file)
    return env


def _durations(junit: Path) -> dict[str, float]:
    """Seconds per node id from a JUnit XML file (classname + name back to a node id)."""
    out: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        cls, name = case.get("classname", ""), case.get("name", "")
        parts = cls.split(".")
        # classname "tests.test_x" or "tests.test_x.TestClass" -> tests/test_x.py[::TestClass]
        for k in range(len(parts), 0, -1):
            path = ROOT / Path(*parts[:k]).with_suffix(".py")
            if path.is_file():
                node = "::".join([str(path.relative_to(ROOT)), *parts[k:], name])
                out[node] = out.get(node, 0.0) + float(case.get("time", 0.0))
                break
    return out


def run_tests(py: str, tests: list[str], timeout: float) -> str:
    """'caught', 'timeout' or 'alive' for one run of ``tests``."""
    shutil.rmtree(ROOT / ".hypothesis", ignore_errors=True)
    try:
        rc = subprocess.run(pytest_cmd(py, tests), capture_output=True, timeout=timeout, cwd=ROOT).returncode
    except subprocess.TimeoutExpired:
        return "timeout"
    return "alive" if rc == 0 else "caught"


def judge(py: str, cov: Coverage, line: int, factor: float, floor: float, wide_s: float) -> dict:
    """Run one mutant (already written over the module): its covering tests, then the wide suite."""
    tests = cov.tests_for(line)
    chosen = tests if tests is not None else cov.pool
    timeout = max(floor, factor * cov.budget(tests))
    status = run_tests(py, chosen, timeout)
    row = {
        "tests": len(tests) if tests is not None else f"pool ({len(cov.pool)} files)",
        "timeout_s": round(timeout, 1),
    }
    if status == "alive":
        status = run_tests(py, ["tests"], max(floor, factor * wide_s))
        status = {"alive": "survived", "caught": "caught-wide", "timeout": "timeout-wide"}[status]
    return {**row, "status": status}


def audit(tool, module: Path, args, wide_s: float) -> list[dict]:
    original = module.read_text()
    tree = ast.parse(original)
    pts = tool.points(tree, True)
    random.Random(args.seed).shuffle(pts)
    chosen = pts if args.all else pts[: args.n]
    cov = measure_coverage(args.python, module, pool_for(str(module)))
    src = original.splitlines()
    rows = []
    try:
        for p in chosen:
            module.write_text(ast.unparse(tool.mutate(tree, p)))
            r = judge(args.python, cov, p[2], args.factor, args.min_timeout, wide_s)
            r.update(line=p[2], mutation=p[3], code=src[p[2] - 1].strip()[:100] if p[2] else "")
            rows.append(r)
            if r["status"] == "survived":
                print(f"SURVIVED {module}:{p[2]} {p[3]}  | {r['code']}", flush=True)
    finally:
        module.write_text(original)
    caught = sum(r["status"] != "survived" for r in rows)
    hangs = sum(r["status"].startswith("timeout") for r in rows)
    pct = 100.0 * caught / len(rows) if rows else 100.0
    print(
        f"{module}: {len(pts)} strong points, {len(rows)} run, {caught} caught ({pct:.0f} %; "
        f"{hangs} by a hang), {len(rows) - caught} survived",
        flush=True,
    )
    return rows


def wide_seconds(py: str) -> float:
    """The unmutated fast suite's own wall time (once, for the wide confirmations' timeout)."""
    t0 = time.perf_counter()
    rc = subprocess.run(pytest_cmd(py, ["tests"]), capture_output=True, cwd=ROOT).returncode
    if rc != 0:
        sys.exit("mutation.py: the unmutated fast suite fails: fix it before an audit")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="+")
    ap.add_argument("-n", type=int, default=60, help="mutants per module (default 60)")
    ap.add_argument("--all", action="store_true", help="every strong point of each module")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--factor", type=float, default=5.0, help="timeout = factor x the unmutated tests' time")
    ap.add_argument("--min-timeout", type=float, default=30.0, help="the least timeout of a run, s")
    ap.add_argument("--wide-seconds", type=float, help="the fast suite's unmutated time (default: measured once)")
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--json", help="write every mutant's row here")
    args = ap.parse_args(argv)
    tool = load_tool()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=ROOT)
    if dirty.stdout.strip():
        sys.exit("mutation.py: src/ has uncommitted changes; the audit needs a clean tree")
    wide = args.wide_seconds or wide_seconds(args.python)
    print(f"fast suite unmutated: {wide:.0f} s (wide confirmations get {args.factor:g}x)", flush=True)
    results = {}
    for m in args.modules:
        results[m] = audit(tool, Path(m), args, wide)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
