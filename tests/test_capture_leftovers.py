"""Nothing of a run outlives hostgap: ``end_leftovers`` ends this process's descendants (one that
ignores SIGTERM, as the multiprocessing resource tracker does, included) and the orphans of its
process group, within its bound.

Each case runs in its own process and session (``start_new_session``): ending "every descendant"
and "the orphans of the process group" must never reach the test runner's own workers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

IGNORES_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def run_case(body: str) -> dict:
    """Run ``body`` (Python; it sets ``out``) in a new session; return ``out``."""
    code = (
        textwrap.dedent(f"""
        import json, os, subprocess, sys, time, types
        from hostgap.capture.engines.vllm import watchdog as vw
        IGNORES_TERM = {IGNORES_TERM!r}
        def alive(pid):
            try:
                state = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                return False
            return state not in ("Z", "X")
        out = {{}}
    """)
        + textwrap.dedent(body)
        + "\nprint(json.dumps(out))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, start_new_session=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_end_leftovers_ends_a_child_that_ignores_sigterm():
    out = run_case("""
        child = subprocess.Popen([sys.executable, "-c", IGNORES_TERM])
        time.sleep(0.3)
        t0 = time.monotonic()
        out["killed"] = vw.end_leftovers(grace_s=0.5)
        out["child"] = child.pid
        out["status"] = child.wait(timeout=10)
        out["took_s"] = time.monotonic() - t0
    """)
    assert out["child"] in out["killed"]  # SIGTERM ignored: killed after the grace period
    assert out["status"] != 0 and out["took_s"] < 10


def test_orphan_of_the_process_group_is_found_and_ended():
    """A grandchild whose parent exited is reparented (to init, or a subreaper) but stays in the
    process group; reparented to pid 1 it is one of ``group_orphans`` and is ended."""
    out = run_case("""
        code = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', " + repr(IGNORES_TERM)
                + "], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)")
        orphan = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
        time.sleep(0.3)
        ppid = int(open(f"/proc/{orphan}/stat").read().rsplit(")", 1)[1].split()[1])
        out["to_init"] = ppid == 1
        out["found"] = orphan in vw.group_orphans()
        vw.end_leftovers(grace_s=0.5)
        time.sleep(0.5)
        out["alive_after"] = alive(orphan)
        if alive(orphan):
            os.kill(orphan, 9)
    """)
    if out["to_init"]:
        assert out["found"] and not out["alive_after"]
    else:  # a subreaper adopted it: its parent is alive, so it is no orphan of the group
        assert not out["found"]


def test_a_failed_run_with_vllm_loaded_ends_its_leftovers():
    """The CLI's error path calls end_leftovers_if_engine_loaded: with vLLM imported it ends what
    is left (measured on a real engine killed at start-up: its Worker and the resource tracker were
    still running 10 s after hostgap's exit status 2; with this, nothing); without vLLM, nothing
    is touched."""
    out = run_case("""
        child = subprocess.Popen([sys.executable, "-c", IGNORES_TERM])
        time.sleep(0.3)
        sys.modules.pop("vllm", None)
        vw.end_leftovers_if_engine_loaded()
        out["kept_without_vllm"] = child.poll() is None
        sys.modules["vllm"] = types.ModuleType("vllm")
        vw.end_leftovers_if_engine_loaded()
        out["status"] = child.wait(timeout=10)
    """)
    assert out["kept_without_vllm"] and out["status"] != 0
