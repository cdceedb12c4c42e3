# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: diagnosis_rows
short_description: (internal) The rows of the kvfleet.vllm.diagnose playbook, from cache_gate results
version_added: 0.3.0
description:
- One row per instance (host, instance, version, verdict, state, causes, KV usage, running, waiting, preemptions
  per second, block size, blocks, read error, GPUs, monitor findings), the one shape both modes of the
  diagnose playbook report.
- The input is a host's loop of M(kvfleet.vllm.cache_gate) results (each with C(item), the instance record)
  or the C(results) of one M(kvfleet.vllm.cache_gate) run over C(targets).
options:
  _input:
    description: cache_gate results.
    type: list
    elements: dict
    required: true
  host:
    description: The host of every row; without it each result's C(host).
    type: str
  infos:
    description: The matching M(kvfleet.vllm.metrics_info) results; without them the version and the read
      error come from the gate's samples.
    type: list
    elements: dict
  gpus:
    description: The host's GPU count; null when not read.
    type: int
  monitor:
    description: The monitor's findings per instance name (C(trends), C(sustained), C(trend_evidence)).
    type: dict
"""

EXAMPLES = r"""
- name: One host's rows
  ansible.builtin.set_fact:
    rows: "{{ gate.results | kvfleet.vllm.diagnosis_rows(inventory_hostname, info.results) }}"
"""

RETURN = r"""
_value:
  description: One dict per instance.
  type: list
  elements: dict
"""

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import diagnosis_rows


class FilterModule(object):
    def filters(self):
        return {"diagnosis_rows": diagnosis_rows}
