"""Mutation audit in CI-sized time: each mutant runs only the tests that execute its line, under a
timeout derived from those tests' own time.

    .venv/bin/python bench/mutation.py src/hostgap/model/attribution/fit.py --all
    .venv/bin/python bench/mutation.py --every-module -n 1 --seed 7,11 --json out.json

The mutants are those of ``../shared/tools/mutate.py --strong`` (its ``points`` and ``mutate``, the
same flips in the same seeded order, so a sample here is the sample there). What changes is how
each one is judged:

1. **Coverage picks the tests.** The whole fast suite runs once under coverage with one context
   per test (pytest-cov ``--cov-context=test``), kept in ``--map`` for the commit it was made at;
   a mutant then runs exactly the tests that executed its line: a test that never runs the line
   cannot see the change. A line run only while its module was imported (a module constant, a
   default argument: no test's context) runs the module's own tests (``bench/mutation.sh
   --tests-for``) and, if they all pass, the whole fast suite.
2. **A hang is a catch.** Each run gets ``--factor`` (default 5) times the unmutated time of the
   tests it runs (their durations from the coverage run, plus pytest's start-up), at least
   ``--min-timeout`` seconds; a mutant past it made the tests hang or crawl (an NNLS that no
   longer converges) and counts as caught, ``timeout``.

Needs a clean src/ (the module is rewritten in place and restored after every mutant, also on
Ctrl-C), .venv with pytest-cov (requirements/lock.txt) and ../shared beside the project.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import random
import shutil
import signal
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
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pool_for(module: str) -> list[str]:
    """The module's own test files, as bench/mutation.sh maps them."""
    out = subprocess.run(
        ["bash", str(ROOT / "bench" / "mutation.sh"), "--tests-for", module], capture_output=True, text=True, check=True
    ).stdout.split()
    return sorted({str(p.relative_to(ROOT)) for t in out for p in sorted(ROOT.glob(t))}) or ["tests"]


