# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Judge a canary against a baseline from windows of vLLM snapshots: pass, fail or inconclusive.

Pure functions, standard library only (runs in modules and on hosts). ``analyse`` takes each
side's targets with their snapshots (as ``_probe.sample`` returns them, oldest first, with the
latency histograms) and returns the verdict, one sentence of reason with the numbers, and one
entry per check; ``decide`` turns a verdict into what a rollout does with the host.
docs/canary-analysis.md explains the rules; in short:

1. A canary that restarted in the window (its process start time changed, its counters went
   down, its engine set changed) or that could not be read for more than
   ``max_unreadable_samples`` samples in a row fails; so does a critical cause of the diagnosis
   (``_diagnosis.diagnose``): a dead engine, a cache exhausted with preemptions, request errors,
   a stall.
2. The baseline is matched (the same model and data-parallel layout as the canary; a baseline
   target that is unhealthy, restarted or serves something else is left out) and judged per
   host: each check's baseline value is the median of the hosts' own values, and a host whose
   value lies more than ``outlier_rooms`` tolerances from the others is left out of that check
   (two hosts that disagree that much decide only what both agree on). No host can sway it.
3. ``traffic_share``: the canary's finished requests per second against the median baseline
   server's; far below its share (a one-sided Poisson test), it fails: no traffic is never a
   pass. A canary that holds requests but finishes few is judged on its queue.
4. Each other metric of the window is compared, normalised per request (or per running
   sequence); a check fails when the canary is worse than the baseline by more than the larger
   of a relative and an absolute tolerance and a one-sided Mann-Whitney U test (exact for small
   samples without ties) on per-interval values finds it worse, at ``alpha`` with Holm's
   step-down correction over the checks. A check beyond its tolerance with fewer than
   ``min_intervals`` values a side is ``inconclusive``, never failed by the tolerance alone.
5. Fewer than ``min_requests`` canary requests and no failure: ``inconclusive``.

