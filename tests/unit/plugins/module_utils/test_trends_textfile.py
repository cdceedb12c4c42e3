from __future__ import annotations

from prometheus_client import parser as prometheus_parser

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import CAUSE_IDS
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.plugins.module_utils._textfile import render
from ansible_collections.kvfleet.vllm.plugins.module_utils._trends import (
    sustained_causes, trends)


def history(usages, rates):
    return [{"time": 60.0 * i, "kv_cache_usage": u, "rates": {"requests_finished_per_s": r}}
            for i, (u, r) in enumerate(zip(usages, rates))]


def test_usage_falling_while_rate_holds():
    h = history([0.8 - 0.02 * i for i in range(20)], [5.0 + (i % 2) * 0.2 for i in range(20)])
    found = trends(h)["usage_falling_rate_steady"]
    assert found and found["usage_drop_fitted"] >= 0.3


def test_usage_falling_with_falling_traffic_is_not_the_trend():
    h = history([0.8 - 0.02 * i for i in range(20)], [5.0 - 0.2 * i for i in range(20)])
    assert trends(h)["usage_falling_rate_steady"] is None


def test_flat_usage_or_too_little_history():
    assert trends(history([0.5] * 20, [5.0] * 20))["usage_falling_rate_steady"] is None
    assert trends(history([0.9, 0.1], [5.0, 5.0]))["usage_falling_rate_steady"] is None


def test_sustained_causes():
    cap = {"causes": [{"id": "concurrency_cap"}]}
    both = {"causes": [{"id": "concurrency_cap"}, {"id": "request_errors"}]}
    assert sustained_causes([cap, both, cap, cap, cap]) == ["concurrency_cap"]
    assert sustained_causes([cap]) == []


def test_textfile_parses_back_and_omits_unexposed_values():
    snap = {"healthy": True, "kv_cache_usage": 0.25, "num_gpu_blocks": 256, "block_size": 32,
            "used_blocks_estimate": 64, "requests_running": 2, "requests_waiting": 30,
            "rates": {"requests_finished_per_s": 1.5, "generation_tokens_per_s": None,
                      "preemptions_per_s": 0.0},
            "unit_memory": {"rss_bytes": 3 * 1024 ** 3, "processes": 2, "main_pid": 9, "gpu_bytes": 70 * 1024 ** 3}}
    results = [
        {"instance": 'a"1', "snapshot": snap, "time": 1796040000.5, "sustained": ["concurrency_cap"],
         "diagnosis": {"verdict": "degraded", "causes": [{"id": "concurrency_cap"}]},
         "trends": {"usage_falling_rate_steady": None}},
        {"instance": "b", "snapshot": None, "time": 1796040001.0, "sustained": [],
         "diagnosis": {"verdict": "unhealthy", "causes": [{"id": "engine_down"}]}, "trends": {}},
    ]
    text = render(results)
    ours = dict(((s.name, tuple(sorted(s.labels.items()))), s.value) for s in parse(text)[0])
    theirs = {}
    for fam in prometheus_parser.text_string_to_metric_families(text):
        for s in fam.samples:
            theirs[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert ours == theirs
    assert ours[("kvfleet_vllm_kv_cache_usage_ratio", (("instance", 'a"1'),))] == 0.25
    assert ours[("kvfleet_vllm_memory_rss_bytes", (("instance", 'a"1'),))] == 3 * 1024 ** 3
    assert [k for k in ours if k[0] == "kvfleet_vllm_memory_rss_bytes"] == [
        ("kvfleet_vllm_memory_rss_bytes", (("instance", 'a"1'),))]
    assert ours[("kvfleet_vllm_memory_gpu_bytes", (("instance", 'a"1'),))] == 70 * 1024 ** 3
    # without NVML (gpu_bytes null) the series is absent, not 0
    snap["unit_memory"]["gpu_bytes"] = None
    assert "kvfleet_vllm_memory_gpu_bytes{" not in render(results)
    snap["unit_memory"]["gpu_bytes"] = 70 * 1024 ** 3
    assert ours[("kvfleet_vllm_up", (("instance", "b"),))] == 0
    assert ours[("kvfleet_vllm_verdict", (("instance", "b"), ("verdict", "unhealthy")))] == 1
    assert ours[("kvfleet_vllm_cause", (("cause", "concurrency_cap"), ("instance", 'a"1')))] == 1
    assert ours[("kvfleet_vllm_cause_sustained", (("cause", "concurrency_cap"), ("instance", 'a"1')))] == 1
    assert sum(1 for k in ours if k[0] == "kvfleet_vllm_cause") == 2 * len(CAUSE_IDS)
    # a rate vLLM did not give, and every value of the dead instance, are absent, not 0
    assert not [k for k in ours if k[0] == "kvfleet_vllm_generation_tokens_rate"]
    assert not [k for k in ours if k[0] == "kvfleet_vllm_requests_running" and k[1] == (("instance", "b"),)]


def test_textfile_latency_gauges_only_for_finite_quantiles():
    lat = {"basis": "window", "seconds": 60.0,
           "ttft": {"p50": 0.007917, "p90": 0.016333, "p99": 0.019633, "count": 11, "reason": None},
           "itl": {"p50": None, "p90": None, "p99": None, "count": 0,
                   "reason": "nothing observed in the window (no token generated)"},
           # not from _latency, but a textfile must never carry them
           "queue": {"p50": float("nan"), "p90": float("inf"), "p99": True},
           "e2e": None}
    results = [{"instance": "a", "snapshot": {"healthy": True, "latency": lat}, "time": 1.0,
                "sustained": [], "diagnosis": {"verdict": "healthy", "causes": []}, "trends": {}},
               {"instance": "b", "snapshot": None, "time": 1.0, "sustained": [],
                "diagnosis": {"verdict": "unhealthy", "causes": [{"id": "engine_down"}]}, "trends": {}}]
    text = render(results)
    found = dict((tuple(sorted(s.labels.items())), s.value) for s in parse(text)[0]
                 if s.name == "kvfleet_vllm_latency_seconds")
    assert found == {
        (("instance", "a"), ("metric", "ttft"), ("quantile", "0.5")): 0.007917,
        (("instance", "a"), ("metric", "ttft"), ("quantile", "0.9")): 0.016333,
        (("instance", "a"), ("metric", "ttft"), ("quantile", "0.99")): 0.019633}
    assert "# TYPE kvfleet_vllm_latency_seconds gauge" in text
    list(prometheus_parser.text_string_to_metric_families(text))
