"""The canary analysis (plugins/module_utils/_canary.py) on real paired captures (vLLM CPU
0.32.0 under one load; tests/fixtures/metrics, pairs canary-*): how often identical settings are
failed, how soon a bad canary is failed (at the end of its window, and by the early verdict of
_analysis_run: a fail at early_alpha in early_intervals evaluations in a row), and the
analysis's CPU per target per sample. Derived cases (a 5xx canary, a restart, a canary the
load balancer forgot) are the captures with the one change each names, as in the unit tests."""

from __future__ import annotations

import copy
import threading
import time

from ansible_collections.kvfleet.vllm.plugins.module_utils._analysis_run import _Verdicts
# what _Verdicts reads of a sampling window, as the unit tests feed it
from ansible_collections.kvfleet.vllm.tests.unit.plugins.module_utils.test_analysis_early import Replayed
from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import (
    CHECKS, DEFAULT_MIN_REQUESTS, analyse)
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

INTERVAL_S = 1.0   # the captures' spacing (tests/support/capture_fixtures.py canary-pairs)
_CHECK_NAMES = ["traffic_share"] + [c[0] for c in CHECKS]


def _target(name, samples, **limits):
    return {"name": name, "samples": copy.deepcopy(samples), "limits": limits}


def false_fails(window):
    """Every window of `window` consecutive samples of the pair with identical settings, each way
    round (either server as the canary): (analyses, verdicts counted)."""
    a, b = fixtures.replay("canary-same-canary"), fixtures.replay("canary-same-baseline")
    verdicts = {}
    count = 0
    for first, second in ((a, b), (b, a)):
        for start in range(0, len(first) - window + 1):
            res = analyse([_target("canary", first[start:start + window], max_num_seqs=16)],
                          [_target("baseline", second[start:start + window], max_num_seqs=16)])
            verdicts[res["verdict"]] = verdicts.get(res["verdict"], 0) + 1
            count += 1
    return count, verdicts


def first_fail(condition, **limits):
    """The fewest samples from the start of the bad canary's window at which the analysis fails
    it, and what it named: the time from its first bad sample to the decision, less the
    analysis's own CPU (added separately)."""
    canary, baseline = fixtures.replay(condition + "-canary"), fixtures.replay(condition + "-baseline")
    for n in range(2, len(canary) + 1):
        res = analyse([_target("canary", canary[:n], **limits)], [_target("baseline", baseline[:n], max_num_seqs=16)])
        if res["verdict"] == "fail":
            named = [c["metric"] for c in res["checks"] if c["result"] == "fail"] or \
                [c["id"] for c in res["causes"] if c.get("severity") == "critical"]
            return {"samples": n, "seconds": (n - 1) * INTERVAL_S, "named": named}
    return {"samples": None, "seconds": None, "named": []}


def _with_5xx(samples, share=0.5):
    out = copy.deepcopy(samples)
    for snap in out:
        done = snap.get("requests_finished_total") or 0
        snap["http_5xx_total"] = int(round(done * share / (1 - share)))
        snap["http_requests_total"] = done + snap["http_5xx_total"]
    return out


def _restarted(samples, at=5):
    """The canary restarted after `at` samples: gone for two, then a new process at zero."""
    out = copy.deepcopy(samples[:at])
    for k in range(2):
        out.append({"url": "x", "time": samples[at + k]["time"], "healthy": False, "error": "refused"})
    fresh = copy.deepcopy(fixtures.replay("idle"))
    for k, snap in enumerate(fresh * 6):
        snap = copy.deepcopy(snap)
        snap["time"] = samples[min(at + 2 + k, len(samples) - 1)]["time"] + 0.001 * k
        snap["process_start_time"] = samples[0]["process_start_time"] + 500
        out.append(snap)
    return out[:len(samples)]


