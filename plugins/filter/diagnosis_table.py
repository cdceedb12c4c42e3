# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: diagnosis_table
short_description: (internal) The fleet table of the kvfleet.vllm.diagnose playbook, as text lines
version_added: 0.1.0
description:
  - One header line and one line per instance (host, instance, version, verdict, causes, KV usage,
    running, waiting, preemptions per second, block size); absent values show as C(-).
options:
  _input:
    description: The per-instance rows the diagnose playbook collects.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Print the table
  ansible.builtin.debug:
    msg: "{{ rows | kvfleet.vllm.diagnosis_table }}"
"""

RETURN = r"""
_value:
  description: Text lines, the header first.
  type: list
  elements: str
"""

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import table_lines


class FilterModule(object):
    def filters(self):
        return {"diagnosis_table": table_lines}
