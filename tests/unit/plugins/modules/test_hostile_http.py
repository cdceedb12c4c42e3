"""The modules' HTTP (ansible.module_utils.urls) against hostile servers on 127.0.0.1."""

from __future__ import annotations

import json
import time

import pytest

from ansible_collections.kvfleet.vllm.plugins.modules import cache_gate, metrics_info
from ansible_collections.kvfleet.vllm.tests.unit.plugins import local_servers as ls

KEY = "k3y-never-elsewhere"
SLACK = 6.0  # seconds past the timeout: the units run at nice 19 beside vLLM (tests/run.sh);
# the hostile servers hold a client for local_servers.STOP_AFTER (20 s), far above, so a missing deadline still fails


def test_redirect_to_another_port_never_gets_the_key(run_module):
    with ls.LocalServer(ls.vllm()) as other, ls.LocalServer(ls.redirect_to(other.url)) as first:
        failed, result = run_module(metrics_info, {"url": first.url, "api_key": KEY})
        assert other.requests == []  # nothing reached the second server, least of all the key
    assert failed
    assert "HTTP 302" in result["msg"] and "redirects are not followed" in result["msg"]
    assert other.url + "/metrics" in result["msg"]
    assert first.requests[0]["headers"].get("Authorization") == "Bearer " + KEY
    assert KEY not in json.dumps(result)


def test_cache_gate_behind_a_redirect_is_not_healthy(run_module):
    with ls.LocalServer(ls.vllm()) as other, ls.LocalServer(ls.redirect_to(other.url, 307)) as first:
        failed, result = run_module(cache_gate, {"url": first.url, "api_key": KEY, "samples": 2,
                                                 "interval": 0})
        assert other.requests == []
    assert failed and result["verdict"] == "unhealthy"
    assert "redirects are not followed" in result["msg"]


@pytest.mark.parametrize("trickle", ["trickle_body", "trickle_headers"])
def test_a_trickling_server_ends_at_the_timeout(run_module, trickle):
    with ls.LocalServer(getattr(ls, trickle)(every=1.0)) as srv:
        start = time.monotonic()
        failed, result = run_module(metrics_info, {"url": srv.url, "timeout": 2.5})
        elapsed = time.monotonic() - start
    assert elapsed < 2.5 + SLACK, "took %.1fs" % elapsed
    assert failed and "timed out after 2.5s" in result["msg"]


def test_trickling_server_holds_cache_gate_one_timeout_per_sample(run_module):
    with ls.LocalServer(ls.trickle_body(every=1.0)) as srv:
        start = time.monotonic()
        failed, result = run_module(cache_gate, {"url": srv.url, "timeout": 2, "samples": 2,
                                                 "interval": 0})
        elapsed = time.monotonic() - start
    assert elapsed < 2 * 2 + SLACK, "took %.1fs" % elapsed
    assert failed and result["verdict"] == "unhealthy"
    assert [c["id"] for c in result["causes"]] == ["engine_down"]


def test_50_mb_body_with_its_length_is_refused_unread(run_module):
    with ls.LocalServer(ls.huge_body(50 * ls.MB, declare_length=True)) as srv:
        start = time.monotonic()
        failed, result = run_module(metrics_info, {"url": srv.url})
        elapsed = time.monotonic() - start
    assert failed and "max_body_bytes" in result["msg"] and "announces 52428800 bytes" in result["msg"]
    assert elapsed < 3


def test_50_mb_body_without_a_length_is_cut_at_the_cap(run_module):
    with ls.LocalServer(ls.huge_body(50 * ls.MB, declare_length=False)) as srv:
        failed, result = run_module(metrics_info, {"url": srv.url})
    assert failed and "larger than max_body_bytes (16777216 bytes)" in result["msg"]


def test_max_body_bytes_is_an_option(run_module):
    with ls.LocalServer(ls.vllm()) as srv:
        failed, result = run_module(metrics_info, {"url": srv.url, "max_body_bytes": 4096})
    assert failed and "max_body_bytes (4096" in result["msg"]


def test_unasked_gzip_is_refused_not_inflated(run_module):
    with ls.LocalServer(ls.gzip_bomb(64 * ls.MB)) as srv:
        start = time.monotonic()
        failed, result = run_module(metrics_info, {"url": srv.url})
        elapsed = time.monotonic() - start
    assert failed and "gzip-encoded, which was not asked for" in result["msg"]
    assert elapsed < 3


def url_of(srv):
    return srv.url.replace("http://", "http://operator:pa55word-zz@")


def test_credentials_in_the_url_are_used_but_never_shown(run_module):
    with ls.LocalServer(ls.vllm()) as srv:
        failed, result = run_module(metrics_info, {"url": url_of(srv)})
        failed_gate, gate = run_module(cache_gate, {"url": url_of(srv), "samples": 1})
    assert not failed and not failed_gate
    assert result["metrics"]["url"] == srv.url and gate["samples"][0]["url"] == srv.url
    for text in (json.dumps(result), json.dumps(gate)):
        assert "pa55word-zz" not in text
    assert "operator:" not in json.dumps(result["metrics"]) and "operator:" not in gate["msg"]


def test_credentials_never_reach_an_error(run_module):
    # nothing listens on port 9 here: the error names the URL, without its credentials
    url = "http://operator:pa55word-zz@127.0.0.1:9"
    failed, result = run_module(metrics_info, {"url": url, "timeout": 2})
    assert failed and "http://127.0.0.1:9/metrics" in result["msg"]
    failed, gate = run_module(cache_gate, {"url": url, "timeout": 2, "samples": 1})
    assert failed and "http://127.0.0.1:9" in gate["msg"]
    assert "operator" not in result["msg"] + result["url"] + gate["msg"] + gate["samples"][0]["error"]
    # Ansible echoes the arguments (invocation): the password is masked there too
    for text in (json.dumps(result), json.dumps(gate)):
        assert "pa55word-zz" not in text
