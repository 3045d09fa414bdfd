"""`hostgap` asks numpy, before importing it, for no transparent huge pages; a value the user
set is kept, and a process that already imported numpy is left as it is."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import os, sys{pre}; from hostgap.cli import no_huge_pages; no_huge_pages(); "
    "print(os.environ.get('NUMPY_MADVISE_HUGEPAGE', 'unset'))"
)


def probe(env_value: str | None, pre: str = "") -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if env_value is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(pre=pre)], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_set_before_numpy_is_imported():
    assert probe(None) == "0"


def test_the_users_value_is_kept():
    assert probe("1") == "1"


def test_a_process_that_imported_numpy_is_left_alone():
    assert probe(None, pre="; import numpy") == "unset"
