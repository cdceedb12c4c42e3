# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: prometheus_rules
short_description: Prometheus recording and alerting rules for vLLM, from the diagnosis' cause table
version_added: 0.3.0
description:
- Returns a Prometheus rules file (a dict with C(groups)) with recording rules over vLLM's series and one
  alert per cause of M(kvfleet.vllm.cache_gate), named C(Vllm<Cause>) (C(VllmConcurrencyCap), ...), whose
  C(description) annotation is the cause's advice and whose C(severity) label is the gate's.
- Causes vLLM's series compute (C(engine_down), C(kv_cache_exhausted), C(concurrency_cap),
  C(admission_rejections), C(request_errors), C(request_aborts), C(admission_stall), C(deferred_backlog))
  use the gate's thresholds; the others read the monitor's C(kvfleet_vllm_cause_sustained) gauge from
  node_exporter's textfile. Also C(VllmMonitorVerdict), C(VllmTtftP95High), C(VllmQueueTimeP95High),
  C(VllmPreemptionRateHigh) and C(VllmKvCacheUsageHigh). See docs/monitoring.md.
- The kvfleet.vllm.prometheus role writes this file.
options:
  _input:
    description:
    - Settings, each optional; unknown keys are refused.
    - C(job) and C(node_job) (the scrape jobs of vLLM and of node_exporter), C(window) (the span of
      rates, default C(5m)), C(for), C(down_for), C(usage_high_for), C(slo_for) (durations),
      C(kv_usage_high), C(stall_seconds), C(min_preemptions), C(preemption_ratio_unhealthy),
      C(min_request_errors), C(error_ratio_unhealthy) (the gate's thresholds by default),
      C(ttft_p95_seconds), C(queue_time_p95_seconds) (SLOs), C(preemption_rate) (per second).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Write the rules file
  ansible.builtin.copy:
    dest: /etc/prometheus/rules/kvfleet_vllm.yml
    content: "{{ {'job': 'vllm', 'ttft_p95_seconds': 1.5} | kvfleet.vllm.prometheus_rules | to_nice_yaml(width=1000) }}"
    mode: "0644"
    validate: promtool check rules %s
"""

RETURN = r"""
_value:
  description: The rules file, C(groups) of recording and alerting rules.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._prometheus_rules import RulesError, rules


def prometheus_rules(settings):
    try:
        return rules(settings)
    except RulesError as e:
        raise AnsibleFilterError(str(e))


class FilterModule(object):
    def filters(self):
        return {"prometheus_rules": prometheus_rules}
