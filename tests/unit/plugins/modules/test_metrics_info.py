from __future__ import annotations

import os
import socket

from ansible_collections.kvfleet.vllm.plugins.modules import metrics_info
from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins.modules.conftest import (
    REFUSED, FakeServer, capture_path, routes)

URL = "http://127.0.0.1:8000"


def test_reads_a_real_capture(run_module):
    server = FakeServer(routes(capture_path("vllm-0.32.0-cpu-kv-exhausted-1.txt")))
    failed, result = run_module(metrics_info, {"url": URL + "/", "api_key": "s3cret"}, server)
    assert not failed and result["changed"] is False
    m = result["metrics"]
    assert (m["schema"], m["version"], m["healthy"]) == ("v1", "0.32.0", True)
    assert m["num_gpu_blocks"] == 64 and m["block_size"] == 32
    assert m["kv_cache_usage"] > 0.9 and m["preemptions_total"] == 33
    assert [c["url"] for c in server.calls] == [URL + "/metrics", URL + "/health", URL + "/version"]
    assert server.calls[0]["headers"]["Authorization"] == "Bearer s3cret"
    assert "s3cret" not in str(result)  # no_log


def test_health_503_is_not_a_failure_and_no_version_is_null(run_module):
    server = FakeServer(routes(capture_path("vllm-0.32.0-cpu-idle-0.txt"), health=503, version=404))
    failed, result = run_module(metrics_info, {"url": URL}, server)
    assert not failed
    assert result["metrics"]["healthy"] is False and result["metrics"]["health_status"] == 503
    assert result["metrics"]["version"] is None


def test_connection_refused_names_url_and_cause(run_module):
    failed, result = run_module(metrics_info, {"url": URL}, FakeServer({"/metrics": REFUSED}))
    assert failed
    assert URL + "/metrics" in result["msg"] and "Connection refused" in result["msg"]


def test_timeout_names_url_and_cause(run_module):
    server = FakeServer({"/metrics": socket.timeout("timed out")})
    failed, result = run_module(metrics_info, {"url": URL, "timeout": 1.5}, server)
    assert failed and "timed out after 1.5s" in result["msg"] and URL in result["msg"]


def test_garbage_says_what_was_found(run_module):
    html = fixtures.read(os.path.join(fixtures.GARBAGE, "html.txt")).encode()
    failed, result = run_module(metrics_info, {"url": URL}, FakeServer(routes(html)))
    assert failed and "HTML page" in result["msg"] and "/metrics" in result["msg"]
    node = fixtures.read(os.path.join(fixtures.GARBAGE, "node-exporter.txt")).encode()
    failed, result = run_module(metrics_info, {"url": URL}, FakeServer(routes(node)))
    assert failed and "not a vLLM server" in result["msg"]


def test_bad_url_fails_before_any_request(run_module):
    server = FakeServer({})
    failed, result = run_module(metrics_info, {"url": "127.0.0.1:8000"}, server)
    assert failed and "url must start with http://" in result["msg"] and server.calls == []


def test_latency_since_start_from_a_real_capture(run_module):
    # busy-2 TTFT: 15 first tokens since start; by hand in test_latency.py
    server = FakeServer(routes(capture_path("vllm-0.32.0-cpu-busy-2.txt")))
    failed, result = run_module(metrics_info, {"url": URL}, server)
    assert not failed
    lat = result["metrics"]["latency"]
    assert (lat["basis"], lat["seconds"]) == ("since_start", None)
    ttft = lat["ttft"]
    assert (ttft["p50"], ttft["p90"], ttft["p99"], ttft["count"]) == (0.008214, 0.01875, 0.037, 15)
    assert sorted(k for k in lat if k not in ("basis", "seconds")) == ["e2e", "itl", "queue", "ttft"]
    assert "engines" not in lat
    assert "histograms" not in result["metrics"]  # the raw counts are for windows only


def test_latency_per_engine_and_none_with_reason(run_module):
    server = FakeServer(routes(capture_path("vllm-0.32.0-cpu-dp2-one-overloaded-0.txt")))
    failed, result = run_module(metrics_info, {"url": URL}, server)
    assert not failed
    lat = result["metrics"]["latency"]
    assert sorted(lat["engines"]) == ["0", "1"]
    # the second engine had no request yet: no quantile, a reason, a count of 0
    idle = lat["engines"]["1"]["ttft"]
    assert (idle["p50"], idle["count"]) == (None, 0) and "nothing observed" in idle["reason"]
    assert lat["ttft"]["count"] == lat["engines"]["0"]["ttft"]["count"] > 0
