"""The ``hf-cb`` / ``hf-cb-async`` engines (transformers' continuous batching): configuration,
step labels, the annotation wrappers and the async mode on a CPU with stand-ins (fast); the real
loop on the tiny preset and ``measure --engine hf-cb,hf-cb-async`` end to end (slow)."""

from __future__ import annotations

import json
import threading
import types
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hostgap.capture.engines.hf import hooks
from hostgap.capture.protocol import validity
from hostgap.capture.protocol.engine import ONE_THREAD, Workload, load_engine
from hostgap.capture.protocol.orchestrate import MeasureConfig, resolve
from hostgap.errors import HostgapError
from hostgap.model.arch import get_preset
from hostgap.report import run_rows
from hostgap.report.figures import stepwise as figures

NS = types.SimpleNamespace
FIELDS_524 = {
    "page_size",
    "num_blocks",
    "max_batch_tokens",
    "max_requests_per_batch",
    "allow_block_sharing",
    "use_async_batching",
    "use_cuda_graph",
    "auto_switch_to_flash",
    "seed",
}


def test_config_sizes_and_version_differences():
    kw = hooks.config_kwargs(FIELDS_524, 4, 128, 128, use_async=True, graphs=True, seed=3)
    assert kw == {
        "page_size": 256,
        "num_blocks": 4 * 2 + 1,  # 128 + 128 + 1 tokens need 2 pages of 256
        "max_batch_tokens": 512,
        "max_requests_per_batch": 4,
        "allow_block_sharing": False,
        "use_async_batching": True,
        "use_cuda_graph": True,
        "auto_switch_to_flash": False,
        "seed": 3,
    }
    small = hooks.config_kwargs(FIELDS_524, 1, 16, 8, use_async=False, graphs=False, seed=0)
    assert small["num_blocks"] == 2 and small["max_batch_tokens"] == 64
    assert hooks.config_kwargs(FIELDS_524, 1, 255, 0, use_async=False, graphs=False, seed=0)["num_blocks"] == 2
    assert hooks.config_kwargs(FIELDS_524, 1, 254, 1, use_async=False, graphs=False, seed=0)["num_blocks"] == 2
    assert hooks.config_kwargs(FIELDS_524, 1, 256, 0, use_async=False, graphs=False, seed=0)["num_blocks"] == 3
    # transformers 5.17: block_size, no auto_switch_to_flash
    old = (FIELDS_524 - {"page_size", "auto_switch_to_flash"}) | {"block_size"}
    kw = hooks.config_kwargs(old, 2, 32, 8, use_async=False, graphs=False, seed=0)
    assert kw["block_size"] == 256 and "page_size" not in kw and "auto_switch_to_flash" not in kw

    class Cfg:
        def __init__(self, page_size=256, num_blocks=None, use_cuda_graph=None):
            self.page_size, self.num_blocks, self.use_cuda_graph = page_size, num_blocks, use_cuda_graph

    assert hooks.config_fields(Cfg) == {"page_size", "num_blocks", "use_cuda_graph"}
    assert hooks.resolved_config(Cfg(num_blocks=5, use_cuda_graph=(False, False))) == {
        "page_size": 256,
        "num_blocks": 5,
        "use_cuda_graph": [False, False],
    }


def _req(q, s, status="DECODING"):
    return NS(query_length=q, state=NS(position_offset=s, status=NS(name=status)))


def test_step_label_sync_async_and_prefill():
    io = NS(requests_in_batch=[_req(1, 130), _req(1, 131)])
    assert hooks.step_label(io, 3) == "hostgap.step#3:decode:b2:q1:s131"
    pre = NS(requests_in_batch=[_req(128, 128, "PREFILLING")])
    assert hooks.step_label(pre, 0) == "hostgap.step#0:prefill:b1:q128:s128"
    one = NS(requests_in_batch=[_req(1, 1, "PREFILLING")])  # a one-token prompt is still a prefill
    assert hooks.step_label(one, 0) == "hostgap.step#0:prefill:b1:q1:s1"
    pairs = NS(io_pairs=[NS(host_io=NS(requests_in_batch=[])), NS(host_io=io)], current_pair=1)
    assert hooks.step_label(pairs, 7) == "hostgap.step#7:decode:b2:q1:s131"
    assert hooks.step_label(NS(requests_in_batch=None), 0) == "hostgap.step#0:decode:b0:q0:s0"