Windows: each target's own readable samples from the end of the warm-up on (the baseline's
after its last restart). Per-interval values: one per pair of consecutive readable samples.
"""

from __future__ import annotations

import math

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import add_rates, diagnose
from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import (
    bucket_quantile, counts_between)

__all__ = ["CHECKS", "DEFAULT_MIN_REQUESTS", "DEFAULT_THRESHOLDS", "INCONCLUSIVE_POLICIES", "VERDICTS", "WHOLE_THRESHOLDS",
           "analyse", "before_differences", "check_thresholds", "decide", "holm", "mann_whitney_u", "poisson_cdf", "side_window",
           "target_window"]

VERDICTS = ("pass", "fail", "inconclusive")
INCONCLUSIVE_POLICIES = ("fail_canary", "fail", "pass")
DEFAULT_MIN_REQUESTS = 20

# check -> (family of its tolerances, what it reads, quantile or None, worse when "higher"/"lower",
#           unit for the reason)
CHECKS = (
    ("error_ratio", "error_ratio", "error_ratio", None, "higher", ""),
    ("http_5xx_ratio", "http_5xx_ratio", "http_5xx_ratio", None, "higher", ""),
    ("abort_ratio", "abort_ratio", "abort_ratio", None, "higher", ""),
    ("preemptions_per_request", "preemptions_per_request", "preemptions_per_request", None,
     "higher", ""),
    ("kv_usage", "kv_usage", "kv_usage", None, "higher", ""),
    ("requests_waiting", "requests_waiting", "requests_waiting", None, "higher", ""),
    ("queue_time_p50", "queue_time", "queue", 0.5, "higher", " s"),
    ("queue_time_p95", "queue_time", "queue", 0.95, "higher", " s"),
    ("ttft_p50", "ttft", "ttft", 0.5, "higher", " s"),
    ("ttft_p95", "ttft", "ttft", 0.95, "higher", " s"),
    ("itl_p50", "itl", "itl", 0.5, "higher", " s"),
    ("itl_p95", "itl", "itl", 0.95, "higher", " s"),
    ("e2e_p50", "e2e", "e2e", 0.5, "higher", " s"),
    ("e2e_p95", "e2e", "e2e", 0.95, "higher", " s"),
    ("gen_tokens_per_seq", "gen_tokens_per_seq", "gen_tokens_per_seq", None, "lower", " tokens/s"),
)
FAMILIES = ("error_ratio", "http_5xx_ratio", "abort_ratio", "preemptions_per_request", "kv_usage",
            "requests_waiting", "queue_time", "ttft", "itl", "e2e", "gen_tokens_per_seq")
_HISTOGRAMS = ("queue", "ttft", "itl", "e2e")
# the checks a canary that finished too few requests is still judged on: they need no finished
# request (what it holds, and how much of the cache each running sequence takes)
_WITHOUT_REQUESTS = ("requests_waiting", "kv_usage")
# the thresholds that are whole numbers: name -> (lowest, highest)
WHOLE_THRESHOLDS = {"min_intervals": (2, 10000), "max_unreadable_samples": (0, 1000), "early_intervals": (1, 1000)}

# The one copy of the defaults (the module's documentation states them; a unit test compares).
DEFAULT_THRESHOLDS = {
    # the statistical test: its level over all the checks (Holm), and the fewest per-interval
    # values on each side for it (fewer, beyond the tolerance: inconclusive)
    "alpha": 0.05,
    "min_intervals": 5,
    # tolerances against the baseline: the canary may be worse by the larger of the two
    "error_ratio_relative": 0.5, "error_ratio_absolute": 0.01,
    "http_5xx_ratio_relative": 0.5, "http_5xx_ratio_absolute": 0.01,
    "abort_ratio_relative": 0.5, "abort_ratio_absolute": 0.05,
    "preemptions_per_request_relative": 0.5, "preemptions_per_request_absolute": 0.05,
    "kv_usage_relative": 0.5, "kv_usage_absolute": 0.02,
    "requests_waiting_relative": 0.5, "requests_waiting_absolute": 2.0,
    "queue_time_relative": 0.5, "queue_time_absolute": 0.05,
    "ttft_relative": 0.5, "ttft_absolute": 0.05,
    "itl_relative": 0.5, "itl_absolute": 0.01,
    "e2e_relative": 0.5, "e2e_absolute": 0.5,
    "gen_tokens_per_seq_relative": 0.5, "gen_tokens_per_seq_absolute": 1.0,
    # the canary's finished requests per second per server, as a share of the median baseline
    # server's, below which (significantly) it fails: it gets too little of the traffic
    "traffic_share_min": 0.3,
    # consecutive unreadable samples of a canary server beyond which it fails (a restart, an outage)
    "max_unreadable_samples": 2,
    # beyond the baseline by more than this many tolerances, a check too short of values for the
    # test fails all the same: noise in a few intervals does not make a difference that large
    "decisive_rooms": 4.0,
    # a baseline host whose value lies beyond this many tolerances from the others' is left out
    # of that check (two hosts: the check decides only what both agree on)
    "outlier_rooms": 2.0,
    # the window ends early on a fail at early_alpha (stricter than alpha: the verdict is looked
    # at after every sample) in early_intervals evaluations in a row, one per canary sample
    "early_alpha": 0.005,
    "early_intervals": 2,
    # absolute limits, used without a (healthy, busy enough, matching) baseline; None: not checked then
    "error_ratio_max": 0.01,
    "http_5xx_ratio_max": 0.01,
    "abort_ratio_max": None,
    "preemptions_per_request_max": 0.1,
    "kv_usage_max": None,
    "requests_waiting_max": None,
    "queue_time_p50_max": None, "queue_time_p95_max": 1.0,
    "ttft_p50_max": None, "ttft_p95_max": 2.0,
    "itl_p50_max": None, "itl_p95_max": 0.2,
    "e2e_p50_max": None, "e2e_p95_max": None,
    "gen_tokens_per_seq_min": None,
}
# the counters a restart sets back to 0 (a drop between two samples starts a new window)
_COUNTERS = ("requests_finished_total", "generation_tokens_total", "prompt_tokens_total",
             "preemptions_total", "request_errors_total", "request_aborts_total",
             "http_requests_total", "http_5xx_total")
_DIGITS = 6
# the largest pair of samples (n1 + n2) whose Mann-Whitney p-value is exact, without ties
_EXACT_MAX = 60


def _is_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and not math.isnan(value) and not math.isinf(value))


def absolute_key(check):
    """The threshold that limits `check` without a baseline."""
    direction = [c[4] for c in CHECKS if c[0] == check][0]
    return check + ("_min" if direction == "lower" else "_max")


def check_thresholds(thresholds):
    """None, or why `thresholds` (a dict overriding DEFAULT_THRESHOLDS) cannot be used; the
    message names the key and what it may be."""
    if thresholds is None:
        return None
    if not isinstance(thresholds, dict):
        return "thresholds must be a dictionary, got %s" % type(thresholds).__name__
    for key in sorted(thresholds, key=str):
        value = thresholds[key]
        if key not in DEFAULT_THRESHOLDS:
            return "thresholds.%s is not a threshold; the thresholds are: %s" % (
                key, ", ".join(sorted(DEFAULT_THRESHOLDS)))
        if key in WHOLE_THRESHOLDS:
            low, high = WHOLE_THRESHOLDS[key]
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                return "thresholds.%s must be a whole number from %d to %d, got %r" % (key, low, high, value)
            continue
        if key in ("alpha", "early_alpha"):
            if not _is_number(value) or not 0 < value < 1:
                return "thresholds.%s must be a number between 0 and 1, got %r" % (key, value)
            continue
        if key == "traffic_share_min":
            if not _is_number(value) or not 0 <= value <= 1:
                return "thresholds.traffic_share_min must be a number from 0 to 1, got %r" % (value,)
            continue
        if value is None and (key.endswith("_max") or key.endswith("_min")):
            continue  # that absolute limit is not checked
        if not _is_number(value) or value < 0:
            return "thresholds.%s must be a number, 0 or more%s, got %r" % (
                key, " (or null: no limit)" if key.endswith(("_max", "_min")) else "", value)
    return None


# --- the statistics ------------------------------------------------------------------------------

def _u_counts(n1, n2):
    """How many of the C(n1 + n2, n1) orderings give each U of the first sample, 0..n1*n2: the
    coefficients of the Gaussian binomial [n1 + n2 choose n1] in q (Mann and Whitney, 1947)."""
    # table[k] holds the coefficients of [m choose k] for the current m
    table = [[1]] + [[0] for unused in range(n1)]
    for m in range(1, n1 + n2 + 1):
        for k in range(min(m, n1), 0, -1):
            # [m, k] = [m-1, k-1] + q^k [m-1, k]
            lower, same = table[k - 1], table[k]
            width = max(len(lower), len(same) + k)
            out = [0] * width
            for u, c in enumerate(lower):
                out[u] += c
            for u, c in enumerate(same):
                out[u + k] += c
            table[k] = out
    return table[n1]


def mann_whitney_u(x, y, alternative="greater", method="auto"):
    """One-sided Mann-Whitney U test of `x` against `y`: (U of x, z, p).

    alternative "greater": x tends to be larger than y; "less": smaller. method "exact": the
    exact distribution of U (no ties allowed); "asymptotic": the normal approximation with the
    tie correction of the variance and a continuity correction of 0.5 toward the null (as
    scipy.stats.mannwhitneyu(method="asymptotic", use_continuity=True)); "auto": exact when there
    are no ties and at most 60 values in all, else asymptotic. With 5 values a side the smallest
    exact p is 1/252 (0.004), which the normal approximation puts at 0.006. All values equal:
    z 0.0 and p 1.0 (nothing tells them apart).
    """
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        raise ValueError("both samples need at least one value")
    pooled = sorted([(v, 0) for v in x] + [(v, 1) for v in y], key=lambda item: item[0])
    n = n1 + n2
    rank_x, ties, i = 0.0, 0.0, 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2.0 + 1   # the mean rank of the tied run, ranks from 1
        rank_x += rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    u = rank_x - n1 * (n1 + 1) / 2.0
    mean = n1 * n2 / 2.0
    variance = n1 * n2 / 12.0 * ((n + 1) - ties / float(n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return u, 0.0, 1.0
    shift = u - mean if alternative == "greater" else mean - u
    z = (shift - 0.5) / math.sqrt(variance)
    if method == "exact" or (method == "auto" and not ties and n <= _EXACT_MAX):
        if ties:
            raise ValueError("the exact test needs values without ties")
        counts = _u_counts(n1, n2)
        total = float(sum(counts))
        whole = int(round(u))
        tail = counts[whole:] if alternative == "greater" else counts[:whole + 1]
        return u, z, min(1.0, sum(tail) / total)
    return u, z, 0.5 * math.erfc(z / math.sqrt(2))


def poisson_cdf(k, mean):
    """P(X <= k) for X Poisson with that mean (k a whole number 0 or more)."""
    if mean <= 0:
        return 1.0
    term = math.exp(-mean)
    if term == 0.0:   # underflow: sum in logarithms
        logs = [-mean + j * math.log(mean) - math.lgamma(j + 1) for j in range(int(k) + 1)]
        top = max(logs)
        return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))
    total = term
    for j in range(1, int(k) + 1):
        term *= mean / j
        total += term
    return min(1.0, total)


def binomial_sf(k, n, share):
    """P(X >= k) for X binomial over n trials, each a success with probability share."""
    if k <= 0:
        return 1.0
    if k > n or share <= 0.0:
        return 0.0
    if share >= 1.0:
        return 1.0
    total = 0.0
    for j in range(int(k), int(n) + 1):
        term = math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                        + j * math.log(share) + (n - j) * math.log1p(-share))
        total += term
        if term < 1e-12 * total:
            break
    return min(total, 1.0)


def holm(p_values, alpha):
    """Holm's step-down correction: for each p-value (None: not tested), whether it is rejected
    at family level alpha, and the level it was held to. The smallest is held to alpha / m, the
    next to alpha / (m - 1), ...; the first not rejected stops the rest. m counts every entry,
    tested or not, so that adding a check never makes another easier to fail."""
    m = len(p_values)
    order = sorted((p, k) for k, p in enumerate(p_values) if p is not None)
    out = [(False, None)] * m
    going = True
    for rank, (p, k) in enumerate(order):
        level = alpha / (m - rank)
        going = going and p < level
        out[k] = (going, level)
    return out


# --- one target's window -------------------------------------------------------------------------

def _readable(samples):
    return [s for s in samples or [] if isinstance(s, dict) and not s.get("error")
            and _is_number(s.get("time"))]


def _engine_set(snap):
    return tuple(sorted(snap.get("engines") or {})) or ("0",)


def _restart_between(a, b):
    """Why reading b is from another process than reading a, or None."""
    sa, sb = a.get("process_start_time"), b.get("process_start_time")
    if _is_number(sa) and _is_number(sb) and abs(sb - sa) > 1:
        return "process_start_time_seconds changed from %.0f to %.0f" % (sa, sb)
    down = [f for f in _COUNTERS if _is_number(a.get(f)) and _is_number(b.get(f)) and b[f] < a[f]]
    if down:
        return "its counters went down (%s)" % ", ".join(down)
    if _engine_set(a) != _engine_set(b):
        return "its engine set changed from %s to %s" % (",".join(_engine_set(a)), ",".join(_engine_set(b)))
    return None


def _since_restart(readable):
    """The trailing run of readings after the last restart, and the last restart's reason."""
    start, why = 0, None
    for k in range(1, len(readable)):
        reason = _restart_between(readable[k - 1], readable[k])
        if reason:
            start, why = k, reason
    return readable[start:], why


