"""Step markers: which annotations delimit engine steps, and the batch composition they carry.

Preference (METHOD.md §3): a user ``--step-marker REGEX``; hostgap's own capture annotations;
vLLM ``execute_...``; SGLang ``step[...]``; ``ProfilerStep#N``; else the whole trace is one step.

hostgap's capture annotation (one ``record_function`` per forward pass)::

    hostgap.step#{index}:{kind}:b{batch}:q{q}:s{s}

kind ``prefill`` or ``decode``; q = tokens per request processed this step; s = KV length per
request after the step.

vLLM's detailed annotation (``detailed_trace_annotation``)::

    execute_{T}_context_{n}(sq{Σq}sk{Σs}sqsq{Σq²}sqsk{Σq·s})_generation_{m}(sq..sk..sqsq..sqsk..)

and the short form ``execute_context_{n}({Σq}[_{Σq²}])_generation_{m}({Σq})``.
Composition field names everywhere: ``ctx_requests, ctx_q, ctx_s, ctx_qq, ctx_qs,
gen_requests, gen_q, gen_s, gen_qq, gen_qs``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from hostgap.errors import HostgapError
from hostgap.events import Kind, Trace

COMPOSITION_FIELDS = (
    "ctx_requests",
    "ctx_q",
    "ctx_s",
    "ctx_qq",
    "ctx_qs",
    "gen_requests",
    "gen_q",
    "gen_s",
    "gen_qq",
    "gen_qs",
)

HOSTGAP_MARKER = re.compile(r"^hostgap\.step#(\d+):(prefill|decode):b(\d+):q(\d+):s(\d+)$")
VLLM_DETAILED = re.compile(
    r"^execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
    r"_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
)
VLLM_SHORT = re.compile(r"^execute_context_(\d+)\((\d+)(?:_(\d+))?\)_generation_(\d+)\((\d+)(?:_(\d+))?\)")
VLLM_ANY = re.compile(r"^execute_(\d+_)?context_")
SGLANG = re.compile(r"^step\[(.*)\]$")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def hostgap_step_name(index: int, kind: str, batch: int, q: int, s: int) -> str:
    """The capture annotation for one forward pass (parsed back by :func:`composition`)."""
    return f"hostgap.step#{index}:{kind}:b{batch}:q{q}:s{s}"


@dataclass(frozen=True)
class MarkerFamily:
    name: str  # "custom", "hostgap", "vllm", "sglang", "profiler_step", "whole_trace"
    pattern: re.Pattern


FAMILIES = (
    MarkerFamily("hostgap", HOSTGAP_MARKER),
    MarkerFamily("vllm", VLLM_ANY),
    MarkerFamily("sglang", SGLANG),
    MarkerFamily("profiler_step", PROFILER_STEP),
)


@dataclass(frozen=True)
class Markers:
    """The step markers chosen: family, trace rows (any order; empty: the whole trace is one
    step) and a note saying why, when a choice was made between families."""

    family: str
    rows: np.ndarray
    note: str = ""


def step_markers(trace: Trace, step_marker: str | None = None) -> Markers:
    """The annotations that delimit engine steps (module docstring for the order).

    Host-side annotations are searched first; legacy traces whose ``ProfilerStep#N`` ranges carry
    the category ``Operator`` (loaded as framework ops) are searched when no annotation matches.
    When a trace carries both vLLM-style ``execute_…`` and SGLang ``step[…]`` ranges (SGLang's
    own traces do), ``step[…]`` bounds the engine iterations: ``execute_…`` ranges there can
    enclose the wait for the previous batch's GPU work, folding it into one step.
    """
    if step_marker:
        try:
            pattern = re.compile(step_marker)
        except re.error as e:
            raise HostgapError("--step-marker", f"invalid regular expression ({e})") from None
        rows = _matching(trace, pattern.search)
        if not len(rows):
            raise HostgapError(trace.meta.path, f"no annotation matches --step-marker {step_marker!r}")
        return Markers("custom", rows)
    found = {fam.name: _matching(trace, fam.pattern.match) for fam in FAMILIES}
    if len(found["vllm"]) and len(found["sglang"]) and not len(found["hostgap"]):
        return Markers(
            "sglang",
            found["sglang"],
            "both execute_ and step[ annotations: steps from step[ "
            "(execute_ ranges can hold the wait for earlier GPU work)",
        )
    for fam in FAMILIES:
        if len(found[fam.name]):
            return Markers(fam.name, found[fam.name])
    return Markers("whole_trace", np.zeros(0, dtype=np.int64))


NO_MARKERS = "no step markers: the whole trace is one step"
"""The words every command uses for a trace without step markers (family ``whole_trace``)."""


def describe(family: str) -> str:
    """What delimited the steps, in the words every command prints:
    ``describe("vllm") == "vllm markers"``; ``describe("whole_trace") == NO_MARKERS``."""
    return NO_MARKERS if family == "whole_trace" else f"{family} markers"


def find_markers(trace: Trace, step_marker: str | None = None) -> tuple[str, np.ndarray]:
    """(family name, marker rows). Empty rows: the whole trace is one step."""
    m = step_markers(trace, step_marker)
    return m.family, m.rows


def _matching(trace: Trace, predicate) -> np.ndarray:
    """Host annotation rows whose name satisfies ``predicate``; else framework-op rows (legacy
    ``Operator``-category step ranges)."""
    ev = trace.events
    named = trace.name_mask(predicate)
    rows = np.flatnonzero(named & (ev.kind == Kind.ANNOTATION))
    if not len(rows):
        rows = np.flatnonzero(named & (ev.kind == Kind.CPU_OP))
    return rows


def composition(name: str) -> tuple[str, dict[str, int | None] | None]:
    """(kind, composition fields or None) parsed from a marker name.

    kind is ``prefill``, ``decode`` or ``mixed`` when the annotation says, else ``unknown``.
    """
    m = HOSTGAP_MARKER.match(name)
    if m:
        _, kind, b, q, s = m.groups()
        b, q, s = int(b), int(q), int(s)
        fields: dict[str, int | None] = dict.fromkeys(COMPOSITION_FIELDS, 0)
        pre = "ctx" if kind == "prefill" else "gen"
        fields.update(
            {f"{pre}_requests": b, f"{pre}_q": b * q, f"{pre}_s": b * s, f"{pre}_qq": b * q * q, f"{pre}_qs": b * q * s}
        )
        return kind, fields
    m = VLLM_DETAILED.match(name)
    if m:
        v = [int(x) for x in m.groups()]
        fields = dict(zip(COMPOSITION_FIELDS, [v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]]))
        return _kind(fields), fields
    m = VLLM_SHORT.match(name)
    if m:
        n, cq, cqq, g, gq, gqq = m.groups()
        fields = {
            "ctx_requests": int(n),
            "ctx_q": int(cq),
            "ctx_s": None,
            "ctx_qq": int(cqq) if cqq else None,
            "ctx_qs": None,
            "gen_requests": int(g),
            "gen_q": int(gq),
            "gen_s": None,
            "gen_qq": int(gqq) if gqq else int(gq),
            "gen_qs": None,
        }
        return _kind(fields), fields
    m = SGLANG.match(name)
    if m:
        return _sglang(m.group(1))
    return "unknown", None


def _kind(f: dict) -> str:
    ctx, gen = f.get("ctx_requests") or 0, f.get("gen_requests") or 0
    if ctx and gen:
        return "mixed"
    if ctx:
        return "prefill"
    if gen:
        return "decode"
    return "unknown"


SGLANG_TOKENS = ("toks", "tokens", "num_tokens", "extend_tokens", "input_tokens")
"""Keys of an SGLang ``step[...]`` annotation that give the tokens processed in the step."""


def _sglang(body: str) -> tuple[str, dict | None]:
    """SGLang ``step[...]``: key=value pairs when present.

    ``forward_mode``/``mode`` gives the kind; ``bs``/``batch_size``/``batch`` the requests; ``toks``
    (or ``tokens``, ``num_tokens``, ``extend_tokens``, ``input_tokens``) the tokens processed this
    step, Σq: ``ctx_q`` of a prefill (extend) step, ``gen_q`` of a decode step (where it defaults
    to the batch size, one token per request). A mixed step's fields stay null (its tokens cannot
    be split between prefill and decode), as do the sequence lengths, which the annotation lacks.

    >>> _sglang("forward_mode=EXTEND bs=8 toks=15360")[1]["ctx_q"]
    15360
    """
    pairs = dict(re.findall(r"(\w+)\s*[=:]\s*([\w.]+)", body))
    mode = (pairs.get("forward_mode") or pairs.get("mode") or body).lower()
    kind = "unknown"
    if "extend" in mode or "prefill" in mode:
        kind = "prefill"
    if "decode" in mode:
        kind = "decode" if kind == "unknown" else "mixed"
    if "mixed" in mode:
        kind = "mixed"
    bs = _count(pairs, ("bs", "batch_size", "batch"))
    toks = _count(pairs, SGLANG_TOKENS)
    if kind not in ("prefill", "decode") or (bs is None and toks is None):
        return kind, None
    fields = dict.fromkeys(COMPOSITION_FIELDS, None)
    pre, other = ("ctx", "gen") if kind == "prefill" else ("gen", "ctx")
    fields[f"{pre}_requests"] = bs
    fields[f"{other}_requests"] = 0
    fields[f"{pre}_q"] = toks if toks is not None else (bs if kind == "decode" else None)
    return kind, fields


def _count(pairs: dict[str, str], keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` whose value is a whole number, else None."""
    for k in keys:
        v = pairs.get(k)
        if v is not None and v.isdigit():
            return int(v)
    return None
