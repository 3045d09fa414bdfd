"""A small builder for hand-made step timelines (Kineto-style event dicts).

Times are integer **µs** in the builder (Kineto's unit); the analysis works in ns, so an exact
answer of 7 µs is ``7 * US`` ns. One host process/thread and one device/stream by default::

    t = Timeline()
    t.annotation("ProfilerStep#1", 0, 100)
    with_op = t.op("aten::linear", 2, 20)
    t.launch_kernel(5, 3, "gemm", 30, 10)        # cudaLaunchKernel [5, 8] -> gemm [30, 40]
    t.graph_launch(50, 4, [("k", 60, 5), ("k", 66, 5)])
    trace = t.load(tmp_dir)

Every launch gets a fresh correlation id; :meth:`Timeline.load` writes the JSON next to the
other micro traces of the test and reads it back with hostgap's own loader, so the tests see
exactly what a user's trace would give.
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from pathlib import Path

from hostgap.readers import load_trace

US = 1000
HOST_PID = 100
HOST_TID = 1
DEVICE = 0
STREAM = 7

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
H200 = [{"id": 0, "name": "NVIDIA H200"}]
A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]


def _x(cat, name, ts, dur, pid, tid, **args) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {k: v for k, v in args.items() if v is not None},
    }


class Timeline:
    """Accumulates events; every method returns the event (or correlation id) it added."""

    def __init__(
        self,
        *,
        pid: int = HOST_PID,
        tid: int = HOST_TID,
        device: int = DEVICE,
        stream: int = STREAM,
        props: list | None = None,
    ):
        self.pid, self.tid, self.device, self.stream = pid, tid, device, stream
        self.props = props
        self.events: list[dict] = []
        self._corr = itertools.count(1)

    # -- host side -------------------------------------------------------------------

    def _add(self, ev: dict) -> dict:
        self.events.append(ev)
        return ev

    def annotation(self, name: str, ts, dur, *, tid: int | None = None) -> dict:
        """A host-side range (record_function, ``ProfilerStep#N``, vLLM/SGLang markers)."""
        return self._add(_x("user_annotation", name, ts, dur, self.pid, tid or self.tid))

    def gpu_annotation(self, name: str, ts, dur) -> dict:
        return self._add(
            _x("gpu_user_annotation", name, ts, dur, self.device, self.stream, device=self.device, stream=self.stream)
        )

    def op(self, name: str, ts, dur, *, tid: int | None = None) -> dict:
        """A framework op (``cpu_op``)."""
        return self._add(_x("cpu_op", name, ts, dur, self.pid, tid or self.tid))

    def frame(self, name: str, ts, dur, *, tid: int | None = None) -> dict:
        """A Python frame (``python_function``)."""
        return self._add(_x("python_function", name, ts, dur, self.pid, tid or self.tid))

    def runtime(self, name: str, ts, dur, *, corr: int | None = None, tid: int | None = None) -> dict:
        """Any runtime/driver API call (``cudaStreamSynchronize``, ``cudaMemcpyAsync`` ...)."""
        return self._add(_x("cuda_runtime", name, ts, dur, self.pid, tid or self.tid, correlation=corr))

    # -- launches and GPU work --------------------------------------------------------

    def kernel(
        self, name: str, ts, dur, *, corr: int | None = None, stream: int | None = None, device: int | None = None
    ) -> dict:
        d = self.device if device is None else device
        s = self.stream if stream is None else stream
        return self._add(_x("kernel", name, ts, dur, d, s, device=d, stream=s, correlation=corr))

    def launch_kernel(
        self,
        ts,
        dur,
        kernel: str,
        k_ts,
        k_dur,
        *,
        api: str = "cudaLaunchKernel",
        stream: int | None = None,
        tid: int | None = None,
    ) -> int:
        """A launch call [ts, ts+dur] and the kernel it enqueued [k_ts, k_ts+k_dur]."""
        corr = next(self._corr)
        self.runtime(api, ts, dur, corr=corr, tid=tid)
        self.kernel(kernel, k_ts, k_dur, corr=corr, stream=stream)
        return corr

    def graph_launch(
        self,
        ts,
        dur,
        kernels: list[tuple[str, float, float]],
        *,
        api: str = "cudaGraphLaunch",
        stream: int | None = None,
        tid: int | None = None,
    ) -> int:
        """One graph launch replaying ``kernels`` [(name, ts, dur), ...] under one correlation id."""
        corr = next(self._corr)
        self.runtime(api, ts, dur, corr=corr, tid=tid)
        for name, k_ts, k_dur in kernels:
            self.kernel(name, k_ts, k_dur, corr=corr, stream=stream)
        return corr

    def copy(
        self,
        ts,
        dur,
        c_ts,
        c_dur,
        nbytes: int,
        *,
        direction: str = "HtoD",
        api: str = "cudaMemcpyAsync",
        stream: int | None = None,
        tid: int | None = None,
    ) -> int:
        """A copy call and the GPU copy it enqueued (direction ``HtoD``/``DtoH``/``DtoD``)."""
        corr = next(self._corr)
        self.runtime(api, ts, dur, corr=corr, tid=tid)
        s = self.stream if stream is None else stream
        self._add(
            _x(
                "gpu_memcpy",
                f"Memcpy {direction} (Pinned -> Device)",
                c_ts,
                c_dur,
                self.device,
                s,
                device=self.device,
                stream=s,
                correlation=corr,
                bytes=nbytes,
            )
        )
        return corr

    def memset(self, ts, dur, c_ts, c_dur, nbytes: int, *, stream: int | None = None) -> int:
        corr = next(self._corr)
        self.runtime("cudaMemsetAsync", ts, dur, corr=corr)
        s = self.stream if stream is None else stream
        self._add(
            _x(
                "gpu_memset",
                "Memset (Device)",
                c_ts,
                c_dur,
                self.device,
                s,
                device=self.device,
                stream=s,
                correlation=corr,
                bytes=nbytes,
            )
        )
        return corr

    # -- output ---------------------------------------------------------------------

    def document(self, **top) -> dict:
        doc = {"schemaVersion": 1, **top, "traceEvents": list(self.events)}
        if self.props is not None and "deviceProperties" not in top:
            doc["deviceProperties"] = self.props
        return doc

    def write(self, folder, name: str = "micro.json", **top) -> str:
        path = Path(folder) / name
        path.write_text(json.dumps(self.document(**top)))
        return str(path)

    def load(self, folder=None, name: str | None = None, **top):
        """Write to ``folder`` (a fresh temp folder when None) and load with hostgap's loader."""
        if folder is None:
            folder = tempfile.mkdtemp(prefix="hostgap-anatomy-")
        name = name or f"micro{len(os.listdir(folder))}.json"
        return load_trace(self.write(folder, name, **top))

    def __repr__(self) -> str:
        rows = "\n".join(
            f"  {e['cat']:<18} {e['name'][:40]:<40} ts={e['ts']:<8} dur={e['dur']:<6} tid={e['tid']} "
            f"corr={e['args'].get('correlation', '')}"
            for e in sorted(self.events, key=lambda e: e["ts"])
        )
        return f"Timeline(\n{rows}\n)"
