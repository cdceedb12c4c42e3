"""`running` pinned flat well below a known --max-num-seqs while requests wait and the cache has
room is a lower scheduler limit (scheduler_limit), not head-of-line blocking: vLLM 0.32.0's
scheduler stops admitting at --max-num-active-seqs or when the step's token budget is spent."""

from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import CAUSE_IDS, diagnose
from ansible_collections.kvfleet.vllm.tests.unit.plugins.module_utils.test_diagnosis import ids, window

# eight running, decode-bound steps (one token per running request), 30 waiting, 20% used
PLATEAU = {"requests_running": 8, "requests_waiting": 30, "kv_cache_usage": 0.2,
           "used_blocks_estimate": 200, "+generation_tokens": 160, "+engine_steps": 20,
           "+batched_tokens": 160, "+requests_finished": 2, "+prompt_tokens": 400,
           "version": "0.32.0"}


def test_a_flat_plateau_below_the_cap_is_a_scheduler_limit_with_the_numbers():
    r = diagnose(window(PLATEAU, PLATEAU, PLATEAU), max_num_seqs=128)
    assert ids(r) == ["scheduler_limit"] and r["verdict"] == "degraded"
    cause = r["causes"][0]
    ev = cause["evidence"]
    assert (ev["running_plateau"], ev["samples_at_plateau"], ev["max_num_seqs"]) == (8, 3, 128)
    assert ev["limits_not_given"] == ["max_num_active_seqs", "max_num_batched_tokens"]
    assert ev["tokens_per_step"] == 8.0
    # 1001 blocks - 1 - 200 used, 16 tokens each; prompts of 200 tokens (400 over 2 finished)
    assert ev["free_tokens_estimate"] == 800 * 16 and ev["prompts_the_free_blocks_hold"] == 64
    advice = cause["advice"]
    assert "Running holds at 8 in 3 of 3 samples, below --max-num-seqs 128" in advice
    assert "Pass max_num_active_seqs and max_num_batched_tokens to the gate" in advice
    assert "a budget of about 8 tokens or --max-num-active-seqs 8" in advice
    assert "head" not in ids(r)[0]


def test_with_both_limits_given_and_neither_reached_it_points_to_the_scheduled_tokens():
    r = diagnose(window(PLATEAU, PLATEAU, PLATEAU), max_num_seqs=128,
                 limits={"max_num_active_seqs": 64, "max_num_batched_tokens": 2048})
    assert ids(r) == ["scheduler_limit"]
    assert r["causes"][0]["evidence"]["limits_not_given"] == []
    assert "--max-num-scheduled-tokens" in r["causes"][0]["advice"]


def test_the_limits_it_names_keep_their_own_causes():
    # the active-seq limit given and reached, or the budget given and filled: those causes
    r = diagnose(window(PLATEAU, PLATEAU, PLATEAU), max_num_seqs=128, limits={"max_num_active_seqs": 8})
    assert ids(r) == ["active_seq_cap"]
    r = diagnose(window(PLATEAU, PLATEAU, PLATEAU), max_num_seqs=128, limits={"max_num_batched_tokens": 8})
    assert ids(r) == ["token_budget"]
    # at the cap itself it is the cap
    r = diagnose(window(PLATEAU, PLATEAU, PLATEAU), max_num_seqs=8)
    assert ids(r) == ["concurrency_cap"]


def test_a_falling_running_count_is_still_head_of_line_blocking():
    rows = [dict(PLATEAU, requests_running=n) for n in (6, 3, 1)]
    assert ids(diagnose(window(*rows), max_num_seqs=128)) == ["head_of_line_blocking"]


def test_no_plateau_is_called_without_a_known_cap_or_from_one_sample():
    assert "scheduler_limit" not in ids(diagnose(window(PLATEAU, PLATEAU, PLATEAU)))
    assert "scheduler_limit" not in ids(diagnose(window(PLATEAU), max_num_seqs=128))


def test_a_plateau_without_room_for_a_prompt_is_not_called_a_scheduler_limit():
    # free blocks hold 800 * 16 tokens; prompts of 20000 tokens do not fit: the cache is full
    # for admission, whatever the plateau
    full = dict(PLATEAU, **{"+prompt_tokens": 40000})
    assert "scheduler_limit" not in ids(diagnose(window(full, full, full), max_num_seqs=128))


def test_it_is_a_cause_id_the_roles_and_rules_know():
    assert "scheduler_limit" in CAUSE_IDS


# A long prompt in prefill (derived: its prompt tokens advance by a 512-token chunk a step, next
# to no token is generated), one running below the cap, short requests waiting behind it. vLLM
# 0.32.0's scheduler gives the running request its chunk from the step's budget first
# (v1/core/sched/scheduler.py, schedule()): nothing is left to admit the waiting ones.
PREFILL = {"requests_running": 1, "requests_waiting": 6, "kv_cache_usage": 0.05,
           "used_blocks_estimate": 50, "+generation_tokens": 0, "+engine_steps": 4,
           "+batched_tokens": 2048, "+prompt_tokens": 2048, "version": "0.32.0"}


def test_a_long_prompt_in_prefill_is_head_of_line_blocking_with_or_without_the_cap():
    for kwargs in ({"max_num_seqs": 16}, {}, {"max_num_seqs": 16, "limits": {"max_num_batched_tokens": 512}}):
        r = diagnose(window(PREFILL, PREFILL, PREFILL), **kwargs)
        assert ids(r) == ["head_of_line_blocking"], (kwargs, r["causes"])
        ev = r["causes"][0]["evidence"]
        assert ev["prompt_tokens_in_window"] == 4096 and ev["generation_tokens_in_window"] == 0
        assert ev["cap_known"] is ("max_num_seqs" in kwargs)
    # the --max-num-active-seqs plateau of decoding requests stays scheduler_limit
    assert ids(diagnose(window(PLATEAU, PLATEAU, PLATEAU), max_num_seqs=128)) == ["scheduler_limit"]
    # at the cap, prefilling or not, it is the cap
    full = dict(PREFILL, requests_running=16)
    assert ids(diagnose(window(full, full, full), max_num_seqs=16)) == ["concurrency_cap"]
