"""Parallel execution over independent items: a local process pool, or Ray tasks.

The lowest layer but one (it imports only :mod:`hostgap.errors`): it knows nothing of what it
runs. Trace sets (:mod:`hostgap.analysis.traceset`) map the analysis of one file over the files of
a set with it; the measurement sweep (:mod:`hostgap.capture.protocol.ray_backend`) runs its cells as Ray
tasks on a cluster joined with :func:`connect`.
"""

from __future__ import annotations

from hostgap.parallel.pool import map_processes
from hostgap.parallel.ray_tasks import LOCAL_OBJECT_STORE_BYTES, connect, map_tasks

__all__ = ["LOCAL_OBJECT_STORE_BYTES", "connect", "map_processes", "map_tasks"]
