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