def _unreadable_run(samples):
    """The most consecutive unreadable samples."""
    most = run = 0
    for s in samples:
        run = run + 1 if not isinstance(s, dict) or s.get("error") else 0
        most = max(most, run)
    return most


def _delta(first, last, field):
    a, b = first.get(field), last.get(field)
    if not _is_number(a) or not _is_number(b) or b < a:
        return None
    return b - a


def _quantile(counts, q):
    bounds, values = counts
    if bounds is None or not values or values[-1] <= 0:
        return None
    return bucket_quantile(q, bounds, values)


def _after(samples, start):
    """The samples from the end of the warm-up on (all of them when start is None)."""
    if start is None:
        return list(samples or [])
    return [s for s in samples or [] if isinstance(s, dict) and _is_number(s.get("time")) and s["time"] >= start]


def target_window(samples, start=None):
    """One target's window, from `start` (the end of the warm-up, a time) on: its counter
    deltas, histogram deltas and per-interval values.

    {"usable": bool, "why": why not, "seconds", "samples", "restarted" (why its last restart in
     the window, or None), "unreadable" (most unreadable samples in a row), "models", "engines",
     "finished", "errors", "aborts", "http", "http_5xx", "preemptions", "generation_tokens",
     "seq_seconds" (sum over the intervals of their length x their mean running sequences),
     "kv_per_seq" and "waiting" (per sample), "in_flight" (running + waiting at the last
     reading), "held" (most running + waiting at any reading),
     "histograms": {metric: (bounds, counts) or (None, reason)},
     "intervals": {metric key: [per-interval values]}}.
    """
    window = _after(samples, start)
    readable = _readable(window)
    run, restarted = _since_restart(readable)
    out = {"usable": False, "why": None, "samples": len(run), "seconds": 0.0,
           "restarted": restarted, "unreadable": _unreadable_run(window),
           "models": sorted(set(s.get("model") for s in readable if s.get("model"))),
           "engines": sorted(set(len(_engine_set(s)) for s in readable)),
           "finished": 0, "errors": 0, "aborts": 0, "http": None, "http_5xx": None, "preemptions": 0,
           "generation_tokens": 0, "gen_tokens_counted": 0, "seq_seconds": 0.0,
           "kv_per_seq": [], "waiting": [], "histograms": {}, "intervals": dict((c[0], []) for c in CHECKS),
           "in_flight": 0, "held": 0}
    for snap in run:
        held = sum(snap.get(f) for f in ("requests_running", "requests_waiting") if _is_number(snap.get(f)))
        out["held"] = max(out["held"], held)
        usage, running = snap.get("kv_cache_usage"), snap.get("requests_running")
        if _is_number(usage) and _is_number(running) and running >= 1:
            out["kv_per_seq"].append(usage / running)
        if _is_number(snap.get("requests_waiting")):
            out["waiting"].append(snap["requests_waiting"])
    if run:
        # requests the server holds at its last reading: a slow server has them, an idle one not
        out["in_flight"] = sum(run[-1].get(f) for f in ("requests_running", "requests_waiting")
                               if _is_number(run[-1].get(f)))
    out["intervals"]["kv_usage"] = list(out["kv_per_seq"])
    out["intervals"]["requests_waiting"] = list(out["waiting"])
    if len(run) < 2:
        out["why"] = ("no readable sample" if not readable else
                      "one readable sample%s: no window" % (" after its restart" if restarted else ""))
        return out
    first, last = run[0], run[-1]
    out["seconds"] = round(last["time"] - first["time"], 3)
    finished = _delta(first, last, "requests_finished_total")
    if finished is None:
        out["why"] = "vllm:request_success is not exposed or went down"
        return out
    out.update(usable=True, finished=finished,
               errors=_delta(first, last, "request_errors_total") or 0,
               aborts=_delta(first, last, "request_aborts_total") or 0,
               http=_delta(first, last, "http_requests_total"),
               http_5xx=_delta(first, last, "http_5xx_total"),
               preemptions=_delta(first, last, "preemptions_total") or 0,
               generation_tokens=_delta(first, last, "generation_tokens_total") or 0)
    for metric in _HISTOGRAMS:
        out["histograms"][metric] = counts_between(metric, first.get("histograms"),
                                                   last.get("histograms"))
    for a, b in zip(run, run[1:]):
        _interval(out, a, b)
    return out


def _interval(out, a, b):
    """The per-interval values of one pair of consecutive readings."""
    dt = b["time"] - a["time"]
    done = _delta(a, b, "requests_finished_total")
    iv = out["intervals"]
    if done:
        iv["error_ratio"].append((_delta(a, b, "request_errors_total") or 0) / float(done))
        iv["abort_ratio"].append((_delta(a, b, "request_aborts_total") or 0) / float(done))
        iv["preemptions_per_request"].append((_delta(a, b, "preemptions_total") or 0) / float(done))
    answered = _delta(a, b, "http_requests_total")
    if answered:
        iv["http_5xx_ratio"].append((_delta(a, b, "http_5xx_total") or 0) / float(answered))
    running = [r for r in (a.get("requests_running"), b.get("requests_running")) if _is_number(r)]
    gen = _delta(a, b, "generation_tokens_total")
    if dt > 0 and len(running) == 2 and sum(running) > 0 and gen is not None:
        mean_running = sum(running) / 2.0
        iv["gen_tokens_per_seq"].append(gen / dt / mean_running)
        out["seq_seconds"] += dt * mean_running
        out["gen_tokens_counted"] += gen
    for check, unused, metric, q, unused2, unused3 in CHECKS:
        if metric in _HISTOGRAMS:
            value = _quantile(counts_between(metric, a.get("histograms"), b.get("histograms")), q)
            if value is not None:
                iv[check].append(value)