def early_decision(canary, baseline, limits, first_bad=1, every=1):
    """When the early verdict ends the window: the captures fed sample by sample (every `every`-th
    of them: counters read at those instants are what a sampler `every` s apart reads) to the
    module's own _analysis_run._Verdicts (its defaults). first_bad: the index (in the captures) of
    the canary's first sample that shows it bad (1 for a canary bad from the start: the end of
    its first interval). Returns the sample decided at, the intervals and seconds from the first
    bad sample, the canary's finished requests then, and what it named."""
    stop = threading.Event()
    mine, theirs = Replayed(), Replayed()
    plan = _Verdicts([("canary", {"name": "canary"}, dict(limits), mine),
                      ("baseline", {"name": "baseline"}, {"max_num_seqs": 16}, theirs)],
                     DEFAULT_MIN_REQUESTS, None, 0, len(canary) * INTERVAL_S, stop)
    for index in range(0, len(canary), every):
        # copies: the analysis adds rates to its samples
        theirs.snaps.append(copy.deepcopy(baseline[index]))
        mine.snaps.append(copy.deepcopy(canary[index]))
        plan.watch(mine)
        if stop.is_set():
            reason = plan.early
            named = (["restart (process_start_time_seconds)"] if "restarted in the window" in reason else
                     [m for m in _CHECK_NAMES if "%s " % m in reason] or ["critical cause"])
            first = -(-first_bad // every) * every   # the first sample read at or after it
            done = int(mine.snaps[-1].get("requests_finished_total") or 0) - int(
                mine.snaps[0].get("requests_finished_total") or 0)
            return {"samples": len(mine.snaps), "intervals": (index - first) // every,
                    "seconds": (index - first) * INTERVAL_S, "requests": done, "named": named}
    return {"samples": None, "intervals": None, "seconds": None, "requests": None, "named": []}


def decisions():
    """Intervals and seconds from the first bad sample to the early verdict, per bad canary, with
    samples 1 s apart (the captures as they are) and 5 s apart (every fifth)."""
    same_c, same_b = fixtures.replay("canary-same-canary"), fixtures.replay("canary-same-baseline")
    cases = [(name, fixtures.replay(cond + "-canary"), fixtures.replay(cond + "-baseline"), limits, 1)
             for name, cond, limits in (
                 ("small kv cache", "canary-small-kv", {"max_num_seqs": 16}),
                 ("low max num seqs", "canary-low-seqs", {"max_num_seqs": 4}),
                 ("no traffic (load balancer forgot it)", "canary-idle", {"max_num_seqs": 16}))]
    cases.append(("5xx for half its answers (derived)", _with_5xx(same_c), _with_5xx(same_b, 0.0),
                  {"max_num_seqs": 16}, 1))
    out = {}
    for name, canary, baseline, limits, first_bad in cases:
        for every in (1, 5):
            out["%s, samples %d s apart" % (name, every)] = early_decision(
                canary, baseline, limits, first_bad=first_bad, every=every)
    # the restart's first bad sample is the first unreadable one (at 5 s apart it falls between two)
    out["restarted mid-window (derived), samples 1 s apart"] = early_decision(
        _restarted(same_c), same_b, {"max_num_seqs": 16}, first_bad=5)
    return out


def _slower(samples, buckets=1):
    """The same server on a slower host (derived, as in the unit tests): every request of every
    latency histogram `buckets` buckets later."""
    out = copy.deepcopy(samples)
    for snap in out:
        for engines in snap["histograms"].values():
            for hist in engines.values():
                counts = hist["counts"]
                hist["counts"] = [0] * buckets + counts[:len(counts) - 1 - buckets] + counts[-1:]
    return out


def slower_host(window):
    """A harmless change on a host already slower than its peer: the pair with identical
    settings, the canary slowed by one bucket before and after; each window of `window` samples
    after a window of the same length before it, each way round. Verdicts without the window
    before the change (the host judged) and with it (the change judged: the difference of
    differences)."""
    a, b = fixtures.replay("canary-same-canary"), fixtures.replay("canary-same-baseline")
    without, judged = {}, {}
    for first, second in ((a, b), (b, a)):
        slow = _slower(first)
        for start in range(0, len(first) - 2 * window + 1):
            pre = analyse([_target("canary", slow[start:start + window], max_num_seqs=16)],
                          [_target("baseline", second[start:start + window], max_num_seqs=16)], min_requests=8)
            after = ([_target("canary", slow[start + window:start + 2 * window], max_num_seqs=16)],
                     [_target("baseline", second[start + window:start + 2 * window], max_num_seqs=16)])
            v = analyse(*copy.deepcopy(after), min_requests=8)["verdict"]
            without[v] = without.get(v, 0) + 1
            v = analyse(*copy.deepcopy(after), min_requests=8, before=pre)["verdict"]
            judged[v] = judged.get(v, 0) + 1
    return {"window_samples": window, "analyses": sum(without.values()), "host_judged": without,
            "change_judged": judged}


def cpu_per_target_sample(reps):
    canary, baseline = fixtures.replay("canary-same-canary"), fixtures.replay("canary-same-baseline")
    targets = [_target("canary", canary)], [_target("baseline", baseline)]
    t0 = time.process_time()
    for unused in range(reps):
        analyse(copy.deepcopy(targets[0]), copy.deepcopy(targets[1]))
    spent = time.process_time() - t0
    return spent / reps / (2 * len(canary))


def bench(smoke):
    windows = [10] if smoke else [6, 10, 15, 20]
    out = {"false_fail": [], "time_to_fail": {}, "cpu_ms_per_target_sample": None}
    for w in windows:
        n, verdicts = false_fails(w)
        out["false_fail"].append({"window_samples": w, "analyses": n, "verdicts": verdicts,
                                  "false_fail_rate": verdicts.get("fail", 0) / float(n)})
    out["slower_host"] = [slower_host(w) for w in ([8] if smoke else [6, 8, 10])]
    out["early"] = decisions()
    out["time_to_fail"]["small_kv_cache"] = first_fail("canary-small-kv", max_num_seqs=16)
    out["time_to_fail"]["low_max_num_seqs"] = first_fail("canary-low-seqs", max_num_seqs=4)
    out["cpu_ms_per_target_sample"] = cpu_per_target_sample(3 if smoke else 20) * 1000.0
    return out
