# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: deploy_order
short_description: (internal) The order of kvfleet.vllm.deploy's batches
version_added: 0.4.0
description:
  - The deploy's hosts in batch order, hosts an earlier run left drained first (the next deploy
    finishes them before it changes another), then the others, each part in the inventory's order.
  - An unreachable host keeps its place.
  - A host in O(settled) (the check found it converged and finished its line) is in no batch, so
    the first batch, the canary, is always a host that changes.
options:
  _input:
    description: The play's hosts, in the inventory's order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  reachable:
    description: The hosts still in the play (C(ansible_play_hosts)).
    type: list
    elements: str
    required: true
  left_drained:
    description: The hosts whose drain marker an earlier run left.
    type: list
    elements: str
    required: true
  settled:
    description: The hosts left out of the batches (converged); a host also in O(left_drained) is not left out.
    type: list
    elements: str
    default: []
    version_added: 0.4.0
"""

EXAMPLES = r"""
- name: Order the batches
  ansible.builtin.set_fact:
    _order: "{{ ansible_play_hosts_all | kvfleet.vllm.deploy_order(reachable=ansible_play_hosts, left_drained=['gpu-03']) }}"
"""

RETURN = r"""
_value:
  description: The host names in batch order.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import RolloutError, batch_order


def _deploy_order(hosts, reachable, left_drained, settled=None):
    try:
        return batch_order(hosts, reachable, left_drained, settled or [])
    except RolloutError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"deploy_order": _deploy_order}
