from __future__ import annotations

import pytest

from ansible_collections.kvfleet.vllm.plugins.modules import cache_gate
from ansible_collections.kvfleet.vllm.tests.unit.plugins.modules.conftest import (
    REFUSED, FakeServer, capture_path, routes)

URL = "http://127.0.0.1:8000"


def sequence(condition):
    """Serve the recorded captures of one condition in order, one per scrape."""
    bodies = [capture_path("vllm-0.32.0-cpu-%s-%d.txt" % (condition, i)) for i in range(3)]
    return lambda: bodies.pop(0)


def test_real_capped_sequence_is_concurrency_cap(run_module):
    server = FakeServer(routes(sequence("cap2")))
    failed, result = run_module(cache_gate, {"url": URL, "interval": 0, "max_num_seqs": 2}, server)
    assert not failed  # degraded is not in the default fail_on
    assert result["verdict"] == "degraded"
    assert [c["id"] for c in result["causes"]] == ["concurrency_cap"]
    assert len(result["samples"]) == 3 and "rates" in result["samples"][1]
    assert "engines" not in result["samples"][0]


def test_latency_over_the_window_of_a_real_busy_sequence(run_module):
    # busy-0 .. busy-2: the TTFT window computed by hand in test_latency.py
    server = FakeServer(routes(sequence("busy")))
    failed, result = run_module(cache_gate, {"url": URL, "interval": 0}, server)
    assert not failed
    lat = result["latency"]
    assert lat["basis"] == "window" and lat["seconds"] >= 0
    assert (lat["ttft"]["p50"], lat["ttft"]["p90"], lat["ttft"]["p99"]) == (0.007917, 0.016333, 0.019633)
    assert (lat["e2e"]["p50"], lat["e2e"]["count"]) == (1.25, 10)
    assert not [s for s in result["samples"] if "histograms" in s]


def test_latency_of_an_unreadable_server_says_why(run_module):
    failed, result = run_module(cache_gate, {"url": URL, "interval": 0, "samples": 2},
                                FakeServer({"/metrics": REFUSED}))
    assert failed and result["latency"]["ttft"]["p50"] is None
    assert result["latency"]["ttft"]["reason"] == "no readable sample"


def test_fail_on_degraded_fails_with_causes_in_msg(run_module):
    server = FakeServer(routes(sequence("cap2")))
    failed, result = run_module(cache_gate, {"url": URL, "interval": 0, "fail_on": ["degraded"]},
                                server)
    assert failed and "concurrency_cap" in result["msg"] and "degraded" in result["msg"]


def test_idle_is_healthy(run_module):
    server = FakeServer(routes(sequence("idle")))
    failed, result = run_module(cache_gate, {"url": URL, "interval": 0}, server)
    assert not failed and (result["verdict"], result["state"]) == ("healthy", "idle")


def test_unreachable_is_engine_down_and_fails(run_module):
    failed, result = run_module(cache_gate, {"url": URL, "interval": 0, "samples": 2},
                                FakeServer({"/metrics": REFUSED}))
    assert failed and result["verdict"] == "unhealthy"
    assert [c["id"] for c in result["causes"]] == ["engine_down"]
    assert "Connection refused" in result["msg"] and URL in result["msg"]


@pytest.mark.parametrize("args, text", [
    ({"samples": 0}, "samples must be 1 or more"),
    ({"interval": -1}, "interval must be 0 or more"),
    ({"max_num_seqs": 0}, "max_num_seqs must be 1 or more"),
    ({"thresholds": {"kv_usage_high": 1.5}}, "thresholds.kv_usage_high must be more than 0, at most 1"),
    ({"thresholds": {"stall_seconds": 0}}, "thresholds.stall_seconds must be more than 0 seconds"),
    ({"thresholds": {"min_preemptions": 0}}, "thresholds.min_preemptions must be 1 or more"),
    ({"max_num_batched_tokens": 0}, "max_num_batched_tokens must be 1 or more"),
    ({"fail_on": ["sick"]}, "fail_on"),
])
def test_bad_options_fail_before_any_request(run_module, args, text):
    server = FakeServer({})
    failed, result = run_module(cache_gate, dict(url=URL, **args), server)
    assert failed and text in result["msg"] and server.calls == []


def test_threshold_defaults_have_one_copy():
    """The module leaves the limits to the diagnosis; its documentation states the same values."""
    import re
    import yaml
    from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import DEFAULT_THRESHOLDS
    options = yaml.safe_load(cache_gate.DOCUMENTATION)["options"]["thresholds"]["suboptions"]
    assert set(options) == set(DEFAULT_THRESHOLDS)
    for name, spec in options.items():
        assert "default" not in spec, name
        text = " ".join(spec["description"]) if isinstance(spec["description"], list) else spec["description"]
        documented = float(re.search(r"Default ([0-9.]+)\.", text).group(1))
        assert documented == DEFAULT_THRESHOLDS[name], name
