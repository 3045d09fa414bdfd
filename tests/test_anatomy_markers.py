"""Step markers: the batch composition each family's annotation carries, and which family wins.

Expected fields are worked out by hand from the formats in hostgap.anatomy.markers.
"""

from __future__ import annotations

import pytest

from anatomy_builders import Timeline
from hostgap.anatomy.markers import COMPOSITION_FIELDS, composition, find_markers, step_markers
from hostgap.errors import HostgapError


def fields(**kw):
    out = dict.fromkeys(COMPOSITION_FIELDS, 0)
    out.update(kw)
    return out


def test_hostgap_annotation_composition():
    """b requests of q tokens each, KV s each: requests b, q b*q, s b*s, qq b*q², qs b*q*s."""
    assert composition("hostgap.step#0:prefill:b2:q8:s10") == (
        "prefill",
        fields(ctx_requests=2, ctx_q=16, ctx_s=20, ctx_qq=128, ctx_qs=160),
    )
    assert composition("hostgap.step#3:decode:b4:q1:s100") == (
        "decode",
        fields(gen_requests=4, gen_q=4, gen_s=400, gen_qq=4, gen_qs=400),
    )


def test_vllm_detailed_composition_is_mixed_when_both_parts_have_requests():
    name = "execute_12_context_1(sq8sk10sqsq64sqsk80)_generation_4(sq4sk40sqsq4sqsk40)"
    kind, f = composition(name)
    assert kind == "mixed"
    assert f == dict(zip(COMPOSITION_FIELDS, [1, 8, 10, 64, 80, 4, 4, 40, 4, 40]))


@pytest.mark.parametrize(
    "name, kind, ctx_qq, gen_qq",
    [
        ("execute_context_2(16_130)_generation_3(3)", "mixed", 130, 3),  # no Σq² for decode: Σq
        ("execute_context_0(0)_generation_2(2_5)", "decode", None, 5),
        ("execute_context_1(7)_generation_0(0)", "prefill", None, 0),
        ("execute_context_0(0)_generation_0(0)", "unknown", None, 0),
    ],
)
def test_vllm_short_composition(name, kind, ctx_qq, gen_qq):
    k, f = composition(name)
    assert k == kind
    assert (f["ctx_qq"], f["gen_qq"]) == (ctx_qq, gen_qq)
    assert f["ctx_s"] is None and f["gen_s"] is None and f["ctx_qs"] is None and f["gen_qs"] is None


def test_vllm_short_counts():
    _, f = composition("execute_context_2(16_130)_generation_3(3)")
    assert (f["ctx_requests"], f["ctx_q"], f["gen_requests"], f["gen_q"]) == (2, 16, 3, 3)


@pytest.mark.parametrize(
    "name, kind, f",
    [
        (
            "step[forward_mode=extend bs=3]",
            "prefill",
            dict.fromkeys(COMPOSITION_FIELDS) | {"ctx_requests": 3, "gen_requests": 0},
        ),
        (
            "step[forward_mode=decode bs=5]",
            "decode",
            dict.fromkeys(COMPOSITION_FIELDS) | {"gen_requests": 5, "gen_q": 5, "ctx_requests": 0},
        ),
        ("step[mode: mixed bs=4]", "mixed", None),
        ("step[prefill decode]", "mixed", None),
        ("step[decode]", "decode", None),
        ("step[forward_mode=decode batch_size=x7]", "decode", None),
        ("step[forward_mode=idle]", "unknown", None),
        ("ProfilerStep#3", "unknown", None),
    ],
)
def test_sglang_and_other_compositions(name, kind, f):
    assert composition(name) == (kind, f)


def annotations(*names) -> Timeline:
    t = Timeline()
    for i, n in enumerate(names):
        t.annotation(n, 100 * i, 50)
    t.op("aten::mm", 1, 1)
    return t


def test_family_preference(tmp_path):
    hostgap = "hostgap.step#0:decode:b1:q1:s8"
    vllm = "execute_context_0(0)_generation_1(1)"
    sglang = "step[forward_mode=decode bs=1]"
    tr = annotations(hostgap, vllm, sglang, "ProfilerStep#1").load(tmp_path)
    m = step_markers(tr)
    assert m.family == "hostgap" and len(m.rows) == 1 and m.note == ""
    tr = annotations(vllm, sglang, sglang).load(tmp_path)
    m = step_markers(tr)
    assert m.family == "sglang" and len(m.rows) == 2 and "step[" in m.note
    tr = annotations(vllm, "ProfilerStep#1").load(tmp_path)
    assert find_markers(tr)[0] == "vllm"
    tr = annotations("ProfilerStep#1", "other").load(tmp_path)
    fam, rows = find_markers(tr)
    assert fam == "profiler_step" and len(rows) == 1
    tr = annotations("other").load(tmp_path)
    fam, rows = find_markers(tr)
    assert fam == "whole_trace" and len(rows) == 0


def test_legacy_operator_step_ranges_are_used_when_no_annotation_matches(tmp_path):
    t = Timeline()
    t.op("ProfilerStep#1", 0, 50)
    t.op("ProfilerStep#2", 50, 50)
    t.annotation("unrelated", 0, 10)
    m = step_markers(t.load(tmp_path))
    assert m.family == "profiler_step" and len(m.rows) == 2


def test_custom_marker(tmp_path):
    tr = annotations("my_step_1", "my_step_2", "other").load(tmp_path)
    m = step_markers(tr, r"my_step")
    assert m.family == "custom" and len(m.rows) == 2
    with pytest.raises(HostgapError, match="no annotation matches"):
        step_markers(tr, r"nothing")
    with pytest.raises(HostgapError, match="invalid regular expression"):
        step_markers(tr, r"(")
