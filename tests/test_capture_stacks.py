"""py-spy stack summaries: classification of collapsed stacks, and a real sampled run."""

from __future__ import annotations

import time

import pytest

from hostgap.capture.protocol.stacks import classify, find_pyspy, parse_raw, sample_during, summarise

RAW = """\
process 1:"python x.py";thread (1): MainThread;main (x.py:1);forward (m.py:2);at::native::cpublas::gemm (libtorch_cpu.so) 30
process 1:"python x.py";thread (1): MainThread;main (x.py:1);_call_impl (module.py:9) 60
process 1:"python x.py";thread (1): MainThread;main (x.py:1);to (t.py:3);cudaStreamSynchronize (libcudart.so) 10
process 1:"python x.py";thread (7): Thread-1;run (threading.py:1);wait (threading.py:2);pthread_cond_wait (libc.so.6) 50
process 2:"engine core";thread (2): MainThread;busy_loop (core.py:5);poll (libc.so.6) 40
"""


def test_classify_innermost_frame_wins():
    assert classify(["a (x.py:1)", "gemm_kernel (lib.so)", "futex_wait (libc.so)"]) == "waiting"
    assert classify(["a (x.py:1)", "sgemm (libmkl.so)"]) == "compute"
    assert classify(["a (x.py:1)", "dispatch (libtorch.so)"]) == "other"
    assert classify([]) == "other"


def test_parse_and_summarise():
    per = parse_raw(RAW)
    assert len(per) == 3
    main = [c for t, c in per.items() if "thread (1)" in t][0]
    assert main == {"compute": 30, "other": 60, "waiting": 10}
    s = summarise(RAW)
    assert s["main_thread"]["samples"] == 100  # busiest by non-waiting samples
    assert s["main_thread"]["compute_share"] == pytest.approx(0.3)
    a = s["all_threads"]
    assert a["samples"] == 190 and a["threads"] == 3
    assert a["compute_share"] + a["waiting_share"] + a["other_share"] == pytest.approx(1)
    assert summarise("")["samples"] == 0


@pytest.mark.slow
@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")
def test_sampling_a_busy_loop(tmp_path):
    def spin():
        t = time.perf_counter()
        x = 0
        while time.perf_counter() - t < 1.0:
            x += 1

    s = sample_during(spin, tmp_path, rate_hz=50, native=False)
    assert (tmp_path / "pyspy.txt").is_file()
    assert s["main_thread"]["samples"] > 5
    assert s["main_thread"]["other_share"] > 0.5  # pure-Python loop: neither compute nor waiting