class _Recorder:
    """A record_function stand-in: a context manager that logs the names entered."""

    def __init__(self):
        self.names = []

    def __call__(self, name):
        rec = self

        class Ctx:
            def __enter__(self):
                rec.names.append(name)

            def __exit__(self, *exc):
                return False

        return Ctx()


def _method(log, name):
    def f(*a, **k):
        log.append(name)
        return name

    return f


def _processor(log, pairs=False):
    """A stand-in batch processor: every method the wrappers look for, logging its calls."""

    def obj(*names):
        o = NS()
        for n in names:
            setattr(o, n, _method(log, n))
        return o

    host = obj("_reset_static_tensors")
    io_names = ["prepare_batch_tensors", "get_model_kwargs", "retrieve_device_outputs"]
    if pairs:
        io = obj(*io_names, "infer_carry_over_ids", "prepare_batch_update")
        io.io_pairs, io.current_pair = [NS(host_io=host), NS(host_io=obj("_reset_static_tensors"))], 0
        host.requests_in_batch = [_req(1, 9)]
    else:
        io = obj(*io_names, "_reset_static_tensors")
        io.requests_in_batch = [_req(1, 9)]
    bp = obj("_generation_step", "prepare_next_batch", "_update_tp_group_state", "update_batch")
    bp.inputs_and_outputs = io
    bp.scheduler = obj("schedule_batch")
    bp.offloading_manager = obj("offload_requests", "restore_scheduled_requests")
    bp.cache = obj("extend_read_and_write_indices")
    bp.model_runner = obj("_forward_process_and_sample", "_sample")
    bp.output_router = obj("deliver_batch")
    return bp


def test_wrappers_annotate_only_when_tracing_and_count_every_step():
    log, rec = [], _Recorder()
    bp = _processor(log)
    io_module = NS(build_attention_mask=_method(log, "mask"))
    h = hooks.LoopAnnotations(rec)
    h.install(bp, io_module)
    assert h.missing == [] and len(h.wrapped) == 15
    assert bp._generation_step() == "_generation_step"  # wrapped, same result
    bp.prepare_next_batch()
    assert rec.names == [] and h.steps == 1 and h.thread_ident == threading.get_ident()
    h.trace(True)
    bp._generation_step()
    bp.scheduler.schedule_batch()
    bp.inputs_and_outputs._reset_static_tensors()
    io_module.build_attention_mask()
    bp.output_router.deliver_batch()
    h.trace(False)
    bp.update_batch()
    assert rec.names == [
        "hostgap.step#1:decode:b1:q1:s9",
        "hostgap.cb.schedule",
        "hostgap.cb.inputs.reset",
        "hostgap.cb.inputs.mask",
        "hostgap.cb.deliver",
    ]
    assert h.steps == 2 and log[-1] == "update_batch"
    h.reset()
    assert h.steps == 0
    # another thread (another engine's loop) is not annotated by the shared mask wrapper
    h.trace(True)
    done = []
    t = threading.Thread(target=lambda: done.append(io_module.build_attention_mask()))
    t.start()
    t.join()
    h.trace(False)
    assert done == ["mask"] and rec.names.count("hostgap.cb.inputs.mask") == 1
    # installed once per process: a second engine reuses the wrapper
    assert hooks.install_mask_wrapper(io_module, rec) is True
    assert hooks.install_mask_wrapper(NS(), rec) is False


