"""The vLLM engine's pieces that run without vLLM: inputs, limits, environment, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from hostgap.capture.engines import vllm as ve
from hostgap.capture.protocol.engine import ENGINES, Workload, load_engine
from hostgap.errors import HostgapError
from hostgap.model.arch import PRESETS, get_preset

TINY = get_preset("tiny")


def test_registered_under_vllm_and_importable_without_vllm():
    assert ENGINES["vllm"] in ("hostgap.capture.engines.vllm:VllmEngine", ve.VllmEngine)
    assert load_engine("vllm") is ve.VllmEngine
    code = "import sys, hostgap.capture.engines.vllm; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_missing_vllm_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(HostgapError) as e:
        ve.vllm_version()
    assert "not installed" in str(e.value) and "install-vllm.sh" in str(e.value)
    with pytest.raises(HostgapError, match="not installed"):
        ve.VllmEngine(Workload(preset="tiny", arch=TINY))


def test_every_preset_family_has_a_vllm_class():
    assert {a.family for a in PRESETS.values()} <= set(ve.ARCHITECTURES)


@pytest.mark.parametrize("preset", ["tiny", "tiny-moe", "gpt2"])
def test_model_dir_is_config_only_with_architecture(tmp_path, preset):
    arch = get_preset(preset)
    d = ve.write_model_dir(arch, tmp_path / preset, "bfloat16")
    assert sorted(p.name for p in d.iterdir()) == ["config.json"]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == [ve.ARCHITECTURES[arch.family]]
    assert cfg["vocab_size"] == arch.vocab
    assert cfg.get("num_hidden_layers", cfg.get("n_layer")) == arch.layers


def test_too_little_kv_memory():
    opts = ve.VllmOptions(kv_cache_gib=0.001, max_model_len=256)
    with pytest.raises(HostgapError) as e:
        ve.validate_options(TINY, opts, tokens_in_flight=64 * 1000)
    msg = str(e.value)
    assert msg.startswith("--kv-cache-gib: too little KV memory")
    per_token = TINY.kv_bytes_per_token("bfloat16")
    assert f"{int(0.001 * 2**30) // per_token:,} tokens" in msg and "64,000" in msg
    ve.validate_options(TINY, ve.VllmOptions(kv_cache_gib=1.0, max_model_len=256), 64 * 1000)


def test_presets_that_cannot_run_are_refused_before_starting():
    big = get_preset("qwen2.5-32b")
    with pytest.raises(HostgapError, match="cannot fit in host memory"):
        ve.validate_options(big, ve.VllmOptions(max_model_len=1024), 1024)
    with pytest.raises(HostgapError, match="positions"):
        ve.validate_options(get_preset("gpt2"), ve.VllmOptions(max_model_len=4096), 10)
    with pytest.raises(HostgapError, match="eager or graph"):
        ve.validate_options(TINY, ve.VllmOptions(mode="static"), 10)
    with pytest.raises(HostgapError, match="max_model_len"):
        ve.validate_options(
            TINY, ve.VllmOptions(chunked_prefill=False, max_num_batched_tokens=64, max_model_len=512), 10
        )


def test_engine_env_keeps_everything_in_the_run_dir(tmp_path):
    env = ve.engine_env(tmp_path)
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    for k in ("VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT"):
        assert env[k].startswith(str(tmp_path))
    assert env["VLLM_LOGGING_STREAM"] == "ext://sys.stderr"


def test_patched_env_restores(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "7")
    monkeypatch.delenv("HOSTGAP_X", raising=False)
    with ve.patched_env({"HOSTGAP_X": "1"}, drop=("VLLM_CPU_KVCACHE_SPACE",)):
        import os

        assert os.environ["HOSTGAP_X"] == "1" and "VLLM_CPU_KVCACHE_SPACE" not in os.environ
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "7" and "HOSTGAP_X" not in os.environ


def test_child_output_goes_to_the_log(tmp_path, capfd):
    log = tmp_path / "engine.log"
    with ve.output_to(log):
        subprocess.run([sys.executable, "-c", "import sys; print('child out'); print('child err', file=sys.stderr)"])
    out, err = capfd.readouterr()
    assert "child" not in out and "child" not in err
    assert "child out" in log.read_text() and "child err" in log.read_text()


def test_last_error_line_finds_the_root_cause(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text(
        "(EngineCore pid=1) INFO 11-30 [core.py:1] starting\n"
        "(EngineCore pid=1) ERROR 11-30 [core.py:2] ValueError: To serve at least one request "
        "with the models's max seq len (4096), (0.06 GiB KV cache is needed\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    assert ve.last_error_line(log).startswith("ValueError: To serve at least one request")
    assert ve.last_error_line(tmp_path / "none.log") == ""


def test_request_timing_from_engine_metrics():
    m = SimpleNamespace(queued_ts=1.0, scheduled_ts=1.001, first_token_ts=1.011, last_token_ts=1.051)
    out = SimpleNamespace(request_id="hg3", metrics=m, outputs=[SimpleNamespace(token_ids=[1] * 9)])
    (row,) = ve.request_timing([out, SimpleNamespace(request_id="x", metrics=None, outputs=[])])
    assert row["tokens"] == 9 and row["request"] == "hg3"
    assert row["prefill_ns"] == 10_000_000 and row["decode_ns"] == 40_000_000
    assert row["engine_ns"] == 51_000_000


def test_prompt_ids_are_fixed_and_in_vocab():
    a = ve.prompt_ids(1024, [5, 300], seed=1)
    assert [len(p) for p in a] == [5, 300] and a == ve.prompt_ids(1024, [5, 300], seed=1)
    assert all(3 <= t < 1024 for p in a for t in p)


def test_measure_engine_vllm_without_vllm_exits_2(tmp_path):
    code = (
        "import sys; sys.modules['vllm'] = None\n"
        "from hostgap.cli import main\n"
        "sys.argv = ['hostgap', 'measure', '--engine', 'vllm', '--preset', 'tiny', '--out', %r]\n"
        "main()" % str(tmp_path)
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [x for x in res.stderr.splitlines() if x.strip() and not x.startswith("USDT")]
    assert lines[-1].startswith("hostgap: error:") and "vLLM is not installed" in lines[-1]
    assert "Traceback" not in res.stderr


def test_engine_start_failure_is_one_line_with_the_root_cause(tmp_path, monkeypatch, capfd):
    """vLLM's own start-up error (raised in EngineCore, printed to its stderr) becomes one line
    naming the root cause and the log; nothing reaches hostgap's stdout."""
    import os
    import types

    fake = types.ModuleType("vllm")
    fake.__version__ = "0.0-test"

    class LLM:
        def __init__(self, **kw):
            assert kw["load_format"] == "dummy" and kw["skip_tokenizer_init"] is True
            assert kw["enable_prefix_caching"] is False and kw["disable_log_stats"] is False
            assert kw["profiler_config"]["detailed_trace_annotation"] is True
            assert kw["profiler_config"]["torch_profiler_with_stack"] is False
            assert os.environ["VLLM_NO_USAGE_STATS"] == "1" and "VLLM_CPU_KVCACHE_SPACE" not in os.environ
            os.write(1, b"a child's print\n")
            os.write(
                2,
                b"(EngineCore pid=9) ERROR [core.py:1] ValueError: To serve at least one request "
                b"with the models's max seq len (256), 0.5 GiB KV cache is needed\n",
            )
            raise RuntimeError("Engine core initialization failed. See root cause above.")

    fake.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    rt = ve.VllmRuntime(TINY, ve.VllmOptions(max_model_len=256), tmp_path / "run")
    with pytest.raises(HostgapError) as e:
        rt.start()
    msg = str(e.value)
    assert msg.startswith("preset tiny: vLLM could not start the engine: ValueError: To serve")
    kept = tmp_path / "run.failed"  # the run directory may go: the log is kept beside it
    assert msg.endswith(f"(log: {kept / 'engine.log'})") and "\n" not in msg
    out, _err = capfd.readouterr()
    assert "child" not in out
    assert "a child's print" in (kept / "engine.log").read_text()
    assert (kept / "engine.log").read_bytes() == (tmp_path / "run" / "engine.log").read_bytes()
    facts = json.loads((kept / "engine.json").read_text())
    assert facts["options"]["max_model_len"] == 256 and facts["preset"] == "tiny"
    assert facts["problem"].startswith("RuntimeError: Engine core initialization failed")
    assert json.loads((kept / "model-config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "3"  # the caller's environment is restored
    assert (tmp_path / "run" / "model" / "config.json").exists()


def test_engine_timing_takes_the_fastest_call_per_n_and_the_two_point_slope():
    calls = [
        {"n_tokens": 1, "wall_ns": 60, "engine_ns": 45, "engine_decode_ns": 0},
        {"n_tokens": 1, "wall_ns": 50, "engine_ns": 40, "engine_decode_ns": 0},
        {"n_tokens": 6, "wall_ns": 95, "engine_ns": 80, "engine_decode_ns": 30},
        {"n_tokens": 11, "wall_ns": 150, "engine_ns": 120, "engine_decode_ns": 70},
        {"n_tokens": 11, "traced": True, "wall_ns": 140, "engine_ns": 1, "engine_decode_ns": 1},
    ]
    t = ve.engine_timing(calls)
    assert t["by_n"]["1"] == {"wall_ns": 50, "engine_ns": 40, "engine_decode_ns": 0}
    assert t["per_step"] == {"wall_ns": 10.0, "engine_ns": 8.0, "frontend_ns": 2.0}
    assert ve.engine_timing(calls[:1])["per_step"] is None


def test_contention_counts_untraced_calls_only():
    calls = [
        {"wall_ns": 1000, "other_cpu_ns": 10},
        {"wall_ns": 1000, "other_cpu_ns": 60},
        {"wall_ns": 2000, "other_cpu_ns": 100},
        {"wall_ns": 500, "other_cpu_ns": 500, "traced": True},
        {"wall_ns": 800, "other_cpu_ns": None},
    ]
    c = ve.contention(calls)
    assert c["calls"] == 3
    assert c["other_cpu_share"] == pytest.approx((10 + 60 + 100) / 4000)
    assert c["preempted_share"] == pytest.approx(1 / 3)  # 60 > 5 % of 1000; 100 is not > 100
    assert ve.contention([{"wall_ns": 5, "other_cpu_ns": None}]) is None
    rows = __import__("hostgap.analysis.vllm_split", fromlist=["x"]).engine_rows({"contention": c})
    assert rows == [
        ("other work during runs", "4 % of a core", "33 % of 3 runs over 5 % (CPU time of other processes)")
    ]


class _StuckCore:
    """An engine core whose shutdown never returns (a hung EngineCore)."""

    def __init__(self):
        self.calls = 0

    def shutdown(self, timeout=None):
        self.calls += 1
        if self.calls == 1:
            import time as _t

            end = _t.monotonic() + 600
            while _t.monotonic() < end:
                _t.sleep(0.01)


def _fake_runtime(tmp_path, core):
    from hostgap.capture.engines.vllm import watchdog as vw

    rt = ve.VllmRuntime(TINY, ve.VllmOptions(max_model_len=256), tmp_path / "vllm")
    rt.run_dir.mkdir(parents=True)
    rt.log_path.write_text("(EngineCore pid=1) INFO ready\n")
    rt.llm = SimpleNamespace(llm_engine=SimpleNamespace(engine_core=core))
    rt.watch = vw.Watchdog(log_path=rt.log_path, poll_s=0.05).start()
    return rt


def test_ctrl_c_during_shutdown_ends_it_and_keeps_the_log(tmp_path):
    import os
    import signal
    import threading
    import time

    core = _StuckCore()
    rt = _fake_runtime(tmp_path, core)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        rt.close()
    assert time.monotonic() - t0 < 60  # not the 600 s the stuck shutdown would take
    assert rt.llm is None and core.calls == 2  # vLLM's clean-up given its bounded second chance
    facts = json.loads((tmp_path / "vllm.failed" / "engine.json").read_text())
    assert facts["problem"] == "interrupted (Ctrl-C)"
    assert (tmp_path / "vllm.failed" / "engine.log").read_text() == "(EngineCore pid=1) INFO ready\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_clean_close_keeps_no_failure_directory(tmp_path):
    rt = _fake_runtime(tmp_path, SimpleNamespace(shutdown=lambda timeout=None: None))
    rt.close()
    assert rt.kept is None and not (tmp_path / "vllm.failed").exists()
    assert rt.shutdown_ns > 0 and rt.leftovers["processes_ended"] == []
    rt.close()  # twice is harmless: nothing kept, nothing ended again
    assert rt.kept is None and rt.llm is None
