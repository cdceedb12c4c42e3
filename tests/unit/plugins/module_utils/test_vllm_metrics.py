from __future__ import annotations

import os
import re

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import (
    FIELDS, NotVllmMetrics, normalize)
from ansible_collections.kvfleet.vllm.tests.unit import fixtures


def view_of(relpath):
    return normalize(parse(fixtures.read(os.path.join(fixtures.METRICS, relpath)))[0])


def test_v0_old_names_without_engine_label():
    v = view_of("synthetic/v0-0.8-style.txt")
    assert v["schema"] == "v0"
    assert v["kv_cache_usage"] == 0.5
    assert v["num_gpu_blocks"] == 1001 and v["block_size"] == 16
    assert v["used_blocks_estimate"] == 500          # 0.5 x (1001 - 1)
    assert (v["requests_running"], v["requests_waiting"], v["requests_swapped"]) == (3, 2, 1)
    assert v["preemptions_total"] == 7
    assert v["prompt_tokens_total"] == 1200           # counter exposed without _total
    assert v["generation_tokens_total"] == 3400
    # a client's abort is not an engine error: separate fields
    assert v["request_errors_total"] == 0 and v["request_aborts_total"] == 2
    assert v["requests_finished_total"] == 17
    assert v["prefix_cache_hit_rate"] is None         # V0 gauge is -1: prefix caching off
    # not exposed by V0: null, never 0
    for field in ("waiting_capacity", "waiting_deferred", "admission_rejections_total",
                  "prefix_cache_queries_total"):
        assert v[field] is None, field
    assert list(v["engines"]) == ["0"] and list(v["models"]) == ["opt"]


def test_fresh_v0_with_only_cache_config():
    v = view_of("synthetic/v0-fresh.txt")
    assert v["schema"] == "v0"
    assert v["num_gpu_blocks"] == 2048 and v["block_size"] == 16
    assert v["kv_cache_usage"] is None and v["requests_running"] is None
    assert v["used_blocks_estimate"] is None


def test_old_and_new_names_side_by_side_are_not_added():
    v = view_of("synthetic/v1-0.10-both-names.txt")
    assert v["schema"] == "v1"
    assert v["kv_cache_usage"] == 0.25
    assert v["prefix_cache_queries_total"] == 100 and v["prefix_cache_hits_total"] == 40
    assert v["prefix_cache_hit_rate"] == 0.4
    assert v["used_blocks_estimate"] == 100


def test_two_engines_sum_and_block_weighted_usage():
    v = view_of("synthetic/v1-two-engines.txt")
    assert v["requests_running"] == 10 and v["requests_waiting"] == 3
    assert v["kv_cache_usage"] == pytest.approx((0.2 * 1001 + 0.8 * 3001) / 4002, abs=1e-6)
    assert v["num_gpu_blocks"] == 4002
    assert v["used_blocks_estimate"] == 200 + 2400
    assert (v["waiting_capacity"], v["waiting_deferred"]) == (2, 1)
    assert v["preemptions_total"] == 3                # _created series are not added
    assert v["admission_rejections_total"] == 6       # no engine label, summed over reasons
    assert v["request_errors_total"] == 1 and v["request_aborts_total"] == 2
    assert v["requests_finished_total"] == 53
    assert v["engines"]["0"]["request_errors_total"] == 1 and v["engines"]["1"]["request_aborts_total"] == 2
    assert v["prefix_cache_hit_rate"] is None         # no query yet
    assert v["engines"]["0"]["requests_running"] == 4
    assert v["engines"]["1"]["kv_cache_usage"] == 0.8
    assert v["engines"]["1"]["admission_rejections_total"] is None
    assert list(v["models"]) == ['org/"big"\\model\nv2']


def test_two_models():
    v = view_of("synthetic/v1-two-models.txt")
    assert v["models"]["a"]["kv_cache_usage"] == 0.5
    assert v["models"]["b"]["requests_running"] == 1
    assert v["kv_cache_usage"] == pytest.approx(0.3)
    assert v["num_gpu_blocks"] == 202 and v["requests_running"] == 3


def test_non_vllm_exporter_is_named():
    text = fixtures.read(os.path.join(fixtures.GARBAGE, "node-exporter.txt"))
    with pytest.raises(NotVllmMetrics) as err:
        normalize(parse(text)[0])
    assert "node_cpu_seconds_total" in str(err.value)
    assert "not a vLLM server" in str(err.value)


def _raw(text, name, **labels):
    """Independent oracle: the value of one series, found with a regex on the raw text."""
    for line in text.splitlines():
        m = re.match(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), line)
        if m and all('%s="%s"' % kv in m.group(1) for kv in labels.items()):
            return float(m.group(2))
    return None


@pytest.mark.parametrize("name", fixtures.real_captures())
def test_real_captures_match_the_raw_text(name):
    text = fixtures.read(os.path.join(fixtures.METRICS, name))
    entry = fixtures.manifest()[name]
    whole = normalize(parse(text)[0])
    assert set(FIELDS) <= set(whole)
    assert whole["schema"] == "v1"
    kv_bytes = int(re.search(r"--kv-cache-memory-bytes (\d+)", entry["server_argv"]).group(1))
    for engine, v in whole["engines"].items():
        # each engine's view against its own series (data parallel: one per rank)
        def raw(name, **labels):
            return _raw(text, name, engine=engine, **labels)
        assert v["kv_cache_usage"] == raw("vllm:kv_cache_usage_perc")
        assert v["requests_running"] == raw("vllm:num_requests_running")
        assert v["requests_waiting"] == raw("vllm:num_requests_waiting")
        assert v["waiting_capacity"] == raw("vllm:num_requests_waiting_by_reason", reason="capacity")
        assert v["preemptions_total"] == raw("vllm:num_preemptions_total")
        assert v["generation_tokens_total"] == raw("vllm:generation_tokens_total")
        assert v["request_errors_total"] == raw("vllm:request_success_total", finished_reason="error")
        assert v["request_aborts_total"] == raw("vllm:request_success_total", finished_reason="abort")
        assert v["engine_steps_total"] == raw("vllm:iteration_tokens_total_count")
        assert v["request_prompt_tokens_sum"] == raw("vllm:request_prompt_tokens_sum")
        assert v["engines_sleeping"] == 1 - raw("vllm:engine_sleep_state", sleep_state="awake")
        assert v["model"] == "tiny-llama"
        # --kv-cache-memory-bytes of the recorded server (per engine) / 32 tokens x 1 KiB (the
        # tiny model, and the deep one of long-prefill with its single KV head); with two
        # engines the label says the sum of both pools, the view each engine's own
        assert v["num_gpu_blocks"] == kv_bytes // (32 * 1024)
        assert v["block_size"] == 32
        assert v["used_blocks_estimate"] == round(v["kv_cache_usage"] * (v["num_gpu_blocks"] - 1))
    v = whole
    # the server's view: sums over engines, usage weighted by blocks
    engines = list(v["engines"].values())
    assert v["requests_running"] == sum(e["requests_running"] for e in engines)
    assert v["num_gpu_blocks"] == sum(e["num_gpu_blocks"] for e in engines)
    assert v["models"]["tiny-llama"]["requests_running"] == v["requests_running"]
