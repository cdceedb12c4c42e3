# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Grafana dashboard of a kvfleet.vllm fleet, generated beside the Prometheus rules and from
the same settings (job names, window), so that its queries read the series the rules record.
Stdlib only.

Rows: the cause and verdict the monitor names (its textfile) next to the symptoms; KV cache usage
per instance and engine; running vs waiting by reason; preemptions; tokens per second; TTFT, ITL
and queue-time quantiles from vLLM's histograms; the servers' resident memory. Annotations: each
vLLM (re)start (deploys, restarts, crashes), from process_start_time_seconds.
"""

from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._prometheus_rules import _R, _settings

__all__ = ["UID", "dashboard"]

UID = "kvfleet-vllm"
_LATENCY = (("Time to first token", "vllm:time_to_first_token_seconds"),
            ("Inter-token latency", "vllm:inter_token_latency_seconds"),
            ("Queue time", "vllm:request_queue_time_seconds"))


def _target(expr, legend, ref):
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr,
            "legendFormat": legend, "refId": ref}


def _panel(pid, title, targets, x, y, w=12, h=8, unit="short", kind="timeseries", description="",
           **field):
    defaults = {"unit": unit}
    defaults.update(field)
    return {"id": pid, "type": kind, "title": title, "description": description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"x": x, "y": y, "w": w, "h": h},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}}
            if kind == "timeseries" else {},
            "targets": [_target(e, legend, chr(ord("A") + i)) for i, (e, legend) in enumerate(targets)]}


def dashboard(settings=None):
    """The dashboard as a dict (Grafana's JSON model), for the same settings as the rules."""
    s = _settings(settings or {})
    vllm = 'job="%s",instance=~"$instance"' % s["job"]
    node = 'job="%s"' % s["node_job"]
    rate = "$__rate_interval"
    panels = [
        _panel(1, "Cause now (kvfleet.vllm.monitor)",
               [('kvfleet_vllm_cause{%s} == 1' % node, "{{instance}} {{exported_instance}}: {{cause}}")],
               0, 0, w=12, h=6, kind="state-timeline",
               description="The cause the monitor's diagnosis names (PagedAttention does not fragment: "
                           "a real limit, with its advice in the alert)."),
        _panel(2, "Verdict (kvfleet.vllm.monitor)",
               [('kvfleet_vllm_verdict{%s} == 1' % node, "{{instance}} {{exported_instance}}: {{verdict}}")],
               12, 0, w=12, h=6, kind="state-timeline"),
        _panel(3, "KV cache usage", [(_R + "kv_cache_usage:ratio{%s}" % vllm,
                                      "{{instance}} engine {{engine}}")],
               0, 6, unit="percentunit", min=0, max=1,
               description="Usage below the high mark while requests wait is a scheduler limit, not "
                           "fragmentation."),
        _panel(4, "Running vs waiting (by reason)",
               [("vllm:num_requests_running{%s}" % vllm, "running {{instance}} engine {{engine}}"),
                ("vllm:num_requests_waiting_by_reason{%s}" % vllm, "waiting ({{reason}}) {{instance}} engine {{engine}}"),
                ("vllm:num_requests_waiting{%s} unless on (instance, engine) vllm:num_requests_waiting_by_reason{%s}"
                 % (vllm, vllm), "waiting {{instance}} engine {{engine}}")],
               12, 6),
        _panel(5, "Preemptions per second",
               [("rate(vllm:num_preemptions_total{%s}[%s])" % (vllm, rate), "{{instance}} engine {{engine}}")],
               0, 14, unit="ops"),
        _panel(6, "Tokens per second",
               [("rate(vllm:generation_tokens_total{%s}[%s])" % (vllm, rate), "generated {{instance}}"),
                ("rate(vllm:prompt_tokens_total{%s}[%s])" % (vllm, rate), "prompt {{instance}}")],
               12, 14, unit="short"),
    ]
    for i, (title, family) in enumerate(_LATENCY):
        panels.append(_panel(
            7 + i, title + " (p50, p95, p99)",
            [("histogram_quantile(%s, sum by (le, instance) (rate(%s_bucket{%s}[%s])))" % (q, family, vllm, rate),
              "p%s {{instance}}" % q[2:].ljust(2, "0")) for q in ("0.5", "0.95", "0.99")],
            8 * i, 22, w=8, unit="s"))
    panels.append(_panel(10, "Memory of the servers: resident, and GPU where NVML reads it (memory_growth)",
                         [("kvfleet_vllm_memory_rss_bytes{%s}" % node, "resident {{instance}} {{exported_instance}}"),
                          ("kvfleet_vllm_memory_gpu_bytes{%s}" % node, "GPU {{instance}} {{exported_instance}}")],
                         0, 30, w=24, unit="bytes"))
    return {
        "uid": UID, "title": "kvfleet.vllm fleet", "tags": ["vllm", "kvfleet"], "editable": True,
        "schemaVersion": 39, "version": 1, "time": {"from": "now-6h", "to": "now"}, "refresh": "1m",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "instance", "type": "query", "label": "vLLM instance", "includeAll": True, "multi": True,
             "allValue": ".*", "refresh": 2,
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": 'label_values(vllm:num_requests_running{job="%s"}, instance)' % s["job"],
                       "refId": "instances"}}]},
        "annotations": {"list": [
            {"name": "vLLM (re)starts", "enable": True, "iconColor": "orange",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "expr": 'changes(process_start_time_seconds{job="%s"}[2m]) > 0' % s["job"],
             "titleFormat": "vLLM started on {{instance}}", "step": "1m"}]},
        "panels": panels,
    }