# --- a side: its targets pooled ------------------------------------------------------------------

def _pool_histograms(parts):
    """Bucket deltas of several targets added up: (bounds, counts) or (None, reason)."""
    good = [p for p in parts if p[0] is not None]
    if not good:
        reasons = [p[1] for p in parts if p[1]]
        return None, reasons[0] if reasons else "not exposed"
    bounds = good[0][0]
    if any(p[0] != bounds for p in good[1:]):
        return None, "the targets have different bucket bounds"
    return bounds, [sum(c) for c in zip(*[p[1] for p in good])]


def side_window(windows):
    """The pooled window of one side's usable target windows: the values each check compares,
    and the per-interval values of every target together."""
    usable = [w for w in windows if w["usable"]]
    out = {"targets": len(usable), "finished": sum(w["finished"] for w in usable),
           "values": {}, "intervals": {}, "why": {}}
    finished = out["finished"]
    counted = {"error_ratio": sum(w["errors"] for w in usable),
               "abort_ratio": sum(w["aborts"] for w in usable),
               "preemptions_per_request": sum(w["preemptions"] for w in usable)}
    answered = [w for w in usable if w["http"] is not None and w["http_5xx"] is not None]
    seq_seconds = sum(w["seq_seconds"] for w in usable)
    kv = [v for w in usable for v in w["kv_per_seq"]]
    waiting = [v for w in usable for v in w["waiting"]]
    hists = dict((m, _pool_histograms([w["histograms"].get(m, (None, "not exposed"))
                                       for w in usable])) for m in _HISTOGRAMS)
    for check, unused, metric, q, unused2, unused3 in CHECKS:
        value, why = None, None
        if check in counted:
            if finished:
                value = counted[check] / float(finished)
            else:
                why = "no request finished"
        elif check == "http_5xx_ratio":
            total = sum(w["http"] for w in answered)
            if total:
                value = sum(w["http_5xx"] for w in answered) / float(total)
            else:
                why = ("no answer of an inference handler counted (http_requests_total)" if answered
                       else "http_requests_total is not exposed")
        elif check == "requests_waiting":
            if waiting:
                value = sum(waiting) / float(len(waiting))
            else:
                why = "no reading of requests waiting"
        elif check == "kv_usage":
            if kv:
                value = sum(kv) / len(kv)
            else:
                why = "no sample with a running sequence"
        elif check == "gen_tokens_per_seq":
            if seq_seconds > 0:
                value = sum(w["gen_tokens_counted"] for w in usable) / seq_seconds
            else:
                why = "no interval with a running sequence"
        else:
            bounds, counts = hists[metric]
            if bounds is None:
                why = counts
            elif counts[-1] <= 0:
                why = "nothing observed in the window"
            else:
                value = bucket_quantile(q, bounds, counts)
        out["values"][check] = None if value is None else round(value, _DIGITS)
        out["why"][check] = why
        out["intervals"][check] = [v for w in usable for v in w["intervals"][check]]
    # what the per-request tests of an early verdict count: events and their requests or answers
    out["per_request"] = dict((check, (counted[check], finished)) for check in counted)
    out["per_request"]["http_5xx_ratio"] = (sum(w["http_5xx"] for w in answered),
                                            sum(w["http"] for w in answered))
    out["per_request"].update((check, hists[metric]) for check, unused, metric, unused2, unused3, unused4
                              in CHECKS if metric in _HISTOGRAMS)
    if not usable:
        out["why"] = dict((c[0], "no usable window") for c in CHECKS)
    return out


# --- the judgement -------------------------------------------------------------------------------

def _fmt(value, unit=""):
    if value is None:
        return "n/a"
    if unit == " s":
        return "%.3g s" % value
    return "%.3g%s" % (value, unit)


def _check_spec(check):
    return [c for c in CHECKS if c[0] == check][0]


def _brief(check):
    """A failed or undecided check in a few words, for the reason: 'ttft_p95 3 s > 0.488 s
    (baseline 0.325 s, p=6e-05)'."""
    if check["metric"] == "traffic_share":
        return "traffic_share %s requests/s per server < %s (baseline median %s%s)" % (
            _fmt(check["canary"]), _fmt(check["limit"]), _fmt(check["baseline"]),
            ", p=%.2g" % check["p_value"] if check["p_value"] is not None else "")
    unit, direction = _check_spec(check["metric"])[5], _check_spec(check["metric"])[4]
    sign = ">" if direction == "higher" else "<"
    extra = []
    if check["baseline"] is not None:
        extra.append("baseline %s" % _fmt(check["baseline"], unit))
    else:
        extra.append("absolute limit")
    if check["p_value"] is not None:
        extra.append("p=%.2g" % check["p_value"])
    if check["result"] == "inconclusive":
        extra.append(check["why"])
    value = _fmt(check["canary"], unit)
    if check.get("judged_value") is not None:
        value += " (%s without the host's handicap before the change)" % _fmt(check["judged_value"], unit)
    return "%s %s %s %s (%s)" % (check["metric"], value, sign, _fmt(check["limit"], unit), ", ".join(extra))


def _room(family, base, th):
    return max(th[family + "_relative"] * abs(base), th[family + "_absolute"])


def _rooms(value, base, family, th):
    """How many tolerances value lies from base (None without a tolerance to count in)."""
    room = _room(family, base, th)
    return abs(value - base) / room if room > 0 else None


def _limit(base, room, direction):
    return base + room if direction == "higher" else base - room


def _worse(value, limit, direction):
    return value > limit if direction == "higher" else value < limit


def _median(values):
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2.0


def _robust(check, family, direction, hosts, th):
    """The baseline of one check from its hosts' own windows (hosts: [(host, side_window)]):
    {"value", "intervals", "used" (hosts), "left_out" ([(host, value)]), "split" (two hosts that
    disagree: [(host, value, intervals)], the stricter first) or None, "why" (no value)}."""
    have = [(h, w["values"][check], w["intervals"][check]) for h, w in hosts
            if w["values"][check] is not None]
    out = {"value": None, "intervals": [], "used": [], "left_out": [], "split": None, "why": None}
    if not have:
        reasons = [w["why"][check] for unused, w in hosts if w["why"].get(check)]
        out["why"] = reasons[0] if reasons else "no baseline host"
        return out
    if len(have) == 2:
        (h1, v1, i1), (h2, v2, i2) = have
        if abs(v1 - v2) > th["outlier_rooms"] * _room(family, min(v1, v2, key=abs), th):
            strict = sorted(have, key=lambda x: x[1], reverse=direction == "lower")
            out["split"] = strict
            out["used"] = [h1, h2]
            return out
        out.update(value=(v1 + v2) / 2.0, intervals=i1 + i2, used=[h1, h2])
        return out
    center = _median([v for unused, v, unused2 in have])
    reach = th["outlier_rooms"] * _room(family, center, th)
    kept = [x for x in have if abs(x[1] - center) <= reach]
    out["left_out"] = [(h, v) for h, v, unused in have if abs(v - center) > reach]
    out.update(value=center, intervals=[v for unused, unused2, iv in kept for v in iv],
               used=[h for h, unused, unused2 in kept])
    return out


