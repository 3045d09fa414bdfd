"""Process and thread ids read from Kineto JSON (readers/kineto/schema.py ``_ids``, and the
compiled decoder's same rule): an int is kept, a digit string is that int, a null is NONE, other
text is a stable negative below NONE, numbered in order of first appearance (mutation audit: a
null read as the text "None" and text read as NONE passed every test)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import cpu_op
from hostgap.events import NONE
from hostgap.readers import load_trace
from hostgap.readers.kineto import compiled as kineto_columns

ROUTES = [
    "pure",
    pytest.param("compiled", marks=pytest.mark.skipif(kineto_columns._NATIVE is None, reason="not built here")),
]


@pytest.mark.parametrize("route", ROUTES)
def test_null_text_and_digit_ids(kineto_trace, monkeypatch, route):
    if route == "pure":
        monkeypatch.setenv("HOSTGAP_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("HOSTGAP_PURE_PYTHON", raising=False)
    ids = [None, "stream 7", "stream 7", "other", 42, "12", None]
    events = [cpu_op(f"op{i}", ts=float(i), pid=v, tid=v) for i, v in enumerate(ids)]
    t = load_trace(kineto_trace(events))
    order = np.argsort(t.events.start_ns, kind="stable")
    # null → NONE (-1); "stream 7" → -2, the same at its second appearance; "other" → -3;
    # 42 kept; "12" → 12
    want = [NONE, -2, -2, -3, 42, 12, NONE]
    assert t.events.tid[order].tolist() == want
    assert t.events.pid[order].tolist() == want
