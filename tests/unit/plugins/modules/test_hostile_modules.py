"""The hostile-input corpus and hostile options through the modules (the fetcher's GET patched)."""

from __future__ import annotations

import json
import threading

import pytest

from ansible_collections.kvfleet.vllm.plugins.modules import cache_gate, metrics_info
from ansible_collections.kvfleet.vllm.tests.unit import fixtures
from ansible_collections.kvfleet.vllm.tests.unit.plugins.modules.conftest import (
    FakeServer, capture_path, routes)

URL = "http://127.0.0.1:8000"
BODIES = fixtures.hostile_bodies()
LIMIT = 15  # seconds: a module still running after this hangs


def bounded(run_module, module, args, server):
    """run_module, but a hang or a traceback fails the test instead of holding or crashing it."""
    box = {}

    def run():
        try:
            box["result"] = run_module(module, args, server)
        except BaseException as exc:  # the traceback a user would see
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(LIMIT)
    if thread.is_alive():
        pytest.fail("%s %s still runs after %ss: it hangs" % (module.__name__, args, LIMIT))
    if "error" in box:
        pytest.fail("%s %s raised %s: %s" % (module.__name__, args, type(box["error"]).__name__,
                                             box["error"]))
    return box["result"]


@pytest.mark.parametrize("case, entry", BODIES, ids=[c for c, _e in BODIES])
def test_metrics_info_names_what_it_refused(run_module, case, entry):
    body = fixtures.hostile_body(entry).encode("utf-8")
    failed, result = bounded(run_module, metrics_info, {"url": URL}, FakeServer(routes(body)))
    assert not failed, result.get("msg")
    json.dumps(result, allow_nan=False)
    assert entry["field"] in [e["field"] for e in result["metrics"]["invalid"]]


@pytest.mark.parametrize("case, entry", BODIES, ids=[c for c, _e in BODIES])
def test_cache_gate_is_never_healthy_on_a_hostile_body(run_module, case, entry):
    body = fixtures.hostile_body(entry).encode("utf-8")
    failed, result = bounded(run_module, cache_gate, {"url": URL, "interval": 0, "fail_on": ["healthy"]},
                             FakeServer(routes(body)))
    assert not failed, result["msg"]  # fail_on healthy: a healthy verdict would fail here
    assert result["verdict"] == "degraded"
    assert "invalid_metrics" in [c["id"] for c in result["causes"]]
    assert "invalid_metrics [warning]" in result["msg"]
    json.dumps(result, allow_nan=False)


def test_a_deeply_nested_version_document_is_no_version(run_module):
    server = FakeServer(routes(capture_path("vllm-0.32.0-cpu-idle-0.txt"), version=b"[" * 100000))
    failed, result = bounded(run_module, metrics_info, {"url": URL}, server)
    assert not failed and result["metrics"]["version"] is None


@pytest.mark.parametrize("module, args, text", [
    (metrics_info, {"timeout": float("inf")}, "timeout must be a positive number of seconds, at most 600, got inf"),
    (metrics_info, {"timeout": float("nan")}, "timeout must be a positive number of seconds, at most 600, got nan"),
    (metrics_info, {"timeout": 1e9}, "timeout must be a positive number of seconds, at most 600"),
    (metrics_info, {"max_body_bytes": 0}, "max_body_bytes must be 1024 or more bytes"),
    (cache_gate, {"interval": float("inf")}, "interval must be 0 or more seconds, at most 3600, got inf"),
    (cache_gate, {"interval": float("nan")}, "interval must be 0 or more seconds, at most 3600, got nan"),
    (cache_gate, {"interval": 1e6}, "interval must be 0 or more seconds, at most 3600"),
    (cache_gate, {"samples": 10 ** 9, "interval": 0}, "samples must be 1 or more, at most 1000"),
    (cache_gate, {"samples": 1000, "interval": 3600}, "samples x interval must stay within 3600 s"),
    (cache_gate, {"thresholds": {"stall_seconds": float("nan")}}, "thresholds.stall_seconds must be more than 0 seconds"),
    (cache_gate, {"thresholds": {"stall_seconds": float("inf")}}, "thresholds.stall_seconds must be more than 0 seconds"),
    (cache_gate, {"timeout": float("inf")}, "timeout must be a positive number of seconds"),
], ids=["timeout-inf", "timeout-nan", "timeout-1e9", "max-body-0", "interval-inf", "interval-nan",
        "interval-1e6", "samples-1e9", "window-too-long", "stall-nan", "stall-inf", "gate-timeout-inf"])
def test_unbounded_options_fail_before_any_request(run_module, module, args, text):
    server = FakeServer(routes(capture_path("vllm-0.32.0-cpu-idle-0.txt")))
    failed, result = bounded(run_module, module, dict(url=URL, **args), server)
    assert failed and text in result["msg"], result["msg"]
    assert server.calls == []


@pytest.mark.parametrize("url, text", [
    (URL + "/?token=x", "url must be the server's base URL, without a query (?...) or a fragment"),
    (URL + "/#frag", "url must be the server's base URL, without a query (?...) or a fragment"),
    ("http:///metrics", "url has no host name"),
    ("http://127.0.0.1:99999", "url is not a valid URL (Port out of range"),
    (URL + "\r\nX-Injected: 1", "url must not contain spaces or control characters"),
    ("ftp://user:hunter2@127.0.0.1/", "url must start with http:// or https://, got 'ftp://127.0.0.1/'"),
], ids=["query", "fragment", "no-host", "bad-port", "header-injection", "ftp-with-password"])
def test_unusable_urls_fail_before_any_request_naming_the_option(run_module, url, text):
    server = FakeServer(routes(capture_path("vllm-0.32.0-cpu-idle-0.txt")))
    for module in (metrics_info, cache_gate):
        failed, result = bounded(run_module, module, {"url": url, "interval": 0} if module is cache_gate
                                 else {"url": url}, server)
        assert failed and text in result["msg"], result["msg"]
        assert "hunter2" not in json.dumps(result)
    assert server.calls == []
