"""Nsight Systems loader facts a changed operator would get wrong (mutation audit of
readers/nsys.py, bench/mutation.sh): metadata read once and first-wins, integers parsed strictly,
device names found through the right table, processes adopted only when the GPU op has none.
Each export is built by hand and each expected value follows from the rows written."""

from __future__ import annotations

import json

import pytest

from hostgap.events import Kind
from hostgap.readers.nsys import _int_or_none, load_nsys
from test_load_nsys import Export, gpid, gtid


@pytest.fixture
def export(tmp_path):
    return Export(tmp_path / "pins.sqlite")


@pytest.mark.parametrize(
    "value, expected",
    [
        (3.0, 3),
        (2.5, None),
        (float("inf"), None),
        (float("nan"), None),
        (" +12 ", 12),
        ("-7", -7),
        ("", None),
        ("abc", None),
        ("1e3", None),
        ("1.0", None),
        (2**63 - 1, 2**63 - 1),
        (-(2**63), -(2**63)),
        (2**63, None),
        (2**70, None),
        ("9" * 20, None),  # 20 digits: beyond int64
        ("1" * 21, None),  # longer than any int64
        ("１２", None),  # full-width digits are digits to str.isdigit, not to a parser of exports
        (True, None),
        (b"12", None),
        (None, None),
    ],
)
def test_int_or_none_reads_only_int64_integers(value, expected):
    assert _int_or_none(value) == expected


