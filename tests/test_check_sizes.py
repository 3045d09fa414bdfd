"""scripts/check_sizes.py: fails, listing each offender, when a module is over the line limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_sizes.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def _module(path: Path, lines: int, newline_at_end: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(f"x{i} = {i}" for i in range(lines))
    path.write_text(text + ("\n" if newline_at_end else ""))


def test_modules_over_the_limit_fail_and_are_listed_longest_first(tmp_path):
    _module(tmp_path / "pkg" / "at_limit.py", 10)
    _module(tmp_path / "pkg" / "over.py", 11)
    _module(tmp_path / "pkg" / "sub" / "far_over.py", 30)
    _module(tmp_path / "pkg" / "no_newline.py", 11, newline_at_end=False)  # wc -l: 10, plus the last line
    (tmp_path / "pkg" / "notes.txt").write_text("x\n" * 50)  # not a module
    p = _run("--limit", "10", str(tmp_path / "pkg"))
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert "3 module(s)" in lines[0] and "over 10 lines" in lines[0]
    assert [line.split("/")[-1] for line in lines[1:]] == [
        "far_over.py: 30 lines",
        "no_newline.py: 11 lines",
        "over.py: 11 lines",
    ]


def test_modules_within_the_limit_pass(tmp_path):
    _module(tmp_path / "a.py", 10)
    _module(tmp_path / "b.py", 3)
    p = _run("--limit", "10", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 modules" in p.stdout and "a.py, 10" in p.stdout


def test_a_missing_folder_is_one_line_and_status_2(tmp_path):
    p = _run(str(tmp_path / "nope"))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [f"check_sizes: error: {tmp_path / 'nope'}: no such folder"]
    assert "Traceback" not in p.stderr


def test_the_source_tree_is_within_600_lines():
    p = _run()
    assert p.returncode == 0, p.stdout
