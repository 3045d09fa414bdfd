"""Where the launch floor comes from (anatomy/floor.py): each source's value and label by hand,
and every malformed floor file refused with one line (mutation audit, bench/mutation.sh)."""

from __future__ import annotations

import json

import pytest

from hostgap.anatomy.floor import GENERIC_FLOOR_NS, launch_floor
from hostgap.errors import HostgapError


def test_cli_value_in_us_becomes_ns_and_must_be_positive():
    f = launch_floor(["NVIDIA H100"], floor_us=2.5)
    assert (f.ns, f.source) == (2500.0, "cli")  # 2.5 µs, ahead of the device's default
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(HostgapError, match="must be positive"):
            launch_floor([], floor_us=bad)


@pytest.mark.parametrize(
    "names, ns, key",
    [
        (["NVIDIA H200"], 4503.0, "H200"),
        (["nvidia h100 80gb hbm3"], 4707.0, "H100"),
        (["cpu", "NVIDIA H200 NVL"], 4503.0, "H200"),  # the first name with a known GPU
        (["NVIDIA A100-SXM4-80GB"], GENERIC_FLOOR_NS, None),
        ([], GENERIC_FLOOR_NS, None),
    ],
)
def test_device_defaults(names, ns, key):
    f = launch_floor(names)
    assert f.ns == ns
    assert f.source.startswith(f"default:{key} ") if key else f.source.startswith("generic fallback")


def _file(tmp_path, doc):
    p = tmp_path / "floor.json"
    p.write_text(json.dumps(doc))
    return str(p)


def test_floor_file_value_and_label(tmp_path):
    p = _file(tmp_path, {"kind": "launch_floor", "mean_ns": 4321.5, "device": "NVIDIA H200"})
    f = launch_floor(["NVIDIA H100"], floor_file=p)
    assert (f.ns, f.source) == (4321.5, f"file:{p}")


@pytest.mark.parametrize(
    "doc, msg",
    [
        ([1, 2], "not a launch-floor result"),
        ({"kind": "other", "mean_ns": 4000.0}, "not a launch-floor result"),
        ({"mean_ns": 4000.0}, "not a launch-floor result"),
        ({"kind": "launch_floor", "mean_ns": 0}, "no positive mean_ns"),
        ({"kind": "launch_floor", "mean_ns": -3.0}, "no positive mean_ns"),
        ({"kind": "launch_floor", "mean_ns": "4000"}, "no positive mean_ns"),
        ({"kind": "launch_floor"}, "no positive mean_ns"),
        ({"kind": "launch_floor", "mean_ns": 900.0, "device": "cpu"}, "CPU dispatch floor"),
    ],
)
def test_malformed_floor_files_are_refused(tmp_path, doc, msg):
    with pytest.raises(HostgapError, match=msg):
        launch_floor([], floor_file=_file(tmp_path, doc))
