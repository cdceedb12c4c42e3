"""Latency quantiles from vLLM's histograms (plugins/module_utils/_latency.py), checked against
real vLLM 0.32.0 CPU captures computed by hand, and against buckets that cannot be true."""

from __future__ import annotations

import glob
import json
import math
import os

import pytest

from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import (
    METRICS, bucket_quantile, histograms, latency, window)
from ansible_collections.kvfleet.vllm.plugins.module_utils._prom import parse
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

NAMES = [m for m, _f in METRICS]


def capture(name):
    return parse(fixtures.read(os.path.join(fixtures.METRICS, name)))[0]


def hists(name):
    return histograms(capture(name))


def quantiles(entry):
    return (entry["p50"], entry["p90"], entry["p99"])


def assert_none(entry, *words):
    assert quantiles(entry) == (None, None, None), entry
    assert entry["reason"], entry
    for word in words:
        assert word in entry["reason"], entry


def body(buckets, family="vllm:time_to_first_token_seconds", labels='engine="0",model_name="m"'):
    """Exposition text of one histogram: buckets [(le text, value text)]."""
    lines = ["# TYPE %s histogram" % family]
    lines += ['%s_bucket{%s,le="%s"} %s' % (family, labels, le, v) for le, v in buckets]
    return parse("\n".join(lines) + "\n")[0]


# --- by hand, from a real capture pair ---------------------------------------------------------

def test_window_of_a_real_busy_pair_matches_the_hand_computation():
    # busy-0 and busy-2 (5.805 s apart, 4 concurrent requests). Cumulative counts, TTFT:
    #   le     0.001 0.005 0.01 0.02 0.04 ... +Inf
    #   busy-0     0     1    2    3    4 ...    4
    #   busy-2     0     3   10   14   15 ...   15
    #   window     0     2    8   11   11 ...   11   (11 first tokens in the window)
    # p50: rank 0.5 x 11 = 5.5, first bucket reaching it le=0.01 (8); below it 2, in it 8-2 = 6:
    #      0.005 + (0.01 - 0.005) x (5.5 - 2) / 6 = 0.0079166... -> 0.007917
    # p90: rank 9.9 -> le=0.02 (11); below 8, in it 3: 0.01 + 0.01 x 1.9 / 3 = 0.0163333
    # p99: rank 10.89 -> le=0.02: 0.01 + 0.01 x 2.89 / 3 = 0.0196333
    # E2E: window counts 0 up to le=1.0, then 10 from le=1.5: every rank falls in (1.0, 1.5]:
    #      p50 1.0 + 0.5 x 5 / 10 = 1.25, p90 1.0 + 0.5 x 9 / 10 = 1.45, p99 1.0 + 0.5 x 9.9 / 10 = 1.495
    # Queue: all 10 in the first bucket (0, 0.3]: p50 0.3 x 5 / 10 = 0.15, p90 0.27, p99 0.297
    first, last = hists("vllm-0.32.0-cpu-busy-0.txt"), hists("vllm-0.32.0-cpu-busy-2.txt")
    got = latency(last, first, 5.805)
    assert (got["basis"], got["seconds"]) == ("window", 5.805)
    assert quantiles(got["ttft"]) == (0.007917, 0.016333, 0.019633)
    assert got["ttft"]["count"] == 11 and got["ttft"]["reason"] is None
    assert quantiles(got["e2e"]) == (1.25, 1.45, 1.495) and got["e2e"]["count"] == 10
    assert quantiles(got["queue"]) == (0.15, 0.27, 0.297) and got["queue"]["count"] == 10
    # ITL: window counts le=0.01 12579 - 3596 = 8983, le=0.025 and +Inf 12586 - 3596 = 8990.
    # p50 rank 4495, p90 8091, p99 8900.1 all fall in the first bucket (0, 0.01]:
    #      0.01 x 4495 / 8983 = 0.0050039, 0.01 x 8091 / 8983 = 0.0090070,
    #      0.01 x 8900.1 / 8983 = 0.0099077
    assert quantiles(got["itl"]) == (0.005004, 0.009007, 0.009908)
    assert got["itl"]["count"] == 8990
    assert "engines" not in got  # one engine: the top level is that engine


