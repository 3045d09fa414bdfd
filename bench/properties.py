"""Property tests at a large budget: finds the rare timeline a 60-example run misses.

Usage::

    .venv/bin/python bench/properties.py                       # the anatomy properties, 10,000 examples each
    .venv/bin/python bench/properties.py -n 20000 tests/test_anatomy_properties.py -k naive
    .venv/bin/python bench/properties.py --all                 # every property test of the suite

Runs pytest on the property-test files with ``HOSTGAP_PROPERTY_EXAMPLES`` set (the files read it
through ``tests/budget.py``; the fast suite uses 25-300 per property) and Hypothesis's example
database disabled, so every run draws fresh examples from a fixed seed (``--seed``; change it to
explore further). A failure prints the shrunk input; add it to the test as an ``@example`` with
its hand-derived answer. Takes minutes per property on a shared machine; prints pytest's summary
and exits with its status. Tests marked ``vllm`` (they need .venv-vllm) are left out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["tests/test_anatomy_properties.py"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", default=DEFAULT, help="property-test files (default: the anatomy's)")
    ap.add_argument("-n", "--examples", type=int, default=10_000, help="examples per property (default 10,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-k", help="pytest -k expression (one property)")
    ap.add_argument("--all", action="store_true", help="every test file that takes its budget from tests/budget.py")
    args = ap.parse_args(argv)
    if args.all:
        args.files = sorted(
            str(p.relative_to(ROOT))
            for p in (ROOT / "tests").glob("test_*.py")
            if "from budget import examples" in p.read_text()
        )
    if args.examples < 1:
        print("properties.py: -n must be positive", file=sys.stderr)
        return 2
    env = dict(os.environ, HOSTGAP_PROPERTY_EXAMPLES=str(args.examples))
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-x",
        "-m",
        "not vllm",
        f"--hypothesis-seed={args.seed}",
        *args.files,
    ]
    if args.k:
        cmd += ["-k", args.k]
    print(f"{args.examples:,} examples per property, seed {args.seed}: {' '.join(args.files)}", flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main())
