"""Energy counters without the hardware: a fake powercap tree (wraps, resets, root-only files) and
a fake NVML module with the library's call shapes (a counter in mJ advancing with time)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from hostgap.energy import nvml as nv
from hostgap.energy import powercap as pc
from hostgap.energy.counters import Meter, counter_delta
from hostgap.energy.meter import open_meter


def zone(root: Path, rel: str, name: str, energy: int | None, rng: int | None = 1000) -> Path:
    z = root / rel
    z.mkdir(parents=True)
    (z / "name").write_text(name + "\n")
    if energy is not None:
        (z / "energy_uj").write_text(f"{energy}\n")
    if rng is not None:
        (z / "max_energy_range_uj").write_text(f"{rng}\n")
    return z


@pytest.mark.parametrize(
    "before, after, rng, want",
    [
        (100, 250, 1000, (150, "")),
        (100, 100, 1000, (0, "")),
        (900, 100, 1000, (200, "wrap")),
        (600, 100, 1000, (500, "wrap")),  # exactly half the range: still a wrap
        (600, 101, 1000, (None, "reset")),  # 501: past half the range, a reset
        (900, 100, None, (None, "reset")),
        (900, 100, 0, (None, "reset")),
        (None, 5, 1000, (None, "unreadable")),
        (5, None, 1000, (None, "unreadable")),
    ],
)
def test_counter_delta(before, after, rng, want):
    assert counter_delta(before, after, rng) == want


def test_powercap_domains_names_and_units(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", 10)
    zone(tmp_path, "intel-rapl:0:0", "core", 5)  # inside the package's count: left out
    zone(tmp_path, "intel-rapl:0:1", "dram", 7)
    zone(tmp_path, "intel-rapl:1", "package-1", 20, rng=None)
    zone(tmp_path, "intel-rapl:2", "psys", 30)
    zone(tmp_path, "intel-rapl-mmio:0", "package-0", 10)  # the same counter again: not read
    (tmp_path / "intel-rapl").mkdir()  # the control type's own folder
    doms, left = pc.domains(str(tmp_path))
    assert [d.name for d in doms] == ["package-0", "package-0:dram", "package-1", "psys"]
    assert [d.max_range for d in doms] == [1000, 1000, None, 1000]
    assert [d.in_total for d in doms] == [True, True, True, False]
    assert {d.source for d in doms} == {"powercap"} and {d.unit for d in doms} == {"uj"}
    assert [d.read() for d in doms] == [10, 7, 20, 30]
    assert left == []


def test_env_root_and_missing_root(tmp_path, monkeypatch):
    zone(tmp_path, "intel-rapl:0", "package-0", 10)
    monkeypatch.setenv("HOSTGAP_POWERCAP_ROOT", str(tmp_path))
    assert [d.name for d in pc.domains()[0]] == ["package-0"]
    doms, left = pc.domains(str(tmp_path / "nowhere"))
    assert doms == [] and left == [f"no powercap at {tmp_path / 'nowhere'}"]
    (tmp_path / "empty").mkdir()
    assert pc.domains(str(tmp_path / "empty")) == ([], [f"no RAPL zone under {tmp_path / 'empty'}"])


def test_root_only_counter_is_left_out_and_said(tmp_path, monkeypatch):
    zone(tmp_path, "intel-rapl:0", "package-0", 10)
    zone(tmp_path, "intel-rapl:1", "package-1", 10)
    real = pc._read_int

    def read(path: Path) -> int:
        if path.name == "energy_uj" and path.parent.name == "intel-rapl:1":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(pc, "_read_int", read)
    doms, left = pc.domains(str(tmp_path))
    assert [d.name for d in doms] == ["package-0"]
    assert left == [
        f"{tmp_path / 'intel-rapl:1' / 'energy_uj'} is readable by root only (permission denied): package-1 left out"
    ]


def test_meter_without_any_counter_says_why(tmp_path):
    m = open_meter(str(tmp_path / "none"), nvml=False)
    assert not m.available and m.domains == ()
    assert m.reason == f"no energy counter: no powercap at {tmp_path / 'none'}; NVML not asked for"
    assert m.describe()["available"] is False


def test_meter_differences_through_a_wrap_and_counts_resets(tmp_path):
    z = zone(tmp_path, "intel-rapl:0", "package-0", 900)
    m = open_meter(str(tmp_path), nvml=False)
    assert m.available and m.reason is None
    a = m.read()
    (z / "energy_uj").write_text("100\n")  # wrapped past 1000
    b = m.read()
    assert m.delta_uj(a, b) == {"package-0": 200}
    (z / "energy_uj").write_text("20\n")  # back by 80 with no plausible wrap (a wrap would be 920)
    c = m.read()
    assert m.delta_uj(b, c) == {"package-0": None}
    (z / "energy_uj").write_text("garbage\n")
    d = m.read()
    assert d == {"package-0": None}
    assert m.delta_uj(c, d) == {"package-0": None}
    assert m.events == {"package-0": {"wrap": 1, "reset": 1, "unreadable": 1}}
    assert m.describe()["events"] == {"package-0": {"wrap": 1, "reset": 1, "unreadable": 1}}


class FakeNVML(types.ModuleType):
    """pynvml's call shapes: nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex,
    nvmlDeviceGetTotalEnergyConsumption (mJ); GPU 1 predates the energy counter."""

    class NVMLError(Exception):
        pass

    def __init__(self, counts: list[int | None], init_fails: bool = False):
        super().__init__("pynvml")
        self.counts = counts
        self.init_fails = init_fails

    def nvmlInit(self):
        if self.init_fails:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self):
        return len(self.counts)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        v = self.counts[h[1]]
        if v is None:
            raise self.NVMLError("Not Supported")
        return v


def test_nvml_counts_mj_and_leaves_out_the_unsupported(monkeypatch):
    fake = FakeNVML([5000, None])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    doms, left = nv.domains()
    assert [(d.name, d.source, d.unit, d.max_range) for d in doms] == [("gpu0", "nvml", "mj", None)]
    assert left == ["gpu1: NVML total energy not supported (Not Supported)"]
    m = Meter(tuple(doms))
    a = m.read()
    fake.counts[0] = 7500  # 2.5 J later
    assert m.delta_uj(a, m.read()) == {"gpu0": 2_500_000}
    fake.counts[0] = 100  # a 64-bit counter that went back: reset
    assert m.delta_uj(a, m.read()) == {"gpu0": None}
    assert m.events == {"gpu0": {"reset": 1}}


def test_nvml_read_failure_is_unreadable(monkeypatch):
    fake = FakeNVML([5000])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    m = Meter(tuple(nv.domains()[0]))
    a = m.read()
    fake.counts[0] = None  # the device went away
    assert m.read() == {"gpu0": None}
    assert m.delta_uj(a, m.read()) == {"gpu0": None}
    assert m.events == {"gpu0": {"unreadable": 1}}


def test_nvml_absent_or_without_driver(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert nv.domains() == ([], ["NVML not installed (pip install 'hostgap[energy]')"])
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([], init_fails=True))
    assert nv.domains() == ([], ["NVML: no driver answers (Driver Not Loaded)"])
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([]))
    assert nv.domains() == ([], ["NVML: no GPU"])
    m = open_meter(str(tmp_path), nvml=True)
    assert m.reason == f"no energy counter: no RAPL zone under {tmp_path}; NVML: no GPU"


def test_meter_joins_powercap_and_nvml(monkeypatch, tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", 10)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML([1]))
    m = open_meter(str(tmp_path), nvml=True)
    assert [d.name for d in m.domains] == ["package-0", "gpu0"]
    assert m.describe()["in_total"] == ["package-0", "gpu0"]


def test_zones_that_cannot_be_named_or_read_are_said(tmp_path):
    zone(tmp_path, "intel-rapl:0", "package-0", 10)
    (tmp_path / "intel-rapl:0" / "name").unlink()
    zone(tmp_path, "intel-rapl:1", "package-1", None)
    (tmp_path / "intel-rapl:1" / "energy_uj").write_text("n/a\n")
    doms, left = pc.domains(str(tmp_path))
    assert doms == []
    assert left == [
        f"{tmp_path / 'intel-rapl:0'}: its name cannot be read (No such file or directory)",
        f"{tmp_path / 'intel-rapl:1' / 'energy_uj'} cannot be read (invalid literal for int() with base 10: 'n/a'): "
        "package-1 left out",
    ]


def test_a_tree_of_package_parts_only_has_no_zone(tmp_path):
    zone(tmp_path, "intel-rapl:0:0", "core", 10)  # inside a package the tree does not show
    assert pc.domains(str(tmp_path)) == ([], [f"no RAPL zone under {tmp_path}"])


def test_the_meter_asks_nvml_unless_told_not_to(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert open_meter(str(tmp_path)).reason == (
        f"no energy counter: no RAPL zone under {tmp_path}; NVML not installed (pip install 'hostgap[energy]')"
    )
