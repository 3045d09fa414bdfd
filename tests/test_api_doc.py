"""docs/api.md's Python examples run as written (those that need no server and no measurement;
tests/test_examples.py runs the server ones against stand-ins)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_examples import decode_trace

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_the_examples_of_docs_api_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    runnable = [b for b in blocks if "http://" not in b and "measure(" not in b]
    assert len(runnable) >= 3
    decode_trace(tmp_path / "trace.json.gz", 40.0)
    decode_trace(tmp_path / "base.json.gz", 40.0)  # the candidate is faster: the gate passes
    decode_trace(tmp_path / "new.json.gz", 1.0)
    for code in runnable:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=240)
        assert r.returncode == 0, f"{code}\n{r.stderr}"
    assert (tmp_path / "report.html").is_file()
