"""hostgap's Python API: each capability of the command line as one function with the command's
option names and defaults, returning a result whose ``to_dict()`` / ``to_json()`` are what the
command prints with ``--json``, whose tables are Arrow (``.to_pandas()`` with pandas installed),
which prints the command's terminal output (``print()``) and shows itself in a notebook.
``import hostgap`` exposes the same names (docs/api.md)."""

from hostgap.api._advise import AdviseResult, AdviseResults, advise
from hostgap.api._cache import CacheListing, cache
from hostgap.api._fleet import FleetWatch, RulesResult, rules
from hostgap.api._measure import MeasureResult, MeasureResults, PresetsResult, RunResult, measure, presets
from hostgap.api._models import Prediction, predict
from hostgap.api._results import Result
from hostgap.api._runs import Comparison, Report, RunsTable, compare, run, runs, write_report
from hostgap.api._servers import AttachResult, Watch, attach, watch
from hostgap.api._traces import (
    KernelsResult,
    StepsResult,
    Trace,
    TraceResult,
    TraceResults,
    TraceSetResult,
    analyze,
    kernels,
    load,
    steps,
)
from hostgap.api._traces import (
    _reporting_loads as _reporting_loads,  # the command line's progress bar (private)
)

__all__ = [
    "AdviseResult",
    "AdviseResults",
    "AttachResult",
    "CacheListing",
    "Comparison",
    "FleetWatch",
    "KernelsResult",
    "MeasureResult",
    "MeasureResults",
    "Prediction",
    "PresetsResult",
    "Report",
    "Result",
    "RunResult",
    "RulesResult",
    "RunsTable",
    "StepsResult",
    "Trace",
    "TraceResult",
    "TraceResults",
    "TraceSetResult",
    "Watch",
    "advise",
    "analyze",
    "attach",
    "cache",
    "compare",
    "kernels",
    "load",
    "measure",
    "predict",
    "presets",
    "rules",
    "run",
    "runs",
    "steps",
    "watch",
    "write_report",
]
