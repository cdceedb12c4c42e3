"""The canary judgement (plugins/module_utils/_canary.py) on real captures of a canary and a
baseline under the same load (vLLM CPU 0.32.0; tests/fixtures/metrics/MANIFEST.json, pairs
canary-*: tests/support/capture_fixtures.py canary-pairs), and the Mann-Whitney U test against
scipy's numbers."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils import _canary
from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import (
    CHECKS, DEFAULT_MIN_REQUESTS, DEFAULT_THRESHOLDS, analyse, check_thresholds, decide, holm,
    mann_whitney_u, side_window, target_window)
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
    got_u, unused, got_p = mann_whitney_u(samples[0], samples[1], alternative, method="asymptotic")
    assert got_u == u
    assert got_p == pytest.approx(p, rel=1e-9)
    # with ties the automatic choice is the normal approximation, as scipy's
    if len(set(samples[0] + samples[1])) < len(samples[0] + samples[1]):
        assert mann_whitney_u(samples[0], samples[1], alternative)[2] == got_p


# scipy.stats.mannwhitneyu(x, y, alternative=..., method="exact"), scipy 1.17.1: (U of x, p)
SCIPY_EXACT = [
    (([0.41, 0.52, 0.38, 0.61, 0.47, 0.55], [0.12, 0.15, 0.11, 0.2, 0.14, 0.13, 0.16]), "greater",
     42.0, 0.0005827505827505828),
    (([0.41, 0.52, 0.38, 0.61, 0.47, 0.55], [0.12, 0.15, 0.11, 0.2, 0.14, 0.13, 0.16]), "less", 42.0, 1.0),
    (([3.1, 2.9, 3.3, 3.0, 3.2], [1.0, 1.1, 0.9, 1.2, 1.3]), "greater", 25.0, 0.003968253968253968),
    (([5.0, 1.0, 4.0, 2.0], [3.0, 6.0, 7.0, 0.5, 8.0]), "greater", 6.0, 0.8571428571428572),
    (([5.0, 1.0, 4.0, 2.0], [3.0, 6.0, 7.0, 0.5, 8.0]), "less", 6.0, 0.20634920634920634),
    (([0.5, 0.7, 0.2, 0.9, 0.4, 0.45], [0.3, 0.6, 0.1, 0.35, 0.8, 0.25, 0.15, 0.05]), "greater",
     36.0, 0.07092907092907094),
    (([0.5, 0.7, 0.2, 0.9, 0.4, 0.45], [0.3, 0.6, 0.1, 0.35, 0.8, 0.25, 0.15, 0.05]), "less",
     36.0, 0.946053946053946),
]


@pytest.mark.parametrize("samples, alternative, u, p", SCIPY_EXACT)
def test_mann_whitney_u_is_exact_for_small_samples_without_ties(samples, alternative, u, p):
    got_u, unused, got_p = mann_whitney_u(samples[0], samples[1], alternative)
    assert got_u == u
    assert got_p == pytest.approx(p, rel=1e-12)
    assert mann_whitney_u(samples[0], samples[1], alternative, method="exact")[2] == got_p


def test_five_intervals_a_side_can_fail_the_corrected_test():
    # perfect separation at 5 and 5: exactly 1/252, below alpha / 15 checks (0.0033)? no, but
    # below Holm's first level for the 12 checks that were there before (0.0042), and the normal
    # approximation (0.0061) could not get there at all
    p = mann_whitney_u([3.1, 2.9, 3.3, 3.0, 3.2], [1.0, 1.1, 0.9, 1.2, 1.3])[2]
    assert p == pytest.approx(1 / 252.0)
    assert mann_whitney_u([3.1, 2.9, 3.3, 3.0, 3.2], [1.0, 1.1, 0.9, 1.2, 1.3], method="asymptotic")[2] > 0.006
    with pytest.raises(ValueError):
        mann_whitney_u([1, 2], [2, 3], method="exact")


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
    # every metric, and the canary's share of the traffic first
    assert [c["metric"] for c in result["checks"]] == ["traffic_share"] + [c[0] for c in CHECKS]
    assert [c["result"] for c in result["checks"]] == ["pass"] * (len(CHECKS) + 1)
    assert result["causes"] == []
    assert "passes 16 check(s)" in result["reason"] and "144 requests" in result["reason"]
    # the HTTP layer's answers are read beside the engine's counters: 144 answers, none 5xx
    assert by_metric(result)["http_5xx_ratio"]["canary"] == 0


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


def test_a_canary_without_traffic_fails_on_its_share():
    # canary-idle: the load goes to the baseline only. No data is never a pass: its share of
    # the traffic is compared with the baseline's, and the rest is not judged on nothing
    canary, baseline = pair("canary-idle")
    result = analyse([target("new", canary)], [target("old", baseline)])
    assert result["verdict"] == "fail"
    assert result["requests"] == {"canary": 0, "baseline": 312}
    assert failed(result) == ["traffic_share"]
    share = by_metric(result)["traffic_share"]
    assert share["canary"] == 0 and share["baseline"] > 10 and share["test"] == "poisson"
    assert share["p_value"] < 1e-10
    assert "not back in the load balancer?" in share["why"] and "0 requests finished" in share["why"]
    assert result["reason"].startswith("The canary (0 requests) fails traffic_share 0 requests/s per server <")
    others = [c for c in result["checks"] if c["metric"] not in ("traffic_share", "kv_usage", "requests_waiting")]
    assert all(c["result"] == "skipped" for c in others)


def test_a_canary_far_below_its_share_fails_and_a_fair_share_passes():
    # the same flags: the canary's first 4 s (its rate) against the baseline's whole window is a
    # fair share; a canary that finished a tenth of what the same time brought the baseline is not
    from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import _traffic
    th = dict(DEFAULT_THRESHOLDS)

    def window(finished, seconds, held=0):
        return {"usable": True, "finished": finished, "seconds": seconds, "held": held}
    ok = _traffic([window(100, 50.0)], [("a", [window(120, 50.0)]), ("b", [window(90, 50.0)])], 20, th)
    assert ok["result"] == "pass" and ok["baseline"] == pytest.approx(2.1)
    low = _traffic([window(23, 300.0)],
                   [("a", [window(600, 300.0)]), ("b", [window(610, 300.0)]), ("c", [window(590, 300.0)])], 20, th)
    # 23 requests in 300 s (0.07 requests/s) beside servers at 2 requests/s
    assert low["result"] == "candidate" and low["p_value"] < 1e-20
    slow = _traffic([window(2, 20.0, held=14)], [("a", [window(40, 20.0)])], 20, th)
    assert "held up to 14 request(s)" in slow["why_base"]
    # an idle fleet: nothing expected of the canary, nothing to fail
    idle = _traffic([window(0, 60.0)], [("a", [window(3, 60.0)])], 20, th)
    assert idle["result"] == "skipped" and "fewer than min_requests 20" in idle["why"]


def test_a_slow_canary_with_too_few_requests_is_judged_on_its_queue():
    # the capped canary's first 5 s: 8 finished, 12 held, beside a baseline that finished more
    # with none waiting: the requests it holds are evidence, not absence
    canary, baseline = pair("canary-low-seqs")
    result = analyse([target("new", canary[:6], max_num_seqs=4)], [target("old", baseline[:6])])
    assert result["verdict"] == "fail" and result["requests"]["canary"] == 8
    assert "requests_waiting" in failed(result), result["reason"]
    waiting = by_metric(result)["requests_waiting"]
    assert waiting["canary"] > 5 and waiting["baseline"] == 0
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
    assert "the baseline (1 host(s), 144 requests)" in result["reason"]


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


def test_too_few_intervals_are_inconclusive_never_the_tolerance_alone():
    canary, baseline = pair("canary-small-kv")
    result = analyse([target("new", canary)], [target("old", baseline)], thresholds={"min_intervals": 100})
    checks = by_metric(result)
    assert checks["kv_usage"]["result"] == "inconclusive" and checks["kv_usage"]["test"] is None
    assert "too few interval values for the test" in checks["kv_usage"]["why"]
    # what lies more than decisive_rooms tolerances beyond fails without the test (29 preemptions
    # for 65 requests against none: 9 tolerances), and nothing else is failed untested
    assert checks["preemptions_per_request"]["result"] == "fail" and checks["preemptions_per_request"]["test"] is None
    assert all(c["result"] != "fail" or "tolerances beyond the baseline" in c["why"] for c in result["checks"])
    # with every untested check within decisive_rooms, the verdict is inconclusive
    result = analyse([target("new", canary)], [target("old", baseline)],
                     thresholds={"min_intervals": 100, "decisive_rooms": 1000.0})
    assert result["verdict"] == "inconclusive" and "kv_usage" in result["reason"]


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


def test_a_window_too_short_for_the_test_is_inconclusive_not_a_false_fail():
    # the same flags over 8 s (every other sample: 4 intervals, fewer than min_intervals 5):
    # e2e p95 of 60 requests differs by chance beyond the tolerance, and nothing tells noise
    # apart; that is not judged (it failed the canary when the tolerance alone decided)
    canary, baseline = pair("canary-same")
    result = analyse([target("new", canary[::2][:5])], [target("old", baseline[::2][:5])])
    assert result["verdict"] == "inconclusive" and failed(result) == []
    e2e = by_metric(result)["e2e_p95"]
    assert (e2e["canary"], e2e["baseline"], e2e["test"], e2e["result"]) == (4.25, 2.477273, None, "inconclusive")
    # the whole 19 s window: within the tolerance, and the canary passes
    assert analyse([target("new", canary)], [target("old", baseline)])["verdict"] == "pass"


def test_beyond_the_tolerance_but_not_significant_on_real_data():
    # the small cache's queue time p95 (1.98 s against a limit of 0.43 s) comes from a few slow
    # intervals: the test over the per-interval values does not find the canary's slower (p 0.099)
    canary, baseline = pair("canary-small-kv")
    queue = by_metric(analyse([target("new", canary)], [target("old", baseline)]))["queue_time_p95"]
    assert queue["canary"] > queue["limit"] and queue["result"] == "pass"
    assert queue["p_value"] == pytest.approx(0.099, abs=0.001)


# --- what real failures must not fool ------------------------------------------------------------
# Derived from the real pairs above (vLLM CPU 0.32.0): a restart, HTTP 5xx, aborts and a host
# that reports nonsense cannot be captured from a healthy server here, so they are the recorded
# snapshots with the one change each case names.

def _restarted(samples, at, gap=3):
    """samples with the server down for `gap` samples from `at`, then back as a new process
    with its counters at zero (a restart mid-window)."""
    out = copy.deepcopy(samples[:at])
    for k in range(gap):
        out.append({"url": "http://127.0.0.1:8000", "time": samples[at + k]["time"], "healthy": False,
                    "error": "cannot read http://127.0.0.1:8000/metrics: [Errno 111] Connection refused"})
    fresh = copy.deepcopy(fixtures.replay("idle"))
    for k, snap in enumerate(fresh):
        snap["time"] = samples[min(at + gap + k, len(samples) - 1)]["time"] + 0.001 * k
        snap["process_start_time"] = samples[0]["process_start_time"] + 500
    return out + fresh


def test_a_restart_mid_window_fails_the_canary():
    canary, baseline = pair("canary-same")
    result = analyse([target("new", _restarted(canary, 8, gap=2))], [target("old", baseline)])
    assert result["verdict"] == "fail"
    assert "new restarted in the window: process_start_time_seconds changed" in result["reason"]


def test_a_canary_unreadable_for_more_than_the_allowed_samples_fails():
    canary, baseline = pair("canary-same")
    down = copy.deepcopy(canary)
    for snap in down[-4:]:   # down for its last samples: not "back in the load balancer?"
        snap.clear()
        snap.update({"url": "http://127.0.0.1:8000", "time": 1.0, "healthy": False, "error": "refused"})
    result = analyse([target("new", down, )], [target("old", baseline)])
    assert result["verdict"] == "fail"
    assert "could not be read for 4 samples in a row (max_unreadable_samples 2)" in result["reason"]
    # two in a row is within the default
    down = copy.deepcopy(canary)
    for snap in down[9:11]:
        snap["error"] = "refused"
    assert "could not be read" not in analyse([target("new", down)], [target("old", baseline)])["reason"]


def _with_edge(samples, share_5xx=0.0, share_aborts=0.0):
    """samples whose HTTP layer answered share_5xx of its requests with 5xx on top of what the
    engine finished, and whose engine counted share_aborts of its finished requests as aborts."""
    out = copy.deepcopy(samples)
    for snap in out:
        done = snap["requests_finished_total"]
        snap["http_5xx_total"] = int(round(done * share_5xx / (1 - share_5xx))) if share_5xx else 0
        snap["http_requests_total"] = done + snap["http_5xx_total"]
        snap["request_aborts_total"] = int(round(done * share_aborts))
    return out


def test_errors_at_the_edge_fail_the_canary():
    canary, baseline = pair("canary-same")
    result = analyse([target("new", _with_edge(canary, share_5xx=0.5))], [target("old", _with_edge(baseline))])
    assert result["verdict"] == "fail" and "http_5xx_ratio" in failed(result)
    check = by_metric(result)["http_5xx_ratio"]
    assert check["canary"] == pytest.approx(0.5, abs=0.02) and check["baseline"] == 0
    assert check["effect"]["difference"] == pytest.approx(0.5, abs=0.02)
    # clients that give up: 40% aborts against none
    result = analyse([target("new", _with_edge(canary, share_aborts=0.4))], [target("old", _with_edge(baseline))])
    assert result["verdict"] == "fail" and failed(result) == ["abort_ratio"]
    # without a baseline, 5xx above 1% fails on the absolute limit
    result = analyse([target("new", _with_edge(canary, share_5xx=0.05))], [])
    assert "http_5xx_ratio" in failed(result) and result["mode"] == "absolute"


def _liar(samples, per_sample=50000, slow=True):
    """A baseline host that reports per_sample more finished requests each sample, all of them
    in the slowest (or the fastest) bucket of every latency histogram."""
    out = copy.deepcopy(samples)
    for k, snap in enumerate(out):
        extra = k * per_sample
        snap["requests_finished_total"] += extra
        for metric, engines in snap["histograms"].items():
            for hist in engines.values():
                if "counts" not in hist:
                    continue
                first = len(hist["counts"]) - 1 if slow else 0
                hist["counts"] = [c + (extra if i >= first else 0) for i, c in enumerate(hist["counts"])]
    return out


def _hosts(*pairs):
    return [dict(target(name, samples), host=name) for name, samples in pairs]


@pytest.mark.parametrize("slow", [True, False])
def test_one_baseline_host_that_reports_nonsense_sways_no_verdict(slow):
    same_canary, same_baseline = pair("canary-same")
    unused, other = pair("canary-small-kv")
    low_canary, unused2 = pair("canary-low-seqs")
    liar = _liar(same_baseline, slow=slow)
    honest = [("a", same_baseline), ("b", other)]
    for canary, limits, verdict in ((same_canary, {}, "pass"), (low_canary, {"max_num_seqs": 4}, "fail")):
        alone = analyse([target("new", canary, **limits)], _hosts(*honest))
        swayed = analyse([target("new", canary, **limits)], _hosts(*(honest + [("liar", liar)])))
        assert alone["verdict"] == swayed["verdict"] == verdict, swayed["reason"]
        # a slow liar is left out of the latency checks it lies in, named with its value (a fast
        # one cannot lie below 0: it stays, and the median of three does not move for it)
        ttft = by_metric(swayed)["ttft_p95"]
        if slow:
            assert [x["host"] for x in ttft.get("left_out", [])] == ["liar"]
            assert ttft["baseline_hosts"] == ["a", "b"]
    # pooled by counts as before, the liar would have decided: its million requests
    pooled = side_window([target_window(s) for unused3, s in honest] + [target_window(liar)])
    assert pooled["values"]["ttft_p95"] != side_window([target_window(s) for unused3, s in honest])["values"]["ttft_p95"]


def test_two_baseline_hosts_that_disagree_decide_only_what_both_agree_on():
    same_canary, same_baseline = pair("canary-same")
    low_canary, unused = pair("canary-low-seqs")
    liar = _liar(same_baseline, slow=True)
    # a canary ten times slower is not passed because one of two hosts says slow is normal
    result = analyse([target("new", low_canary, max_num_seqs=4)], _hosts(("a", same_baseline), ("liar", liar)))
    assert result["verdict"] != "pass"
    ttft = by_metric(result)["ttft_p95"]
    assert ttft["result"] == "inconclusive" and "the baseline's two hosts disagree" in ttft["why"]
    # a healthy canary is not failed because one of two hosts says everything is fast
    fast = _liar(same_baseline, slow=False)
    result = analyse([target("new", same_canary)], _hosts(("a", same_baseline), ("liar", fast)))
    assert result["verdict"] != "fail", result["reason"]


def _one_check(value, intervals):
    return {"values": {"ttft_p95": value}, "intervals": {"ttft_p95": intervals}, "why": {}}


@pytest.mark.parametrize("canary_intervals, result", [
    # beyond the honest host's limit on its p95, but its intervals mix with that host's: no evidence
    # that it is worse than either host, so it passes (a real vLLM CPU canary under the same load)
    ([0.09, 0.31, 0.08, 0.12, 0.1, 0.11], "pass"),
    # every interval slower than every one of the honest host's: worse than that host, not than the
    # other, and which of the two is right cannot be told
    ([0.2, 0.22, 0.25, 0.21, 0.3, 0.24], "inconclusive"),
])
def test_worse_than_one_of_two_disagreeing_hosts_is_tested_against_it(canary_intervals, result):
    th = dict(DEFAULT_THRESHOLDS)
    honest = _one_check(0.098, [0.1, 0.09, 0.11, 0.095, 0.12, 0.1])
    liar = _one_check(2560.0, [2500.0, 2600.0, 2550.0, 2570.0, 2560.0, 2540.0])
    entry = _canary._compare("ttft_p95", "ttft", "higher", " s", _one_check(0.175, canary_intervals),
                             [("real-host", honest), ("liar-host", liar)], th)
    assert entry["result"] == "candidate" and entry["baseline"] == 0.098
    settled = _canary._settle([entry], th)[0]
    assert settled["result"] == result, settled["why"]
    assert "the baseline's two hosts disagree" in settled["why"]
    assert set(settled) >= {"p_value", "effect"} and not {"on_reject", "why_base"} & set(settled)


def test_the_baseline_serves_what_the_canary_serves():
    canary, baseline = pair("canary-same")
    other = copy.deepcopy(baseline)
    for snap in other:
        snap["model"] = "another-model"
    result = analyse([target("new", canary)], _hosts(("a", baseline), ("b", other)))
    left = [t for t in result["targets"] if t["name"] == "b"][0]
    assert left["pooled"] is False and left["why"] == "left out: serves another-model, the canary tiny-llama"
    assert result["baseline_hosts"] == ["a"] and result["verdict"] == "pass"
    # nothing left: the absolute limits, and the reason says why
    result = analyse([target("new", canary)], _hosts(("b", other)))
    assert result["mode"] == "absolute" and "serves another-model" in result["reason"]


def test_holm_rejects_step_down_and_never_more_than_bonferroni_would_miss():
    # m = 4: levels 0.0125, 0.0167, 0.025, 0.05
    got = holm([0.01, 0.04, None, 0.015], 0.05)
    assert [r for r, unused in got] == [True, False, False, True]   # 0.04 >= 0.05 / 2
    assert got[0][1] == pytest.approx(0.0125) and got[3][1] == pytest.approx(0.05 / 3)
    # the first that is not rejected stops the rest
    assert [r for r, unused in holm([0.02, 0.001, 0.03], 0.05)] == [True, True, True]
    assert [r for r, unused in holm([0.02, 0.001, 0.011, 0.5], 0.05)] == [True, True, True, False]
    assert [r for r, unused in holm([0.02, 0.001, 0.019, 0.5], 0.05)] == [False, True, False, False]


def test_the_warm_up_is_not_judged():
    # a cold canary: its first two seconds 60% slower on TTFT (a cold prefix cache); skipped
    canary, baseline = pair("canary-same")
    cold = copy.deepcopy(canary)
    result = analyse([target("new", cold)], [target("old", baseline)], warmup=2.0)
    assert result["warmup_seconds"] == 2.0
    assert result["requests"]["canary"] < 144 and result["verdict"] == "pass"
    assert target_window(canary, start=canary[0]["time"] + 2.0)["samples"] == len(canary) - 2


@pytest.mark.parametrize("verdict, policy, canary_batch, keep, stop", [
    ("pass", "fail_canary", True, True, False),
    ("fail", "pass", False, False, True),
    ("inconclusive", "fail_canary", True, False, True),
    ("inconclusive", "fail_canary", False, True, True),
    ("inconclusive", "fail", False, False, True),
    ("inconclusive", "pass", True, True, True),
])
def test_an_inconclusive_host_is_never_kept_silently(verdict, policy, canary_batch, keep, stop):
    out = decide({"verdict": verdict, "reason": "because"}, inconclusive=policy, canary_batch=canary_batch)
    assert (out["keep"], out["stop"]) == (keep, stop)
    assert out["judged"] is (verdict != "inconclusive")
    if verdict == "inconclusive":
        assert out["why"].startswith("analysis inconclusive, not judged; %s" % ("kept" if keep else "rolled back"))
        assert "no later batch starts" in out["why"]
    with pytest.raises(ValueError):
        decide({"verdict": "pass"}, inconclusive="maybe")


def test_a_difference_no_noise_makes_fails_without_the_test():
    # the small cache's kv_usage per sequence (about 4x the baseline's) in its first 4 s: too few
    # intervals for the test; 3.8 tolerances beyond is inconclusive at the default, a fail when
    # decisive_rooms is below it; the same flags' chance differences (1.7 tolerances) never fail
    canary, baseline = pair("canary-small-kv")
    th = {"min_intervals": 100}
    check = by_metric(analyse([target("new", canary)], [target("old", baseline)], thresholds=th))["kv_usage"]
    assert check["result"] == "inconclusive"
    check = by_metric(analyse([target("new", canary)], [target("old", baseline)],
                              thresholds=dict(th, decisive_rooms=3.0)))["kv_usage"]
    assert check["result"] == "fail" and "tolerances beyond the baseline (decisive_rooms 3)" in check["why"]
    assert "rooms" not in check
    canary, baseline = pair("canary-same")
    result = analyse([target("new", canary[::2][:5])], [target("old", baseline[::2][:5])])
    assert failed(result) == []


# --- the difference of differences: judge the change, not the host ------------------------------

def _slower(samples, buckets=1):
    """A host slower than the one recorded, the same traffic: every request of every latency
    histogram `buckets` buckets later (derived from the real capture: a host on a busier CPU)."""
    out = copy.deepcopy(samples)
    for snap in out:
        for engines in snap["histograms"].values():
            for hist in engines.values():
                counts = hist["counts"]
                hist["counts"] = [0] * buckets + counts[:len(counts) - 1 - buckets] + counts[-1:]
    return out


def _halves(samples):
    return samples[:10], samples[10:]


def test_a_host_slower_before_its_change_is_judged_on_what_the_change_added():
    canary, baseline = pair("canary-same")
    slow_before, slow_after = _halves(_slower(canary))
    base_before, base_after = _halves(baseline)
    # judged as a host alone, the slower host fails on its latency, though its change is harmless
    alone = analyse([target("new", slow_after)], [target("old", base_after)], min_requests=8)
    latency = set(c[0] for c in CHECKS if c[1] in ("queue_time", "ttft", "itl", "e2e"))
    assert alone["verdict"] == "fail" and failed(alone) and set(failed(alone)) <= latency, alone["reason"]
    # its window before the change, under the same traffic, against the same baseline
    before = analyse([target("new", slow_before)], [target("old", base_before)], min_requests=8)
    assert before["verdict"] == "fail"
    result = analyse([target("new", slow_after)], [target("old", base_after)], min_requests=8, before=before)
    assert result["verdict"] == "pass", result["reason"]
    assert result["before"]["used"] is True and set(failed(alone)) <= set(result["before"]["handicaps"])
    for metric in failed(alone):
        check = by_metric(result)[metric]
        assert check["result"] == "pass" and check["before"]["handicap"] > 0 and check["judged_value"] < check["canary"]
    assert "judged on what the change added where the host was worse before it" in result["reason"]


def test_a_real_regression_on_top_of_a_slow_host_still_fails():
    canary, baseline = pair("canary-same")
    low_canary, low_baseline = pair("canary-low-seqs")
    before = analyse([target("new", _halves(_slower(canary))[0])], [target("old", _halves(baseline)[0])],
                     min_requests=8)
    # after the change: the host is capped at 4 sequences and queues (the real capture), slower still
    result = analyse([target("new", _slower(low_canary), max_num_seqs=4)], [target("old", low_baseline)],
                     before=before)
    assert result["verdict"] == "fail", result["reason"]
    queue = by_metric(result)["queue_time_p95"]
    assert queue["result"] == "fail" and queue["judged_value"] is not None or queue["before"]["handicap"] == 0
    assert "queue_time_p95" in failed(result) or "requests_waiting" in failed(result)


def test_a_host_better_than_its_baseline_before_gets_no_credit_and_no_blame():
    canary, baseline = pair("canary-same")
    # the baseline was the slower one before: the canary had no handicap, nothing is taken off
    before = analyse([target("new", _halves(canary)[0])], [target("old", _halves(_slower(baseline))[0])],
                     min_requests=8)
    result = analyse([target("new", _halves(canary)[1])], [target("old", _halves(baseline)[1])],
                     min_requests=8, before=before)
    latency = set(c[0] for c in CHECKS if c[1] in ("queue_time", "ttft", "itl", "e2e"))
    assert result["before"]["used"] is True and not latency & set(result["before"]["handicaps"])
    plain = analyse([target("new", _halves(canary)[1])], [target("old", _halves(baseline)[1])], min_requests=8)
    assert result["verdict"] == plain["verdict"]
    assert [c["result"] for c in result["checks"]] == [c["result"] for c in plain["checks"]]


@pytest.mark.parametrize("before, why", [
    ({"mode": "absolute", "checks": []}, "no healthy baseline that serves what the canary serves"),
    ({"mode": "absolute", "requests": {"canary": 30, "baseline": 5}, "checks": []},
     "the baseline finished 5 request(s) in the window before the change, fewer than min_requests 20"),
    ({"mode": "baseline", "requests": {"canary": 3}, "checks": []}, "fewer than min_requests"),
    ({"mode": "baseline", "requests": {"canary": 50}, "checks": [{"metric": "ttft_p95", "canary": None}]},
     "compared no check"),
    ("not a result", "no result of a window before the change"),
])
def test_a_window_before_the_change_that_cannot_be_used_is_said_and_changes_nothing(before, why):
    canary, baseline = pair("canary-same")
    plain = analyse([target("new", canary)], [target("old", baseline)])
    result = analyse([target("new", canary)], [target("old", baseline)], before=before)
    assert result["before"] == {"used": False, "why": result["before"]["why"], "handicaps": {}}
    assert why in result["before"]["why"]
    assert result["verdict"] == plain["verdict"] and result["reason"] == plain["reason"]
