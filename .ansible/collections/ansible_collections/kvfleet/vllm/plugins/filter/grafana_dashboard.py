# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: grafana_dashboard
short_description: The Grafana dashboard of a kvfleet.vllm fleet
version_added: 0.4.0
description:
  - Grafana's JSON model of one dashboard (uid C(kvfleet-vllm)) - the cause and verdict the monitor
    names next to KV cache usage per instance and engine, running vs waiting by reason,
    preemptions, tokens per second, TTFT, inter-token and queue-time quantiles, and the servers'
    resident memory; each vLLM (re)start as an annotation.
  - Its queries read the series of P(kvfleet.vllm.prometheus_rules#filter) and take the same
    settings (job names, window); a C(datasource) variable picks the Prometheus.
options:
  _input:
    description: The settings of P(kvfleet.vllm.prometheus_rules#filter) (an empty dict for the defaults).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Write the dashboard
  ansible.builtin.copy:
    content: "{{ {} | kvfleet.vllm.grafana_dashboard | to_nice_json }}"
    dest: /var/lib/grafana/dashboards/kvfleet-vllm.json
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The dashboard.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._grafana import dashboard
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._prometheus_rules import RulesError


def grafana_dashboard(settings):
    try:
        return dashboard(settings)
    except RulesError as exc:
        raise AnsibleFilterError(str(exc).replace("prometheus_rules:", "grafana_dashboard:"))


class FilterModule(object):
    def filters(self):
        return {"grafana_dashboard": grafana_dashboard}
