"""Nsight Systems SQLite loader: hand-built exports with exact expected rows, bad input,
and the two real exports in ../shared/traces/nsys (skipped when absent)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import TRACES, vendored_path
from hostgap.errors import HostgapError
from hostgap.events import NONE, CopyKind, Kind
from hostgap.readers import load_trace
from hostgap.readers.nsys import NO_CUDA_TABLES, api_base_name, classify_api, load_nsys

SHARED = TRACES / "nsys"
HW = 1 << 48  # nsys puts hardware/VM ids above the pid bits


def gpid(pid: int) -> int:
    return HW | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) | tid


SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
    globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL,
    graphNodeId INTEGER, graphId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
    eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
    returnValue INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    value INTEGER NOT NULL, bytes INTEGER NOT NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
    text TEXT, globalTid INTEGER, textId INTEGER, domainId INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
"""


class Export:
    """A tiny nsys export written row by row; ``path`` after ``close()``."""

    def __init__(self, path: Path, schema: str = SCHEMA):
        self.path = path
        self.con = sqlite3.connect(path)
        self.con.executescript(schema)
        self._ids: dict[str, int] = {}

    def sid(self, s: str) -> int:
        if s not in self._ids:
            self._ids[s] = 1000 + 7 * len(self._ids)  # sparse ids, as in real exports
            self.con.execute("INSERT INTO StringIds VALUES (?, ?)", (self._ids[s], s))
        return self._ids[s]

    def kernel(self, start, end, corr, pid, *, name="void k<int>(int)", short="k", device=0, stream=7, graph_node=None):
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (start, end, device, 1, stream, corr, gpid(pid), self.sid(name), self.sid(short), graph_node, None),
        )

    def api(self, start, end, corr, pid, tid, name, event_class=0):
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?)",
            (start, end, event_class, gtid(pid, tid), corr, self.sid(name), 0),
        )

    def memcpy(self, start, end, corr, pid, nbytes, copy_kind, device=0, stream=7):
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?)",
            (start, end, device, stream, corr, gpid(pid), nbytes, copy_kind),
        )

    def memset(self, start, end, corr, pid, nbytes, device=0, stream=7):
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,?,?,?,?,?)",
            (start, end, device, stream, corr, gpid(pid), 0, nbytes),
        )

    def nvtx(self, start, end, pid, tid, *, text=None, text_id=None, event_type=59):
        self.con.execute(
            "INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?)",
            (start, end, event_type, text, gtid(pid, tid), text_id, 0),
        )

    def process(self, pid, name):
        self.con.execute("INSERT INTO PROCESSES VALUES (?,?,?)", (gpid(pid), pid, name))

    def sql(self, statement: str, *args):
        self.con.execute(statement, *args)

    def close(self) -> str:
        self.con.commit()
        self.con.close()
        return str(self.path)


@pytest.fixture
def export(tmp_path):
    return Export(tmp_path / "mini.sqlite")


def rows_of(trace, kind):
    return np.flatnonzero(trace.events.kind == kind)


# ---------------------------------------------------------------- API names


@pytest.mark.parametrize(
    "name, kind",
    [
        ("cudaLaunchKernel_v7000", Kind.LAUNCH),
        ("cudaLaunchKernel", Kind.LAUNCH),
        ("cudaLaunchKernelExC_v11060", Kind.LAUNCH),
        ("cudaLaunchCooperativeKernel_v9000", Kind.LAUNCH),
        ("cuLaunchKernel", Kind.LAUNCH),
        ("cuLaunchKernel_ptsz", Kind.LAUNCH),
        ("cuLaunchKernelEx", Kind.LAUNCH),
        ("hipLaunchKernel", Kind.LAUNCH),
        ("hipExtModuleLaunchKernel", Kind.LAUNCH),
        ("hipModuleLaunchKernel", Kind.LAUNCH),
        ("cudaGraphLaunch_v10000", Kind.GRAPH_LAUNCH),
        ("cudaGraphLaunch_ptsz_v10000", Kind.GRAPH_LAUNCH),
        ("cuGraphLaunch", Kind.GRAPH_LAUNCH),
        ("hipGraphLaunch", Kind.GRAPH_LAUNCH),
        ("cudaGraphInstantiate_v12000", Kind.RUNTIME),
        ("cudaLaunchHostFunc_v10000", Kind.RUNTIME),
        ("cudaMemcpyAsync_v3020", Kind.RUNTIME),
        ("cudaStreamSynchronize_v3020", Kind.RUNTIME),
        ("cuKernelGetAttribute", Kind.RUNTIME),
    ],
)
def test_classify_api(name, kind):
    assert classify_api(name) is kind