def test_async_wrappers_and_missing_methods():
    log, rec = [], _Recorder()
    bp = _processor(log, pairs=True)
    h = hooks.LoopAnnotations(rec)
    h.install(bp, NS())
    assert h.missing == ["build_attention_mask"]
    assert "ContinuousBatchingIOs.infer_carry_over_ids" not in h.wrapped  # stand-in type name
    assert sum(w.endswith("._reset_static_tensors") for w in h.wrapped) == 2
    h.trace(True)
    bp._generation_step()
    bp.inputs_and_outputs.infer_carry_over_ids()
    bp.inputs_and_outputs.prepare_batch_update()
    assert rec.names == [
        "hostgap.step#0:decode:b1:q1:s9",
        "hostgap.cb.inputs.carry_over",
        "hostgap.cb.update.wait_outputs",
    ]
    bare = NS(inputs_and_outputs=NS(), prepare_next_batch=_method(log, "p"))
    with pytest.raises(HostgapError, match="no _generation_step"):
        hooks.LoopAnnotations(rec).install(bare, NS())


def test_async_on_cpu_is_allowed_only_while_the_ios_are_built():
    class AsyncIOs:
        _supported_device_types = ("cuda", "xpu")

    made = []
    module = NS(ContinuousBatchingAsyncIOs=AsyncIOs, create_device_stream=lambda d: made.append(d) or "stream")
    orig = module.create_device_stream
    with hooks.cpu_async_allowed(module):
        assert AsyncIOs._supported_device_types == ("cuda", "xpu", "cpu")
        s = module.create_device_stream(NS(type="cpu"))
        assert isinstance(s, hooks._NoStream)
        assert s.record_event(1) is s.wait_event(1) is s.wait_stream(1) is s.synchronize() is None
        assert module.create_device_stream(NS(type="cuda")) == "stream" and len(made) == 1
    assert AsyncIOs._supported_device_types == ("cuda", "xpu") and module.create_device_stream is orig
    with pytest.raises(RuntimeError), hooks.cpu_async_allowed(module):
        raise RuntimeError("boom")
    assert AsyncIOs._supported_device_types == ("cuda", "xpu") and module.create_device_stream is orig
    with pytest.raises(HostgapError, match="run it on CUDA"), hooks.cpu_async_allowed(NS(create_device_stream=orig)):
        pass


def _workload(mode="eager", device="cpu"):
    return Workload(preset="tiny", arch=get_preset("tiny"), batch=1, prompt_len=8, device=device, mode=mode)


def test_registry_modes_and_one_line_refusals():
    pytest.importorskip("torch")
    sync, asyn = load_engine("hf-cb"), load_engine("hf-cb-async")
    assert (sync.name, asyn.name, sync.use_async, asyn.use_async) == ("hf-cb", "hf-cb-async", False, True)
    with pytest.raises(HostgapError, match="runs eager or graph"):
        sync(_workload("static"))
    with pytest.raises(HostgapError, match="CUDA graphs need --device cuda"):
        asyn(_workload("graph"))
    with pytest.raises(HostgapError) as e:
        resolve(MeasureConfig(engine="hf-cb", device="cpu", mode="graph"))
    assert str(e.value).endswith("CUDA graphs need a CUDA device")
    with pytest.raises(HostgapError, match=r"use --mode static on CPU"):
        resolve(MeasureConfig(engine="hf", device="cpu", mode="graph"))


def test_the_loop_thread_is_the_contention_basis_on_a_cpu():
    assert {"hf", "hf-cb", "hf-cb-async"} <= set(ONE_THREAD)
    for engine, device, threads, want in (
        ("hf-cb", "cpu", 1, True),
        ("hf-cb-async", "cpu", 1, True),
        ("hf-cb", "cpu", 2, False),
        ("hf-cb", "cuda", 1, False),
        ("vllm", "cpu", 1, False),
    ):
        assert validity.in_thread(NS(engine=engine, device=device, threads=threads)) is want


SPLIT = {
    "steps": 10,
    "step_ns": 4_000_000.0,
    "compute_ns": 2_000_000.0,
    "step_host_ns": 1_500_000.0,
    "loop_host_ns": 500_000.0,
    "compute_loop_ns": 100_000.0,
    "between_ns": 600_000.0,
    "step_parts": {"forward": 1_400_000.0, "other": 100_000.0},
    "loop_parts": {"inputs": 300_000.0, "update": 150_000.0, "other": 50_000.0},
    "shares": {"compute_ns": 0.5, "step_host_ns": 0.375, "loop_host_ns": 0.125},
}