def _entry(check, canary_value, baseline_value):
    return {"metric": check, "canary": canary_value, "baseline": baseline_value, "limit": None,
            "result": "skipped", "why": None, "test": None, "p_value": None, "effect": None,
            "level": None}


def _effect(c, b, u=None, n=None):
    """How much worse: the difference, the ratio and, with a test, the probability that a
    canary interval is worse than a baseline one (U / (n1 n2), 0.5 when alike)."""
    out = {"difference": round(c - b, _DIGITS), "ratio": round(c / b, 4) if b else None}
    if u is not None and n:
        out["probability"] = round(u / float(n), 4)
    return out


def _test(entry, cv, bv, direction, th):
    """Beyond the tolerance: the test on per-interval values; with too few values, a fail when
    the canary is beyond the baseline by decisive_rooms tolerances, else inconclusive."""
    if len(cv) >= th["min_intervals"] and len(bv) >= th["min_intervals"]:
        alternative = "greater" if direction == "higher" else "less"
        u, unused, p = mann_whitney_u(cv, bv, alternative)
        if direction == "lower":
            u = len(cv) * len(bv) - u
        entry.update(test="mann_whitney_u", p_value=float("%.4g" % p), result="candidate",
                     n=(len(cv), len(bv)))
        entry["effect"]["probability"] = round(u / float(len(cv) * len(bv)), 4)
        return entry
    rooms = entry.get("rooms")
    if rooms is not None and rooms > th["decisive_rooms"]:
        entry.update(result="fail", why=(
            "%.1f tolerances beyond the baseline (decisive_rooms %g), with too few interval values for the "
            "test (%d and %d, min_intervals %d)" % (rooms, th["decisive_rooms"], len(cv), len(bv),
                                                    th["min_intervals"])))
        return entry
    entry.update(result="inconclusive", why=(
        "beyond the tolerance, but too few interval values for the test (%d and %d, "
        "min_intervals %d)" % (len(cv), len(bv), th["min_intervals"])))
    return entry


def _per_request(check, canary, limit):
    """The early verdict's test on the canary's requests themselves, for a check worse when higher:
    (p, words) or None where the check has none. A ratio: events over requests (or answers), each
    request taken to add events as a Poisson variable at the limit's rate. A quantile q: the requests
    known beyond the limit (in buckets whose lower bound is at or above it), each beyond with
    probability 1 - q if the canary's quantile were within the limit (a binomial tail). Both test
    the canary against its limit, not against the baseline's value: beyond the tolerance, not only
    beyond the baseline."""
    data = canary.get("per_request", {}).get(check)
    spec = _check_spec(check)
    if data is None or spec[4] != "higher":
        return None
    if spec[3] is None:
        events, total = data
        if not total or limit <= 0:
            return None
        p = 1.0 - poisson_cdf(int(events) - 1, total * limit) if events > 0 else 1.0
        return max(p, 0.0), "%d in %d requests against %.3g at the limit" % (events, total, total * limit)
    bounds, counts = data
    if bounds is None or counts[-1] <= 0:
        return None
    above = [k for k, bound in enumerate(bounds) if bound >= limit]
    if not above:
        return None   # the limit beyond the last finite bucket: no request is known beyond it
    total = counts[-1]
    beyond = total - counts[above[0]]
    q = spec[3]
    return binomial_sf(beyond, total, 1.0 - q), "%d of %d requests beyond %s (at most %.0f%% if its p%d were within)" % (
        beyond, total, _fmt(limit, spec[5]), 100 * (1 - q), int(round(100 * q)))


def _early_test(entry, check, canary, limit, shift):
    """In an early verdict, the per-request test where the check has one, in place of the interval
    test: a few intervals hold many requests, so overwhelming evidence is seen in one or two."""
    if entry["result"] not in ("candidate", "inconclusive"):
        return entry
    found = _per_request(check, canary, limit + shift)
    if found is None:
        return entry
    p, words = found
    entry.update(result="candidate", test="per_request", p_value=float("%.4g" % p), per_request=words)
    entry.pop("n", None)
    return entry


def _handicap(pre, direction):
    """How much worse than its baseline the canary host was before its change (0 when it was
    not worse): the difference of differences takes it off the canary's values."""
    if not pre:
        return 0.0
    d = pre["canary"] - pre["baseline"]
    return max(d if direction == "higher" else -d, 0.0)


def _compare(check, family, direction, unit, canary, hosts, th, pre=None, early=False):
    """One check of the canary against the baseline's hosts (robust to one of them); pre: the
    canary host's and the baseline's values of this check before the change (or None); early: an
    early verdict's look (_early_test)."""
    raw = canary["values"][check]
    base = _robust(check, family, direction, hosts, th)
    entry = _entry(check, raw, base["value"])
    entry["baseline_hosts"] = base["used"]
    if base["left_out"]:
        entry["left_out"] = [{"host": h, "value": round(v, _DIGITS)} for h, v in base["left_out"]]
    if raw is None or (base["value"] is None and base["split"] is None):
        entry["why"] = "no value for the %s: %s" % (
            "canary" if raw is None else "baseline", canary["why"][check] if raw is None else base["why"])
        return entry
    # a host already this much worse before its change is judged on what the change added
    shift = _handicap(pre, direction)
    sign = 1.0 if direction == "higher" else -1.0
    c = raw - sign * shift
    cv = [v - sign * shift for v in canary["intervals"][check]]
    if pre:
        entry["before"] = {"canary": round(pre["canary"], _DIGITS), "baseline": round(pre["baseline"], _DIGITS),
                           "handicap": round(shift, _DIGITS)}
    shown = _fmt(c, unit)
    if shift:
        entry["judged_value"] = round(c, _DIGITS)
        shown = ("%s (%s less %s, what the host was worse than its baseline before the change: %s against %s)" % (
            _fmt(c, unit), _fmt(raw, unit), _fmt(shift, unit), _fmt(pre["canary"], unit), _fmt(pre["baseline"], unit)))
    if base["split"] is not None:
        split = base["split"]
        hs, vs = split[0][0], split[0][1]
        hl, vl, il = split[1][0], split[1][1], split[1][2]
        strict = _limit(vs, _room(family, vs, th), direction)
        lenient = _limit(vl, _room(family, vl, th), direction)
        entry.update(baseline=round(vs, _DIGITS), limit=round(strict, _DIGITS))
        disagree = "the baseline's two hosts disagree (%s %s, %s %s)" % (hs, _fmt(vs, unit), hl, _fmt(vl, unit))
        if not _worse(c, strict, direction):
            entry.update(result="pass", why="%s, within the limit %s of either baseline host; %s" % (
                shown, _fmt(strict, unit), disagree))
            return entry
        if not _worse(c, lenient, direction):
            # worse than one host only: tested against that host, a significant difference cannot
            # be decided (the other host may be the right one), no significant difference passes
            middle = "%s, beyond the limit of one baseline host (%s) and within the other's (%s): %s" % (
                shown, _fmt(strict, unit), _fmt(lenient, unit), disagree)
            entry.update(effect=_effect(c, vs), why_base=middle, on_reject="inconclusive")
            _test(entry, cv, split[0][2], direction, th)
            if entry["result"] == "inconclusive":
                entry["why"] = "%s; %s" % (middle, entry["why"])
                entry.pop("why_base", None)
            return entry
        entry.update(baseline=round(vl, _DIGITS), limit=round(lenient, _DIGITS), effect=_effect(c, vl))
        entry["why_base"] = "%s, beyond the limit of both baseline hosts; %s" % (shown, disagree)
        entry["rooms"] = _rooms(c, vl, family, th)
        _test(entry, cv, il, direction, th)
        return _early_test(entry, check, canary, lenient, shift) if early else entry
    b = base["value"]
    entry["baseline"] = round(b, _DIGITS)
    limit = _limit(b, _room(family, b, th), direction)
    entry["limit"] = round(limit, _DIGITS)
    if not _worse(c, limit, direction):
        entry.update(result="pass", why="%s, within the limit %s (baseline %s)" % (
            shown, _fmt(limit, unit), _fmt(b, unit)))
        return entry
    entry["effect"] = _effect(c, b)
    entry["rooms"] = _rooms(c, b, family, th)
    if shift:
        entry["why_base"] = "%s, %s the limit %s (baseline %s)" % (
            shown, "above" if direction == "higher" else "below", _fmt(limit, unit), _fmt(b, unit))
    _test(entry, cv, base["intervals"], direction, th)
    return _early_test(entry, check, canary, limit, shift) if early else entry