def test_the_same_window_through_the_sampler():
    # replay() goes through _probe.sample, as the gate and the monitor do
    snaps = fixtures.replay("busy")
    picked = [s for s in snaps if s["time"] in (1000.0, 1005.805)]
    got = window(picked)
    assert quantiles(got["ttft"]) == (0.007917, 0.016333, 0.019633)
    assert got["seconds"] == 5.805
    json.dumps(got, allow_nan=False)


def test_one_reading_gives_the_quantiles_since_start():
    # busy-2 TTFT cumulative: le 0.005 -> 3, 0.01 -> 10, 0.02 -> 14, 0.04 -> 15 = +Inf.
    # p50 rank 7.5 -> (0.005, 0.01]: 0.005 + 0.005 x 4.5 / 7 = 0.0082143
    # p90 rank 13.5 -> (0.01, 0.02]: 0.01 + 0.01 x 3.5 / 4 = 0.01875
    # p99 rank 14.85 -> (0.02, 0.04]: 0.02 + 0.02 x 0.85 / 1 = 0.037
    got = latency(hists("vllm-0.32.0-cpu-busy-2.txt"))
    assert (got["basis"], got["seconds"]) == ("since_start", None)
    assert quantiles(got["ttft"]) == (0.008214, 0.01875, 0.037) and got["ttft"]["count"] == 15


def test_window_without_requests_is_none_with_a_reason():
    same = hists("vllm-0.32.0-cpu-busy-2.txt")
    got = latency(same, same, 2.0)
    for name in NAMES:
        assert_none(got[name], "nothing observed in the window")
        assert got[name]["count"] == 0


def test_an_idle_server_has_no_quantiles_since_start():
    got = latency(hists("vllm-0.32.0-cpu-idle-0.txt"))
    for name in NAMES:
        assert_none(got[name], "since the server started")


def test_restart_in_the_window_is_none_never_negative():
    # the later reading has fewer observations: the counters began again
    got = latency(hists("vllm-0.32.0-cpu-busy-0.txt"), hists("vllm-0.32.0-cpu-busy-2.txt"), 5.8)
    for name in NAMES:
        assert_none(got[name], "restarted")
        assert got[name]["count"] is None


def test_restart_between_the_first_and_last_reading_is_found():
    # busy-0, busy-2, busy-0 again: first and last are equal, yet the server restarted between
    busy0 = {"time": 1.0, "histograms": hists("vllm-0.32.0-cpu-busy-0.txt")}
    busy2 = {"time": 6.8, "histograms": hists("vllm-0.32.0-cpu-busy-2.txt")}
    got = window([busy0, busy2, dict(busy0, time=9.0)])
    for name in NAMES:
        assert_none(got[name], "restarted")
    seq = fixtures.sequence("0.32.0", "dp2-one-overloaded")
    dp = [{"time": t, "histograms": histograms(parse(text)[0])} for t, text in seq]
    got = window([dp[0], dp[-1], dict(dp[0], time=99.0)])
    assert_none(got["engines"]["0"]["itl"], "restarted")  # engine 0 generated 3434 tokens between


def test_two_engines_are_added_up_and_kept_apart():
    seq = fixtures.sequence("0.32.0", "dp2-one-overloaded")
    first, last = [histograms(parse(text)[0]) for _t, text in (seq[0], seq[-1])]
    got = latency(last, first, seq[-1][0] - seq[0][0])
    assert sorted(got["engines"]) == ["0", "1"]
    for name in NAMES:
        counts = [got["engines"][e][name]["count"] for e in ("0", "1")]
        if got[name]["count"] is not None:
            assert got[name]["count"] == sum(counts)
    # the top level is the quantile of the added buckets: between the engines' own
    for name in NAMES:
        values = [got["engines"][e][name]["p50"] for e in ("0", "1")
                  if got["engines"][e][name]["p50"] is not None]
        if got[name]["p50"] is not None and values:
            assert min(values) <= got[name]["p50"] <= max(values)


def test_an_engine_missing_from_the_first_reading():
    seq = fixtures.sequence("0.32.0", "dp2-one-overloaded")
    last = histograms(parse(seq[-1][1])[0])
    first = json.loads(json.dumps(last))
    for per_engine in first.values():
        per_engine.pop("1")
    got = latency(last, first, 1.0)
    assert_none(got["engines"]["1"]["ttft"], "engine 1 is not in the first reading")
    assert got["engines"]["0"]["ttft"]["count"] == 0
    assert_none(got["ttft"], "the engines differ")  # one engine against two