def test_the_difference_line_claims_a_host_cost_only_against_hf():
    from hostgap.report.run_view import difference_line

    part = {"value": 1e5, "lo": 0.0, "hi": 2e5}
    diff = {"base": "hf-cb", "other": "hf-cb-async", "valid": True, "level": 0.95, "schedule": "interleaved"}
    diff.update(wall_ns=part, host_exposed_ns=part)
    assert difference_line(diff).endswith("host-exposed +0.100 ms/step [+0.000, +0.200]")
    assert difference_line(dict(diff, base="hf", other="vllm")).endswith("beyond the in-process loop)")


def test_measure_table_rows_for_the_loop():
    facts = {
        "engine": "hf-cb-async",
        "cb_split": SPLIT,
        "async_mode": "forced on CPU: why",
        "forward_steps_per_call": {"16": 17},
    }
    rows = run_rows._process_rows({"engine_facts": facts, "n2": 16})
    labels = [r[0] for r in rows]
    assert labels[0] == "loop split (traced)" and "  loop host between steps" in labels
    assert rows[-2] == ("async batching", "forced on CPU", "why")
    assert rows[-1] == ("forward steps per call", "17 for N2 = 16", "+1: the async loop's wasted step")
    sync = run_rows.cb_rows(
        {"engine": "hf-cb", "cb_split": None, "async_mode": "off", "forward_steps_per_call": {"16": 16}}, 16
    )
    assert sync == [("forward steps per call", "16 for N2 = 16", "one prefill + N - 1 decode steps")]
    on = run_rows.cb_rows({"async_mode": "on"}, None)
    assert on == [("async batching", "on", "batch N+1 prepared while batch N computes")]
    assert run_rows._process_rows({"engine_facts": {"engine": "hf"}}) == []


def test_loop_figure():
    pytest.importorskip("matplotlib")
    parts = dict(
        SPLIT, loop_parts={"inputs": 3.0, "update": 2.0, "schedule": 1.5, "admit": 1.0, "mask": 0.5, "other": 0.2}
    )
    fig = figures.loop_figure(parts, "fig-x")
    assert fig.svg and "the loop's work between forward passes" in fig.caption and "0.600 ms" in fig.caption
    assert "loop: rest" in fig.svg or "loop: rest" in str(fig.svg)
    none = figures.loop_figure({"unavailable": "no decode steps"}, "fig-y")
    assert none.svg is None and none.caption == "Not available: no decode steps."
    inp = NS(results={"engine_facts": {"engine": "hf-cb", "cb_split": {}}})
    assert figures.processes_figure(inp, "fig-z").caption == "Not available: no decode steps in the traced run."


# -- the real loop (slow) -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engines():
    pytest.importorskip("transformers")
    made = {}
    for name in ("hf-cb", "hf-cb-async"):
        w = Workload(preset="tiny", arch=get_preset("tiny"), batch=2, prompt_len=16, max_new_tokens=8)
        e = load_engine(name)(w)
        e.prepare()
        made[name] = e
    yield made
    for e in made.values():
        e.close()


@pytest.mark.slow
def test_the_real_loop_sync_and_forced_async(engines, tmp_path):
    from hostgap.analysis import cb_split
    from hostgap.analysis.trace import analyse_trace
    from hostgap.capture.engines.hf.batching import ASYNC_ON_CPU
    from hostgap.events import Kind

    for name, extra in (("hf-cb", 0), ("hf-cb-async", 1)):
        e = engines[name]
        for n in (1, 8):
            wall = e.generate(n)
            assert wall > 0 and e.steps_per_call[str(n)] == n + extra
            assert 0 < e.last_thread_ns  # the loop thread's CPU clock
        with pytest.raises(HostgapError, match="outside 1..8"):
            e.generate(9)
        _wall, path = e.generate_traced(8, tmp_path / name)
        trace = analyse_trace(path).trace
        assert len(cb_split.step_threads(trace)) == 1  # every step on the loop thread
        e.chose_anatomy_trace(path)
        split = e.split
        assert split["steps"] == 8 + extra - 2 and split["loop_host_ns"] > 0
        total = split["compute_ns"] + split["step_host_ns"] + split["loop_host_ns"]
        assert total == pytest.approx(split["step_ns"])
        d = e.describe()
        assert d["engine"] == name and d["attn_implementation"] == "sdpa" and d["not_annotated"] == []
        assert d["cb_config"]["use_async_batching"] is bool(extra)
        assert d["async_mode"] == ("off" if not extra else ASYNC_ON_CPU)
        # only the traced loop's thread runs ops: the other engine's idle loop records none
        ev = trace.events
        assert len(np.unique(ev.tid[ev.kind == Kind.CPU_OP])) == 1


