"""The canary analysis (plugins/module_utils/_canary.py) on real paired captures (vLLM CPU
0.32.0 under one load; tests/fixtures/metrics, pairs canary-*): how often identical settings are
failed, how soon a bad canary is failed, and the analysis's CPU per target per sample."""

from __future__ import annotations

import copy
import time

from ansible_collections.kvfleet.vllm.plugins.module_utils._canary import analyse
from ansible_collections.kvfleet.vllm.tests.unit import fixtures

INTERVAL_S = 1.0   # the captures' spacing (tests/support/capture_fixtures.py canary-pairs)


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


def cpu_per_target_sample(reps):
    canary, baseline = fixtures.replay("canary-same-canary"), fixtures.replay("canary-same-baseline")
    targets = [_target("canary", canary)], [_target("baseline", baseline)]
    t0 = time.process_time()
    for unused in range(reps):
        analyse(copy.deepcopy(targets[0]), copy.deepcopy(targets[1]))
    spent = time.process_time() - t0
    return spent / reps / (2 * len(canary))


def bench(smoke):
    windows = [10] if smoke else [6, 10, 15]
    out = {"false_fail": [], "time_to_fail": {}, "cpu_ms_per_target_sample": None}
    for w in windows:
        n, verdicts = false_fails(w)
        out["false_fail"].append({"window_samples": w, "analyses": n, "verdicts": verdicts,
                                  "false_fail_rate": verdicts.get("fail", 0) / float(n)})
    out["time_to_fail"]["small_kv_cache"] = first_fail("canary-small-kv", max_num_seqs=16)
    out["time_to_fail"]["low_max_num_seqs"] = first_fail("canary-low-seqs", max_num_seqs=4)
    out["cpu_ms_per_target_sample"] = cpu_per_target_sample(3 if smoke else 20) * 1000.0
    return out