# --- Prometheus' rule ------------------------------------------------------------------------

def test_rank_in_the_inf_bucket_gives_the_highest_finite_bound():
    # 10 observations, 9 at most 0.5 s, one above 1.0: p99's rank 9.9 is in the +Inf bucket
    got = latency(histograms(body([("0.1", "1"), ("0.5", "9"), ("1.0", "9"), ("+Inf", "10")])))
    assert got["ttft"]["p99"] == 1.0
    # p90's rank 9 is reached at le=0.5: 0.1 + 0.4 x (9 - 1) / 8 = 0.5
    assert got["ttft"]["p90"] == 0.5
    assert bucket_quantile(0.5, [0.1], [0, 4]) == 0.1  # everything above the only bound


def test_first_bucket_interpolates_from_zero_and_a_non_positive_bound_is_returned():
    assert bucket_quantile(0.5, [2.0, 4.0], [10, 10, 10]) == 1.0
    assert bucket_quantile(0.5, [-1.0, 4.0], [10, 10, 10]) == -1.0
    assert bucket_quantile(0.5, [1.0], [0, 0]) is None


def test_buckets_in_any_order_are_sorted_by_le():
    got = latency(histograms(body([("+Inf", "4"), ("0.5", "4"), ("0.1", "0")])))
    assert quantiles(got["ttft"]) == (0.3, 0.46, 0.496)


def test_old_itl_name_is_read_and_never_added_to_the_new_one():
    old = body([("0.01", "4"), ("+Inf", "4")], family="vllm:time_per_output_token_seconds")
    assert latency(histograms(old))["itl"]["count"] == 4
    new = body([("0.01", "1"), ("+Inf", "1")], family="vllm:inter_token_latency_seconds")
    assert latency(histograms(old + new))["itl"]["count"] == 1


def test_absent_histograms_are_none_with_a_reason():
    got = latency(histograms(body([("0.1", "1"), ("+Inf", "1")])))
    for name in ("itl", "queue", "e2e"):
        assert_none(got[name], "not exposed")
        assert got[name]["count"] is None


# --- buckets that cannot be true ---------------------------------------------------------------

@pytest.mark.parametrize("buckets, words", [
    ([("0.1", "5"), ("0.5", "3"), ("+Inf", "6")], "cumulative counts fall"),
    ([("0.1", "1"), ("0.5", "3"), ("+Inf", "2")], "cumulative counts fall"),
    ([("0.1", "NaN"), ("+Inf", "2")], "not a count"),
    ([("0.1", "1"), ("+Inf", "NaN")], "not a count"),
    ([("0.1", "+Inf"), ("+Inf", "+Inf")], "not a count"),
    ([("0.1", "-1"), ("+Inf", "2")], "not a count"),
    ([("0.1", "1e300"), ("+Inf", "1e300")], "not a count"),
    ([("0.1", "1"), ("0.5", "2")], "no +Inf bucket"),
    ([("+Inf", "2")], "only the +Inf bucket"),
    ([("0.1", "1"), ("0.10", "1"), ("+Inf", "2")], "two buckets with le=0.10"),
    ([("0.1", "1"), ("+Inf", "1"), ("Inf", "1")], "two +Inf buckets"),
    ([("fast", "1"), ("+Inf", "2")], "is not a number"),
    ([("NaN", "1"), ("+Inf", "2")], "is not a number"),
    ([("-Inf", "0"), ("+Inf", "2")], "cannot be a bucket bound"),
    ([("-1.7e308", "1"), ("1.7e308", "2"), ("+Inf", "2")], "too large to interpolate"),
])
def test_hostile_buckets_are_none_never_a_traceback(buckets, words):
    got = latency(histograms(body(buckets)))
    assert_none(got["ttft"], words)
    json.dumps(got, allow_nan=False)


def test_a_bucket_without_le_is_refused():
    samples = parse('vllm:time_to_first_token_seconds_bucket{engine="0"} 1\n')[0]
    assert_none(latency(histograms(samples))["ttft"], "no le label")


