"""The transformers engine: annotations, cache modes, capture safety, model building."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hostgap.capture.engines.hf.decode import HFEngine, cache_keyword  # noqa: E402
from hostgap.capture.protocol.engine import ENGINES, Workload, load_engine, step_name  # noqa: E402
from hostgap.capture.protocol.workload import (  # noqa: E402
    arch_from_checkpoint,
    build_model,
    check_fits,
    needed_bytes,
)
from hostgap.errors import HostgapError  # noqa: E402
from hostgap.events import Kind  # noqa: E402
from hostgap.model.arch import get_preset  # noqa: E402
from hostgap.readers import load_trace  # noqa: E402


def _work(preset="tiny", **kw) -> Workload:
    base = dict(preset=preset, prompt_len=16, batch=2, max_new_tokens=16)
    base.update(kw)
    base.setdefault("arch", get_preset(preset) if preset != "local" else None)
    return Workload(**base)


def _tokens(engine: HFEngine, n: int) -> list:
    seen = []
    orig = engine._decode

    def spy(i, ids, rf):
        seen.append(ids.tolist())
        return orig(i, ids, rf)

    engine._decode = spy
    engine.generate(n)
    engine._decode = orig
    return seen + [engine.last_tokens.tolist()]


def test_registry_and_step_names():
    assert load_engine("hf") is HFEngine and ENGINES["hf"] is HFEngine
    assert step_name(0, "prefill", 4, 128, 128) == "hostgap.step#0:prefill:b4:q128:s128"


def test_eager_and_static_decode_the_same_tokens():
    out = {}
    for mode in ("eager", "static"):
        e = HFEngine(_work(mode=mode))
        e.prepare()
        out[mode] = _tokens(e, 12)
        assert len(out[mode]) == 12 and all(len(t) == 2 for t in out[mode])
        assert _tokens(e, 12) == out[mode]  # no state carries over between calls
        e.close()
    assert out["eager"] == out["static"]


def test_one_annotation_per_step(tmp_path):
    e = HFEngine(_work(prompt_len=8, batch=3))
    e.prepare()
    wall, path = e.generate_traced(5, tmp_path)
    assert wall > 0 and path.exists()
    t = load_trace(str(path))
    ann = t.events.of_kind(Kind.ANNOTATION) & t.name_mask(lambda s: s.startswith("hostgap.step#"))
    names = sorted(t.names_of(ann.nonzero()[0]), key=lambda s: int(s.split("#")[1].split(":")[0]))
    assert names == ["hostgap.step#0:prefill:b3:q8:s8"] + [
        f"hostgap.step#{i}:decode:b3:q1:s{8 + i}" for i in range(1, 5)
    ]


@pytest.mark.parametrize("preset", ["tiny", "gpt2"])
def test_static_step_is_capturable(preset):
    """The graph-mode decode step runs on the meta device, where any host read of a tensor
    value (``.item()``, ``bool(t)``, ``.tolist()``) raises: so it has no host sync and can be
    captured as a CUDA graph. Both cache keywords (5.17, 5.24) go through ``cache_keyword``."""
    w = _work(preset, mode="static", device="meta", prompt_len=8, max_new_tokens=8)
    e = HFEngine(w)
    e.model = build_model(w)
    e._kw = cache_keyword(e.model)
    e._prompt = torch.zeros((w.batch, w.prompt_len), dtype=torch.long, device="meta")
    e._setup_static(w.prompt_len + w.max_new_tokens)
    with torch.inference_mode():
        e._static_prefill()
        e._static_step()
        e._static_step()
    with pytest.raises(RuntimeError):
        e._static["pos"].item()  # the check itself works: meta refuses host reads


def test_graph_mode_needs_cuda():
    with pytest.raises(HostgapError, match="CUDA"):
        HFEngine(_work(mode="graph"))
    with pytest.raises(HostgapError, match="unknown mode"):
        HFEngine(_work(mode="turbo"))


def test_model_built_in_target_dtype():
    m = build_model(_work(dtype="bfloat16"))
    dtypes = {p.dtype for p in m.parameters()}
    assert dtypes == {torch.bfloat16}
    assert sum(p.numel() for p in m.parameters()) == get_preset("tiny").param_count()


def test_memory_check():
    arch = get_preset("llama-3.1-8b")
    assert needed_bytes(arch, "bfloat16", 1, 2048) > arch.weight_bytes("bfloat16")
    assert needed_bytes(arch, "bfloat16", 64, 2048) > needed_bytes(arch, "bfloat16", 1, 2048)
    with pytest.raises(HostgapError, match="cannot fit in memory"):
        check_fits(get_preset("qwen2.5-32b"), "bfloat16", 1, 256, "cpu")
    assert check_fits(get_preset("tiny"), "float32", 1, 256, "cpu") > 0


def test_local_checkpoint(tmp_path):
    w = _work()
    build_model(w).save_pretrained(tmp_path / "ckpt")
    arch = arch_from_checkpoint(str(tmp_path / "ckpt"))
    assert arch.param_count() == get_preset("tiny").param_count()
    e = HFEngine(_work(preset="local", arch=arch, model_path=str(tmp_path / "ckpt")))
    e.prepare()
    assert e.generate(3) > 0
    with pytest.raises(HostgapError, match="no config.json"):
        arch_from_checkpoint(str(tmp_path))


def test_a_step_that_does_not_advance_is_caught():
    e = HFEngine(_work(mode="static", prompt_len=8, max_new_tokens=8))
    e.prepare()
    assert e.generate(5) > 0
    e._static_step = lambda: None  # a "replay" that does nothing
    with pytest.raises(HostgapError, match="did not advance"):
        e.generate(5)