def _absolute(check, direction, unit, canary, th, without):
    """One check of the canary against its absolute limit (no baseline to compare with)."""
    c = canary["values"][check]
    key = absolute_key(check)
    limit = th[key]
    entry = _entry(check, c, None)
    entry["limit"] = limit
    if limit is None:
        entry["why"] = "%s, and no absolute limit (thresholds.%s)" % (without, key)
    elif c is None:
        entry["why"] = "no value for the canary: %s" % canary["why"][check]
    elif _worse(c, limit, direction):
        entry.update(result="fail", why="%s, %s the absolute limit %s (%s)" % (
            _fmt(c, unit), "above" if direction == "higher" else "below", _fmt(limit, unit), without))
    else:
        entry.update(result="pass", why="%s, within the absolute limit %s (%s)" % (
            _fmt(c, unit), _fmt(limit, unit), without))
    return entry


def _rate(windows):
    seconds = sum(w["seconds"] for w in windows)
    return (sum(w["finished"] for w in windows) / seconds) if seconds > 0 else None


def _rates(canary_windows, hosts):
    """Finished requests per second per server: the canary's, and the median baseline host's
    (0.0 without a window); a rollout reads an idle fleet from them."""
    mine = _rate([w for w in canary_windows if w["usable"]])
    rates = [r for r in (_rate([w for w in ws if w["usable"]]) for unused, ws in hosts) if r is not None]
    return {"canary": round(mine or 0.0, _DIGITS), "baseline": round(_median(rates), _DIGITS) if rates else 0.0}


def _traffic(canary_windows, hosts, min_requests, th):
    """traffic_share: the canary's finished requests per second per server against the median
    baseline host's per server. Its p-value: the chance of finishing this few or fewer if the
    canary got traffic_share_min of the median share (one-sided Poisson)."""
    usable = [w for w in canary_windows if w["usable"]]
    mine = _rate(usable)
    rates = [r for r in (_rate([w for w in ws if w["usable"]]) for unused, ws in hosts) if r is not None]
    entry = _entry("traffic_share", None if mine is None else round(mine, _DIGITS), None)
    held = max([w["held"] for w in canary_windows] or [0])
    if mine is None or not rates:
        entry["why"] = "no %s window to compare" % ("canary" if mine is None else "baseline")
        return entry
    median = _median(rates)
    if len(rates) == 2 and min(rates) < th["traffic_share_min"] * max(rates):
        # two hosts whose own shares disagree more than the canary's may: the lower one decides,
        # so that a host that reports a flood cannot fail a canary for missing it
        median = min(rates)
    seconds = sum(w["seconds"] for w in usable)
    expected = median * seconds
    finished = sum(w["finished"] for w in usable)
    entry.update(baseline=round(median, _DIGITS), limit=round(th["traffic_share_min"] * median, _DIGITS))
    if expected < min_requests:
        entry["why"] = ("the median baseline server finished %.3g requests/s: %.1f expected of the canary "
                        "in its window, fewer than min_requests %d" % (median, expected, min_requests))
        return entry
    floor = th["traffic_share_min"] * expected
    share = finished / expected if expected else 0.0
    if finished >= floor:
        entry.update(result="pass", why="%d requests finished, %.0f%% of the median baseline server's "
                     "%.1f in the same time (at least %.0f%%)" % (
                         finished, 100 * share, expected, 100 * th["traffic_share_min"]))
        return entry
    hint = ("it held up to %d request(s) at once, so it is slow to finish them" % held if held else
            "it held no request: not back in the load balancer?")
    entry.update(result="candidate", test="poisson", p_value=float("%.4g" % poisson_cdf(finished, floor)),
                 effect=_effect(mine, median), held=held,
                 why_base="%d requests finished, %.0f%% of the median baseline server's %.1f in the same "
                          "time (below %.0f%%): %s" % (
                              finished, 100 * share, expected, 100 * th["traffic_share_min"], hint))
    return entry


def _settle(checks, th):
    """Holm over every check's p-value: a candidate fails when its p-value is rejected, and passes
    as not significant otherwise."""
    results = holm([c["p_value"] if c["result"] == "candidate" else None for c in checks], th["alpha"])
    for c, (rejected, level) in zip(checks, results):
        if c["result"] != "candidate":
            continue
        c["level"] = None if level is None else float("%.4g" % level)
        base = c.pop("why_base", None) or "%s, %s the limit %s (baseline %s)" % (
            _fmt(c["canary"], _unit(c)), "above" if _check_spec(c["metric"])[4] == "higher" else "below",
            _fmt(c["limit"], _unit(c)), _fmt(c["baseline"], _unit(c)))
        n = c.pop("n", None)
        words = c.pop("per_request", None)
        test = ("Mann-Whitney U over %d and %d interval values" % n if n else
                "per request, %s" % words if words else "Poisson")
        if rejected and c.get("on_reject") == "inconclusive":
            c.update(result="inconclusive", why="%s; %s against the stricter host: p=%.2g < %.2g (Holm, alpha %g "
                     "over %d checks), so it cannot be decided" % (
                         base, test, c["p_value"], level, th["alpha"], len(checks)))
        elif rejected:
            c.update(result="fail", why="%s; %s: p=%.2g < %.2g (Holm, alpha %g over %d checks)" % (
                base, test, c["p_value"], level, th["alpha"], len(checks)))
        else:
            c.update(result="pass", why="%s, but not significant: %s p=%.2g >= %.2g (Holm, alpha %g "
                     "over %d checks)" % (base, test, c["p_value"], level, th["alpha"], len(checks)))
        c.pop("held", None)
    for c in checks:
        c.pop("why_base", None)
        c.pop("per_request", None)
        c.pop("on_reject", None)
        c.pop("n", None)
        c.pop("rooms", None)
    return checks


def _unit(check):
    return "" if check["metric"] == "traffic_share" else _check_spec(check["metric"])[5]