@pytest.mark.parametrize(
    "name, base",
    [
        ("cudaLaunchKernel_v7000", "cudaLaunchKernel"),
        ("cuLaunchKernel_ptsz", "cuLaunchKernel"),
        ("cudaMemcpyAsync_ptsz_v7000", "cudaMemcpyAsync"),
        ("cudaStreamGetCaptureInfo_v2_v11030", "cudaStreamGetCaptureInfo_v2"),
        ("cuMemAlloc_v2", "cuMemAlloc_v2"),
        ("cudaLaunchKernel", "cudaLaunchKernel"),
    ],
)
def test_api_base_name(name, base):
    assert api_base_name(name) == base


# ---------------------------------------------------------------- linking and columns


def test_launch_with_version_suffix_links_to_its_kernel(export):
    t0 = 1_779_630_014_975_716_426  # > 2**53: a float round trip would change it
    export.api(t0, t0 + 4_321, corr=7, pid=100, tid=101, name="cudaLaunchKernel_v7000")
    export.kernel(
        t0 + 9_000, t0 + 9_001, corr=7, pid=100, name="void gemm<float>(float*)", short="gemm", device=1, stream=13
    )
    export.process(100, "python3")
    trace = load_nsys(export.close())
    ev = trace.events
    (launch,) = rows_of(trace, Kind.LAUNCH)
    (kernel,) = rows_of(trace, Kind.KERNEL)
    assert trace.name_of(launch) == "cudaLaunchKernel"
    assert trace.name_of(kernel) == "void gemm<float>(float*)"
    assert (ev.start_ns[launch], ev.dur_ns[launch]) == (t0, 4_321)
    assert (ev.start_ns[kernel], ev.dur_ns[kernel]) == (t0 + 9_000, 1)
    assert (ev.link_key[launch], ev.correlation[launch]) == (ev.link_key[kernel], ev.correlation[kernel])
    assert ev.link_key[launch] == gpid(100) >> 24 and ev.correlation[launch] == 7
    assert (ev.pid[launch], ev.tid[launch], ev.device[launch], ev.stream[launch]) == (100, 101, NONE, NONE)
    assert (ev.pid[kernel], ev.tid[kernel], ev.device[kernel], ev.stream[kernel]) == (100, 13, 1, 13)
    assert np.all(ev.external_id == NONE)
    assert trace.meta.format == "nsys"
    assert trace.meta.processes == {100: "python3"}
    ev.validate()


def test_graph_launch_shares_its_correlation_with_every_replayed_kernel(export):
    export.api(100, 120, corr=9, pid=100, tid=100, name="cudaGraphLaunch_v10000")
    for i in range(3):
        export.kernel(200 + 10 * i, 205 + 10 * i, corr=9, pid=100, name=f"void node{i}()", graph_node=50 + i)
    export.api(300, 310, corr=10, pid=100, tid=100, name="cudaLaunchKernel_v7000")
    export.kernel(400, 450, corr=10, pid=100)
    trace = load_nsys(export.close())
    ev = trace.events
    (graph,) = rows_of(trace, Kind.GRAPH_LAUNCH)
    assert trace.name_of(graph) == "cudaGraphLaunch"
    kernels = rows_of(trace, Kind.KERNEL)
    same = kernels[(ev.link_key[kernels] == ev.link_key[graph]) & (ev.correlation[kernels] == ev.correlation[graph])]
    assert trace.names_of(same) == ["void node0()", "void node1()", "void node2()"]
    assert trace.meta.extra["graph_kernels"] == 3


def test_two_processes_reusing_a_correlation_id_do_not_cross_link(export):
    export.api(100, 110, corr=5, pid=100, tid=100, name="cudaLaunchKernel_v7000")
    export.api(105, 115, corr=5, pid=200, tid=201, name="cudaLaunchKernel_v7000")
    export.kernel(150, 160, corr=5, pid=100, device=0, stream=7)
    export.kernel(150, 170, corr=5, pid=200, device=1, stream=7)
    trace = load_nsys(export.close())
    ev = trace.events
    launches, kernels = rows_of(trace, Kind.LAUNCH), rows_of(trace, Kind.KERNEL)
    launch_pairs = {(int(ev.link_key[i]), int(ev.correlation[i])): int(ev.pid[i]) for i in launches}
    kernel_pairs = [((int(ev.link_key[i]), int(ev.correlation[i])), int(ev.pid[i])) for i in kernels]
    assert len(launch_pairs) == 2  # correlation 5 twice, distinct scopes
    assert set(ev.correlation[kernels]) == {5}  # the bare correlation id would match both
    for pair, pid in kernel_pairs:
        assert launch_pairs[pair] == pid
    assert {int(ev.device[i]): int(ev.pid[i]) for i in kernels} == {0: 100, 1: 200}


