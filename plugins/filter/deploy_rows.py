# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_rows
short_description: (internal) Finish the kvfleet.vllm.deploy summary rows of hosts a run lost
version_added: 0.4.0
description:
  - A host whose line of the summary was never finished (it became unreachable, the run was
    interrupted, or it failed the checks) is named C(unreachable), C(interrupted) or C(refused);
    one stopped after its drain started is marked C(drained). Finished lines are kept as they
    are. The deploy playbook and the P(kvfleet.vllm.deploy_report#callback) callback share this
    code.
options:
  _input:
    description: Each host's line (the playbook's C(_rollout_row)).
    type: list
    elements: dict
    required: true
  stages:
    description: Host name to the deploy step it had started (C(drain), C(change), C(restart), C(verify), C(undrain)).
    type: dict
  unreachable:
    description: Hosts that became unreachable, as a list of names or a dict of name to why.
    type: raw
  failures:
    description: Host name to the task that failed and was not rescued.
    type: dict
  interrupted:
    description: The run was stopped by a signal (Ctrl-C).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Finish the rows of the hosts this batch lost
  ansible.builtin.set_fact:
    rows: "{{ rows | kvfleet.vllm.deploy_rows(stages={'gpu-03': 'restart'}, unreachable=['gpu-03']) }}"
"""

RETURN = r"""
_value:
  description: The rows, with the lost hosts' lines finished.
  type: list
  elements: dict
"""

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import end_rows


def deploy_rows(rows, stages=None, unreachable=None, failures=None, interrupted=False):
    if isinstance(unreachable, (list, tuple)):
        unreachable = {h: "unreachable" for h in unreachable}
    return end_rows(rows, stages, unreachable, failures, interrupted)


class FilterModule:
    def filters(self):
        return {"deploy_rows": deploy_rows}
