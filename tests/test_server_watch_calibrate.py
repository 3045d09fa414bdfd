"""``watch --calibrate``: the policy that says when (by hand, with a clock that does not sleep),
the calibrations a watch takes of a stand-in server's traffic (tests/standin_server.py speaking
vLLM 0.32's bounded protocol), and the faults a calibration profile meets — Ctrl-C, a server that
dies or hangs mid-profile, no profile routes — each ending with the stop sent and the watch
going on (or ending) as documented."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from hostgap.server.attach.client import BUSY, CANCELLED, NO_ROUTES, AttachError
from hostgap.server.watch.estimate import fit_calibration
from hostgap.server.watch.recalibrate import Policy, Trigger, out_of_range
from hostgap.server.watch.selfcal import SelfCalibration
from test_server_attach import FAULT_LIMIT_S, standin  # noqa: F401  (the stand-in server fixture)


def row(batch: float = 4.0, prefill: float = 0.05, status: str = "ok", steps: float = 100) -> dict:
    return {"status": status, "steps": steps, "seqs_per_step": batch, "prefill_share": prefill}


def decode_steps(batches=(4,), n: int = 24) -> list[dict]:
    """Decode steps whose GPU time is 1 ms + 0.5 ms per sequence, wall 5 ms more."""
    out = []
    for i in range(n):
        b = batches[i % len(batches)]
        gpu = 1_000_000 + 500_000 * b
        out.append({"kind": "decode", "wall_ns": gpu + 5_000_000, "gpu_active_ns": gpu, "gen_requests": b})
    return out


def cal(batches=(4,), prefill=(0.05, 0.05)):
    return fit_calibration(decode_steps(batches), "c", prefill_range=prefill)


# ---------------------------------------------------------------------- the policy, by hand


def test_start_waits_for_decode_traffic():
    t = Trigger(Policy(min_gap_s=0))
    assert t.observe(row(status="idle", steps=0, batch=None), None, 0.0) is None
    assert t.pending == "start" and t.stale(None)  # wanted, but nothing to profile yet
    assert t.observe(row(status="no-scrape", steps=None, batch=None), None, 1.0) is None
    assert t.observe(row(batch=0.0), None, 2.0) is None  # steps, but no decode batch
    assert t.observe(row(), None, 3.0) == "start"


def test_batch_out_of_range_persists_before_it_triggers():
    t = Trigger(Policy(min_gap_s=0, persist=2))
    c = cal((4,))
    t.finished(0.0, ok=True)
    assert t.observe(row(batch=4.9), c, 1.0) is None  # 0.9/4 = 0.225 <= 0.25: in range
    assert t.observe(row(batch=8.0), c, 2.0) is None and t.outside == 1
    assert t.observe(row(batch=4.0), c, 3.0) is None and t.outside == 0  # back in range: count again
    assert t.observe(row(batch=8.0), c, 4.0) is None
    assert t.observe(row(batch=8.0), c, 5.0) == "batch"
    assert t.stale(c)


def test_batch_tolerance_is_the_extrapolation():
    p = Policy(batch_tolerance=0.25)
    assert out_of_range(p, cal((4,)), row(batch=5.0)) is None  # 1/4 = 0.25: not beyond
    assert out_of_range(p, cal((4,)), row(batch=5.01)) == "batch"
    assert out_of_range(p, cal((4,)), row(batch=3.2)) is None  # 0.8/3.2 = 0.25
    assert out_of_range(p, cal((4,)), row(batch=3.1)) == "batch"
    assert out_of_range(p, cal((2, 8)), row(batch=10.0)) is None  # 2/10 = 0.2
    assert out_of_range(p, cal((2, 8)), row(batch=11.0)) == "batch"  # 3/11 > 0.25
    assert out_of_range(p, cal((4,)), row(batch=None)) is None


def test_prefill_share_out_of_range():
    p = Policy(prefill_tolerance=0.15)
    c = cal(prefill=(0.1, 0.2))
    assert out_of_range(p, c, row(prefill=0.35)) is None  # 0.2 + 0.15
    assert out_of_range(p, c, row(prefill=0.36)) == "prefill"
    assert out_of_range(p, c, row(prefill=0.0)) is None  # 0.1 − 0.15 < 0
    assert out_of_range(p, cal(prefill=None), row(prefill=0.9)) is None  # a given calibration: no range


def test_prefill_lower_edge():
    p = Policy(prefill_tolerance=0.15)
    c = cal(prefill=(0.4, 0.5))
    assert out_of_range(p, c, row(prefill=0.25)) is None
    assert out_of_range(p, c, row(prefill=0.24)) == "prefill"


def test_age_restart_gap_backoff_and_disable():
    t = Trigger(Policy(min_gap_s=10, max_age_s=100, retry_s=5, persist=1))
    c = cal()
    t.started(0.0)
    t.finished(1.0, ok=True)
    assert t.observe(row(), c, 50.0) is None
    assert t.observe(row(), c, 101.0) == "age"
    t.started(101.0)
    assert t.observe(row(), c, 102.0) is None  # one runs: never two
    t.finished(103.0, ok=False)
    assert t.failures == 1
    assert t.observe(row(), c, 107.0) is None  # back-off 5 s after the failure, and the 10 s gap
    assert t.observe(row(), c, 111.5) == "age"
    t.started(111.5)
    t.finished(112.0, ok=True)
    assert t.failures == 0 and t.taken_at == 112.0
    assert t.observe(row(status="reset", steps=None), c, 113.0) is None
    assert t.pending == "restart"
    assert t.observe(row(), c, 121.0) is None  # within the gap after the last start
    assert t.observe(row(), c, 122.0) == "restart"
    t.disable()
    assert t.observe(row(), c, 500.0) is None and not t.stale(c)


def test_backoff_doubles_up_to_the_age():
    assert [Policy(retry_s=30, max_age_s=200).backoff_s(n) for n in range(6)] == [0, 30, 60, 120, 200, 200]


def test_gap_does_not_hold_the_first_calibration():
    t = Trigger(Policy(min_gap_s=1000, retry_s=1))
    t.started(0.0)
    t.finished(1.0, ok=False)
    assert t.observe(row(), None, 1.5) is None  # back-off
    assert t.observe(row(), None, 2.5) == "start"  # no calibration yet: the gap does not apply


# ---------------------------------------------------------------------- SelfCalibration


class FakeAttach:
    """Stands for :func:`hostgap.server.attach.profile.attach`: each call takes the next item
    (a result's batches, or an exception); records overlapping calls."""

    def __init__(self, *items, hold: threading.Event | None = None):
        self.items = list(items)
        self.calls = 0
        self.active = 0
        self.most = 0
        self.hold = hold
        self.cancelled = 0

    def __call__(self, cfg, say, cancel):
        self.calls += 1
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            if self.hold is not None:
                while not self.hold.is_set():
                    if cancel.wait(0.01):
                        self.cancelled += 1
                        raise AttachError(cfg.url, "cancelled", 3, reason=CANCELLED)
            item = self.items.pop(0) if len(self.items) > 1 else self.items[0]
            if isinstance(item, BaseException):
                raise item
            return {"run_id": f"run{self.calls}", "steps": decode_steps(item), "profiling": {"inflation": None}}
        finally:
            self.active -= 1


def selfcal(fake, notes, **policy) -> SelfCalibration:
    now = [0.0]
    sc = SelfCalibration(
        "http://127.0.0.1:9",
        policy=Policy(**{"min_gap_s": 0, "retry_s": 0, "persist": 1, **policy}),
        store=False,
        on_note=notes.append,
        attach=fake,
        clock=lambda: now[0],
    )
    sc.now = now  # type: ignore[attr-defined]
    return sc


def settle(sc: SelfCalibration) -> None:
    if sc._thread is not None:
        sc._thread.join(10)


def test_calibrates_then_adds_a_profile_for_a_new_batch():
    notes: list[str] = []
    fake = FakeAttach((2,), (8,))
    sc = selfcal(fake, notes)
    r = row(batch=2.0, prefill=0.1)
    sc.observe(r)
    settle(sc)
    first = sc.current()
    assert first is not None and first.batches == (2,) and first.prefill_range == (0.1, 0.1)
    assert r["calibrating"] is False  # the profile starts after the interval that asked for it
    r2 = row(batch=8.0, prefill=0.2)
    sc.observe(r2)
    assert r2["calibrating"] is True  # it ran during this one
    settle(sc)
    both = sc.current()
    assert both.batches == (2, 8) and both.runs == ("run1", "run2") and both.prefill_range == (0.1, 0.2)
    assert both.gpu_slope_s == pytest.approx(0.5e-3) and both.gpu_intercept_s == pytest.approx(1e-3)
    assert [h["reason"] for h in sc.history] == ["start", "batch"] and all(h["ok"] for h in sc.history)
    assert fake.most == 1
    assert sum("calibration run1, run2: 48 decode steps at batch [2, 8]" in n for n in notes) == 1


def test_age_starts_afresh():
    notes: list[str] = []
    sc = selfcal(FakeAttach((2,), (2,)), notes, max_age_s=50)
    sc.observe(row(batch=2.0))
    settle(sc)
    sc.now[0] = 60.0
    sc.observe(row(batch=2.0))
    settle(sc)
    assert sc.current().runs == ("run2",) and sc.history[-1]["reason"] == "age"


def test_no_profile_routes_is_said_once_and_never_retried():
    notes: list[str] = []
    fake = FakeAttach(AttachError("u", "vLLM 0.32.0 serves no /start_profile (HTTP 404)", 2, reason=NO_ROUTES))
    sc = selfcal(fake, notes)
    for i in range(5):
        sc.now[0] = float(i * 100)
        sc.observe(row())
        settle(sc)
    assert fake.calls == 1 and sc.current() is None
    assert sum(n.startswith("cannot calibrate: ") for n in notes) == 1
    assert not sc.trigger.enabled and sc.to_dict()["disabled"] is True


def test_failures_back_off_and_a_busy_server_is_retried():
    notes: list[str] = []
    fake = FakeAttach(AttachError("u", "a profile is already running", 2, reason=BUSY), (4,))
    sc = selfcal(fake, notes, retry_s=30)
    sc.observe(row())
    settle(sc)
    assert sc.current() is None and "trying again in 30 s" in notes[-1]
    sc.now[0] = 10.0
    sc.observe(row())
    assert fake.calls == 1  # backing off
    sc.now[0] = 31.0
    sc.observe(row())
    settle(sc)
    assert fake.calls == 2 and sc.current() is not None


def test_too_few_steps_is_a_failure_not_a_crash():
    notes: list[str] = []
    sc = selfcal(FakeAttach(RuntimeError("boom"), (4,)), notes)
    sc.observe(row())
    settle(sc)
    assert sc.history[-1]["ok"] is False and "RuntimeError: boom" in sc.history[-1]["problem"]
    fake = FakeAttach((4,))
    fake_steps = selfcal(fake, notes)
    fake.items = [(4,)]
    fake_steps._attach = lambda cfg, say, cancel: {"run_id": "r", "steps": decode_steps((4,), n=3)}
    fake_steps.observe(row())
    settle(fake_steps)
    assert "3 usable decode steps" in fake_steps.history[-1]["problem"]


def test_close_cancels_a_running_calibration():
    notes: list[str] = []
    hold = threading.Event()
    fake = FakeAttach((4,), hold=hold)
    sc = selfcal(fake, notes)
    sc.observe(row())
    assert sc.running and wait_until(lambda: fake.calls == 1, 10)
    sc.observe(row())  # never a second profile while one runs
    time.sleep(0.1)
    assert fake.calls == 1
    sc.close()
    assert not sc.running and fake.cancelled == 1 and sc.current() is None
    assert sc.history[-1]["problem"] == "cancelled"


# ---------------------------------------------------------------------- against a stand-in server


def watch_cli(url: str, tmp_path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "hostgap", "watch", url, "--interval", "0.5", "--json", "--no-store", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )


def wait_until(predicate, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_watch_calibrates_on_a_stand_in_with_traffic(standin, tmp_path):  # noqa: F811
    from hostgap.server.attach.loadgen import LoadGenerator, LoadSpec

    s = standin("vllm", "--version", "0.32.0")
    with LoadGenerator(s.url, LoadSpec(2, 8, 100000)) as load:
        assert load.wait_streaming(60)
        p = watch_cli(s.url, tmp_path, "--calibrate", "--trace-dir", str(s.trace_dir), "--duration", "12")
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    doc = json.loads(out)
    (good,) = [h for h in doc["calibrations"]["history"] if h["ok"]]
    assert good["reason"] == "start" and good["batches"] == [2]
    assert good["inflation"]["windows"]["before"]["step_period_s"] is not None  # the cost, as attach measures it
    after = [r for r in doc["intervals"] if r["calibration"]]
    assert after and all(r["calibration"] == good["run_id"] and 0 <= r["host_share"] <= 1 for r in after)
    assert s.state()["requests"] == ["/start_profile", "/stop_profile"]
    assert "Traceback" not in err


def test_no_profile_routes_keeps_the_telemetry(standin, tmp_path):  # noqa: F811
    from hostgap.server.attach.loadgen import LoadGenerator, LoadSpec

    s = standin("vllm", "--version", "0.32.0", "--profile-404")
    with LoadGenerator(s.url, LoadSpec(2, 8, 100000)) as load:
        assert load.wait_streaming(60)
        p = watch_cli(s.url, tmp_path, "--duration", "4")  # the default calibrates on vLLM
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert err.count("cannot calibrate: ") == 1 and "--profiler-config" in err
    doc = json.loads(out)
    assert doc["intervals"] and all(r["steps_per_s"] for r in doc["intervals"] if r["status"] == "ok")
    assert s.state()["requests"] == ["/start_profile"]


@pytest.mark.slow  # a fault that takes its bound: CI runs it
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_during_a_calibration_sends_the_stop(standin, tmp_path, sig):  # noqa: F811
    from hostgap.server.attach.loadgen import LoadGenerator, LoadSpec

    s = standin("vllm", "--version", "0.32.0", "--step-ms", "200")  # 36 steps: ~11 s of profile
    with LoadGenerator(s.url, LoadSpec(2, 8, 100000)) as load:
        assert load.wait_streaming(60)
        p = watch_cli(s.url, tmp_path, "--calibrate", "--trace-dir", str(s.trace_dir))
        try:
            assert wait_until(lambda: s.state()["start_calls"] >= 1), "no calibration started"
            t0 = time.monotonic()
            p.send_signal(sig)
            out, err = p.communicate(timeout=FAULT_LIMIT_S)
            took = time.monotonic() - t0
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 0, err
    assert s.state()["requests"] == ["/start_profile", "/stop_profile"] and not s.state()["profiling"]
    assert json.loads(out)["calibrations"]["history"][-1]["problem"].startswith("cancelled")
    assert took < FAULT_LIMIT_S and "Traceback" not in err


@pytest.mark.slow  # a fault that takes its bound: CI runs it
@pytest.mark.parametrize("fault", ["dies", "hangs"])
def test_server_fault_mid_calibration(standin, tmp_path, fault):  # noqa: F811
    from hostgap.server.attach.loadgen import LoadGenerator, LoadSpec

    flags = ("--hang-after-start",) if fault == "hangs" else ()
    s = standin("vllm", "--version", "0.32.0", "--step-ms", "200", *flags)
    load = LoadGenerator(s.url, LoadSpec(2, 8, 100000))
    try:
        load.start()
        assert load.wait_streaming(60)
        # 200 steps of 200 ms: the fault comes while the Worker still records
        args = ("--calibrate", "--calibrate-steps", "200", "--trace-dir", str(s.trace_dir), "--timeout", "1")
        p = watch_cli(s.url, tmp_path, *args)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True)
        reader.start()
        try:
            assert wait_until(lambda: s.state()["start_calls"] >= 1), "no calibration started"
            if fault == "dies":
                s.proc.kill()
            # the health checks (2 x 3 s) and the stop's 10 s bound, on a loaded machine
            assert wait_until(lambda: any("calibration failed" in ln for ln in lines), 90), "".join(lines)
            p.send_signal(signal.SIGINT)
            out, _ = p.communicate(timeout=FAULT_LIMIT_S)
            reader.join(10)
            err = "".join(lines)
        finally:
            if p.poll() is None:
                p.kill()
    finally:
        load.stop()
    assert p.returncode == 0, err
    doc = json.loads(out)
    problems = [h.get("problem") or "" for h in doc["calibrations"]["history"]]
    assert any("stopped answering" in x for x in problems), problems
    assert "no-scrape" in {r["status"] for r in doc["intervals"]} and "Traceback" not in err
    if fault == "hangs":
        assert s.state()["requests"][:2] == ["/start_profile", "/stop_profile"]  # the stop was sent