_CAUSE_NUMBERS = {
    "engine_down": (("samples_down", "%s of"), ("samples", "%s samples unreadable")),
    "kv_cache_exhausted": (("preemptions_in_window", "%s preemptions"),
                           ("finished_in_window", "for %s finished requests"),
                           ("kv_cache_usage_max", "(KV cache usage up to %.2f)")),
    "request_errors": (("errors_in_window", "%s errors"), ("finished_in_window", "of %s finished"),
                       ("error_ratio", "(ratio %s)")),
    "admission_stall": (("seconds_without_progress", "no engine step for %s s"),),
    "deferred_deadlock": (("prompt_tokens_in_window", "%s prompt tokens"),
                          ("generation_tokens_in_window", "%s generated"),),
    "crash_loop": (("restarts_in_window", "%s restarts"),),
    "group_member_lost": (("links", "%s links"), ("expected_links", "of %s")),
}


def _cause_text(cause):
    ev = cause.get("evidence") or {}
    parts = [fmt % ev[key] for key, fmt in _CAUSE_NUMBERS.get(cause["id"], ())
             if ev.get(key) is not None]
    if ev.get("error") or ev.get("health_error"):
        parts.append("(last error: %s)" % (ev.get("error") or ev.get("health_error")))
    return "%s (%s%s)" % (cause["id"], cause["severity"], (": " + " ".join(parts)) if parts else "")


def _diagnosis(target, start=None):
    if target.get("diagnosis") is not None:
        return target["diagnosis"]
    snaps = [dict(s) for s in _after(target.get("samples"), start) if isinstance(s, dict)]
    if not snaps:
        return {"verdict": "unhealthy", "causes": [{
            "id": "engine_down", "severity": "critical",
            "evidence": {"error": "no sample was taken"}, "advice": ""}]}
    return diagnose(add_rates(snaps), limits=target.get("limits"))


def _start(canary, warmup):
    """The end of the warm-up: `warmup` seconds after the canary's first sample."""
    if not warmup:
        return None
    firsts = [s["time"] for t in canary for s in (t.get("samples") or [])[:1]
              if isinstance(s, dict) and _is_number(s.get("time"))]
    return (min(firsts) + warmup) if firsts else None


def _mismatch(window, mine):
    """Why a baseline window does not serve what the canary serves, or None."""
    if mine["models"] and window["models"] and window["models"] != mine["models"]:
        return "serves %s, the canary %s" % (", ".join(window["models"]), ", ".join(mine["models"]))
    if mine["engines"] and window["engines"] and window["engines"] != mine["engines"]:
        return "runs %s engine(s), the canary %s" % (
            "/".join(str(e) for e in window["engines"]), "/".join(str(e) for e in mine["engines"]))
    return None


def _canary_identity(windows):
    return {"models": sorted(set(m for w in windows for m in w["models"])),
            "engines": sorted(set(e for w in windows for e in w["engines"]))}


def before_differences(before, min_requests=DEFAULT_MIN_REQUESTS):
    """From an earlier result of analyse() for the same canary host, taken before its change
    (under the same traffic, against the same baseline): ({check: {"canary", "baseline"}}, None),
    or ({}, why it cannot be used)."""
    if not isinstance(before, dict):
        return {}, "no result of a window before the change"
    if before.get("mode") != "baseline":
        pooled = (before.get("requests") or {}).get("baseline")
        if _is_number(pooled) and pooled < min_requests:
            return {}, ("the baseline finished %d request(s) in the window before the change, fewer than "
                        "min_requests %d" % (pooled, min_requests))
        return {}, "the window before the change had no healthy baseline that serves what the canary serves"
    finished = (before.get("requests") or {}).get("canary")
    if not _is_number(finished) or finished < min_requests:
        return {}, "the host finished %s request(s) in the window before the change, fewer than min_requests %d" % (
            finished if _is_number(finished) else "no", min_requests)
    out = {}
    names = [c[0] for c in CHECKS]
    for check in before.get("checks") or []:
        if not isinstance(check, dict) or check.get("metric") not in names:
            continue
        c, b = check.get("canary"), check.get("baseline")
        if _is_number(c) and _is_number(b):
            out[check["metric"]] = {"canary": float(c), "baseline": float(b)}
    return out, None if out else "the window before the change compared no check"


