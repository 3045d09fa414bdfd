"""``hostgap rules``: Prometheus recording rules that compute watch's estimate per instance.

Every expression reads the engines' own series only, through the instance's Prometheus:

- vLLM (``model estimate``), per class (engine, model, hardware) with a calibration, over a rate
  window W, summed over the engine's ``engine`` index (data-parallel engines of one server)::

      hostgap:step_period_seconds   = rate(vllm:inter_token_latency_seconds_sum) / rate(…_count)
      hostgap:sequences_per_step    = rate(vllm:generation_tokens_total) / rate(vllm:iteration_tokens_total_count)
      hostgap:model_gpu_seconds_per_step = a + b · batch                       (the class's GPU line)
      hostgap:model_rel_error       = block_rel_err + extrapolation(batch)      (as watch's)
      hostgap:host_exposed_share    = clamp(1 − gpu / period, 0, 1)
      hostgap:host_exposed_share_low/high = clamp(1 − gpu · (1 ± err) / period, 0, 1)

  exactly :func:`hostgap.server.watch.estimate.vllm_model`: an instance whose whole interval
  lies above 1 (the model's GPU time exceeds the measured period, ``gpu·(1−err) > period``) gets
  no share, as watch withholds it. Every series carries ``calibration`` (the class's runs) and
  ``hostgap_class``; ``hostgap:calibration_out_of_range`` is 1 while an instance's batch lies
  outside the class's calibrated batches (the class wants a new attach at that load), else 0;
  ``hostgap:step_anomaly`` is 1 while the period lies above the model's band at the instance's
  batch and prefill (``hostgap:model_step_period_high_seconds``, :mod:`hostgap.server.watch.anomaly`),
  0 while within it.
  The selectors match the class's ``model_name`` (and its hardware through a label the scrape
  configuration sets, ``--hardware-label``): a server of a class without calibration matches no
  rule and gets no series at all, never a 0.
- SGLang (``device timer``), no calibration: ``1 − rate(sglang:forward_execution_seconds_total)
  / Σ rate(sglang:scheduler_stage_seconds_total{category!="idle"})`` per scheduler rank; the share
  is rank 0's, low and high the least and greatest over the ranks (watch's, without the
  occupancy gauge); shares outside [0, 1] (counters out of step) are left out.

The step period and batch are recorded for SGLang too
(``sglang:inter_token_latency_seconds``; rank 0's ``sglang:realtime_tokens_total{mode="decode"}``
over its ``sglang:cuda_graph_passes_total``, as watch reads them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hostgap.errors import HostgapError
from hostgap.server.fleet.classes import ClassCalibration, quoted
from hostgap.server.watch.anomaly import HOST_TOLERANCE

SHARE = "hostgap:host_exposed_share"
PERIOD = "hostgap:step_period_seconds"
BATCH = "hostgap:sequences_per_step"
STEPS = "hostgap:steps_per_second"
GPU = "hostgap:model_gpu_seconds_per_step"
ERR = "hostgap:model_rel_error"
MODEL_PERIOD = "hostgap:model_step_period_seconds"
OUT_OF_RANGE = "hostgap:calibration_out_of_range"
PREFILL = "hostgap:prefill_share"
PREFILL_PER_STEP = "hostgap:prefill_tokens_per_step"
MODEL_PERIOD_HIGH = "hostgap:model_step_period_high_seconds"
ANOMALY = "hostgap:step_anomaly"
RECORDED = (
    SHARE,
    SHARE + "_low",
    SHARE + "_high",
    PERIOD,
    BATCH,
    STEPS,
    GPU,
    ERR,
    MODEL_PERIOD,
    OUT_OF_RANGE,
    PREFILL,
    PREFILL_PER_STEP,
    MODEL_PERIOD_HIGH,
    ANOMALY,
)


@dataclass(frozen=True)
class RulesConfig:
    window: str = "1m"
    """The rate window (a Prometheus duration): at least four scrape intervals."""
    hardware_label: str | None = None
    """A label the scrape configuration sets on each server's series naming its hardware."""
    sglang: bool = True
    """Add the SGLang device-timer group (it needs no calibration)."""


def _num(x: float) -> str:
    return repr(float(x))


def _sum(expr: str, by: str = "engine") -> str:
    return f"sum without ({by}) ({expr})"


def class_selector(cls: ClassCalibration, cfg: RulesConfig) -> str:
    parts = [f"model_name={quoted(cls.model)}"]
    if cfg.hardware_label and cls.hardware:
        parts.append(f"{cfg.hardware_label}={quoted(cls.hardware)}")
    return "{" + ",".join(parts) + "}"


def _check_classes(classes: Sequence[ClassCalibration], cfg: RulesConfig) -> None:
    seen: dict[tuple[str, str, str | None], str] = {}
    for c in classes:
        if c.engine != "vllm":
            raise HostgapError(c.name, f"engine {c.engine!r}: model-estimate rules are for vLLM classes")
        key = (c.engine, c.model, c.hardware if cfg.hardware_label else None)
        if key in seen:
            raise HostgapError(
                f"{seen[key]}, {c.name}",
                f"two calibrations for model {c.model!r} on different hardware: name the label that "
                "tells their servers apart with --hardware-label",
            )
        seen[key] = c.name


