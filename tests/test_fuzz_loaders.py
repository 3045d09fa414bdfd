"""Fuzzing in CI: a fixed-seed budget of the generators of bench/fuzz.py (mutated Kineto JSON and
Nsight Systems SQLite), plus property-based (hypothesis) Kineto documents. Required on every
input: no exception but HostgapError, and on every input that loads a valid event table with
the accounting balanced (kept + skipped + flows + metadata = events in the file). bench/fuzz.py
runs the same generators at >= 10,000 inputs with time and memory bounds."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budget import examples
from hostgap.errors import HostgapError
from hostgap.readers import load_trace

_spec = importlib.util.spec_from_file_location(
    "hostgap_bench_fuzz", Path(__file__).resolve().parents[1] / "bench" / "fuzz.py"
)
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)

BUDGET = 160  # inputs per seed below: ~10 s on two shared cores


def outcome(path: str) -> str:
    try:
        trace = load_trace(path)
    except HostgapError:
        return "hostgap error"
    assert fuzz.balanced(trace), path
    return "ok"


@pytest.mark.parametrize("seed", [101, 202])
def test_fixed_seed_budget(tmp_path, seed):
    seen = {"ok": 0, "hostgap error": 0}
    for _kind, path, _size in fuzz.cases(BUDGET, seed, str(tmp_path)):
        seen[outcome(path)] += 1
    # the generators must produce both outcomes, or the budget tests nothing
    assert seen["ok"] > BUDGET // 5 and seen["hostgap error"] > BUDGET // 10


def test_nsys_mutations(tmp_path):
    rng = random.Random(7)
    seen = {"ok": 0, "hostgap error": 0}
    for i in range(60):
        data, suffix, _ = fuzz.nsys_input(rng, str(tmp_path))
        p = tmp_path / f"n{i}{suffix}"
        p.write_bytes(data)
        seen[outcome(str(p))] += 1
    assert seen["ok"] > 20


def test_run_one_classifies(tmp_path):
    """The bench's classifier: a good file is ok, a refused one a hostgap error, and a timeout
    is reported as over time, not raised."""
    good = tmp_path / "g.json"
    good.write_text(json.dumps(fuzz.kineto_seed(random.Random(0))))
    assert fuzz.run_one(str(good), good.stat().st_size, 10, True, True) == ("ok", "")
    bad = tmp_path / "b.json"
    bad.write_text('{"traceEvents": []}')
    assert fuzz.run_one(str(bad), 20, 10, False, False)[0] == "hostgap error"
    assert fuzz.run_one(str(good), good.stat().st_size, 1e-6, True, False)[0] in ("over time", "ok")


# -- property-based documents --------------------------------------------------------------

numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0005, 1661203462598772, 4.7e15, -1]),
)
values = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=8))
event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "i", "M", "s", "f", "B"]),
        "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "user_annotation", "Trace", "zzz"]),
        "name": st.text(max_size=10),
        "ts": st.one_of(numbers, values),
        "dur": st.one_of(numbers, values),
    },
    optional={
        "pid": values,
        "tid": values,
        "args": st.one_of(
            values,
            st.dictionaries(
                st.sampled_from(["correlation", "External id", "device", "stream", "bytes", "name"]), values
            ),
        ),
    },
)
docs = st.builds(
    lambda evs, extra: {"traceEvents": evs, **extra},
    st.lists(st.one_of(event, values), max_size=25),
    st.fixed_dictionaries({}, optional={"deviceProperties": values, "baseTimeNanoseconds": values}),
)


@settings(**examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs, st.booleans())
def test_generated_documents(tmp_path, doc, bom):
    p = tmp_path / "h.json"
    p.write_bytes((b"\xef\xbb\xbf" if bom else b"") + json.dumps(doc).encode())
    if outcome(str(p)) == "ok":
        n = len(doc["traceEvents"])
        assert load_trace(str(p)).meta.extra["events_in_file"] == n
