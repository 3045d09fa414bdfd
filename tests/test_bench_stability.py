"""bench/measure_stability.py: the summary of K runs (valid count, times, the host fractions'
spread and mutual agreement, invalid reasons by kind) from run records; no measuring here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "measure_stability", Path(__file__).resolve().parent.parent / "bench/measure_stability.py"
)
assert _SPEC and _SPEC.loader
ms = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ms)


def _run(seconds, valid, hf=None, ci=None, reasons=(), rounds=0, agree=0.01):
    return {
        "seconds": seconds,
        "exit": 0 if valid else 3,
        "valid": valid,
        "reasons": list(reasons),
        "runs": [
            {
                "engine": "hf",
                "valid": valid,
                "reasons": list(reasons),
                "host_fraction": hf,
                "ci": ci,
                "anatomy_minus_diff": agree,
                "agree": abs(agree) <= 0.1,
                "rounds": rounds,
                "engine_difference": None,
            }
        ],
    }


def test_summary_counts_and_spreads():
    rows = [
        _run(30.0, True, 0.50, [0.45, 0.55], rounds=0),
        _run(40.0, True, 0.52, [0.47, 0.57], rounds=2, agree=-0.03),
        _run(70.0, False, reasons=["wall not linear in N (R² 0.9804 < 0.99)", "machine busy: 90% of runs"]),
        _run(35.0, False, reasons=["wall not linear in N (R² 0.9701 < 0.99)"]),
    ]
    s = ms.summarise(rows, "hf")
    assert (s["k"], s["valid"], s["under_60s"]) == (4, 2, 3)
    assert s["seconds_median"] == pytest.approx(37.5) and s["seconds_max"] == 70.0
    assert (s["host_fraction_min"], s["host_fraction_median"], s["host_fraction_max"]) == (0.50, 0.51, 0.52)
    assert s["each_within_every_interval"] is True
    assert s["anatomy_agree"] == 2 and s["anatomy_minus_diff_max_abs"] == pytest.approx(0.03)
    assert s["rounds_max"] == 2
    assert s["invalid_reasons"] == {"wall not linear in N (R² # < #)": 2, "machine busy": 1}
    t = ms.text(
        s,
        {
            "label": "quiet",
            "engine": "hf",
            "load": "none",
            "date_utc": "x",
            "loadavg_before": "0.1",
            "loadavg_after": "0.2",
            "cpus": 2,
            "nice": 0,
        },
    )
    assert "valid                   2 of 4" in t and "2 x wall not linear" in t


def test_a_valid_run_outside_another_interval_is_reported():
    rows = [_run(30.0, True, 0.50, [0.48, 0.52]), _run(30.0, True, 0.60, [0.58, 0.62])]
    assert ms.summarise(rows, "hf")["each_within_every_interval"] is False


def test_intervals_holding_the_median_and_overlapping_pairs():
    rows = [
        _run(30.0, True, 0.50, [0.45, 0.55]),
        _run(30.0, True, 0.52, [0.515, 0.60]),  # the median is 0.52: this one and the first hold it
        _run(30.0, True, 0.70, [0.66, 0.74]),  # overlaps neither other interval, misses the median
    ]
    s = ms.summarise(rows, "hf")
    assert (s["intervals"], s["intervals_holding_median"]) == (3, 2)
    assert (s["interval_pairs"], s["interval_pairs_overlapping"]) == (3, 1)


def test_two_engines_are_summarised_each():
    def two(valid_b: bool):
        r = _run(300.0, valid_b, 0.50, [0.45, 0.55])
        other = dict(r["runs"][0], engine="vllm", valid=True, host_fraction=0.75, ci=[0.74, 0.76], agree=True)
        r["runs"][0]["valid"] = valid_b
        r["runs"].append(other)
        return r

    s = ms.summarise([two(True), two(False)], "hf,vllm")
    assert s["engine_valid"] == 1 and s["engines"]["hf"]["engine_valid"] == 1
    assert s["engines"]["vllm"]["engine_valid"] == 2 and s["engines"]["vllm"]["host_fraction_median"] == 0.75
    meta = {
        "label": "q",
        "engine": "hf,vllm",
        "load": "none",
        "date_utc": "x",
        "loadavg_before": "0",
        "loadavg_after": "0",
    }
    t = ms.text(s, meta)
    assert "hf: valid in 1 of 2 runs" in t and "vllm: valid in 2 of 2 runs" in t
    assert "host fraction (valid)   median 75.0 %" in t
