"""NVTX event types from the export's own ENUM_NSYS_EVENT_TYPE table (load/nsys.py
``_nvtx_types``): ids named ``Nvtx...Range`` are ranges, ``Nvtx...Mark`` marks, on top of the
built-in ids; a table without a ``name`` column is not read (mutation audit: the check's
``and`` turned ``or`` queried the missing column and no test noticed)."""

from __future__ import annotations

import pytest

from hostgap.events import Kind
from hostgap.readers.nsys import load_nsys
from test_load_nsys import Export, rows_of


@pytest.fixture
def export(tmp_path):
    return Export(tmp_path / "enum.sqlite")


def test_the_exports_enum_names_its_range_and_mark_ids(export):
    export.sql("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, name TEXT, label TEXT)")
    for row in [
        (77, "NvtxPushPopRange"),  # a range under another id
        (78, "NvtxtMark"),  # a mark
        (79, "NvtxDomainCreate"),  # NVTX, neither
        (80, "CudaKernel"),  # not NVTX
        (None, "NvtxStartEndRange"),  # no id: ignored
        (81, None),  # no name: ignored
        ("x", "NvtxStartEndRange"),  # an id that is no integer: ignored
    ]:
        export.sql("INSERT INTO ENUM_NSYS_EVENT_TYPE (id, name) VALUES (?, ?)", row)
    export.nvtx(100, 200, pid=100, tid=101, text="by the enum", event_type=77)
    export.nvtx(300, 400, pid=100, tid=101, text="built in", event_type=59)
    for etype in (78, 79, 80, 81):
        export.nvtx(500, 600, pid=100, tid=101, text=f"type {etype}", event_type=etype)
    trace = load_nsys(export.close())
    assert trace.names_of(rows_of(trace, Kind.ANNOTATION)) == ["by the enum", "built in"]
    assert trace.meta.skipped == {"nvtx mark": 1, "nvtx record that is not a range": 3}


def test_an_enum_table_without_names_leaves_the_built_in_ids(export):
    export.sql("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, label TEXT)")
    export.sql("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (77, 'NvtxPushPopRange')")
    export.nvtx(100, 200, pid=100, tid=101, text="built in", event_type=59)
    export.nvtx(300, 400, pid=100, tid=101, text="unknown id", event_type=77)
    export.nvtx(500, None, pid=100, tid=101, text="a mark", event_type=34)
    trace = load_nsys(export.close())
    assert trace.names_of(rows_of(trace, Kind.ANNOTATION)) == ["built in"]
    assert trace.meta.skipped == {"nvtx mark": 1, "nvtx record that is not a range": 1}
