"""metrics_info and cache_gate against real vLLM 0.32 CPU servers (issue: the metrics brain)."""

from __future__ import annotations

import json

from conftest import MIB, run_module, under_load


def test_metrics_info_idle(idle_server):
    failed, result = run_module("metrics_info", {"url": idle_server.url})
    assert not failed, result
    m = result["metrics"]
    assert (m["schema"], m["version"], m["healthy"]) == ("v1", "0.32.0", True)
    assert m["num_gpu_blocks"] == 8 * MIB // (32 * 1024) and m["block_size"] == 32
    assert m["kv_cache_usage"] == 0 and m["requests_running"] == 0
    assert list(m["models"]) == ["tiny-llama"] and list(m["engines"]) == ["0"]


def test_metrics_info_check_mode(idle_server):
    failed, result = run_module("metrics_info", {"url": idle_server.url}, check=True)
    assert not failed and result["changed"] is False and result["metrics"]["healthy"] is True


def test_gate_idle_is_healthy_idle(idle_server):
    failed, result, seconds = run_module("cache_gate", {"url": idle_server.url}, timed=True)
    assert not failed, result
    assert (result["verdict"], result["state"], result["causes"]) == ("healthy", "idle", [])
    assert len(result["samples"]) == 3
    print("gate wall time with defaults (ansible CLI included): %.1fs" % seconds)


def test_tiny_kv_cache_under_load_is_kv_cache_exhausted_then_engine_down_once_stopped(server_factory):
    srv = server_factory(kv_bytes=2 * MIB, max_num_seqs=16)
    load = under_load(srv, 200, 32, 200, 800)
    try:
        failed, result = run_module(
            "cache_gate", {"url": srv.url, "max_num_seqs": 16, "fail_on": []})
    finally:
        load.cancel()
    ids = [c["id"] for c in result["causes"]]
    assert not failed
    assert "kv_cache_exhausted" in ids, json.dumps(result["causes"], indent=1)
    assert "concurrency_cap" not in ids
    cause = [c for c in result["causes"] if c["id"] == "kv_cache_exhausted"][0]
    # full by usage, or for admission: no room for a prompt of the mean size, or preempting
    ev = cause["evidence"]
    assert (ev["kv_cache_usage_max"] >= 0.9 or ev["admits_a_mean_prompt"] is False
            or ev["preemptions_in_window"] >= 3), ev
    # the same server stopped (one start fewer for the stage): nothing answers, unhealthy
    url = srv.url
    srv.stop()
    failed, result = run_module("cache_gate", {"url": url, "samples": 2, "interval": 1})
    assert failed and result["verdict"] == "unhealthy"
    assert [c["id"] for c in result["causes"]] == ["engine_down"], result["causes"]


def test_max_num_seqs_2_under_load_is_concurrency_cap_not_exhaustion(capped_server):
    srv = capped_server
    load = under_load(srv, 200, 40, 20, 900)
    try:
        known = run_module("cache_gate", {"url": srv.url, "max_num_seqs": 2, "fail_on": []})
        inferred = run_module("cache_gate", {"url": srv.url, "fail_on": []})
    finally:
        load.cancel()
    for failed, result in (known, inferred):
        assert not failed  # degraded is not in fail_on
        ids = [c["id"] for c in result["causes"]]
        assert "concurrency_cap" in ids, result
        assert "kv_cache_exhausted" not in ids
        assert result["verdict"] == "degraded"
    # without the cap, the free blocks are weighed against the prompts the server really saw
    evidence = inferred[1]["causes"][0]["evidence"]
    assert evidence["cap_known"] is False and evidence["likely_limit"] == "max_num_seqs", evidence
    assert "--max-num-seqs" in known[1]["causes"][0]["advice"]
    assert known[1]["causes"][0]["evidence"]["engine"] == "0"
    # a server that is plainly serving costs no extension
    assert known[1]["extended_seconds"] == 0.0 and known[1]["pending"] == []
