"""The gate's rules against windows recorded from real vLLM CPU 0.32.0 servers.

tests/fixtures/metrics/MANIFEST.json says, for every capture, the server's command line, the
load and what the server really did (statuses, finish reasons, step times). Each test replays
gate-sized windows (3 samples, 2 s apart, as the roles run the gate) through the same sampler
and rules as cache_gate. The old rules' verdicts on the same windows are in docs/kv-cache.md.
"""

from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import add_rates, diagnose
from ansible_collections.kvfleet.vllm.tests.unit import fixtures


def windows(snaps, samples=3, interval=2.0):
    """Every gate window the recording holds: samples `interval` s apart from each start."""
    out = []
    for start in snaps:
        picked = [start]
        for _next in range(samples - 1):
            due = picked[-1]["time"] + interval - 0.05
            later = [s for s in snaps if s["time"] >= due]
            if not later:
                break
            picked.append(later[0])
        if len(picked) == samples:
            out.append([dict(s) for s in picked])
    return out


def judge(window, **kwargs):
    return diagnose(add_rates(window), **kwargs)


def ids(result):
    return [c["id"] for c in result["causes"]]


def test_long_prefill_step_reads_as_idle_and_never_as_a_stall():
    # 16.4 s in one prefill step (1401 tokens, deep model): the gauges are written after a
    # step, so they still show the idle server before it; the 3 requests behind it are unseen.
    snaps = fixtures.replay("long-prefill")
    assert len(snaps) >= 20
    for window in windows(snaps):
        result = judge(window, max_num_seqs=16)
        assert result["verdict"] == "healthy", (window[0]["time"], result["causes"])
    frozen = [s for s in snaps if s["prompt_tokens_total"] == 0]
    assert frozen[-1]["time"] - frozen[0]["time"] >= 15
    assert all(s["requests_running"] == 0 and s["requests_waiting"] == 0 for s in frozen)


def test_one_step_prefills_on_a_loaded_cpu_are_never_a_stall():
    # Three 1201-token prompts, no chunked prefill, the machine shared with other jobs: the
    # first prompt's step took 57 s, the next one (1 running) 57 s more, every series frozen.
    snaps = fixtures.replay("long-prefill-queued")
    for window in windows(snaps, interval=6.0):
        assert judge(window, max_num_seqs=16)["verdict"] == "healthy"
    whole = judge([dict(s) for s in snaps], max_num_seqs=16)
    assert "admission_stall" not in ids(whole), whole["causes"]
    held = [s for s in snaps if s["requests_running"] == 1 and s["generation_tokens_total"] == 1]
    assert held[-1]["time"] - held[0]["time"] >= 25


def test_killed_engine_core_is_engine_down_once_confirmed():
    snaps = fixtures.replay("engine-core-killed")
    assert snaps[0]["healthy"] and all(s.get("error") for s in snaps[1:])
    # the gate's own window after the kill: critical (the latest two are down)
    result = judge([dict(s) for s in snaps[:3]])
    assert ids(result) == ["engine_down"] and result["verdict"] == "unhealthy"
    # one sample after the kill is not yet proof: a warning, and one more sample decides
    result = judge([dict(s) for s in snaps[:2]])
    assert result["verdict"] == "degraded" and result["pending"][0]["id"] == "engine_down"


def test_client_disconnects_are_not_counted_as_aborts_by_vllm():
    # 6 of 8 streaming clients closed mid-stream; vLLM 0.32 drops them in the API server without
    # counting a finished_reason (output_processor.py), so nothing reads as request errors.
    snaps = fixtures.replay("client-disconnect")
    assert {s["request_aborts_total"] for s in snaps} == {0}
    result = judge([dict(s) for s in snaps])
    assert result["verdict"] == "healthy" and ids(result) == []


def test_queue_limit_rejections_name_the_flag():
    snaps = fixtures.replay("queued-rejections")
    result = judge([dict(s) for s in snaps])
    assert ids(result) == ["admission_rejections"]
    cause = result["causes"][0]
    assert set(cause["evidence"]["by_reason"]) == {"max_num_queued_reqs"}
    assert "--max-num-queued-reqs" in cause["advice"]


def test_small_token_budget_is_token_budget_not_a_cap():
    # --max-num-batched-tokens 64, 48 requests, cache mostly free, running far below 64.
    gated = windows(fixtures.replay("small-batched-tokens"))[:4]
    assert gated
    for window in gated:
        result = judge(window)
        assert ids(result) == ["token_budget"], result["causes"]
        assert result["causes"][0]["evidence"]["likely_limit"] == "max_num_batched_tokens"
        result = judge([dict(s) for s in window], max_num_seqs=64,
                       limits={"max_num_batched_tokens": 64})
        assert ids(result) == ["token_budget"]
        assert result["causes"][0]["evidence"]["budget_known"] is True


def test_two_engines_one_overloaded_is_that_engines_exhaustion():
    # --data-parallel-size 2; every request pinned to rank 0 (X-data-parallel-rank: 0).
    for window in windows(fixtures.replay("dp2-one-overloaded"))[1:]:
        result = judge(window, max_num_seqs=16)
        assert "concurrency_cap" not in ids(result) and "head_of_line_blocking" not in ids(result)
        assert ids(result) == ["kv_cache_exhausted"], result["causes"]
        assert result["causes"][0]["evidence"]["engine"] == "0"
        assert result["engines"]["1"]["verdict"] == "healthy"
        assert result["engines"]["1"]["state"] == "idle"


def test_lora_requests_over_max_loras_are_deferred_not_capacity():
    # --max-loras 1, two adapters: the second adapter's requests wait as 'deferred'.
    gated = windows(fixtures.replay("lora-deferred"))
    deferred = [w for w in gated if all(s["waiting_deferred"] >= 1 for s in w)]
    assert len(deferred) >= 4
    for window in deferred:
        result = judge(window, max_num_seqs=16)
        assert ids(result) == ["deferred_backlog"], result["causes"]
    for window in gated:  # never a sequence cap: 6 waited for the LoRA slot, not for capacity
        assert "concurrency_cap" not in ids(judge(window, max_num_seqs=16))