def pytest_cmd(py: str, tests: list[str], extra: tuple[str, ...] = ()) -> list[str]:
    return [py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--hypothesis-seed=0", *FAST, *extra, *tests]


def head_commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()


@dataclass
class Coverage:
    """Which tests of the fast suite ran each line of each module, and each test's unmutated time."""

    tests: list[str]
    lines: dict[str, dict[int, list[int]]]  # module path -> line -> indices into tests
    durations: list[float]
    startup_s: float
    commit: str

    def tests_for(self, module: str, line: int) -> list[str] | None:
        """Node ids of the tests that ran ``line`` of ``module``; None when only its import ran it."""
        idx = self.lines.get(module, {}).get(line)
        return [self.tests[i] for i in idx] if idx else None

    def budget(self, tests: list[str] | None) -> float:
        """Unmutated seconds of a run of these tests (None: the whole fast suite)."""
        if tests is None:
            return self.startup_s + sum(self.durations)
        where = {t: i for i, t in enumerate(self.tests)}
        return self.startup_s + sum(self.durations[where[t]] for t in tests if t in where)

    def to_json(self) -> dict:
        return {
            "commit": self.commit,
            "startup_s": self.startup_s,
            "tests": self.tests,
            "durations": self.durations,
            "lines": {m: {str(k): v for k, v in d.items()} for m, d in self.lines.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> Coverage:
        lines = {m: {int(k): v for k, v in v2.items()} for m, v2 in d["lines"].items()}
        return cls(d["tests"], lines, d["durations"], d["startup_s"], d["commit"])


def _nodeid(context: str) -> str:
    # pytest-cov names a context "<nodeid>|setup", "|run" or "|teardown"
    return context.rsplit("|", 1)[0]


def measure_coverage(py: str) -> Coverage:
    """Run the whole fast suite once under coverage, one context per test, and a JUnit file for
    each test's time."""
    from coverage import CoverageData

    with tempfile.TemporaryDirectory() as tmp:
        data_file, junit = Path(tmp) / "cov", Path(tmp) / "junit.xml"
        extra = ("--cov=hostgap", "--cov-context=test", "--cov-report=", f"--junitxml={junit}")
        t0 = time.perf_counter()
        run = subprocess.run(
            pytest_cmd(py, ["tests"], extra), capture_output=True, text=True, cwd=ROOT,
            env={**os.environ, "COVERAGE_FILE": str(data_file)},
        )  # fmt: skip
        wall = time.perf_counter() - t0
        if run.returncode != 0:
            sys.exit(f"mutation.py: the unmutated fast suite fails under coverage:\n{run.stdout[-3000:]}")
        data = CoverageData(basename=str(data_file))
        data.read()
        durations = _durations(junit)
        tests = sorted(durations)
        where = {t: i for i, t in enumerate(tests)}
        lines: dict[str, dict[int, list[int]]] = {}
        for f in data.measured_files():
            try:
                rel = str(Path(f).resolve().relative_to(ROOT))
            except ValueError:
                continue
            per = {}
            for line, contexts in data.contexts_by_lineno(f).items():
                idx = sorted({where[n] for n in map(_nodeid, contexts) if n in where})
                if idx:
                    per[line] = idx
            lines[rel] = per
    startup = max(1.0, wall - sum(durations.values()))
    return Coverage(tests, lines, [durations[t] for t in tests], startup, head_commit())


def coverage_map(py: str, path: Path) -> Coverage:
    """The map kept at ``path`` when it was made at this commit, else a new one written there."""
    if path.is_file():
        cov = Coverage.from_json(json.loads(path.read_text()))
        if cov.commit == head_commit():
            return cov
    print("coverage map: running the fast suite once under coverage ...", flush=True)
    cov = measure_coverage(py)
    path.write_text(json.dumps(cov.to_json()))
    return cov


def _durations(junit: Path) -> dict[str, float]:
    """Seconds per node id from a JUnit XML file (classname + name back to a node id)."""
    out: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
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


def judge(py: str, cov: Coverage, module: str, line: int, factor: float, floor: float) -> dict:
    """Run one mutant (already written over the module): the tests that ran its line, or, for a
    line only the import ran, the module's own tests and then the whole fast suite."""
    tests = cov.tests_for(module, line)
    if tests is not None:
        timeout = max(floor, factor * cov.budget(tests))
        status = run_tests(py, tests, timeout)
        return {
            "tests": len(tests),
            "timeout_s": round(timeout, 1),
            "status": "survived" if status == "alive" else status,
        }
    pool = pool_for(module)
    timeout = max(floor, factor * cov.budget(None) * 0.5)
    status = run_tests(py, pool, timeout)
    if status == "alive":
        wide = max(floor, factor * cov.budget(None))
        status = {"alive": "survived", "caught": "caught-wide", "timeout": "timeout-wide"}[
            run_tests(py, ["tests"], wide)
        ]
    return {"tests": "import-time: own tests, then the fast suite", "timeout_s": round(timeout, 1), "status": status}


def audit(tool, module: Path, seeds: list[int], n: int | None, cov: Coverage, args) -> list[dict]:
    original = module.read_text()
    tree = ast.parse(original)
    pts = tool.points(tree, True)
    chosen: list = []
    for seed in seeds:
        order = list(pts)
        random.Random(seed).shuffle(order)
        chosen += [p for p in (order if n is None else order[:n]) if p not in chosen]
    rel = str(module.resolve().relative_to(ROOT))
    src = original.splitlines()
    rows = []
    try:
        for p in chosen:
            module.write_text(ast.unparse(tool.mutate(tree, p)))
            r = judge(args.python, cov, rel, p[2], args.factor, args.min_timeout)
            r.update(line=p[2], mutation=p[3], code=src[p[2] - 1].strip()[:100] if p[2] else "")
            rows.append(r)
            if r["status"] == "survived":
                print(f"SURVIVED {module}:{p[2]} {p[3]}  | {r['code']}", flush=True)
    finally:
        module.write_text(original)
    caught = sum(r["status"] != "survived" for r in rows)
    hangs = sum(str(r["status"]).startswith("timeout") for r in rows)
    pct = 100.0 * caught / len(rows) if rows else 100.0
    print(
        f"{module}: {len(pts)} strong points, {len(rows)} run, {caught} caught ({pct:.0f} %; "
        f"{hangs} by a hang), {len(rows) - caught} survived",
        flush=True,
    )
    return rows


def every_module() -> list[str]:
    """The modules bench/mutation.sh audits by default (the analysis core)."""
    out = subprocess.run(
        ["bash", str(ROOT / "bench" / "mutation.sh"), "--list"], capture_output=True, text=True, cwd=ROOT
    )
    mods = [m for m in out.stdout.split() if m.endswith(".py")]
    if not mods:
        sys.exit("mutation.py: could not read the module list of bench/mutation.sh")
    return mods


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("modules", nargs="*")
    ap.add_argument("--every-module", action="store_true", help="bench/mutation.sh's default module list")
    ap.add_argument("-n", type=int, default=60, help="mutants per module and seed (default 60)")
    ap.add_argument("--all", action="store_true", help="every strong point of each module")
    ap.add_argument("--seed", default="1", help="one seed or several, comma-separated")
    ap.add_argument("--factor", type=float, default=5.0, help="timeout = factor x the unmutated tests' time")
    ap.add_argument("--min-timeout", type=float, default=30.0, help="the least timeout of a run, s")
    ap.add_argument("--map", default=str(Path(tempfile.gettempdir()) / "hostgap-mutation-coverage.json"))
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--json", help="write every mutant's row here")
    args = ap.parse_args(argv)
    # SIGTERM (a timeout, a CI stop) unwinds like Ctrl-C, so the module is restored
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("mutation.py: terminated; the module was restored"))
    tool = load_tool()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=ROOT)
    if dirty.stdout.strip():
        sys.exit("mutation.py: src/ has uncommitted changes; the audit needs a clean tree")
    mods = args.modules + (every_module() if args.every_module else [])
    if not mods:
        ap.error("name modules or --every-module")
    cov = coverage_map(args.python, Path(args.map))
    print(f"coverage map at {cov.commit[:8]}: {len(cov.tests)} tests, fast suite {cov.budget(None):.0f} s", flush=True)
    seeds = [int(x) for x in args.seed.split(",")]
    results = {}
    for m in mods:
        results[m] = audit(tool, Path(m), seeds, None if args.all else args.n, cov, args)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
