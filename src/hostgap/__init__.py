"""hostgap: where every millisecond of an LLM decode step goes.

The Python API (docs/api.md): each command of the command line as one function with the
command's option names and defaults, returning a result object; importing hostgap imports
nothing heavy, each name loads its part on first use::

    import hostgap
    result = hostgap.analyze("trace.json.gz")
    result.verdict["label"], result.steps.to_pandas()

Errors the command line reports as one line are :class:`HostgapError` with the same message.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hostgap.errors import HostgapError
from hostgap.version import SCHEMA_VERSION, __version__

__all__ = [
    "SCHEMA_VERSION",
    "AdviseResult",
    "AdviseResults",
    "AttachResult",
    "CacheListing",
    "Comparison",
    "FleetWatch",
    "HostgapError",
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
    "__version__",
    "advise",
    "analyze",
    "attach",
    "attribution",
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

_API = frozenset(__all__) - {"SCHEMA_VERSION", "HostgapError", "__version__", "attribution"}

if TYPE_CHECKING:
    from hostgap.api import (
        AdviseResult,
        AdviseResults,
        AttachResult,
        CacheListing,
        Comparison,
        FleetWatch,
        KernelsResult,
        MeasureResult,
        MeasureResults,
        Prediction,
        PresetsResult,
        Report,
        Result,
        RulesResult,
        RunResult,
        RunsTable,
        StepsResult,
        Trace,
        TraceResult,
        TraceResults,
        TraceSetResult,
        Watch,
        advise,
        analyze,
        attach,
        cache,
        compare,
        kernels,
        load,
        measure,
        predict,
        presets,
        rules,
        run,
        runs,
        steps,
        watch,
        write_report,
    )
    from hostgap.model import attribution


def __getattr__(name: str):
    """The API's names, imported on first use (``import hostgap`` stays light)."""
    if name in _API:  # imported by name: the root stays below every layer (import-linter)
        value = getattr(importlib.import_module("hostgap.api"), name)
    elif name == "attribution":
        value = importlib.import_module("hostgap.model.attribution")
    else:
        raise AttributeError(f"module 'hostgap' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