def vllm_group(cls: ClassCalibration, cfg: RulesConfig) -> dict:
    """The recording rules of one vLLM class (see the module docstring)."""
    sel, w, cal = class_selector(cls, cfg), cfg.window, cls.calibration
    mine = "{" + f"calibration={quoted(cls.name)}" + "}"
    labels = {"calibration": cls.name, "hostgap_class": f"{cls.engine}/{cls.model}/{cls.hardware or 'any'}"}
    steps = _sum(f"rate(vllm:iteration_tokens_total_count{sel}[{w}])")
    batch, gpu, err, period = BATCH + mine, GPU + mine, ERR + mine, PERIOD + mine
    lo, hi = min(cal.batches), max(cal.batches)
    if lo == hi:  # one calibrated batch: |batch − edge| / min(batch, edge)
        extra = f"clamp_min({batch} - {_num(hi)}, 0) / {_num(hi)} + clamp_min({_num(lo)} - {batch}, 0) / {batch}"
    else:  # several: |batch − edge| / max(batch, edge)
        extra = f"clamp_min({batch} - {_num(hi)}, 0) / {batch} + clamp_min({_num(lo)} - {batch}, 0) / {_num(lo)}"
    shown = f"{gpu} * (1 - {err}) <= {period}"  # the interval reaches below 1: watch shows it

    def rule(name: str, expr: str) -> dict:
        return {"record": name, "expr": expr, "labels": dict(labels)}

    prompt = _sum(f"rate(vllm:prompt_tokens_total{sel}[{w}])")
    gen = _sum(f"rate(vllm:generation_tokens_total{sel}[{w}])")
    return {
        "name": f"hostgap-{labels['hostgap_class']}",
        "rules": [
            rule(STEPS, steps),
            rule(
                PERIOD,
                f"{_sum(f'rate(vllm:inter_token_latency_seconds_sum{sel}[{w}])')}\n/ "
                f"({_sum(f'rate(vllm:inter_token_latency_seconds_count{sel}[{w}])')} > 0)",
            ),
            rule(BATCH, f"{gen}\n/ ({steps} > 0)"),
            rule(PREFILL, f"{prompt}\n/ (({prompt} + {gen}) > 0)"),
            rule(GPU, f"({_num(cal.gpu_intercept_s)} + {_num(cal.gpu_slope_s)} * {batch}) > 0"),
            rule(ERR, f"{_num(cal.block_rel_err)} + {extra}"),
            rule(PREFILL_PER_STEP, f"{prompt}\n/ ({steps} > 0)"),
            rule(
                MODEL_PERIOD,
                f"{gpu} + {_num(cal.host_intercept_s)} + {_num(cal.host_slope_s)} * {batch}\n"
                f"+ {_num(max(cal.gpu_slope_s, 0.0))} * {PREFILL_PER_STEP + mine}",
            ),
            rule(MODEL_PERIOD_HIGH, f"{MODEL_PERIOD + mine} * (1 + {err} + {_num(HOST_TOLERANCE)})"),
            rule(ANOMALY, f"{period} > bool {MODEL_PERIOD_HIGH + mine}"),
            rule(SHARE, f"clamp(1 - {gpu} / {period}, 0, 1)\nand ({shown})"),
            rule(SHARE + "_low", f"clamp(1 - {gpu} * (1 + {err}) / {period}, 0, 1)\nand ({shown})"),
            rule(SHARE + "_high", f"clamp(1 - {gpu} * (1 - {err}) / {period}, 0, 1)\nand ({shown})"),
            rule(OUT_OF_RANGE, f"({batch} < bool {_num(lo)}) + ({batch} > bool {_num(hi)})"),
        ],
    }


def sglang_group(cfg: RulesConfig) -> dict:
    """SGLang's device-timer share per server (see the module docstring)."""
    w = cfg.window

    def per_rank(sel: str) -> str:
        forward = f"rate(sglang:forward_execution_seconds_total{sel}[{w}])"
        stages = f'sglang:scheduler_stage_seconds_total{{category!="idle"{"," + sel[1:-1] if sel else ""}}}'
        busy = f"sum without (category) (rate({stages}[{w}]))"
        return f"((1 - {forward} / ({busy} > 0)) >= 0 <= 1)"

    first = '{tp_rank=~"0|"}'
    labels = {"hostgap_basis": "device timer"}
    passes = f"rate(sglang:cuda_graph_passes_total{first}[{w}])"
    itl = "sglang:inter_token_latency_seconds"
    decode = 'sglang:realtime_tokens_total{mode="decode",tp_rank=~"0|"}'
    return {
        "name": "hostgap-sglang",
        "rules": [
            {"record": SHARE, "expr": f"max without (tp_rank) {per_rank(first)}", "labels": labels},
            {"record": SHARE + "_low", "expr": f"min without (tp_rank) {per_rank('')}", "labels": labels},
            {"record": SHARE + "_high", "expr": f"max without (tp_rank) {per_rank('')}", "labels": labels},
            {
                "record": PERIOD,
                "expr": f"sum without (tp_rank) (rate({itl}_sum[{w}]))\n/ "
                f"(sum without (tp_rank) (rate({itl}_count[{w}])) > 0)",
                "labels": labels,
            },
            {
                "record": BATCH,
                "expr": f"sum without (tp_rank, mode) (rate({decode}[{w}]))\n/ "
                f"(sum without (tp_rank, mode) ({passes}) > 0)",
                "labels": labels,
            },
        ],
    }


def rules_document(classes: Sequence[ClassCalibration], cfg: RulesConfig | None = None) -> dict:
    """The rule file (``groups``) for ``classes``."""
    cfg = cfg or RulesConfig()
    _check_classes(classes, cfg)
    groups = [vllm_group(c, cfg) for c in classes]
    if cfg.sglang:
        groups.append(sglang_group(cfg))
    return {"groups": groups}


def rules_yaml(doc: dict, header: Sequence[str] = ()) -> str:
    """The rule file as YAML, ``header`` lines as comments above it."""
    import yaml  # type: ignore[import-untyped,unused-ignore]

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, s: str) -> yaml.ScalarNode:
        style = "|" if "\n" in s else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)

    _Dumper.add_representer(str, _str)
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
    return "".join(f"# {line}\n" for line in header) + body