def test_memcpy_bytes_and_copy_kinds_and_memset(export):
    cases = [
        (1, CopyKind.H2D, "Memcpy HtoD"),
        (2, CopyKind.D2H, "Memcpy DtoH"),
        (8, CopyKind.D2D, "Memcpy DtoD"),
        (10, CopyKind.P2P, "Memcpy PtoP"),
        (0, CopyKind.OTHER, "Memcpy (unknown)"),
    ]
    for i, (nsys_kind, _, _) in enumerate(cases):
        export.memcpy(1000 * i, 1000 * i + 100 + i, corr=i, pid=100, nbytes=4096 * (i + 1), copy_kind=nsys_kind)
    export.memset(9000, 9050, corr=99, pid=100, nbytes=768, device=1, stream=15)
    trace = load_nsys(export.close())
    ev = trace.events
    copies = rows_of(trace, Kind.MEMCPY)
    assert [int(ev.copy_kind[i]) for i in copies] == [int(k) for _, k, _ in cases]
    assert [int(ev.bytes[i]) for i in copies] == [4096 * (i + 1) for i in range(len(cases))]
    assert [int(ev.dur_ns[i]) for i in copies] == [100 + i for i in range(len(cases))]
    assert trace.names_of(copies) == [n for _, _, n in cases]
    (memset,) = rows_of(trace, Kind.MEMSET)
    assert (ev.bytes[memset], ev.copy_kind[memset], ev.device[memset], ev.stream[memset]) == (
        768,
        CopyKind.OTHER,
        1,
        15,
    )
    assert trace.name_of(memset) == "Memset"
    assert np.all(ev.bytes[rows_of(trace, Kind.KERNEL)] == 0)


def test_memory_kinds_name_copies_like_the_pytorch_profiler(export):
    export.sql("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY ADD COLUMN srcKind INTEGER")
    export.sql("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY ADD COLUMN dstKind INTEGER")
    export.sql("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMSET ADD COLUMN memKind INTEGER")
    export.sql("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (0, 10, 0, 7, 1, ?, 64, 1, 0, 2)", (gpid(100),))
    export.sql("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (20, 30, 0, 7, 2, ?, 64, 2, 2, 1)", (gpid(100),))
    export.sql("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (40, 50, 0, 7, 3, ?, 64, 1, NULL, NULL)", (gpid(100),))
    export.sql("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (60, 70, 0, 7, 4, ?, 0, 8, 2)", (gpid(100),))
    trace = load_nsys(export.close())
    assert trace.names_of(np.arange(4)) == [
        "Memcpy HtoD (Pageable -> Device)",
        "Memcpy DtoH (Device -> Pinned)",
        "Memcpy HtoD",
        "Memset (Device)",
    ]
    assert trace.events.copy_kind.tolist() == [CopyKind.H2D, CopyKind.D2H, CopyKind.H2D, CopyKind.OTHER]


def test_nvtx_ranges_from_text_and_text_id_marks_skipped(export):
    step = export.sid("decode_step")
    export.nvtx(100, 900, pid=100, tid=101, text_id=step)  # push/pop range, registered string
    export.nvtx(200, 300, pid=100, tid=101, text="aten::mm, op_id = 7")  # push/pop, inline text
    export.nvtx(400, 800, pid=100, tid=102, text="request 3", event_type=60)  # start/end range
    export.nvtx(500, None, pid=100, tid=101, text="a mark", event_type=34)  # mark
    export.nvtx(600, None, pid=100, tid=101, text="never closed")  # range without end
    export.nvtx(700, 650, pid=100, tid=101, text="backwards")  # negative duration
    trace = load_nsys(export.close())
    ev = trace.events
    ranges = rows_of(trace, Kind.ANNOTATION)
    assert trace.names_of(ranges) == ["decode_step", "aten::mm, op_id = 7", "request 3"]
    assert [int(ev.dur_ns[i]) for i in ranges] == [800, 100, 400]
    assert [int(ev.tid[i]) for i in ranges] == [101, 101, 102]
    assert np.all(ev.device[ranges] == NONE) and np.all(ev.pid[ranges] == 100)
    assert trace.meta.skipped == {"nvtx mark": 1, "nvtx range without end": 1, "negative duration (nvtx)": 1}


