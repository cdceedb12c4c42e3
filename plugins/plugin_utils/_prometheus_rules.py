# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus recording and alerting rules generated from the diagnosis' one cause table.

Every cause of ``_diagnosis.CAUSE_IDS`` gets one alert, named after it, whose description is the
cause's own advice. Where vLLM's series can compute the cause, the alert does, with the gate's
thresholds (``DEFAULT_THRESHOLDS``); the causes they cannot (the scheduler settings /metrics
does not show, the unit's restarts, values the normaliser refuses) come from the monitor's
textfile (``kvfleet_vllm_cause_sustained``). A cause the gate calls critical only when the
window proves it has two rules under one alert name: warning, and critical when proven.
"""

from __future__ import annotations

import re

from ansible_collections.kvfleet.vllm.plugins.module_utils._diagnosis import (
    CAUSE_IDS, DEFAULT_THRESHOLDS, cause_advice)

__all__ = ["ALERT_NAMES", "DEFAULTS", "SEVERITIES", "RulesError", "rules"]

# The severities _diagnosis gives each cause (a unit test reads them back from its source).
SEVERITIES = {
    "engine_down": ("warning", "critical"), "probe_errors": ("warning",),
    "kv_cache_exhausted": ("warning", "critical"), "concurrency_cap": ("warning",),
    "active_seq_cap": ("warning",), "token_budget": ("warning",),
    "head_of_line_blocking": ("warning",), "scheduler_limit": ("warning",),
    "admission_stall": ("critical",),
    "deferred_backlog": ("warning",), "deferred_deadlock": ("critical",),
    "admission_rejections": ("warning",), "request_errors": ("warning", "critical"),
    "request_aborts": ("warning",), "invalid_metrics": ("warning",),
    "crash_loop": ("warning", "critical"), "memory_growth": ("warning",),
    "group_member_lost": ("warning", "critical"), "gpu_unhealthy": ("warning", "critical"),
}
ALERT_NAMES = dict((c, "Vllm" + "".join(w.capitalize() for w in c.split("_"))) for c in CAUSE_IDS)

DEFAULTS = {
    "job": "vllm",                  # the scrape job of the vLLM instances (up{job=...})
    "node_job": "node",             # the scrape job of the hosts' node_exporter (the textfile)
    "window": "5m",                 # the span rates, increases and "most samples" look at
    "for": "2m",                    # how long a cause must hold before its alert fires
    "down_for": "1m",               # engine_down: the gate wants two samples down in a row
    "kv_usage_high": DEFAULT_THRESHOLDS["kv_usage_high"],
    "stall_seconds": DEFAULT_THRESHOLDS["stall_seconds"],
    "min_preemptions": DEFAULT_THRESHOLDS["min_preemptions"],
    "preemption_ratio_unhealthy": DEFAULT_THRESHOLDS["preemption_ratio_unhealthy"],
    "min_request_errors": DEFAULT_THRESHOLDS["min_request_errors"],
    "error_ratio_unhealthy": DEFAULT_THRESHOLDS["error_ratio_unhealthy"],
    "ttft_p95_seconds": 2.0,        # SLO: time to first token, p95 over the window
    "queue_time_p95_seconds": 1.0,  # SLO: time in the queue, p95 over the window
    "preemption_rate": 0.05,        # preemptions per second that warn on their own
    "usage_high_for": "15m",        # KV usage at or above kv_usage_high this long warns
    "slo_for": "10m",               # how long a p95 must stay over its SLO
}
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+\Z")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*\Z")
_JOB = re.compile(r'^[^"\\\n]+\Z')
_R = "kvfleet_vllm:"   # recording rules' prefix (level:metric:operations)


class RulesError(ValueError):
    pass


def _settings(given):
    if not isinstance(given, dict):
        raise RulesError("prometheus_rules: settings must be a dict, got %s" % type(given).__name__)
    unknown = set(given) - set(DEFAULTS)
    if unknown:
        raise RulesError("prometheus_rules: unknown setting(s) %s; known: %s"
                         % (", ".join(sorted(unknown)), ", ".join(sorted(DEFAULTS))))
    s = dict(DEFAULTS)
    s.update(dict((k, v) for k, v in given.items() if v is not None))
    for key in ("window", "for", "down_for", "usage_high_for", "slo_for"):
        if not _DURATION.match(str(s[key])):
            raise RulesError("prometheus_rules: %s must be a Prometheus duration such as 30s, 5m "
                             "or 1h, got %r" % (key, s[key]))
    for key in ("job", "node_job"):
        if not _JOB.match(str(s[key])):
            raise RulesError('prometheus_rules: %s must be a job name without quotes, backslashes '
                             'or line breaks, got %r' % (key, s[key]))
    for key in ("kv_usage_high", "preemption_ratio_unhealthy", "error_ratio_unhealthy"):
        if not (isinstance(s[key], (int, float)) and not isinstance(s[key], bool)
                and 0 < s[key] <= 1):
            raise RulesError("prometheus_rules: %s must be a number above 0 and at most 1, "
                             "got %r" % (key, s[key]))
    for key in ("stall_seconds", "min_preemptions", "min_request_errors", "ttft_p95_seconds",
                "queue_time_p95_seconds", "preemption_rate"):
        if not (isinstance(s[key], (int, float)) and not isinstance(s[key], bool) and s[key] > 0):
            raise RulesError("prometheus_rules: %s must be a number above 0, got %r"
                             % (key, s[key]))
    return s


def _num(value):
    return ("%d" % value) if float(value).is_integer() else repr(float(value))


def _records(s):
    w = s["window"]
    return [
        # 0.32 names it kv_cache_usage_perc; older releases gpu_cache_usage_perc (both 0..1)
        (_R + "kv_cache_usage:ratio", "vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc"),
        # vLLM's waiting gauge counts deferred requests too; by reason where it has the split
        (_R + "requests_waiting_capacity",
         'sum without (reason) (vllm:num_requests_waiting_by_reason{reason="capacity"}) '
         "or vllm:num_requests_waiting"),
        (_R + "requests_waiting_deferred",
         'sum without (reason) (vllm:num_requests_waiting_by_reason{reason="deferred"})'),
        # running at its own maximum of the window in at least half the samples (gauges dip
        # between steps; the same rule as the gate's _pinned)
        (_R + "requests_running:pinned",
         "quantile_over_time(0.5, vllm:num_requests_running[%s]) "
         ">= max_over_time(vllm:num_requests_running[%s]) > 0" % (w, w)),
        (_R + ("preemptions:increase" + w), "increase(vllm:num_preemptions_total[%s])" % w),
        (_R + ("requests_finished:increase" + w),
         "sum without (finished_reason) (increase(vllm:request_success_total[%s]))" % w),
        (_R + ("request_errors:increase" + w),
         'sum without (finished_reason) '
         '(increase(vllm:request_success_total{finished_reason="error"}[%s]))' % w),
        (_R + ("request_aborts:increase" + w),
         'sum without (finished_reason) '
         '(increase(vllm:request_success_total{finished_reason="abort"}[%s]))' % w),
        (_R + ("admission_rejections:increase" + w),
         "increase(vllm:admission_rejections_total[%s])" % w),
        (_R + "time_to_first_token_seconds:p95",
         "histogram_quantile(0.95, rate(vllm:time_to_first_token_seconds_bucket[%s]))" % w),
        (_R + "request_queue_time_seconds:p95",
         "histogram_quantile(0.95, rate(vllm:request_queue_time_seconds_bucket[%s]))" % w),
    ]


def _cause_rules(s):
    """{cause: [(severity, expr, for)]} for the causes vLLM's own series compute."""
    w, high = s["window"], _num(s["kv_usage_high"])
    usage_max = "max_over_time(%skv_cache_usage:ratio[%s])" % (_R, w)
    preempt = "%spreemptions:increase%s" % (_R, w)
    finished = "%srequests_finished:increase%s" % (_R, w)
    errors = "%srequest_errors:increase%s" % (_R, w)
    aborts = "%srequest_aborts:increase%s" % (_R, w)
    cap_wait = "%srequests_waiting_capacity" % _R
    sustained = "(%s >= 1 and quantile_over_time(0.5, %s[%s]) >= 1)" % (cap_wait, cap_wait, w)
    exhausted = ("(%s >= %s and %s >= %s and %s / clamp_min(%s, 1) >= %s)" % (
        usage_max, high, preempt, _num(s["min_preemptions"]), preempt, finished,
        _num(s["preemption_ratio_unhealthy"])))
    failing = "(%s >= %s and %s / clamp_min(%s, 1) >= %s)" % (
        errors, _num(s["min_request_errors"]), errors, finished, _num(s["error_ratio_unhealthy"]))
    stall = "%ds" % int(s["stall_seconds"])
    return {
        "engine_down": [("critical", 'up{job="%s"} == 0' % s["job"], s["down_for"])],
        "kv_cache_exhausted": [
            ("critical", exhausted, s["for"]),
            ("warning", "(%s >= %s and %s > 0) unless %s" % (usage_max, high, preempt, exhausted),
             s["for"])],
        # vLLM does not export --max-num-seqs and PromQL cannot compare with a label's value:
        # "running flat at its own maximum" stands for "at the cap" (the target's max_num_seqs
        # label names the cap for whoever reads the alert).
        "concurrency_cap": [("warning", "%s and %srequests_running:pinned and %s < %s" % (
            sustained, _R, usage_max, high), s["for"])],
        # each rejection is an HTTP 503 already: no holding time
        "admission_rejections": [("warning", "%sadmission_rejections:increase%s > 0" % (_R, w),
                                  "0s")],
        "request_errors": [
            ("critical", failing, "0s"),
            ("warning", "%s > 0 unless %s" % (errors, failing), "0s")],
        "request_aborts": [("warning", "%s >= %s and %s / clamp_min(%s, 1) >= %s" % (
            aborts, _num(s["min_request_errors"]), aborts, finished,
            _num(s["error_ratio_unhealthy"])), "0s")],
        # requests waited throughout and no token moved for stall_seconds: a long prefill
        # step (57 s in a real capture) is shorter than that
        "admission_stall": [("critical", (
            "min_over_time(vllm:num_requests_waiting[{st}]) >= 1 "
            "and increase(vllm:prompt_tokens_total[{st}]) == 0 "
            "and increase(vllm:generation_tokens_total[{st}]) == 0 "
            "and increase(vllm:num_preemptions_total[{st}]) == 0").format(st=stall), "0s")],
        "deferred_backlog": [("warning", "quantile_over_time(0.5, %srequests_waiting_deferred[%s])"
                              " >= 1" % (_R, w), s["for"])],
        # per GPU, from the monitor's textfile (kvfleet_vllm_gpu_health: 0 healthy, 1 degraded,
        # 2 unhealthy): an unhealthy reading is a fact (a pending remap, an Xid), not noise, so
        # it fires at once; a degraded one (heat, a link) must hold for `for`
        "gpu_unhealthy": [
            ("critical", 'kvfleet_vllm_gpu_health{job="%s"} == 2' % s["node_job"], "0s"),
            ("warning", 'kvfleet_vllm_gpu_health{job="%s"} == 1' % s["node_job"], s["for"])],
    }


def _summary(cause):
    return "vLLM: %s" % cause.replace("_", " ")


def _alert(name, expr, hold, labels, annotations):
    rule = {"alert": name, "expr": expr}
    if hold not in ("0s", "0m"):
        rule["for"] = hold
    rule["labels"] = labels
    rule["annotations"] = annotations
    return rule


def rules(settings=None):
    """The rules file as a dict (groups: records, causes, monitor, slo)."""
    s = _settings(settings or {})
    computed = _cause_rules(s)
    cause_alerts, monitor_alerts = [], []
    for cause in CAUSE_IDS:
        annotations = {"summary": _summary(cause), "description": cause_advice(cause)}
        if cause in computed:
            for severity, expr, hold in computed[cause]:
                cause_alerts.append(_alert(ALERT_NAMES[cause], expr, hold,
                                           {"severity": severity, "cause": cause}, annotations))
        else:
            # Not in vLLM's series: the monitor's finding, named in most of its recent samples.
            # Its textfile has no severity: the cause's worst.
            cause_alerts.append(_alert(
                ALERT_NAMES[cause],
                'kvfleet_vllm_cause_sustained{job="%s",cause="%s"} == 1' % (s["node_job"], cause),
                "0s", {"severity": SEVERITIES[cause][-1], "cause": cause,
                       "source": "monitor"}, annotations))
    for verdict, severity in (("unhealthy", "critical"), ("degraded", "warning")):
        monitor_alerts.append(_alert(
            "VllmMonitorVerdict",
            'kvfleet_vllm_verdict{job="%s",verdict="%s"} == 1' % (s["node_job"], verdict),
            s["for"], {"severity": severity, "source": "monitor"},
            {"summary": "vLLM: the monitor's verdict is %s" % verdict,
             "description": "kvfleet.vllm.monitor diagnosed this instance %s over its window; "
                            "its kvfleet_vllm_cause gauges and the journal (journalctl -u "
                            "kvfleet-vllm-monitor) name the cause." % verdict}))
    usage = _R + "kv_cache_usage:ratio"
    slo_alerts = [
        _alert("VllmTtftP95High", "%stime_to_first_token_seconds:p95 > %s" % (
            _R, _num(s["ttft_p95_seconds"])), s["slo_for"], {"severity": "warning"},
            {"summary": "vLLM: time to first token p95 above %s s" % _num(s["ttft_p95_seconds"]),
             "description": "The p95 of time to first token over %s is above the SLO. Queue time "
                            "(VllmQueueTimeP95High) or long prefills explain it; the cause alerts "
                            "say which limit holds the queue." % s["window"]}),
        _alert("VllmQueueTimeP95High", "%srequest_queue_time_seconds:p95 > %s" % (
            _R, _num(s["queue_time_p95_seconds"])), s["slo_for"], {"severity": "warning"},
            {"summary": "vLLM: queue time p95 above %s s" % _num(s["queue_time_p95_seconds"]),
             "description": "Requests wait in the scheduler's queue longer than the SLO: a "
                            "scheduler limit or a full cache (see the cause alerts)."}),
        _alert("VllmPreemptionRateHigh", "rate(vllm:num_preemptions_total[%s]) > %s" % (
            s["window"], _num(s["preemption_rate"])), s["for"], {"severity": "warning"},
            {"summary": "vLLM: preempting more than %s per second" % _num(s["preemption_rate"]),
             "description": "vLLM preempts running requests only when the KV cache has no block "
                            "left for their next token; preempted requests recompute their "
                            "prompts later."}),
        _alert("VllmKvCacheUsageHigh", "%s >= %s" % (usage, _num(s["kv_usage_high"])),
               s["usage_high_for"], {"severity": "warning"},
               {"summary": "vLLM: KV cache usage at or above %s for %s" % (
                   _num(s["kv_usage_high"]), s["usage_high_for"]),
                "description": "The KV cache has stayed nearly full. Alone this is a busy server; "
                               "with preemptions or a queue it is exhaustion "
                               "(VllmKvCacheExhausted)."}),
    ]
    return {"groups": [
        {"name": "kvfleet_vllm_records",
         "rules": [{"record": name, "expr": expr} for name, expr in _records(s)]},
        {"name": "kvfleet_vllm_causes", "rules": cause_alerts},
        {"name": "kvfleet_vllm_monitor", "rules": monitor_alerts},
        {"name": "kvfleet_vllm_slo", "rules": slo_alerts},
    ]}