def _cli(*args):
    from hostgap.cli import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.slow
def test_measure_sync_and_async_side_by_side(tmp_path):
    """`measure --engine hf-cb,hf-cb-async` on the tiny preset: two runs, each valid or invalid
    with its reasons, each with its loop split; the engine difference; run directories, the
    database, show, report and compare."""
    pytest.importorskip("transformers")
    db, out = tmp_path / "runs.sqlite", tmp_path / "runs"
    r = _cli(
        "measure", "-p", "tiny", "--device", "cpu", "--engine", "hf-cb,hf-cb-async", "-b", "2", "-L", "16",
        "--n2", "16", "--repeats", "3", "--traced-repeats", "1", "--budget", "30", "--retries", "0",
        "--out", str(out), "--db", str(db), "--json", "-q",
    )  # fmt: skip
    results = json.loads(r.output[r.output.index("[") :])
    assert r.exit_code == (0 if all(x["valid"] for x in results) and results[0]["engine_difference"]["valid"] else 3)
    assert [x["engine"] for x in results] == ["hf-cb", "hf-cb-async"]
    for x in results:
        if not x["valid"]:
            assert x["invalid_reasons"]
        facts = x["engine_facts"]
        split = facts["cb_split"]
        assert split["compute_ns"] + split["step_host_ns"] + split["loop_host_ns"] == pytest.approx(split["step_ns"])
        assert facts["forward_steps_per_call"]["16"] == 16 + (x["engine"] == "hf-cb-async")
        assert facts["attn_implementation"] == "sdpa" and facts["transformers"]  # kept after close
        assert x["differencing"]["thread_t_step_ns"] is not None  # the loop thread's clock
        assert x["engine_difference"]["base"] == "hf-cb" and x["engine_difference"]["schedule"] == "interleaved"
        run_dir = Path(x["run_dir"])
        assert json.loads((run_dir / "results.json").read_text())["engine_facts"]["cb_split"] == split
    assert results[1]["engine_facts"]["async_mode"].startswith("forced on CPU")
    shown = _cli("show", results[1]["run_id"], "--db", str(db))
    assert "loop split (traced)" in shown.output and "forced on CPU" in shown.output
    html = tmp_path / "r.html"
    rep = _cli("report", results[0]["run_dir"], results[1]["run_dir"], "-o", str(html))
    assert rep.exit_code == 0 and "continuous-batching loop" in html.read_text()
    cmp_ = _cli("compare", results[0]["run_dir"], results[1]["run_dir"], "--json")
    assert cmp_.exit_code == 0 and json.loads(cmp_.output[cmp_.output.index("{") :])
    runs = _cli("runs", "--db", str(db), "--json")
    assert sorted(x["engine"] for x in json.loads(runs.output[runs.output.index("[") :])) == ["hf-cb", "hf-cb-async"]


@pytest.mark.slow
def test_sweep_over_the_loop(tmp_path):
    pytest.importorskip("transformers")
    db = tmp_path / "runs.sqlite"
    args = ("sweep", "-p", "tiny", "--engine", "hf-cb", "-b", "1", "-L", "16", "--device", "cpu", "--n2", "8",
            "--repeats", "2", "--traced-repeats", "1", "--warmup", "1", "--db", str(db), "--out", str(tmp_path / "runs"), "-q")  # fmt: skip
    assert _cli(*args).exit_code == 0
    again = _cli(*args)
    assert again.exit_code == 0
    from hostgap.store.database import RunsDB

    with RunsDB(db) as d:
        rows = d.results()
    assert [x["engine"] for x in rows] == ["hf-cb"] and "cb_split" in rows[0]["engine_facts"]