def test_negative_durations_are_skipped_and_counted(export):
    export.kernel(100, 50, corr=1, pid=100)
    export.kernel(200, 250, corr=2, pid=100)
    export.api(10, 5, corr=1, pid=100, tid=100, name="cudaLaunchKernel_v7000")
    export.memcpy(300, 299, corr=3, pid=100, nbytes=8, copy_kind=1)
    trace = load_nsys(export.close())
    assert len(trace.events) == 1 and trace.events.kind[0] == Kind.KERNEL
    assert trace.meta.skipped == {
        "negative duration (kernel)": 1,
        "negative duration (runtime)": 1,
        "negative duration (memcpy)": 1,
    }


def test_driver_and_library_tables(export):
    export.sql(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER (start INTEGER, end INTEGER, eventClass INTEGER,"
        " globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER)"
    )
    export.sql(
        "CREATE TABLE CUBLAS_EVENTS (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER, nameId INTEGER)"
    )
    export.sql(
        "INSERT INTO CUPTI_ACTIVITY_KIND_DRIVER VALUES (10, 30, 1, ?, 4, ?, 0)",
        (gtid(100, 100), export.sid("cuLaunchKernel_ptsz")),
    )
    export.sql("INSERT INTO CUBLAS_EVENTS VALUES (5, 40, 0, ?, ?)", (gtid(100, 100), export.sid("cublasGemmEx")))
    export.kernel(50, 60, corr=4, pid=100)
    trace = load_nsys(export.close())
    ev = trace.events
    (launch,) = rows_of(trace, Kind.LAUNCH)
    (lib,) = rows_of(trace, Kind.LIBRARY)
    assert trace.name_of(launch) == "cuLaunchKernel" and ev.correlation[launch] == 4
    assert trace.name_of(lib) == "cublasGemmEx" and ev.dur_ns[lib] == 35 and ev.correlation[lib] == NONE
    assert "CUPTI_ACTIVITY_KIND_DRIVER" in trace.meta.extra["tables_read"]


def test_minimal_old_schema_loads(tmp_path):
    """Older exports: no demangledName, no graph or globalPid columns, NVTX without textId."""
    ex = Export(
        tmp_path / "old.sqlite",
        schema="""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER,
            streamId INTEGER, correlationId INTEGER, shortName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER,
            correlationId INTEGER, nameId INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER);
    """,
    )
    ex.sql("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (100, 150, 0, 7, 3, ?)", (ex.sid("gemv"),))
    ex.sql(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (10, 20, ?, 3, ?)",
        (gtid(42, 43), ex.sid("cudaLaunchKernel_v7000")),
    )
    ex.sql("INSERT INTO NVTX_EVENTS VALUES (5, 200, 59, 'step', ?)", (gtid(42, 43),))
    trace = load_nsys(ex.close())
    ev = trace.events
    (kernel,) = rows_of(trace, Kind.KERNEL)
    assert trace.name_of(kernel) == "gemv"
    # no globalPid on the kernel table: the process comes from the launch with correlation id 3
    assert (ev.pid[kernel], ev.link_key[kernel], ev.correlation[kernel]) == (42, gpid(42) >> 24, 3)
    assert trace.meta.extra["gpu_ops_process_from_correlation"] == 1
    assert trace.names_of(rows_of(trace, Kind.ANNOTATION)) == ["step"]
    assert trace.meta.extra["graph_kernels"] == 0


def test_nulls_and_odd_values_do_not_stop_the_load(export):
    export.sql(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 20, 0, 1, 7, NULL, NULL, ?, ?, NULL, NULL)",
        (export.sid("k"), export.sid("k")),
    )
    export.sql(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (30, 40, 0, 1, 7, 'n/a', ?, 999999, 999998, NULL, NULL)",
        (gpid(100),),
    )  # text in an integer column; name ids missing from StringIds
    export.sql("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1, 2, 0, NULL, NULL, 424242, 0)")
    export.sql("INSERT INTO NVTX_EVENTS VALUES (0, 5, 59, NULL, NULL, NULL, 0)")
    trace = load_nsys(export.close())
    ev = trace.events
    kernels = rows_of(trace, Kind.KERNEL)
    assert trace.names_of(kernels) == ["k", "kernel (string id 999999)"]
    # text in an integer column is read as unknown and counted, never as 0
    assert ev.correlation[kernels].tolist() == [NONE, NONE] and ev.link_key[kernels[0]] == NONE
    assert trace.meta.skipped["non-integer id read as unknown (kernel) (event kept)"] == 1
    (call,) = rows_of(trace, Kind.RUNTIME)
    assert trace.name_of(call) == "runtime call (string id 424242)" and ev.pid[call] == NONE
    assert trace.names_of(rows_of(trace, Kind.ANNOTATION)) == ["NVTX range"]
    ev.validate()


