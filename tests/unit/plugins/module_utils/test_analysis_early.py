# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The early verdict of a canary analysis (_analysis_run._Verdicts, _canary's per-request tests), on
the recorded pairs (vLLM CPU 0.32.0, 20 samples 1 s apart; tests/support/capture_fixtures.py
canary-pairs), as they are and every fifth sample (the counters a sampler 5 s apart reads)."""

from __future__ import annotations

import copy
import math
import threading

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._analysis_run import _Verdicts
from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import (
    DEFAULT_MIN_REQUESTS, DEFAULT_THRESHOLDS, analyse, binomial_sf)
from ansible_collections.kvfleet.vllm.tests.unit.plugins.module_utils.test_canary import _slower, _with_edge, pair

EARLY = dict(DEFAULT_THRESHOLDS, alpha=DEFAULT_THRESHOLDS["early_alpha"])


class Replayed(object):
    """What _Verdicts reads of a sampling window: the samples so far."""

    def __init__(self):
        self.snaps = []


def early(canary, baseline, canary_limits, every=1):
    """Feed the pair to _Verdicts sample by sample (every `every`-th), as the first canary window
    does: (samples read when the early verdict ended the window, or None; its reason)."""
    stop = threading.Event()
    mine, theirs = Replayed(), Replayed()
    plan = _Verdicts([("canary", {"name": "new"}, dict(canary_limits), mine),
                      ("baseline", {"name": "old"}, {"max_num_seqs": 16}, theirs)],
                     DEFAULT_MIN_REQUESTS, None, 0, 60, stop)
    for index in range(0, len(canary), every):
        theirs.snaps.append(copy.deepcopy(baseline[index]))
        mine.snaps.append(copy.deepcopy(canary[index]))
        plan.watch(mine)
        if stop.is_set():
            return len(mine.snaps), plan.early
    return None, None


@pytest.mark.parametrize("k, n, share", [(10, 40, 0.2375), (3, 3, 0.01), (1, 500, 0.002), (0, 10, 0.5), (7, 5, 0.5)])
def test_the_binomial_tail_is_the_exact_sum(k, n, share):
    exact = sum(math.comb(n, j) * share ** j * (1 - share) ** (n - j) for j in range(k, n + 1))
    assert binomial_sf(k, n, share) == pytest.approx(exact, rel=1e-9, abs=1e-300)


BAD = [
    ("small kv cache", "canary-small-kv", 16, "preemptions_per_request"),
    ("low max num seqs", "canary-low-seqs", 4, "queue_time_p95"),
    ("no traffic", "canary-idle", 16, "traffic_share"),
]


@pytest.mark.parametrize("what, name, seqs, named", BAD)
def test_a_bad_canary_sampled_5_s_apart_is_decided_two_intervals_after_its_first_bad_sample(what, name, seqs, named):
    # bad from the start: the first sample that shows it ends the first interval (the second
    # sample); the decision comes at the fourth, two intervals later
    canary, baseline = pair(name)
    read, reason = early(canary, baseline, {"max_num_seqs": seqs}, every=5)
    assert read == 4, (what, reason)
    assert "%s " % named in reason


def test_a_5xx_canary_sampled_5_s_apart_is_decided_two_intervals_after_its_first_bad_sample():
    canary, baseline = pair("canary-same")
    read, reason = early(_with_edge(canary, share_5xx=0.5), _with_edge(baseline), {"max_num_seqs": 16}, every=5)
    assert read == 4 and "http_5xx_ratio " in reason


@pytest.mark.parametrize("every", [1, 2, 5])
def test_identical_settings_are_never_decided_early(every):
    canary, baseline = pair("canary-same")
    for first, second in ((canary, baseline), (baseline, canary)):
        assert early(first, second, {"max_num_seqs": 16}, every=every) == (None, None)


def test_a_canary_holding_a_queue_is_decided_before_it_finished_min_requests():
    # --max-num-seqs 4 under 12 requests at a time: the queue it holds needs no finished request
    canary, baseline = pair("canary-low-seqs")
    read, reason = early(canary, baseline, {"max_num_seqs": 4})
    assert read is not None and read < len(canary)
    finished = canary[read - 1]["requests_finished_total"] - canary[0]["requests_finished_total"]
    assert finished < DEFAULT_MIN_REQUESTS
    assert "requests_waiting " in reason


def test_the_per_request_test_decides_what_two_intervals_cannot():
    # one histogram bucket slower: queue_time_p50 beyond its tolerance, but fewer than 4 tolerances,
    # and two intervals a side: the interval test cannot run; the canary's 72 requests decide it
    canary, baseline = pair("canary-same")
    c, b = _slower(canary, 1)[::5][:3], baseline[::5][:3]
    sides = ([{"name": "new", "samples": copy.deepcopy(c), "limits": {"max_num_seqs": 16}}],
             [{"name": "old", "samples": copy.deepcopy(b), "limits": {"max_num_seqs": 16}}])
    plain = dict((x["metric"], x) for x in analyse(*sides, thresholds=EARLY)["checks"])
    assert plain["queue_time_p50"]["result"] == "inconclusive"
    assert "too few interval values" in plain["queue_time_p50"]["why"]
    looked = dict((x["metric"], x) for x in analyse(*copy.deepcopy(sides), thresholds=EARLY, early=True)["checks"])
    check = looked["queue_time_p50"]
    assert check["result"] == "fail" and check["test"] == "per_request" and check["p_value"] < 1e-10
    assert "per request, " in check["why"] and "requests beyond" in check["why"]
    # tested against the limit, not the baseline's value: the requests counted are beyond the limit
    assert check["canary"] > check["limit"] > check["baseline"]


def test_the_per_request_test_is_against_the_limit_so_a_canary_within_it_passes():
    canary, baseline = pair("canary-same")
    c, b = canary[::5][:3], baseline[::5][:3]
    result = analyse([{"name": "new", "samples": copy.deepcopy(c), "limits": {"max_num_seqs": 16}}],
                     [{"name": "old", "samples": copy.deepcopy(b), "limits": {"max_num_seqs": 16}}],
                     thresholds=EARLY, early=True)
    assert result["verdict"] != "fail", result["reason"]


def test_the_final_verdict_takes_the_early_look_at_the_callers_alpha():
    plan = _Verdicts([], DEFAULT_MIN_REQUESTS, {"alpha": 0.1}, 0, 60, threading.Event())
    assert plan.final({"alpha": 0.1}) == ({"alpha": 0.1}, False)
    plan.early = "The canary (72 requests) fails queue_time_p50 ..."
    assert plan.final({"alpha": 0.1}) == ({"alpha": 0.1}, True)
    assert plan.final(None) == (None, True)


def test_a_forgotten_canary_decided_early_is_failed_by_the_final_verdict_too():
    # the early verdict fails traffic_share at early_alpha on the first canary window's samples;
    # the final judgement reads one more baseline sample, at alpha (at early_alpha again, a
    # p-value just below that level at the early look could land just above it: in the fleet
    # scenario a forgotten canary was once kept as inconclusive that way)
    canary, baseline = pair("canary-idle")
    read, reason = early(canary, baseline, {"max_num_seqs": 16})
    assert read is not None and "traffic_share " in reason
    plan = _Verdicts([], DEFAULT_MIN_REQUESTS, None, 0, 60, threading.Event())
    plan.early = reason
    final, look = plan.final(None)
    result = analyse([{"name": "new", "samples": copy.deepcopy(canary[:read]), "limits": {"max_num_seqs": 16}}],
                     [{"name": "old", "samples": copy.deepcopy(baseline[:read + 1]), "limits": {"max_num_seqs": 16}}],
                     thresholds=final, early=look)
    assert result["verdict"] == "fail" and "traffic_share" in [c["metric"] for c in result["checks"] if c["result"] == "fail"]
