"""The canary judgement (plugins/module_utils/_canary.py) on real captures of a canary and a
baseline under the same load (vLLM CPU 0.32.0; tests/fixtures/metrics/MANIFEST.json, pairs
canary-*: tests/support/capture_fixtures.py canary-pairs), and the Mann-Whitney U test against
scipy's numbers."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import (
    CHECKS, DEFAULT_MIN_REQUESTS, DEFAULT_THRESHOLDS, analyse, check_thresholds, mann_whitney_u,
    side_window, target_window)
from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import bucket_quantile
from ansible_collections.kvfleet.vllm.tests.unit import fixtures


def pair(name):
    """(canary snapshots, baseline snapshots) of a recorded pair: 20 samples, 1 s apart."""
    return fixtures.replay(name + "-canary"), fixtures.replay(name + "-baseline")


def target(name, samples, **limits):
    return {"name": name, "samples": copy.deepcopy(samples), "limits": limits}


def by_metric(result):
    return dict((c["metric"], c) for c in result["checks"])


def failed(result):
    return [c["metric"] for c in result["checks"] if c["result"] == "fail"]


# --- the Mann-Whitney U test ---------------------------------------------------------------------

# scipy.stats.mannwhitneyu(x, y, alternative=..., method="asymptotic", use_continuity=True),
# scipy 1.17.1: (U of x, p)
SCIPY = [
    (([0.41, 0.52, 0.38, 0.61, 0.47, 0.55], [0.12, 0.15, 0.11, 0.2, 0.14, 0.13, 0.16]), "greater",
     42.0, 0.0017026179106473802),
    (([0.41, 0.52, 0.38, 0.61, 0.47, 0.55], [0.12, 0.15, 0.11, 0.2, 0.14, 0.13, 0.16]), "less",
     42.0, 0.9989348143565723),
    (([1, 2, 2, 3, 3, 3], [2, 2, 3, 1, 1, 1, 2]), "greater", 30.0, 0.09903654382937227),
    (([1, 2, 2, 3, 3, 3], [2, 2, 3, 1, 1, 1, 2]), "less", 30.0, 0.9248510102106156),
    (([0, 0, 0, 0, 0.2], [0, 0, 0, 0, 0, 0, 0, 0]), "greater", 24.0, 0.13419081364638036),
]


@pytest.mark.parametrize("samples, alternative, u, p", SCIPY)
def test_mann_whitney_u_matches_scipy(samples, alternative, u, p):
    got_u, unused, got_p = mann_whitney_u(samples[0], samples[1], alternative)
    assert got_u == u
    assert got_p == pytest.approx(p, rel=1e-9)


def test_mann_whitney_u_of_equal_values_tells_nothing():
    assert mann_whitney_u([5, 5, 5], [5, 5, 5]) == (4.5, 0.0, 1.0)
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])


# --- thresholds ----------------------------------------------------------------------------------

@pytest.mark.parametrize("thresholds, words", [
    ({"ttft": 0.1}, ["thresholds.ttft is not a threshold", "ttft_relative"]),
    ({"ttft_relative": -0.1}, ["thresholds.ttft_relative must be a number, 0 or more"]),
    ({"alpha": 1.0}, ["thresholds.alpha must be a number between 0 and 1"]),
    ({"min_intervals": 1}, ["thresholds.min_intervals must be a whole number from 2"]),
    ({"ttft_p95_max": float("nan")}, ["thresholds.ttft_p95_max", "or null"]),
    ("strict", ["thresholds must be a dictionary"]),
])
def test_bad_thresholds_are_named(thresholds, words):
    error = check_thresholds(thresholds)
    for word in words:
        assert word in error


def test_good_thresholds_pass_and_every_check_has_its_keys():
    assert check_thresholds(dict(DEFAULT_THRESHOLDS)) is None
    assert check_thresholds({"ttft_p95_max": None, "min_intervals": 3}) is None
    for check, family, unused, unused2, direction, unused3 in CHECKS:
        assert family + "_relative" in DEFAULT_THRESHOLDS and family + "_absolute" in DEFAULT_THRESHOLDS
        assert check + ("_max" if direction == "higher" else "_min") in DEFAULT_THRESHOLDS


# --- real pairs under the same load ---------------------------------------------------------------

def test_the_same_flags_pass():
    # canary-same: both servers 8 MiB KV, --max-num-seqs 16, 12 requests at a time each
    canary, baseline = pair("canary-same")
    result = analyse([target("new", canary)], [target("old", baseline)])
    assert result["verdict"] == "pass", result["reason"]
    assert result["mode"] == "baseline" and result["requests"] == {"canary": 144, "baseline": 144}
    assert [c["result"] for c in result["checks"]] == ["pass"] * len(CHECKS)
    assert result["causes"] == []
    assert "passes 12 check(s)" in result["reason"] and "144 requests" in result["reason"]


def test_a_cache_too_small_fails_on_the_cache():
    # canary-small-kv: the canary has a 2 MiB cache (64 blocks) beside the 8 MiB baseline
    canary, baseline = pair("canary-small-kv")
    result = analyse([target("new", canary, max_num_seqs=16)], [target("old", baseline)])
    checks = by_metric(result)
    assert result["verdict"] == "fail" and result["mode"] == "baseline"
    assert {"preemptions_per_request", "kv_usage"} <= set(failed(result)), result["reason"]
    # by hand from the counters: 29 preemptions for 65 finished requests on the canary, none on
    # the baseline (84 finished)
    assert canary[-1]["preemptions_total"] - canary[0]["preemptions_total"] == 29
    assert result["requests"] == {"canary": 65, "baseline": 84}
    assert checks["preemptions_per_request"]["canary"] == round(29 / 65.0, 6)
    assert checks["preemptions_per_request"]["baseline"] == 0
    # the tolerance's absolute part: 0 + 0.05
    assert checks["preemptions_per_request"]["limit"] == DEFAULT_THRESHOLDS["preemptions_per_request_absolute"]
    # a sequence takes about four times the share of a cache a quarter the size
    assert 3 < checks["kv_usage"]["canary"] / checks["kv_usage"]["baseline"] < 5
    for name in ("preemptions_per_request", "kv_usage"):
        assert checks[name]["test"] == "mann_whitney_u" and checks[name]["p_value"] < 0.001
    # the full window's diagnosis: exhaustion, a warning (0.45 preemptions per request < 0.5)
    assert [(c["id"], c["severity"], c["target"]) for c in result["causes"]] == [
        ("kv_cache_exhausted", "warning", "new")]
    assert "preemptions_per_request 0.446 > 0.05 (baseline 0, p=" in result["reason"]


def test_a_low_max_num_seqs_fails_on_queue_time_and_ttft():
    # canary-low-seqs: --max-num-seqs 4 under 12 requests at a time, beside --max-num-seqs 16
    canary, baseline = pair("canary-low-seqs")
    result = analyse([target("new", canary, max_num_seqs=4)], [target("old", baseline, max_num_seqs=16)])
    checks = by_metric(result)
    assert result["verdict"] == "fail"
    assert {"queue_time_p50", "queue_time_p95", "ttft_p50", "ttft_p95"} <= set(failed(result))
    # the cache is not the limit: a warning names the cap, and the cache checks pass
    assert [(c["id"], c["severity"]) for c in result["causes"]] == [("concurrency_cap", "warning")]
    assert checks["kv_usage"]["result"] == checks["preemptions_per_request"]["result"] == "pass"
    assert checks["queue_time_p95"]["canary"] > 10 * checks["queue_time_p95"]["baseline"]
    assert result["requests"] == {"canary": 36, "baseline": 84}


def test_a_canary_without_traffic_is_inconclusive():
    # canary-idle: the load goes to the baseline only
    canary, baseline = pair("canary-idle")
    result = analyse([target("new", canary)], [target("old", baseline)])
    assert result["verdict"] == "inconclusive"
    assert result["requests"] == {"canary": 0, "baseline": 312}
    assert "finished 0 request(s)" in result["reason"] and "baseline finished 312" in result["reason"]
    assert "min_requests %d" % DEFAULT_MIN_REQUESTS in result["reason"]
    assert "not back in the load balancer?" in result["reason"]
    assert all(c["result"] == "skipped" for c in result["checks"])


def test_a_slow_canary_with_too_few_requests_is_not_called_idle():
    # the capped canary's first 5 s: 8 finished, 12 held
    canary, baseline = pair("canary-low-seqs")
    result = analyse([target("new", canary[:6], max_num_seqs=4)], [target("old", baseline[:6])])
    assert result["verdict"] == "inconclusive" and result["requests"]["canary"] == 8
    assert "slow rather than idle: lengthen duration" in result["reason"]
    assert "load balancer" not in result["reason"]


@pytest.mark.parametrize("unhealthy, cause", [("engine-core-killed", "engine_down"),
                                              ("kv-exhausted", "kv_cache_exhausted")])
def test_a_healthy_canary_beside_an_unhealthy_baseline_passes(unhealthy, cause):
    # a dead engine, or a cache exhausted with preemptions (47 for 17 finished): left out of the
    # pool; with nothing left, the absolute limits apply
    canary, unused = pair("canary-same")
    result = analyse([target("new", canary)], [target("sick", fixtures.replay(unhealthy))])
    assert result["verdict"] == "pass", result["reason"]
    assert result["mode"] == "absolute"
    assert "no healthy baseline target" in result["reason"]
    sick = [t for t in result["targets"] if t["name"] == "sick"][0]
    assert sick["pooled"] is False and sick["why"] == "left out: itself unhealthy (%s)" % cause
    assert all(c["result"] in ("pass", "skipped") for c in result["checks"])
    assert by_metric(result)["ttft_p95"]["limit"] == DEFAULT_THRESHOLDS["ttft_p95_max"]
    # beside a healthy one, the pool is the healthy one alone
    canary, baseline = pair("canary-same")
    result = analyse([target("new", canary)], [target("sick", fixtures.replay(unhealthy)),
                                               target("old", baseline)])
    assert result["verdict"] == "pass" and result["mode"] == "baseline"
    assert "1 server(s) pooled, 144 requests" in result["reason"]


def test_a_critical_cause_fails_at_once_with_few_requests():
    # the small cache's first second: 3 preemptions for 3 finished requests, fewer than
    # min_requests, and critical
    canary, baseline = pair("canary-small-kv")
    result = analyse([target("new", canary[:2], max_num_seqs=16)], [target("old", baseline[:2])])
    assert result["verdict"] == "fail" and result["requests"]["canary"] == 3 < DEFAULT_MIN_REQUESTS
    assert result["reason"].startswith("The canary fails at once on a critical cause: new: "
                                       "kv_cache_exhausted (critical: 3 preemptions for 3 finished")
    # and the metric it shows
    assert "preemptions_per_request" in result["reason"]


def test_a_dead_canary_fails_at_once():
    unused, baseline = pair("canary-same")
    result = analyse([target("new", fixtures.replay("engine-core-killed"))], [target("old", baseline)])
    assert result["verdict"] == "fail" and result["requests"]["canary"] == 0
    assert "engine_down (critical: 15 of 16 samples unreadable" in result["reason"]
    assert [c["id"] for c in result["causes"]] == ["engine_down"]


def test_baseline_servers_are_pooled():
    # two healthy 8 MiB baseline servers (of the same and the small-cache pair): their counts and
    # buckets added up, the canary judged per request against the pool
    canary, same = pair("canary-same")
    unused, other = pair("canary-small-kv")
    result = analyse([target("new", canary)], [target("a", same), target("b", other)])
    assert result["verdict"] == "pass", result["reason"]
    assert result["requests"] == {"canary": 144, "baseline": 228}
    pooled = side_window([target_window(same), target_window(other)])
    a, b = target_window(same)["histograms"]["ttft"], target_window(other)["histograms"]["ttft"]
    assert a[0] == b[0]
    summed = [x + y for x, y in zip(a[1], b[1])]
    assert pooled["values"]["ttft_p95"] == round(bucket_quantile(0.95, a[0], summed), 6)
    assert pooled["finished"] == 228
    own = [len(target_window(w)["intervals"]["ttft_p95"]) for w in (same, other)]
    assert len(pooled["intervals"]["ttft_p95"]) == sum(own)


def test_beyond_the_tolerance_but_not_significant_passes():
    # no tolerance at all on ITL: the canary's p50 is 0.1 ms above the baseline's, which the
    # test over 19 intervals on each side does not tell from noise
    canary, baseline = pair("canary-same")
    result = analyse([target("new", canary)], [target("old", baseline)],
                     thresholds={"itl_relative": 0.0, "itl_absolute": 0.0})
    itl = by_metric(result)["itl_p50"]
    assert itl["canary"] > itl["limit"] == itl["baseline"]
    assert itl["result"] == "pass" and itl["test"] == "mann_whitney_u" and itl["p_value"] >= 0.05
    assert "but not significant" in itl["why"]


def test_too_few_intervals_leave_the_tolerance_alone_to_decide():
    canary, baseline = pair("canary-small-kv")
    result = analyse([target("new", canary)], [target("old", baseline)], thresholds={"min_intervals": 100})
    checks = by_metric(result)
    assert checks["kv_usage"]["result"] == "fail" and checks["kv_usage"]["test"] is None
    assert "too few interval values for the test" in checks["kv_usage"]["why"]


def test_without_a_baseline_the_absolute_limits_apply():
    canary, unused = pair("canary-same")
    assert analyse([target("new", canary)], [])["verdict"] == "pass"
    canary, unused = pair("canary-low-seqs")
    result = analyse([target("new", canary)], [])
    assert result["verdict"] == "fail" and result["mode"] == "absolute"
    assert failed(result) == ["queue_time_p95", "ttft_p95"]
    assert "no baseline given" in result["reason"]
    assert by_metric(result)["e2e_p95"]["result"] == "skipped"  # no absolute limit by default
    # a limit set in thresholds is checked
    result = analyse([target("new", canary)], [], thresholds={"e2e_p95_max": 5.0})
    assert "e2e_p95" in failed(result)


def test_a_baseline_with_too_few_requests_is_not_compared():
    canary, baseline = pair("canary-same")
    # the baseline's first second: 12 finished
    result = analyse([target("new", canary)], [target("old", baseline[:2])])
    assert result["mode"] == "absolute"
    assert "the healthy baseline finished 12 request(s), fewer than min_requests 20" in result["reason"]


def test_a_restart_in_the_window_starts_the_window_again():
    canary, baseline = pair("canary-same")
    # 10 samples of a busy server (72 finished), then 3 of a fresh one (its counters at 0)
    restarted = copy.deepcopy(canary[:10]) + copy.deepcopy(fixtures.replay("idle"))
    for k, snap in enumerate(restarted):
        snap["time"] = 1000.0 + k
    window = target_window(restarted)
    assert window["restarted"] and window["samples"] == 3 and window["finished"] == 0
    assert target_window(canary[:10])["finished"] == 72


def test_a_window_too_short_for_the_test_leaves_noise_to_the_tolerance():
    # the same flags over 8 s (every other sample: 4 intervals, fewer than min_intervals 5):
    # e2e p95 of 60 requests differs by chance beyond the tolerance, and nothing tells noise apart
    canary, baseline = pair("canary-same")
    result = analyse([target("new", canary[::2][:5])], [target("old", baseline[::2][:5])])
    assert result["verdict"] == "fail" and failed(result) == ["e2e_p95"]
    e2e = by_metric(result)["e2e_p95"]
    assert (e2e["canary"], e2e["baseline"], e2e["test"]) == (4.25, 2.477273, None)
    # the whole 19 s window: within the tolerance, and the canary passes
    assert analyse([target("new", canary)], [target("old", baseline)])["verdict"] == "pass"


def test_beyond_the_tolerance_but_not_significant_on_real_data():
    # the small cache's queue time p95 (1.98 s against a limit of 0.43 s) comes from a few slow
    # intervals: the test over the per-interval values does not find the canary's slower (p 0.099)
    canary, baseline = pair("canary-small-kv")
    queue = by_metric(analyse([target("new", canary)], [target("old", baseline)]))["queue_time_p95"]
    assert queue["canary"] > queue["limit"] and queue["result"] == "pass"
    assert queue["p_value"] == pytest.approx(0.099, abs=0.001)
