from __future__ import annotations

import copy

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (
    CAUSE_IDS, add_rates, diagnose, since_last_down)
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.plugins.module_utils._vllm_metrics import normalize
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

BASE = dict(healthy=True, kv_cache_usage=0.1, num_gpu_blocks=1001, used_blocks_estimate=100,
            block_size=16, requests_running=0, requests_waiting=0, waiting_deferred=0,
            waiting_capacity=0, preemptions_total=0, admission_rejections_total=0,
            request_errors_total=0, requests_finished_total=100, prompt_tokens_total=1000,
            generation_tokens_total=5000)


def window(*rows, step=2.0):
    """Snapshots from per-sample overrides; counters given as increments are accumulated."""
    snaps, state = [], dict(BASE)
    for i, row in enumerate(rows):
        row = dict(row)
        for counter in ("preemptions_total", "admission_rejections_total", "request_errors_total",
                        "requests_finished_total", "prompt_tokens_total", "generation_tokens_total"):
            state[counter] += row.pop("+" + counter.replace("_total", ""), 0)
        snap = dict(state, time=1000.0 + i * step)
        snap.update(row)
        snaps.append(snap)
    return add_rates(snaps)


def ids(result):
    return [c["id"] for c in result["causes"]]


def test_idle_is_healthy_and_idle():
    r = diagnose(window({}, {}, {}))
    assert r == {"verdict": "healthy", "state": "idle", "causes": [], "window_seconds": 4.0}


def test_serving_without_queue_is_healthy_serving():
    busy = {"requests_running": 5, "kv_cache_usage": 0.4, "+generation_tokens": 900}
    r = diagnose(window(busy, busy, busy))
    assert (r["verdict"], r["state"], r["causes"]) == ("healthy", "serving", [])


def test_engine_down_from_error_or_health():
    snaps = window({}, {})
    snaps.append({"time": 1004.0, "healthy": False, "error": "cannot read http://x/metrics: refused"})
    r = diagnose(snaps)
    assert ids(r) == ["engine_down"] and r["verdict"] == "unhealthy" and r["state"] is None
    assert "refused" in r["causes"][0]["evidence"]["error"]
    r = diagnose(window({"healthy": False, "health_status": 503}))
    assert ids(r) == ["engine_down"]
    assert r["causes"][0]["evidence"]["health_status"] == 503


def test_kv_exhausted_with_preemptions_is_critical():
    full = {"kv_cache_usage": 0.98, "requests_running": 8, "requests_waiting": 6,
            "waiting_capacity": 6, "+preemptions": 3, "+generation_tokens": 300}
    r = diagnose(window(full, full, full), max_num_seqs=128)
    assert ids(r) == ["kv_cache_exhausted"]
    assert r["verdict"] == "unhealthy"
    assert r["causes"][0]["evidence"]["preemptions_in_window"] == 6


def test_kv_full_with_queue_but_no_preemption_is_a_warning():
    full = {"kv_cache_usage": 0.95, "requests_running": 8, "requests_waiting": 2,
            "+generation_tokens": 300}
    r = diagnose(window(full, full, full))
    assert ids(r) == ["kv_cache_exhausted"] and r["verdict"] == "degraded"


def test_concurrency_cap_with_known_cap_tolerates_dips():
    # Gauges dip between engine steps: running 2, 2, 1 was seen on a capped real server.
    rows = [{"requests_running": n, "requests_waiting": 20, "waiting_capacity": 20,
             "kv_cache_usage": 0.02, "used_blocks_estimate": 20, "+generation_tokens": 500}
            for n in (2, 2, 1)]
    r = diagnose(window(*rows), max_num_seqs=2)
    assert ids(r) == ["concurrency_cap"]
    cause = r["causes"][0]
    assert cause["evidence"]["cap_inferred"] is False and cause["evidence"]["max_num_seqs"] == 2
    assert "--max-num-seqs" in cause["advice"] and r["verdict"] == "degraded"
    # last sample: 1 running holding 20 blocks; 1000 - 20 free blocks hold 49 more like it
    assert cause["evidence"]["estimated_extra_sequences"] == int((1000 - 20) / 20.0)
    assert "kv_cache_exhausted" not in ids(r)


def test_concurrency_cap_inferred_without_max_num_seqs():
    rows = [{"requests_running": 4, "requests_waiting": 9, "kv_cache_usage": 0.2,
             "+generation_tokens": 100}] * 3
    r = diagnose(window(*rows))
    assert ids(r) == ["concurrency_cap"]
    assert r["causes"][0]["evidence"]["cap_inferred"] is True
    assert r["causes"][0]["evidence"]["max_num_seqs"] == 4


def test_head_of_line_blocking_when_below_cap_with_free_blocks():
    # A long prompt waits for room; small requests finish and nothing new is admitted.
    rows = [{"requests_running": n, "requests_waiting": 7, "kv_cache_usage": u,
             "used_blocks_estimate": int(u * 1000), "+generation_tokens": 50}
            for n, u in ((6, 0.36), (3, 0.25), (1, 0.18))]
    r = diagnose(window(*rows), max_num_seqs=128)
    assert ids(r) == ["head_of_line_blocking"]
    assert r["causes"][0]["evidence"]["free_blocks_estimate"] == 1000 - 180


def test_admission_stall_waiting_and_no_tokens():
    # vLLM 0.27: usage ~20%, hundreds deferred, /health 200, nothing generated.
    stuck = {"requests_running": 0, "requests_waiting": 300, "waiting_deferred": 300,
             "kv_cache_usage": 0.2}
    r = diagnose(window(stuck, stuck, stuck))
    assert ids(r) == ["admission_stall"] and r["verdict"] == "unhealthy"
    assert r["causes"][0]["evidence"]["generation_tokens_in_window"] == 0


def test_short_window_is_not_a_stall():
    stuck = {"requests_running": 0, "requests_waiting": 3, "kv_cache_usage": 0.2}
    r = diagnose(window(stuck, stuck, step=1.0))  # 1 s < stall_seconds (3 s)
    assert "admission_stall" not in ids(r)


def test_rejections_and_errors():
    r = diagnose(window({}, {"+admission_rejections": 4, "+requests_finished": 10,
                             "+request_errors": 1, "+generation_tokens": 10}))
    assert ids(r) == ["admission_rejections", "request_errors"]
    assert r["verdict"] == "degraded"
    assert r["causes"][1]["evidence"]["error_ratio"] == 0.1
    r = diagnose(window({}, {"+requests_finished": 4, "+request_errors": 4}))
    assert r["verdict"] == "unhealthy" and r["causes"][0]["severity"] == "critical"


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
    r = diagnose(_real("cap2"))  # the cap is inferred from running pinned at 2
    assert ids(r) == ["concurrency_cap"] and r["causes"][0]["evidence"]["max_num_seqs"] == 2


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