# ---------------------------------------------------------------- devices and metadata


def test_device_name_missing_falls_back_clearly(export):
    export.kernel(0, 10, corr=1, pid=100, device=0)
    export.kernel(0, 10, corr=2, pid=100, device=3)
    trace = load_nsys(export.close())
    assert [(d.index, d.name, d.name_source) for d in trace.meta.devices] == [
        (0, "GPU 0 (name not in export)", "missing"),
        (3, "GPU 3 (name not in export)", "missing"),
    ]


def test_device_names_from_target_info_gpu(export):
    export.sql(
        "CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, totalMemory INTEGER, smCount INTEGER,"
        " computeMajor INTEGER, computeMinor INTEGER)"
    )
    export.sql("INSERT INTO TARGET_INFO_GPU VALUES (0, 'NVIDIA H100 80GB HBM3', 85520809984, 132, 9, 0)")
    export.kernel(0, 10, corr=1, pid=100, device=0)
    export.kernel(0, 10, corr=2, pid=100, device=1)
    trace = load_nsys(export.close())
    h100, other = trace.meta.devices
    assert (h100.name, h100.name_source, h100.memory_bytes, h100.sm_count, h100.compute_capability) == (
        "NVIDIA H100 80GB HBM3",
        "trace",
        85520809984,
        132,
        "9.0",
    )
    assert (other.index, other.name_source) == (1, "missing")


def test_session_start_gives_base_time(export):
    export.sql(
        "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT,"
        " systemClockNs INTEGER)"
    )
    export.sql("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1779630014975716426, '', '', 35255823190)")
    export.sql("CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)")
    export.sql("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2026.2.1.210')")
    export.kernel(0, 10, corr=1, pid=100)
    path = export.close()
    trace = load_nsys(path)
    assert trace.meta.base_time_ns == 1779630014975716426
    assert trace.meta.extra["nsys_version"] == "2026.2.1.210"
    con = sqlite3.connect(path)
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_TIME_NORMALIZE', 'true')")
    con.commit()
    con.close()
    assert load_nsys(path).meta.base_time_ns is None


def test_file_is_not_modified_and_readonly_file_loads(export):
    export.api(0, 5, corr=1, pid=100, tid=100, name="cudaLaunchKernel_v7000")
    export.kernel(10, 20, corr=1, pid=100)
    path = export.close()
    os.chmod(path, 0o444)
    before = (hashlib.sha256(Path(path).read_bytes()).hexdigest(), os.stat(path).st_mtime_ns)
    listing = sorted(os.listdir(os.path.dirname(path)))
    assert len(load_nsys(path).events) == 2
    assert (hashlib.sha256(Path(path).read_bytes()).hexdigest(), os.stat(path).st_mtime_ns) == before
    assert sorted(os.listdir(os.path.dirname(path))) == listing  # no -journal/-wal/-shm left


def test_empty_tables_give_an_empty_trace(export):
    trace = load_nsys(export.close())
    assert len(trace.events) == 0 and trace.meta.devices == () and not trace.has_device_activity


# ---------------------------------------------------------------- bad input


def test_sqlite_without_cuda_tables_is_rejected(tmp_path):
    path = tmp_path / "notes.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (id INTEGER, body TEXT)")
    con.execute("INSERT INTO notes VALUES (1, 'hello')")
    con.commit()
    con.close()
    with pytest.raises(HostgapError) as e:
        load_nsys(str(path))
    assert e.value.source == str(path) and e.value.problem == NO_CUDA_TABLES
    with pytest.raises(HostgapError, match="not an Nsight Systems export"):
        load_trace(str(path))  # through the format dispatcher