def test_bounds_that_change_in_the_window_are_none():
    first = histograms(body([("0.1", "1"), ("+Inf", "1")]))
    last = histograms(body([("0.2", "3"), ("+Inf", "3")]))
    assert_none(latency(last, first, 1.0)["ttft"], "bounds changed")


def test_a_window_whose_difference_is_not_cumulative_is_none():
    # each reading is cumulative, their difference is not: le=0.1 grew by 2, +Inf by 1
    first = histograms(body([("0.1", "1"), ("+Inf", "5")]))
    last = histograms(body([("0.1", "3"), ("+Inf", "6")]))
    assert_none(latency(last, first, 1.0)["ttft"], "not cumulative")


def test_a_bad_first_reading_is_named():
    first = histograms(body([("0.1", "NaN"), ("+Inf", "5")]))
    last = histograms(body([("0.1", "3"), ("+Inf", "6")]))
    assert_none(latency(last, first, 1.0)["ttft"], "the first reading of the window", "not a count")


@pytest.mark.parametrize("stored", [
    "text", 42, None, [], {"ttft": "x"}, {"ttft": {"0": "x"}}, {"ttft": {"0": {}}},
    {"ttft": {"0": {"le": [0.1], "counts": [1]}}},
    {"ttft": {"0": {"le": [0.1, 0.1], "counts": [1, 1, 1]}}},
    {"ttft": {"0": {"le": [0.5, 0.1], "counts": [1, 1, 1]}}},
    {"ttft": {"0": {"le": ["0.1"], "counts": [1, 1]}}},
    {"ttft": {"0": {"le": [0.1], "counts": [True, 1]}}},
    {"ttft": {"0": {"le": [0.1], "counts": [-1, 1]}}},
    {"ttft": {"0": {"le": [0.1], "counts": [2, 1]}}},
    {"ttft": {"0": {"le": [0.1], "counts": [1, float("nan")]}}},
    {"ttft": {"0": {"le": [float("inf")], "counts": [1, 1]}}},
    {"ttft": {"0": {"error": ["not", "text"]}}},
])
def test_damaged_stored_histograms_are_none(stored):
    # history lines are read back from a file that may have been damaged
    good = hists("vllm-0.32.0-cpu-busy-2.txt")
    # (None as the first reading means "since start")
    pairs = [(stored, None), (stored, good)] + ([(good, stored)] if stored is not None else [])
    for got in (latency(last, first, 1.0) for last, first in pairs):
        assert got["ttft"]["p50"] is None and got["ttft"]["reason"]
        json.dumps(got, allow_nan=False)


def test_window_skips_unreadable_samples_and_needs_one():
    busy0 = {"time": 1.0, "histograms": hists("vllm-0.32.0-cpu-busy-0.txt")}
    busy2 = {"time": 6.8, "histograms": hists("vllm-0.32.0-cpu-busy-2.txt")}
    down = {"time": 4.0, "error": "refused"}
    got = window([busy0, down, busy2, {"time": 7.0, "error": "refused"}])
    assert got["basis"] == "window" and got["seconds"] == 5.8
    assert quantiles(got["ttft"]) == (0.007917, 0.016333, 0.019633)
    assert window([down, busy2])["basis"] == "since_start"
    empty = window([down, "junk", {"histograms": "junk"}])
    for name in NAMES:
        assert_none(empty[name], "no readable sample")


@pytest.mark.parametrize("name", fixtures.real_captures())
def test_every_real_capture_gives_finite_quantiles_or_a_reason(name):
    got = latency(hists(name))
    for metric in NAMES:
        entry = got[metric]
        values = [v for v in quantiles(entry) if v is not None]
        assert (len(values) == 3) == (entry["reason"] is None), entry
        assert all(math.isfinite(v) and v >= 0 for v in values)
        assert values == sorted(values)
    json.dumps(got, allow_nan=False)


def test_every_hostile_body_is_read_without_a_traceback():
    bodies = [fixtures.hostile_body(e) for _c, e in fixtures.hostile_bodies()]
    bodies += [fixtures.read(p) for p in glob.glob(os.path.join(fixtures.METRICS, "synthetic", "*.txt"))]
    for text in bodies:
        try:
            samples = parse(text)[0]
        except ValueError:
            continue  # not exposition text: the probe refuses it before this
        json.dumps(latency(histograms(samples)), allow_nan=False)
