# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: analysis_charts
short_description: (internal) Charts of a deploy's analysis under traffic, canary against baseline, as inline SVG
version_added: 0.4.0
description:
  - From one host's C(analysis) in the kvfleet.vllm.deploy report (its C(series)), four line charts
    as inline SVG (no script, no external asset), each with the canary and the baseline over the
    analysis window (KV cache usage, running requests, waiting requests, and preemptions since
    the window began); each side is the mean (the sum, for preemptions) over its servers.
  - An empty string when the analysis has no series.
options:
  _input:
    description: The host's C(analysis) (the P(kvfleet.vllm.analysis_outcome#filter) filter's C(analysis)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The charts of node1's analysis
  ansible.builtin.debug:
    msg: "{{ report.hosts[0].analysis | kvfleet.vllm.analysis_charts }}"
"""

RETURN = r"""
_value:
  description: An HTML C(div) with the charts, or an empty string.
  type: str
"""

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import analysis_charts_html


class FilterModule(object):
    def filters(self):
        return {"analysis_charts": analysis_charts_html}
