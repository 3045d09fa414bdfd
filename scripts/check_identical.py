"""Check that a refactoring left hostgap's output byte-identical on the real-trace corpus.

Runs ``hostgap analyze --json`` (and ``steps --json`` / ``kernels --json``) on every trace of
``../shared/traces`` (Kineto JSON and Nsight Systems SQLite), and ``analyze --json`` on the
corpus's multi-rank trace set, and either records stdout, stderr and the exit status of each
run into a folder, or compares a new run with such a recording byte for byte.

Usage (keep the reference outside the repository, e.g. under /tmp)::

    .venv/bin/python scripts/check_identical.py record /tmp/hostgap-ref   # before the change
    .venv/bin/python scripts/check_identical.py check /tmp/hostgap-ref    # after: exit 1 on any difference
    .venv/bin/python scripts/check_identical.py check /tmp/hostgap-ref --cache   # also through the cache

Each command runs in a fresh process with the source tree of the checkout this script lives in
(``--src`` names another, e.g. ``git archive BASE src | tar -x -C /tmp/base`` to record a
reference from an older commit without checking it out).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "traces"
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite")
RANK_SET = ("hta/sampled_rank-0.json.gz", "hta/sampled_rank-1.json.gz")
VERBS = ("analyze", "steps", "kernels")


def corpus_traces(corpus: Path) -> list[Path]:
    """Every trace file of the corpus, in a fixed order."""
    return sorted(p for p in corpus.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def runs(corpus: Path, rank_dir: Path) -> list[tuple[str, list[str]]]:
    """(name, hostgap arguments) of every run the check makes."""
    out = []
    for trace in corpus_traces(corpus):
        rel = trace.relative_to(corpus).as_posix()
        for verb in VERBS:
            out.append((f"{verb}--{rel.replace('/', '--')}", [verb, str(trace), "--json", "--quiet"]))
    out.append(("analyze--rank-set", ["analyze", str(rank_dir), "--json", "--quiet", "--jobs", "2"]))
    return out


def run_one(args: list[str], src: Path, cache_dir: str | None = None) -> bytes:
    """stdout, stderr and exit status of one hostgap command, as one byte string."""
    env = dict(os.environ, PYTHONPATH=str(src), COLUMNS="120", NO_COLOR="1")
    if cache_dir is None:
        env["HOSTGAP_NO_CACHE"] = "1"  # every run decodes and analyses: what the code computes now
    else:
        env.update(HOSTGAP_CACHE_DIR=cache_dir, HOSTGAP_CACHE_MIN="0")
    p = subprocess.run([sys.executable, "-m", "hostgap", *args], capture_output=True, env=env, check=False)
    return b"exit %d\n--- stdout\n%s--- stderr\n%s" % (p.returncode, p.stdout, p.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["record", "check"])
    ap.add_argument("folder", type=Path, help="where the reference outputs are (or go)")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="the trace corpus (default: ../shared/traces)")
    ap.add_argument(
        "--src",
        type=Path,
        default=ROOT / "src",
        help="the source tree to run (default: this checkout's src/; e.g. an exported older commit)",
    )
    ap.add_argument(
        "--cache",
        action="store_true",
        help="with check: run every command twice through a fresh analysis cache (the first fills it, the "
        "second reads it) and compare both runs with the reference",
    )
    a = ap.parse_args(argv)
    if not a.corpus.is_dir():
        print(f"check_identical: error: corpus {a.corpus} not found", file=sys.stderr)
        return 2
    if a.mode == "check" and not a.folder.is_dir():
        print(f"check_identical: error: reference folder {a.folder} not found (run `record` first)", file=sys.stderr)
        return 2
    a.folder.mkdir(parents=True, exist_ok=True)
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        rank_dir = Path(tmp) / "ranks"
        rank_dir.mkdir()
        for rel in RANK_SET:
            (rank_dir / Path(rel).name).symlink_to(a.corpus / rel)
        todo = runs(a.corpus, rank_dir)
        cache = str(Path(tmp) / "cache") if a.cache else None
        for name, args in [(n, x) for n, x in todo for _ in range(2 if cache else 1)]:
            got = run_one(args, a.src, cache).replace(str(rank_dir).encode(), b"<RANK_DIR>")
            ref = a.folder / f"{name}.out"
            digest = hashlib.sha256(got).hexdigest()[:12]
            if a.mode == "record":
                ref.write_bytes(got)
                print(f"recorded {name} ({len(got)} bytes, sha256 {digest})")
            elif not ref.is_file():
                print(f"MISSING  {name}: no reference output")
                differ += 1
            elif ref.read_bytes() != got:
                print(
                    f"DIFFERS  {name} (sha256 {digest}, reference {hashlib.sha256(ref.read_bytes()).hexdigest()[:12]})"
                )
                differ += 1
            else:
                print(f"same     {name} ({len(got)} bytes)")
    if a.mode == "check":
        n = len(todo) * (2 if a.cache else 1)
        print(
            f"{n - differ} of {n} outputs byte-identical"
            + (" (each command twice, through the cache)" if a.cache else "")
        )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
