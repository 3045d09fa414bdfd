"""A quick mutation audit of one module: ``../shared/tools/mutate.py``'s strong mutants and seeds
(its ``points`` and ``mutate``), each run against the named tests; a survivor is confirmed against
a wider set of test files instead of the whole fast suite (minutes, not hours, per module).

    .venv/bin/python bench/mutation_quick.py src/hostgap/model/levers/device.py --seed 5 -n 40 \\
        --tests "tests/test_advise_growth.py tests/test_advise_model.py" \\
        --wide "tests/test_advise_growth.py tests/test_advise_model.py tests/test_server_watch.py" \\
        --json /tmp/device.json

Run on a clean working tree (the module is rewritten for each mutant and restored after). Prints
one line per survivor and a summary; bench/mutation.py is the coverage-selected, whole-suite audit.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(tests: list[str], timeout: float) -> int | str:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--hypothesis-seed=0"]
    try:
        return subprocess.run([*cmd, "-m", "not slow", *tests], capture_output=True, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return "timeout"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module")
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tests", required=True, help="space-separated test files: the first pass")
    ap.add_argument("--wide", required=True, help="space-separated test files: a survivor's confirmation")
    ap.add_argument("--mutate", default=str(ROOT.parent / "shared" / "tools" / "mutate.py"))
    ap.add_argument("--json")
    a = ap.parse_args()
    sys.path.insert(0, str(Path(a.mutate).parent))
    import mutate as m  # type: ignore[import-not-found]

    path = Path(a.module)
    original = path.read_text()
    tree = ast.parse(original)
    pts = m.points(tree, True)
    random.Random(a.seed).shuffle(pts)
    tests, wide = a.tests.split(), a.wide.split()
    missing = [t for t in {*tests, *wide} if not Path(t).exists()]
    if missing:
        sys.exit(f"no such test file: {', '.join(missing)}")
    results = []
    try:
        path.write_text(ast.unparse(tree))
        if run(tests, 300) != 0:
            sys.exit("baseline (unparsed, unmutated) fails the tests: fix the test list first")
        for p in pts[: a.n]:
            path.write_text(ast.unparse(m.mutate(tree, p)))
            status = "killed" if run(tests, 300) != 0 else None
            if status is None:
                status = "killed-wide" if run(wide, 900) != 0 else "survived"
            results.append({"line": p[2], "mutation": p[3], "status": status})
            if status == "survived":
                line = original.splitlines()[p[2] - 1].strip() if p[2] else ""
                print(f"SURVIVED {path}:{p[2]} {p[3]} | {line[:110]}", flush=True)
    finally:
        path.write_text(original)
    killed = sum(r["status"] != "survived" for r in results)
    print(
        f"{path}: {len(pts)} points, {len(results)} sampled, {killed} killed "
        f"({100 * killed / max(1, len(results)):.0f} %), {len(results) - killed} survived"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
