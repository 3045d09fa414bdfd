"""Hostile and broken Nsight Systems exports (each a minimal export built here), and exports
whose kernel table has no globalPid (linked on correlation id within the process)."""

from __future__ import annotations

import numpy as np
import pytest

from hostgap.anatomy.link import link
from hostgap.events import NONE, Kind
from hostgap.readers.nsys import load_nsys
from test_load_nsys import Export, gpid, gtid, rows_of

NO_GPID_SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER,
    streamId INTEGER, correlationId INTEGER, shortName INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER);
"""


@pytest.fixture
def export(tmp_path):
    return Export(tmp_path / "mini.sqlite")


def span_ns(trace) -> int:
    gpu = rows_of(trace, Kind.KERNEL)
    ev = trace.events
    return int(ev.end_ns[gpu].max() - ev.start_ns[gpu].min())


def test_text_start_is_skipped_not_read_as_zero(export):
    export.kernel(1_000_000, 1_500_000, corr=1, pid=1)
    export.kernel(1_600_000, 1_969_000, corr=2, pid=1)
    export.sql(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('abc', 1700000, 0, 1, 7, 3, ?, ?, ?, NULL, NULL)",
        (gpid(1), export.sid("k"), export.sid("k")),
    )
    export.sql(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1650000.5, 1700000, 0, 1, 7, 4, ?, ?, ?, NULL, NULL)",
        (gpid(1), export.sid("k"), export.sid("k")),
    )
    trace = load_nsys(export.close())
    assert len(rows_of(trace, Kind.KERNEL)) == 2
    assert span_ns(trace) == 969_000  # not 1.7 ms from a start read as 0
    assert trace.meta.skipped == {"start or end not an integer (kernel)": 2}


@pytest.mark.parametrize("start, end", [(-(2**63), 100), (-9 * 10**18, 9 * 10**18), (10, 2**63 - 1), (10, 9e18)])
def test_extreme_times_are_skipped_as_out_of_range(export, start, end):
    export.kernel(100, 200, corr=1, pid=1)
    export.sql(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, 3, ?, ?, ?, NULL, NULL)",
        (start, end, gpid(1), export.sid("k"), export.sid("k")),
    )
    trace = load_nsys(export.close())
    trace.events.validate()
    assert len(trace.events) == 1 and span_ns(trace) == 100
    (reason,) = trace.meta.skipped
    assert reason in ("timestamp out of range (kernel)", "start or end not an integer (kernel)")
    assert trace.meta.skipped[reason] == 1


def test_processes_pid_text_is_ignored(export):
    export.kernel(100, 200, corr=1, pid=7)
    export.process(7, "python")
    export.sql("INSERT INTO PROCESSES VALUES (1, 'abc', 'odd')")
    trace = load_nsys(export.close())
    assert trace.meta.processes == {7: "python"}


@pytest.mark.parametrize("value", [9e999, "", "abc", 2.5, b"\x00"])
def test_session_start_that_is_not_an_integer_gives_no_base_time(export, value):
    export.kernel(100, 200, corr=1, pid=7)
    export.sql("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT)")
    export.sql("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, 'x')", (value,))
    assert load_nsys(export.close()).meta.base_time_ns is None


def test_session_start_integer_still_gives_base_time(export):
    export.kernel(100, 200, corr=1, pid=7)
    export.sql("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT)")
    export.sql("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000123456789, 'x')")
    assert load_nsys(export.close()).meta.base_time_ns == 1700000000123456789


def test_deeply_nested_gpu_info_is_ignored(export):
    export.kernel(100, 200, corr=1, pid=7)
    export.sql(
        "CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, nameEnum INTEGER, value TEXT)"
    )
    export.sql("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, '', 'GpuInfo', 0, ?)", ("[" * 100_000 + "]" * 100_000,))
    trace = load_nsys(export.close())
    assert trace.meta.devices[0].name_source == "missing"


def test_no_global_pid_links_on_correlation_within_the_process(tmp_path):
    ex = Export(tmp_path / "nogpid.sqlite", schema=NO_GPID_SCHEMA)
    launch = ex.sid("cudaLaunchKernel_v7000")
    # process 10 launches correlation 1..3; process 20 launches 3 and 4: id 3 is ambiguous
    for corr, pid, t in [(1, 10, 0), (2, 10, 100), (3, 10, 200), (3, 20, 210), (4, 20, 300)]:
        ex.sql(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)",
            (t, t + 5, gtid(pid, pid + 1), corr, launch),
        )
    for corr, t in [(1, 50), (2, 150), (3, 250), (3, 260), (4, 350)]:
        ex.sql("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?)", (t, t + 20, corr, ex.sid("k")))
    trace = load_nsys(ex.close())
    ev = trace.events
    kernels = rows_of(trace, Kind.KERNEL)
    by_start = {int(ev.start_ns[k]): (int(ev.pid[k]), int(ev.link_key[k])) for k in kernels}
    assert by_start == {
        50: (10, gpid(10) >> 24),
        150: (10, gpid(10) >> 24),
        250: (NONE, NONE),
        260: (NONE, NONE),
        350: (20, gpid(20) >> 24),
    }
    assert trace.meta.extra["gpu_ops_process_from_correlation"] == 3
    assert trace.meta.extra["gpu_ops_without_process"] == 2
    links = link(trace)
    assert links.unlinked_gpu_ops == 2
    launches = {
        int(ev.start_ns[k]): int(ev.start_ns[links.launch_of[k]]) for k in kernels if links.launch_of[k] != NONE
    }
    assert launches == {50: 0, 150: 100, 350: 300}


def test_null_global_pid_column_also_links(export):
    export.api(0, 5, corr=9, pid=33, tid=34, name="cudaLaunchKernel_v7000")
    export.sql(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 30, 0, 1, 7, 9, NULL, ?, ?, NULL, NULL)",
        (export.sid("k"), export.sid("k")),
    )
    trace = load_nsys(export.close())
    (k,) = rows_of(trace, Kind.KERNEL)
    assert link(trace).launch_of[k] == int(np.flatnonzero(trace.events.kind == Kind.LAUNCH)[0])


def test_column_name_that_is_not_utf8_is_one_error(export):
    export.kernel(100, 200, corr=1, pid=7)
    export.sql("CREATE TABLE TARGET_INFO_GPU (id INTEGER, nameQZQ TEXT)")
    export.sql("INSERT INTO TARGET_INFO_GPU VALUES (0, 'H100')")
    path = export.close()
    data = open(path, "rb").read()
    assert data.count(b"nameQZQ") == 1
    open(path, "wb").write(data.replace(b"nameQZQ", b"name\x95ZQ"))  # a corrupt byte in the schema
    from hostgap.errors import HostgapError

    try:
        trace = load_nsys(path)
    except HostgapError as e:
        assert "not UTF-8" in str(e) or "SQLite" in str(e)
    else:
        trace.events.validate()
