# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: restarting_groups
short_description: (internal) The serving groups that restart in a deploy's batch
version_added: 0.4.0
description:
  - The keys (C(address:rpc_port) of the head) of the serving groups with an instance that
    restarts or starts on any host of the batch, in the batch's order. The deploy restarts every
    member of such a group, even one whose own files did not change (docs/serving-groups.md), since a
    member bound to a head that restarted without it stays out of the group.
  - A host that has not planned its restart (no C(server_result.restart)) is left out.
options:
  _input:
    description: The batch's host names (C(ansible_play_batch)).
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars); each host's C(server_result.instances) and C(server_result.restart) (its
      C(restart) and C(started) instance names).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The groups that restart in this batch
  ansible.builtin.debug:
    msg: "{{ ansible_play_batch | kvfleet.vllm.restarting_groups(hostvars) }}"
"""

RETURN = r"""
_value:
  description: The groups' keys.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._hostvars import server_result
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._serving_group import restarting_groups


def _restarting_groups(hosts, hostvars=None):
    if hostvars is None:
        raise AnsibleFilterError("restarting_groups needs hostvars")
    planned = []
    for name in hosts:
        hv = hostvars[name]
        restart = server_result(hv, "restart")
        if not restart:
            continue
        planned.append({"instances": server_result(hv, "instances", []),
                        "restart": restart.get("restart"), "started": restart.get("started")})
    return restarting_groups(planned)


class FilterModule(object):
    def filters(self):
        return {"restarting_groups": _restarting_groups}