def test_empty_sqlite_files_are_rejected(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(HostgapError, match="not an Nsight Systems export"):
        load_nsys(str(empty))
    no_tables = tmp_path / "no_tables.sqlite"
    con = sqlite3.connect(no_tables)
    con.execute("PRAGMA user_version = 1")  # writes a valid header and nothing else
    con.commit()
    con.close()
    assert no_tables.read_bytes().startswith(b"SQLite format 3\x00")
    with pytest.raises(HostgapError, match="not an Nsight Systems export"):
        load_trace(str(no_tables))


def test_corrupt_sqlite_gives_one_line_error(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    with pytest.raises(HostgapError) as e:
        load_trace(str(path))
    assert "\n" not in str(e.value) and e.value.source == str(path)


def test_missing_file_is_a_hostgap_error(tmp_path):
    with pytest.raises(HostgapError, match="no such file"):
        load_nsys(str(tmp_path / "absent.sqlite"))


# ---------------------------------------------------------------- the real exports


REAL = {
    "h100_2gpu_1s.sqlite": {"kernels": 3442, "runtime": 5796, "memcpy": 904, "nvtx": 16782},
    "h100_2gpu_mfu_before.sqlite": {},
    # the vendored copy (tests/data/corpus: its first 50 ms), read with or without the corpus
    "vendored:h100_2gpu_1s.sqlite": {"kernels": 206, "runtime": 362, "memcpy": 56, "nvtx": 934},
}


def _sql_counts(path: Path) -> dict[str, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    counts = {
        "kernels": one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        "runtime": one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        + (one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_DRIVER") if "CUPTI_ACTIVITY_KIND_DRIVER" in tables else 0),
        "memcpy": one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
        "memset": one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET"),
        "nvtx": one("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND end >= start"),
        "devices": one("SELECT count(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        "linked_kernels": one(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r"
            " WHERE r.correlationId = k.correlationId AND r.globalTid / 16777216 = k.globalPid / 16777216)"
        ),
        "first_kernel_ns": one("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        "kernel_sum_ns": one("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
        "memcpy_bytes": one("SELECT sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
    }
    con.close()
    return counts


@pytest.fixture(scope="module", params=sorted(REAL))
def real(request):
    name = request.param
    path = vendored_path(f"nsys/{name.split(':')[1]}") if name.startswith("vendored:") else SHARED / name
    if not path.exists():
        pytest.skip(f"{path} not present (the shared trace corpus is not checked out beside the project)")
    t0 = time.perf_counter()
    trace = load_trace(str(path))
    load_s = time.perf_counter() - t0
    print(f"\n{request.param}: loaded {len(trace.events)} events in {load_s * 1000:.0f} ms")
    return request.param, trace, _sql_counts(path)


def test_real_export_counts_match_sql(real):
    name, trace, sql = real
    ev = trace.events
    count = lambda *kinds: int(ev.of_kind(*kinds).sum())  # noqa: E731
    got = {
        "kernels": count(Kind.KERNEL),
        "runtime": count(Kind.LAUNCH, Kind.GRAPH_LAUNCH, Kind.RUNTIME),
        "memcpy": count(Kind.MEMCPY),
        "memset": count(Kind.MEMSET),
        "nvtx": count(Kind.ANNOTATION),
        "devices": len(trace.meta.devices),
    }
    assert got == {k: sql[k] for k in got}
    for key, expected in REAL[name].items():  # the corpus README's published counts
        assert got[key] == expected, key
    assert got["devices"] == 2
    assert trace.meta.skipped == {}
    ev.validate()


def test_real_export_exact_times_bytes_and_links(real):
    _, trace, sql = real
    ev = trace.events
    kernels = ev.of_kind(Kind.KERNEL)
    assert int(ev.start_ns[kernels].min()) == sql["first_kernel_ns"]
    assert int(ev.dur_ns[kernels].sum()) == sql["kernel_sum_ns"]
    assert int(ev.bytes[ev.of_kind(Kind.MEMCPY)].sum()) == sql["memcpy_bytes"]
    api = ev.of_kind(Kind.LAUNCH, Kind.GRAPH_LAUNCH, Kind.RUNTIME)
    api_pairs = set(zip(ev.link_key[api].tolist(), ev.correlation[api].tolist()))
    linked = sum(pair in api_pairs for pair in zip(ev.link_key[kernels].tolist(), ev.correlation[kernels].tolist()))
    assert linked == sql["linked_kernels"]
    assert all(d.name_source == "missing" for d in trace.meta.devices)  # these exports carry no GPU names
    assert set(trace.meta.processes.values()) == {"python3"} and len(trace.meta.processes) == 2
    assert trace.meta.base_time_ns is not None and trace.meta.extra["nsys_version"]
