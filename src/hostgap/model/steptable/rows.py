"""The in-memory form of a STEPS table (:mod:`hostgap.model.steptable.files` reads and writes the
files): :class:`Steps`, one row per engine step with the per-step sums the attribution model
needs (Σp, Σc, Σp², |B|, Σp·c) and its measured times, and :class:`Requests`, the per-request
(p, c) grouped by step where the input has them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Requests:
    """Per-request composition, grouped by step: rows ``offsets[k]:offsets[k+1]`` are step k's."""

    offsets: np.ndarray  # int64, n_steps + 1
    request: np.ndarray  # object (str ids, as given)
    p: np.ndarray  # float64 tokens processed this step (q)
    c: np.ndarray  # float64 KV tokens read (s = cached + scheduled)
    prefill: np.ndarray  # bool: phase == "prefill"

    @property
    def step_index(self) -> np.ndarray:
        """Step index (into :class:`Steps`) of every request row."""
        return np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))


@dataclass(frozen=True)
class Steps:
    """One row per step. Times in ns as float64 (NaN = not measured)."""

    sources: tuple[str, ...]
    source_idx: np.ndarray  # int32 into ``sources``
    step: np.ndarray  # int64 step id, unique within a source
    wall_ns: np.ndarray
    gpu_active_ns: np.ndarray
    host_exposed_ns: np.ndarray
    host_wait_ns: np.ndarray
    queued: np.ndarray  # bool: host ran ahead, wall - gpu_active is not host time
    n_requests: np.ndarray  # float64 |B|
    n_prefill: np.ndarray  # float64 context (prefill) requests
    sum_p: np.ndarray
    sum_c: np.ndarray
    sum_pp: np.ndarray
    sum_pc: np.ndarray  # NaN where the input lacks Σq·s
    requests: Requests | None = None
    origin: str = ""
    notes: tuple[str, ...] = ()  # what reading left out, for the user

    def __len__(self) -> int:
        return len(self.step)

    @property
    def is_prefill(self) -> np.ndarray:
        """Prefill-containing steps: a context request, or any request processing > 1 token."""
        return (self.n_prefill > 0) | (self.sum_p > self.n_requests + 0.5)

    def subset(self, mask: np.ndarray) -> Steps:
        """The steps where ``mask`` is true (requests follow their steps)."""
        idx = np.flatnonzero(mask)
        cols = {f: getattr(self, f)[idx] for f in STEP_ARRAYS}
        req = None
        if self.requests is not None:
            r = self.requests
            counts = np.diff(r.offsets)[idx]
            keep = np.repeat(mask, np.diff(r.offsets)).astype(bool)
            req = Requests(
                np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                r.request[keep],
                r.p[keep],
                r.c[keep],
                r.prefill[keep],
            )
        return Steps(sources=self.sources, requests=req, origin=self.origin, notes=self.notes, **cols)

    def data_sha256(self) -> str:
        """Hash of the content (not the file): the same steps as CSV or Parquet hash alike."""
        h = hashlib.sha256()
        h.update("\n".join(self.sources).encode())
        for f in STEP_ARRAYS:
            h.update(np.ascontiguousarray(getattr(self, f)).tobytes())
        if self.requests is not None:
            for a in (self.requests.offsets, self.requests.p, self.requests.c):
                h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()


STEP_ARRAYS = (
    "source_idx",
    "step",
    "wall_ns",
    "gpu_active_ns",
    "host_exposed_ns",
    "host_wait_ns",
    "queued",
    "n_requests",
    "n_prefill",
    "sum_p",
    "sum_c",
    "sum_pp",
    "sum_pc",
)
"""The per-step array fields of :class:`Steps`, in declaration order (what ``subset`` and the
content hash walk over)."""
