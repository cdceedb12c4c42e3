# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Judge a canary against a baseline from windows of vLLM snapshots: pass, fail or inconclusive.

Pure functions, standard library only (runs in modules and on hosts). ``analyse`` takes each
side's targets with their snapshots (as ``_probe.sample`` returns them, oldest first, with the
latency histograms) and returns the verdict, one sentence of reason with the numbers, and one
entry per check. docs/canary-analysis.md explains the rules; in short:

1. A critical cause of the diagnosis (``_diagnosis.diagnose``) on a canary target fails the
   canary whatever its request count: a dead engine, a cache exhausted with preemptions,
   request errors, a stall.
2. A canary that finished fewer than ``min_requests`` is ``inconclusive``.
3. Otherwise each metric of the window is compared, normalised per request (or per running
   sequence), with the baseline targets pooled: their counter deltas added up and their
   histogram deltas added bucket by bucket before the quantile is taken. A baseline target
   that is itself unhealthy is left out of the pool; with no pool, or a pool that finished
   fewer than ``min_requests``, the absolute limits apply instead.
4. A check fails when the canary is worse than the baseline by more than the larger of a
   relative and an absolute tolerance and, where each side has ``min_intervals`` per-interval
   values, a one-sided Mann-Whitney U test (normal approximation with tie and continuity
   corrections) finds the canary's values larger (smaller, for throughput) at level ``alpha``
   divided by the number of checks (Bonferroni: ``alpha`` bounds the chance that identical
   settings fail any check).
   With fewer values the tolerance alone decides.

Windows: each target's own first and last readable sample (after the last restart in the
window, when its counters went down). Per-interval values: one per pair of consecutive readable
samples of a target, such as that interval's TTFT quantile from its bucket deltas.
"""

from __future__ import annotations

import math

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import add_rates, diagnose
from ansible_collections.kvfleet.vllm.plugins.module_utils._latency import (
    bucket_quantile, counts_between)

__all__ = ["CHECKS", "DEFAULT_MIN_REQUESTS", "DEFAULT_THRESHOLDS", "VERDICTS", "analyse",
           "check_thresholds", "mann_whitney_u", "side_window", "target_window"]

VERDICTS = ("pass", "fail", "inconclusive")
DEFAULT_MIN_REQUESTS = 20

# check -> (family of its tolerances, what it reads, quantile or None, worse when "higher"/"lower",
#           unit for the reason)
CHECKS = (
    ("error_ratio", "error_ratio", "error_ratio", None, "higher", ""),
    ("preemptions_per_request", "preemptions_per_request", "preemptions_per_request", None,
     "higher", ""),
    ("kv_usage", "kv_usage", "kv_usage", None, "higher", ""),
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
FAMILIES = ("error_ratio", "preemptions_per_request", "kv_usage", "queue_time", "ttft", "itl", "e2e",
            "gen_tokens_per_seq")
_HISTOGRAMS = ("queue", "ttft", "itl", "e2e")

# The one copy of the defaults (the module's documentation states them; a unit test compares).
DEFAULT_THRESHOLDS = {
    # the statistical test: its level, and the fewest per-interval values on each side for it
    "alpha": 0.05,
    "min_intervals": 5,
    # tolerances against the baseline: the canary may be worse by the larger of the two
    "error_ratio_relative": 0.5, "error_ratio_absolute": 0.01,
    "preemptions_per_request_relative": 0.5, "preemptions_per_request_absolute": 0.05,
    "kv_usage_relative": 0.5, "kv_usage_absolute": 0.02,
    "queue_time_relative": 0.5, "queue_time_absolute": 0.05,
    "ttft_relative": 0.5, "ttft_absolute": 0.05,
    "itl_relative": 0.5, "itl_absolute": 0.01,
    "e2e_relative": 0.5, "e2e_absolute": 0.5,
    "gen_tokens_per_seq_relative": 0.5, "gen_tokens_per_seq_absolute": 1.0,
    # absolute limits, used without a (healthy, busy enough) baseline; None: not checked then
    "error_ratio_max": 0.01,
    "preemptions_per_request_max": 0.1,
    "kv_usage_max": None,
    "queue_time_p50_max": None, "queue_time_p95_max": 1.0,
    "ttft_p50_max": None, "ttft_p95_max": 2.0,
    "itl_p50_max": None, "itl_p95_max": 0.2,
    "e2e_p50_max": None, "e2e_p95_max": None,
    "gen_tokens_per_seq_min": None,
}
# the counters a restart sets back to 0 (a drop between two samples starts a new window)
_COUNTERS = ("requests_finished_total", "generation_tokens_total", "prompt_tokens_total",
             "preemptions_total", "request_errors_total")
_DIGITS = 6


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
        if key == "min_intervals":
            if not isinstance(value, int) or isinstance(value, bool) or not 2 <= value <= 10000:
                return "thresholds.min_intervals must be a whole number from 2 to 10000, got %r" % (value,)
            continue
        if key == "alpha":
            if not _is_number(value) or not 0 < value < 1:
                return "thresholds.alpha must be a number between 0 and 1, got %r" % (value,)
            continue
        if value is None and (key.endswith("_max") or key.endswith("_min")):
            continue  # that absolute limit is not checked
        if not _is_number(value) or value < 0:
            return "thresholds.%s must be a number, 0 or more%s, got %r" % (
                key, " (or null: no limit)" if key.endswith(("_max", "_min")) else "", value)
    return None


# --- the Mann-Whitney U test ---------------------------------------------------------------------

def mann_whitney_u(x, y, alternative="greater"):
    """One-sided Mann-Whitney U test of `x` against `y`: (U of x, z, p).

    alternative "greater": x tends to be larger than y; "less": smaller. Normal approximation
    with the tie correction of the variance and a continuity correction of 0.5 toward the null
    (as scipy.stats.mannwhitneyu(method="asymptotic", use_continuity=True)). All values equal:
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
    return u, z, 0.5 * math.erfc(z / math.sqrt(2))