def analyse(canary, baseline, min_requests=DEFAULT_MIN_REQUESTS, thresholds=None, warmup=0, before=None,
            early=False):
    """The canary's verdict. canary, baseline: lists of targets, each {"name", "host" (the
    baseline's per-host values group by it; the name when absent), "samples" (snapshots, oldest
    first), "limits" (scheduler limits, optional), "diagnosis" (the diagnose() result of its
    window; computed when absent)}. thresholds: overrides of DEFAULT_THRESHOLDS (check_thresholds
    first). warmup: seconds after the canary's first sample that no window counts. before: the
    result of analyse() for the same canary host before its change (the difference of
    differences: a check it was already worse in is judged on what the change added). early: the
    look of an early verdict during the window (_analysis_run): a check with a per-request test
    (the ratios and the latency quantiles) is tested on the canary's requests against its limit,
    not on its intervals, so that overwhelming evidence needs no five intervals a side.

    {"verdict", "reason", "checks", "requests": {"canary", "baseline"}, "causes" (the canary
     targets' causes, each with its "target"), "mode" ("baseline" or "absolute"), "restarted"
     (the canary targets' restarts, by name), "targets": [{"name", "side", "verdict",
     "requests", "pooled", "why"}], "warmup_seconds", "rates" (finished requests per second per
     server: the canary's and the median baseline host's)}.
    """
    th = dict(DEFAULT_THRESHOLDS)
    th.update(thresholds or {})
    start = _start(canary, warmup)
    targets, causes, critical, broken = [], [], [], []
    canary_windows, all_baseline = [], []
    for target in canary:
        window = target_window(target.get("samples"), start)
        canary_windows.append(window)
        diagnosis = _diagnosis(target, start)
        targets.append({"name": target.get("name"), "side": "canary", "verdict": diagnosis.get("verdict"),
                        "requests": window["finished"] if window["usable"] else None,
                        "pooled": window["usable"], "why": window["why"]})
        for cause in diagnosis.get("causes") or []:
            causes.append(dict(cause, target=target.get("name")))
            if cause.get("severity") == "critical":
                critical.append((target.get("name"), cause))
        if window["restarted"]:
            broken.append("%s restarted in the window: %s" % (target.get("name"), window["restarted"]))
        elif window["unreadable"] > th["max_unreadable_samples"]:
            broken.append("%s could not be read for %d samples in a row (max_unreadable_samples %d)" % (
                target.get("name"), window["unreadable"], th["max_unreadable_samples"]))
    mine_id = _canary_identity(canary_windows)
    by_host = {}
    for target in baseline or []:
        window = target_window(target.get("samples"), start)
        diagnosis = _diagnosis(target, start)
        entry = {"name": target.get("name"), "side": "baseline", "verdict": diagnosis.get("verdict"),
                 "requests": window["finished"] if window["usable"] else None, "pooled": False,
                 "why": window["why"]}
        if window["usable"]:
            all_baseline.append(window)
        other = _mismatch(window, mine_id)
        if diagnosis.get("verdict") == "unhealthy":
            entry["why"] = "left out: itself unhealthy (%s)" % ", ".join(
                c["id"] for c in diagnosis.get("causes") or [] if c.get("severity") == "critical")
        elif other:
            entry["why"] = "left out: %s" % other
        elif window["usable"]:
            by_host.setdefault(target.get("host") or target.get("name"), []).append(window)
            entry["pooled"] = True
        else:
            entry["why"] = "left out: %s" % window["why"]
        targets.append(entry)
    mine = side_window(canary_windows)
    hosts = sorted(by_host.items())
    host_sides = [(h, side_window(ws)) for h, ws in hosts]
    pooled = sum(w["finished"] for h, ws in hosts for w in ws)
    requests = {"canary": mine["finished"], "baseline": sum(w["finished"] for w in all_baseline)}
    window_seconds = max([w["seconds"] for w in canary_windows + all_baseline] or [0.0])

    if not baseline:
        without = "no baseline given"
    elif not hosts:
        left = [t["why"] for t in targets if t["side"] == "baseline"]
        without = "no healthy baseline target that serves what the canary serves (%s)" % "; ".join(left[:3])
    elif pooled < min_requests:
        without = "the healthy baseline finished %d request(s), fewer than min_requests %d" % (
            pooled, min_requests)
    else:
        without = None
    mode = "absolute" if without else "baseline"
    pre, pre_why = before_differences(before, min_requests) if before is not None else ({}, None)
    checks = [_traffic(canary_windows, hosts, min_requests, th)] if mode == "baseline" else []
    for check, family, unused, unused2, direction, unit in CHECKS:
        if mode == "baseline":
            checks.append(_compare(check, family, direction, unit, mine, host_sides, th, pre.get(check), early))
        else:
            checks.append(_absolute(check, direction, unit, mine, th, without))
    few = mine["finished"] < min_requests
    if few and not (broken or critical):
        # too few requests to judge what they measure: only the traffic and what the canary holds
        for c in checks:
            if c["metric"] not in ("traffic_share",) + _WITHOUT_REQUESTS and c["result"] != "skipped":
                c.update(result="skipped", why="the canary finished %d request(s), fewer than min_requests "
                         "%d: %s" % (mine["finished"], min_requests, c["why"] or c.get("why_base") or ""))
    _settle(checks, th)
    out = {"checks": checks, "requests": requests, "causes": causes, "mode": mode,
           "targets": targets, "thresholds": th, "min_requests": min_requests,
           "window_seconds": window_seconds, "warmup_seconds": warmup or 0,
           "baseline_hosts": [h for h, unused in hosts], "rates": _rates(canary_windows, hosts)}
    if before is not None:
        out["before"] = {"used": bool(pre) and mode == "baseline", "why": pre_why,
                         "handicaps": dict((c["metric"], c["before"]["handicap"]) for c in checks
                                           if c.get("before") and c["before"]["handicap"])}
    failed = [c for c in checks if c["result"] == "fail"]
    if broken or critical:
        words = ["The canary fails at once"]
        if broken:
            words.append(": " + "; ".join(broken))
        if critical:
            words.append("%s on a critical cause: %s" % (";" if broken else "", "; ".join(
                "%s: %s" % (name, _cause_text(cause)) for name, cause in critical)))
        also = ("; its %.0f s window also fails %s" % (window_seconds, ", ".join(
            _brief(c) for c in failed)) if failed else "")
        out.update(verdict="fail", reason="".join(words) + also + ".")
        return out
    against = ("the baseline (%d host(s), %d requests)" % (len(hosts), pooled)
               if mode == "baseline" else "absolute limits (%s)" % without)
    handicaps = [c for c in checks if (c.get("before") or {}).get("handicap")]
    if handicaps:
        # the difference of differences, said where it changed what a check compared
        against += ", judged on what the change added where the host was worse before it (%s)" % ", ".join(
            "%s by %s" % (c["metric"], _fmt(c["before"]["handicap"], _unit(c))) for c in handicaps)
    if failed:
        out.update(verdict="fail", reason="The canary (%d requests) fails %s, against %s." % (
            mine["finished"], ", ".join(_brief(c) for c in failed), against))
        return out
    if few:
        held = max([w["held"] for w in canary_windows] or [0])
        hint = ("not back in the load balancer?" if not held else
                "it held up to %d request(s) at once, so it is slow rather than idle" % held)
        out.update(verdict="inconclusive", reason=(
            "The canary finished %d request(s) in its %.0f s window, fewer than min_requests %d, "
            "while the baseline finished %d: %s" % (
                mine["finished"], window_seconds, min_requests, requests["baseline"], hint)))
        return out
    undecided = [c for c in checks if c["result"] == "inconclusive"]
    if undecided:
        out.update(verdict="inconclusive", reason="The canary (%d requests) fails no check against %s, "
                   "but %s cannot be decided: %s." % (mine["finished"], against, ", ".join(
                       c["metric"] for c in undecided), "; ".join(_brief(c) for c in undecided)))
        return out
    passed = [c for c in checks if c["result"] == "pass"]
    if not passed:
        out.update(verdict="inconclusive", reason=(
            "The canary finished %d requests but no check could be made against %s." % (
                mine["finished"], against)))
        return out
    out.update(verdict="pass", reason="The canary (%d requests) passes %d check(s) against %s; %d skipped." % (
        mine["finished"], len(passed), against, len(checks) - len(passed)))
    return out


def decide(result, inconclusive="fail_canary", canary_batch=True):
    """What a rollout does with an analysis result: {"keep": bool, "stop": bool, "judged": bool,
    "why": words}.

    fail rolls the host back. inconclusive is never kept silently: the rollout stops after this
    batch (stop), and the policy says whether the host is kept: fail_canary (the default) rolls
    back the first batch analysed, the canary, and keeps later ones; fail always rolls back;
    pass keeps it. pass keeps the host and goes on."""
    if inconclusive not in INCONCLUSIVE_POLICIES:
        raise ValueError("inconclusive must be one of %s, got %r" % (", ".join(INCONCLUSIVE_POLICIES), inconclusive))
    result = result if isinstance(result, dict) else {}
    verdict, reason = result.get("verdict"), result.get("reason") or "no reason given"
    if verdict == "pass":
        return {"keep": True, "stop": False, "judged": True, "why": "analysis passed: %s" % reason}
    if verdict == "fail":
        return {"keep": False, "stop": True, "judged": True, "why": "analysis failed: %s" % reason}
    if verdict == "inconclusive":
        keep = inconclusive == "pass" or (inconclusive == "fail_canary" and not canary_batch)
        return {"keep": keep, "stop": True, "judged": False, "why": (
            "analysis inconclusive, not judged; %s (inconclusive: %s%s), and no later batch starts: %s" % (
                "kept" if keep else "rolled back", inconclusive,
                ", the canary batch" if inconclusive == "fail_canary" and canary_batch else "", reason))}
    return {"keep": False, "stop": True, "judged": False,
            "why": "analysis gave no verdict (%r): %s" % (verdict, reason)}
