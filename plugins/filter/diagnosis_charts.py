# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: diagnosis_charts
short_description: (internal) The kvfleet.vllm.diagnose report's charts of one instance, as inline SVG
version_added: 0.4.0
description:
  - Small line charts of one row of P(kvfleet.vllm.diagnosis_rows#filter) - KV cache usage,
    running vs waiting requests, generated tokens per second and, where the history has it, the
    time to first token p90 - drawn from the monitor's history when it has two samples or more,
    else from the gate's window. Inline SVG, no script and no external asset; a sample the
    monitor could not read is a red tick.
options:
  _input:
    description: One row of P(kvfleet.vllm.diagnosis_rows#filter) (its C(history) and C(window)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Charts of the first row
  ansible.builtin.debug:
    msg: "{{ rows[0] | kvfleet.vllm.diagnosis_charts }}"
"""

RETURN = r"""
_value:
  description: HTML (a C(div) of C(svg) elements), empty when the row has no samples.
  type: str
"""

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import charts_html


class FilterModule(object):
    def filters(self):
        return {"diagnosis_charts": charts_html}