# --- one target's window -------------------------------------------------------------------------

def _readable(samples):
    return [s for s in samples or [] if isinstance(s, dict) and not s.get("error")
            and _is_number(s.get("time"))]


def _since_restart(readable):
    """The trailing run of readings after the last one whose counters went down (a restart)."""
    start = 0
    for k in range(1, len(readable)):
        a, b = readable[k - 1], readable[k]
        if any(_is_number(a.get(f)) and _is_number(b.get(f)) and b[f] < a[f] for f in _COUNTERS):
            start = k
    return readable[start:]


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


def target_window(samples):
    """One target's window: its counter deltas, histogram deltas and per-interval values.

    {"usable": bool, "why": why not, "seconds", "samples", "restarted",
     "finished", "errors", "preemptions", "generation_tokens", "seq_seconds" (sum over the
     intervals of their length x their mean running sequences), "kv_per_seq" (per sample),
     "histograms": {metric: (bounds, counts) or (None, reason)},
     "intervals": {metric key: [per-interval values]}}.
    """
    readable = _readable(samples)
    run = _since_restart(readable)
    out = {"usable": False, "why": None, "samples": len(run), "seconds": 0.0,
           "restarted": len(run) < len(readable), "finished": 0, "errors": 0, "preemptions": 0,
           "generation_tokens": 0, "gen_tokens_counted": 0, "seq_seconds": 0.0,
           "kv_per_seq": [], "histograms": {}, "intervals": dict((c[0], []) for c in CHECKS),
           "in_flight": 0}
    if run:
        # requests the server holds at its last reading: a slow server has them, an idle one not
        out["in_flight"] = sum(run[-1].get(f) for f in ("requests_running", "requests_waiting")
                               if _is_number(run[-1].get(f)))
    for snap in run:
        usage, running = snap.get("kv_cache_usage"), snap.get("requests_running")
        if _is_number(usage) and _is_number(running) and running >= 1:
            out["kv_per_seq"].append(usage / running)
    out["intervals"]["kv_usage"] = list(out["kv_per_seq"])
    if len(run) < 2:
        out["why"] = ("no readable sample" if not readable else
                      "one readable sample%s: no window" % (" after its restart" if out["restarted"] else ""))
        return out
    first, last = run[0], run[-1]
    out["seconds"] = round(last["time"] - first["time"], 3)
    finished = _delta(first, last, "requests_finished_total")
    if finished is None:
        out["why"] = "vllm:request_success is not exposed or went down"
        return out
    out.update(usable=True, finished=finished,
               errors=_delta(first, last, "request_errors_total") or 0,
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
        iv["preemptions_per_request"].append((_delta(a, b, "preemptions_total") or 0) / float(done))
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
    errors = sum(w["errors"] for w in usable)
    preempted = sum(w["preemptions"] for w in usable)
    seq_seconds = sum(w["seq_seconds"] for w in usable)
    kv = [v for w in usable for v in w["kv_per_seq"]]
    hists = dict((m, _pool_histograms([w["histograms"].get(m, (None, "not exposed"))
                                       for w in usable])) for m in _HISTOGRAMS)
    for check, unused, metric, q, unused2, unused3 in CHECKS:
        value, why = None, None
        if check in ("error_ratio", "preemptions_per_request"):
            if finished:
                value = (errors if check == "error_ratio" else preempted) / float(finished)
            else:
                why = "no request finished"
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


def _brief(check):
    """A failed check in a few words, for the reason: 'ttft_p95 3 s > 0.488 s (baseline 0.325 s,
    p=6e-05)'."""
    unit = [c[5] for c in CHECKS if c[0] == check["metric"]][0]
    sign = ">" if [c[4] for c in CHECKS if c[0] == check["metric"]][0] == "higher" else "<"
    extra = []
    if check["baseline"] is not None:
        extra.append("baseline %s" % _fmt(check["baseline"], unit))
    else:
        extra.append("absolute limit")
    if check["p_value"] is not None:
        extra.append("p=%.2g" % check["p_value"])
    return "%s %s %s %s (%s)" % (check["metric"], _fmt(check["canary"], unit), sign,
                                 _fmt(check["limit"], unit), ", ".join(extra))


def _compare(check, family, direction, unit, canary, baseline, th):
    """One check of the canary against the pooled baseline."""
    c, b = canary["values"][check], baseline["values"][check]
    entry = {"metric": check, "canary": c, "baseline": b, "limit": None, "result": "skipped",
             "why": None, "test": None, "p_value": None}
    if c is None or b is None:
        entry["why"] = "no value for the %s: %s" % (
            "canary" if c is None else "baseline",
            canary["why"][check] if c is None else baseline["why"][check])
        return entry
    room = max(th[family + "_relative"] * abs(b), th[family + "_absolute"])
    limit = b + room if direction == "higher" else b - room
    entry["limit"] = round(limit, _DIGITS)
    worse = c > limit if direction == "higher" else c < limit
    cv, bv = canary["intervals"][check], baseline["intervals"][check]
    side = "above" if direction == "higher" else "below"
    if not worse:
        entry.update(result="pass", why="%s, within the limit %s (baseline %s)" % (
            _fmt(c, unit), _fmt(limit, unit), _fmt(b, unit)))
        return entry
    if len(cv) >= th["min_intervals"] and len(bv) >= th["min_intervals"]:
        unused, z, p = mann_whitney_u(cv, bv, "greater" if direction == "higher" else "less")
        entry.update(test="mann_whitney_u", p_value=float("%.4g" % p))
        # Bonferroni: alpha is the whole analysis's chance of failing identical settings, shared
        # by its checks (each at alpha / checks); at 0.05 a check each, a dozen checks failed
        # about one analysis in three of identical servers (benchmarks/RESULTS.md, canary)
        alpha = th["alpha"] / len(CHECKS)
        if p < alpha:
            entry.update(result="fail", why=(
                "%s, %s the limit %s (baseline %s); Mann-Whitney U over %d and %d interval values: "
                "p=%.2g < %.2g (alpha %g over %d checks)" % (
                    _fmt(c, unit), side, _fmt(limit, unit), _fmt(b, unit), len(cv), len(bv), p, alpha,
                    th["alpha"], len(CHECKS))))
        else:
            entry.update(result="pass", why=(
                "%s, %s the limit %s (baseline %s), but not significant: Mann-Whitney U over %d "
                "and %d interval values p=%.2g >= %.2g (alpha %g over %d checks)" % (
                    _fmt(c, unit), side, _fmt(limit, unit), _fmt(b, unit), len(cv), len(bv), p,
                    alpha, th["alpha"], len(CHECKS))))
        return entry
    entry.update(result="fail", why=(
        "%s, %s the limit %s (baseline %s); too few interval values for the test (%d and %d, "
        "min_intervals %d): the tolerance decides" % (
            _fmt(c, unit), side, _fmt(limit, unit), _fmt(b, unit), len(cv), len(bv),
            th["min_intervals"])))
    return entry


def _absolute(check, direction, unit, canary, th, without):
    """One check of the canary against its absolute limit (no baseline to compare with)."""
    c = canary["values"][check]
    key = absolute_key(check)
    limit = th[key]
    entry = {"metric": check, "canary": c, "baseline": None, "limit": limit, "result": "skipped",
             "why": None, "test": None, "p_value": None}
    if limit is None:
        entry["why"] = "%s, and no absolute limit (thresholds.%s)" % (without, key)
    elif c is None:
        entry["why"] = "no value for the canary: %s" % canary["why"][check]
    elif (c > limit) if direction == "higher" else (c < limit):
        entry.update(result="fail", why="%s, %s the absolute limit %s (%s)" % (
            _fmt(c, unit), "above" if direction == "higher" else "below", _fmt(limit, unit), without))
    else:
        entry.update(result="pass", why="%s, within the absolute limit %s (%s)" % (
            _fmt(c, unit), _fmt(limit, unit), without))
    return entry


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


def _diagnosis(target):
    if target.get("diagnosis") is not None:
        return target["diagnosis"]
    snaps = [dict(s) for s in target.get("samples") or [] if isinstance(s, dict)]
    if not snaps:
        return {"verdict": "unhealthy", "causes": [{
            "id": "engine_down", "severity": "critical",
            "evidence": {"error": "no sample was taken"}, "advice": ""}]}
    return diagnose(add_rates(snaps), limits=target.get("limits"))


def analyse(canary, baseline, min_requests=DEFAULT_MIN_REQUESTS, thresholds=None):
    """The canary's verdict. canary, baseline: lists of targets, each {"name", "samples"
    (snapshots, oldest first), "limits" (scheduler limits, optional), "diagnosis" (the
    diagnose() result of its window; computed when absent)}. thresholds: overrides of
    DEFAULT_THRESHOLDS (check_thresholds first).

    {"verdict", "reason", "checks", "requests": {"canary", "baseline"}, "causes" (the canary
     targets' causes, each with its "target"), "mode" ("baseline" or "absolute"),
     "targets": [{"name", "side", "verdict", "requests", "pooled", "why"}]}.
    """
    th = dict(DEFAULT_THRESHOLDS)
    th.update(thresholds or {})
    targets, causes, critical = [], [], []
    canary_windows, pool_windows, all_baseline = [], [], []
    for side, group in (("canary", canary), ("baseline", baseline or [])):
        for target in group:
            diagnosis = _diagnosis(target)
            window = target_window(target.get("samples"))
            entry = {"name": target.get("name"), "side": side, "verdict": diagnosis.get("verdict"),
                     "requests": window["finished"] if window["usable"] else None,
                     "pooled": False, "why": window["why"]}
            if side == "canary":
                canary_windows.append(window)
                entry["pooled"] = window["usable"]
                for cause in diagnosis.get("causes") or []:
                    causes.append(dict(cause, target=target.get("name")))
                    if cause.get("severity") == "critical":
                        critical.append((target.get("name"), cause))
            else:
                if window["usable"]:
                    all_baseline.append(window)
                if diagnosis.get("verdict") == "unhealthy":
                    entry["why"] = "left out: itself unhealthy (%s)" % ", ".join(
                        c["id"] for c in diagnosis.get("causes") or [] if c.get("severity") == "critical")
                elif window["usable"]:
                    pool_windows.append(window)
                    entry["pooled"] = True
                else:
                    entry["why"] = "left out: %s" % window["why"]
            targets.append(entry)
    mine = side_window(canary_windows)
    pool = side_window(pool_windows)
    requests = {"canary": mine["finished"], "baseline": sum(w["finished"] for w in all_baseline)}
    window_seconds = max([w["seconds"] for w in canary_windows + all_baseline] or [0.0])

    if not baseline:
        without = "no baseline given"
    elif not pool_windows:
        without = "no healthy baseline target to compare with"
    elif pool["finished"] < min_requests:
        without = "the healthy baseline finished %d request(s), fewer than min_requests %d" % (
            pool["finished"], min_requests)
    else:
        without = None
    mode = "absolute" if without else "baseline"
    checks = []
    for check, family, unused, unused2, direction, unit in CHECKS:
        if mode == "baseline":
            checks.append(_compare(check, family, direction, unit, mine, pool, th))
        else:
            checks.append(_absolute(check, direction, unit, mine, th, without))
    out = {"checks": checks, "requests": requests, "causes": causes, "mode": mode,
           "targets": targets, "thresholds": th, "min_requests": min_requests,
           "window_seconds": window_seconds}

    failed = [c for c in checks if c["result"] == "fail"]
    if critical:
        also = ("; its %.0f s window also fails %s" % (window_seconds, ", ".join(
            _brief(c) for c in failed)) if failed else "")
        out.update(verdict="fail", reason="The canary fails at once on a critical cause: %s%s." % (
            "; ".join("%s: %s" % (name, _cause_text(cause)) for name, cause in critical), also))
        return out
    if mine["finished"] < min_requests:
        held = sum(w["in_flight"] for w in canary_windows)
        hint = ("not back in the load balancer?" if not held else
                "it held %d request(s) at its last sample, so it is slow rather than idle: "
                "lengthen duration" % held)
        out.update(verdict="inconclusive", reason=(
            "The canary finished %d request(s) in its %.0f s window, fewer than min_requests %d, "
            "while the baseline finished %d: %s" % (
                mine["finished"], window_seconds, min_requests, requests["baseline"], hint)))
        return out
    passed = [c for c in checks if c["result"] == "pass"]
    against = ("the baseline (%d server(s) pooled, %d requests)" % (pool["targets"], pool["finished"])
               if mode == "baseline" else "absolute limits (%s)" % without)
    if failed:
        out.update(verdict="fail", reason="The canary (%d requests) fails %s, against %s." % (
            mine["finished"], ", ".join(_brief(c) for c in failed), against))
        return out
    if not passed:
        out.update(verdict="inconclusive", reason=(
            "The canary finished %d requests but no check could be made against %s." % (
                mine["finished"], against)))
        return out
    out.update(verdict="pass", reason="The canary (%d requests) passes %d check(s) against %s; %d skipped." % (
        mine["finished"], len(passed), against, len(checks) - len(passed)))
    return out