def _session(export, start, shift=None):
    export.sql("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER)")
    export.sql("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?)", (start,))
    export.sql("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    if shift is not None:
        export.sql("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_TIME_SHIFT', ?)", (shift,))
    export.kernel(0, 10, corr=1, pid=100)
    return load_nsys(export.close())


def test_time_shift_is_subtracted_from_the_session_start(export):
    # trace time 0 = session start - shift: 1,000,000,000,000 - 2,500 ns
    assert _session(export, 10**12, "2500").meta.base_time_ns == 10**12 - 2500


def test_negative_time_shift_moves_the_base_later(tmp_path):
    assert _session(Export(tmp_path / "a.sqlite"), 10**12, "-2500").meta.base_time_ns == 10**12 + 2500
    assert _session(Export(tmp_path / "b.sqlite"), 10**12, "abc").meta.base_time_ns is None
    # a base beyond int64 is no base: 2**63 - 10 + 100
    assert _session(Export(tmp_path / "c.sqlite"), 2**63 - 10, "-100").meta.base_time_ns is None


def test_metadata_first_value_wins_and_null_values_fall_through(export):
    export.sql("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    export.sql("INSERT INTO META_DATA_EXPORT VALUES (NULL, 'x')")
    export.sql("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.1')")
    export.sql("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '9.9')")
    export.sql("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', NULL)")
    export.sql("CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT)")
    export.sql("INSERT INTO META_DATA_CAPTURE VALUES ('NSYS_VERSION', '2024.1')")
    export.kernel(0, 10, corr=1, pid=100)
    extra = load_nsys(export.close()).meta.extra
    assert extra["schema_version"] == "3.1"  # the first of two rows
    assert extra["nsys_version"] == "2024.1"  # a NULL product version is no version


def test_processes_named_only_when_they_own_events_first_name_kept(export):
    export.process(100, "python3")
    export.process(100, "renamed")
    export.process(200, "idle-process")  # owns no event
    export.process(300, "")  # no name
    export.kernel(0, 10, corr=1, pid=100)
    export.kernel(20, 30, corr=2, pid=300)
    assert load_nsys(export.close()).meta.processes == {100: "python3"}


def _gpu_table(export, *rows):
    export.sql("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT)")
    for r in rows:
        export.sql("INSERT INTO TARGET_INFO_GPU VALUES (?, ?)", r)


def test_cuda_to_gpu_mapping_ignores_rows_without_a_gpu_id(export):
    _gpu_table(export, (0, "GPU-A"), (5, "GPU-B"))
    export.sql("CREATE TABLE TARGET_INFO_CUDA_DEVICE (cudaId INTEGER, gpuId INTEGER, pid INTEGER)")
    export.sql("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (0, NULL, 1)")  # no mapping: id 0 is GPU 0
    export.sql("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (1, 5, 1)")  # CUDA 1 is GPU 5
    export.kernel(0, 10, corr=1, pid=100, device=0)
    export.kernel(0, 10, corr=2, pid=100, device=1)
    devices = load_nsys(export.close()).meta.devices
    assert [(d.index, d.name) for d in devices] == [(0, "GPU-A"), (1, "GPU-B")]


def test_old_cuda_device_table_first_named_row_wins(export):
    export.sql("CREATE TABLE TARGET_INFO_CUDA_DEVICE (cudaId INTEGER, name TEXT)")
    export.sql("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (0, 'first')")
    export.sql("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (0, 'second')")
    export.kernel(0, 10, corr=1, pid=100, device=0)
    assert [d.name for d in load_nsys(export.close()).meta.devices] == ["first"]


def test_unnamed_cuda_device_rows_leave_the_name_to_the_system_env(export):
    export.sql("CREATE TABLE TARGET_INFO_CUDA_DEVICE (cudaId INTEGER, name TEXT)")
    export.sql("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (0, NULL)")
    export.sql("CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT)")
    export.sql(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('GpuInfo', ?)",
        (json.dumps({"gpus": [{"cudaId": 0, "name": "from-env", "computeMajor": 9}]}),),
    )
    export.kernel(0, 10, corr=1, pid=100, device=0)
    (dev,) = load_nsys(export.close()).meta.devices
    assert (dev.name, dev.compute_capability) == ("from-env", None)  # no minor: no capability


@pytest.mark.parametrize(
    "rows",
    [
        [("Hostname", "node1")],  # no GpuInfo row at all
        [("GpuInfo", 5)],  # not text
        [("GpuInfo", "")],
        [("GpuInfo", "[1, 2]")],  # not objects
    ],
)
def test_system_env_without_usable_gpu_info_leaves_the_device_unnamed(export, rows):
    export.sql("CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value)")
    for r in rows:
        export.sql("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, ?)", r)
    export.kernel(0, 10, corr=1, pid=100, device=0)
    (dev,) = load_nsys(export.close()).meta.devices
    assert dev.name_source == "missing"


def test_system_env_gpu_positions_and_duplicates(export):
    export.sql("CREATE TABLE TARGET_INFO_SYSTEM_ENV (name TEXT, value TEXT)")
    gpus = [{"name": "pos0"}, {"index": 1, "name": "idx1"}, {"index": 1, "name": "dup"}, {"id": 2}]
    export.sql("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES ('GpuInfo', ?)", (json.dumps(gpus),))
    for d in (0, 1, 2):
        export.kernel(0, 10, corr=d + 1, pid=100, device=d)
    devices = load_nsys(export.close()).meta.devices
    assert [(d.index, d.name if d.name_source != "missing" else None) for d in devices] == [
        (0, "pos0"),
        (1, "idx1"),
        (2, None),
    ]


def test_gpu_ops_with_their_own_process_are_not_re_adopted(export):
    # corr 1 was issued by process 6 only, but the kernel says it ran for process 5: it stays 5
    export.api(0, 5, corr=1, pid=6, tid=6, name="cudaLaunchKernel_v7000")
    export.kernel(10, 20, corr=1, pid=5)
    trace = load_nsys(export.close())
    e = trace.events
    k = e.kind == int(Kind.KERNEL)
    assert list(e.pid[k]) == [5] and list(e.link_key[k]) == [gpid(5) >> 24]
    assert "gpu_ops_process_from_correlation" not in trace.meta.extra
    assert "gpu_ops_without_process" not in trace.meta.extra


def test_string_ids_with_a_null_half_are_ignored(tmp_path):
    schema = Export.__init__.__defaults__[0].replace(
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);",
        "CREATE TABLE StringIds (id INTEGER, value TEXT);",
    )
    ex = Export(tmp_path / "s.sqlite", schema)
    ex.sql("INSERT INTO StringIds VALUES (5, NULL)")
    ex.sql("INSERT INTO StringIds VALUES (NULL, 'orphan')")
    ex.sql("INSERT INTO StringIds VALUES (7, 'short_k')")
    ex.sql("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, 10, 0, 1, 7, 1, ?, 5, 7, NULL, NULL)", (gpid(100),))
    ex.sql("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (0, 1, 0, ?, 2, 9, 0)", (gtid(100, 1),))
    trace = load_nsys(ex.close())
    names = {trace.names[c] for c in trace.events.name}
    # demangled id 5 has no text: the short name; API name id 9 is absent: a labelled placeholder
    assert names == {"short_k", "runtime call (string id 9)"}
