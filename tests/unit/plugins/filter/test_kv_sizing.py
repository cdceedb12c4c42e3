from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.kv_sizing import FilterModule
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import deploy_lines
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

kv_sizing = FilterModule().filters()["kv_sizing"]


def _gate(condition, max_num_seqs, max_model_len=1024):
    """A gate result as the deploy registers it: the instance record and the samples."""
    record = {"name": "main", "max_num_seqs": max_num_seqs,
              "limits": {"max_num_seqs": max_num_seqs, "max_model_len": max_model_len}}
    return {"item": record, "samples": fixtures.replay(condition)[:3]}


def test_a_cap_far_below_the_real_cache_is_warned_about():
    # the recorded busy server: 8 MiB = 256 blocks of 32 tokens, --max-num-seqs 16
    out = kv_sizing([_gate("busy", 16)], typical_tokens=128)
    assert out[0]["cache_tokens"] == 8192 and out[0]["cache_blocks"] == 256
    assert out[0]["fits_max_model_len"] == 8 and out[0]["fits_typical"] == 64
    assert "--max-num-seqs 16" in out[0]["warning"] and "64 requests of 128 tokens" in out[0]["warning"]
    # the deploy summary shows it for the host
    lines = deploy_lines([{"host": "h1", "outcome": "upgraded", "sizing": out, "detail": None}])
    assert "main: --max-num-seqs 16, but the KV cache (8192 tokens) holds 64" in lines[1]


def test_a_cap_that_uses_the_cache_is_not_warned_about():
    # 8192 tokens hold 16 requests of 512 (and not 32): the cap and the cache match
    assert kv_sizing([_gate("busy", 16)], typical_tokens=512)[0]["warning"] is None


def test_a_cache_too_small_for_the_cap_is_warned_about():
    """The cache holds one --max-model-len sequence, so vLLM starts and the idle gate passes, but
    not --max-num-seqs typical requests: a full load preempts (seen on a fleet deploy that shrank
    the cache to 33 blocks beside --max-num-seqs 5, with no warning)."""
    out = kv_sizing([_gate("busy", 16)], typical_tokens=1024)
    assert out[0]["fits_max_model_len"] == 8 and out[0]["fits_typical"] == 8
    assert out[0]["warning"] == ("main: --max-num-seqs 16, but the KV cache (8192 tokens) holds only 8 requests "
                                 "of 1024 tokens: under a full load it runs out and preempts; give the cache "
                                 "more memory or lower --max-num-seqs")
    lines = deploy_lines([{"host": "h1", "outcome": "upgraded", "sizing": out, "detail": None}])
    assert "holds only 8 requests of 1024 tokens" in lines[1]


def test_unreadable_or_bad_input():
    assert kv_sizing([{"item": {"name": "x"}, "samples": [{"error": "refused"}]}]) == []
    with pytest.raises(AnsibleFilterError, match="typical_tokens must be a positive integer"):
        kv_sizing([], typical_tokens=0)


def test_a_data_parallel_head_is_sized_per_engine():
    """A serving group's head shows every engine's cache; each engine's scheduler admits up to
    --max-num-seqs against its own. Seen on the demo fleet: a two-host group with --max-num-seqs
    4 and two 8192-token engines was warned about a 16384-token cache holding 8 requests."""
    samples = fixtures.replay("dp2-one-overloaded")[:3]
    engines = samples[-1]["engines"]
    assert len(engines) == 2
    per_engine = min(e["num_gpu_blocks"] for e in engines.values()) * samples[-1]["block_size"]
    assert samples[-1]["num_gpu_blocks"] * samples[-1]["block_size"] > per_engine   # the sum
    record = {"name": "main", "max_num_seqs": 4, "limits": {"max_num_seqs": 4, "max_model_len": 1024}}
    out = kv_sizing([{"item": record, "samples": samples}], typical_tokens=per_engine // 4)
    assert out[0]["cache_tokens"] == per_engine and out[0]["engines"] == 2
    assert out[0]["fits_typical"] == 4 and out[0]["warning"] is None
    # the same cap against a quarter of that per request is warned about, per engine
    out = kv_sizing([{"item": record, "samples": samples}], typical_tokens=per_engine // 8)
    assert out[0]["fits_typical"] == 8 and "(%d tokens)" % per_engine in out[0]["warning"]
