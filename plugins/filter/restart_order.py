# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: restart_order
short_description: (internal) The order in which vLLM units restart, a serving group's included
version_added: 0.4.0
description:
  - A serving group restarts as one unit (docs/serving-groups.md). Its heads stop first, then its
    workers; the workers start before the heads. An instance outside any group restarts on its own.
  - Each step is a task of its own where a play runs it, so that it is done on every host of the
    batch before the next starts.
  - The same order the role's rollback and the host program's restart guard use
    (C(plugins/module_utils/_group_order.py)).
options:
  _input:
    description: The units that restart, in order; each a dict with C(unit), and C(group) (a serving
      group member's group, also read from its C(record)) and C(headless) (a group's worker). The
      instance model's items and the deployment record's instances both fit.
    type: list
    elements: dict
    required: true
  workers:
    description: More of the groups' workers (a deployment record's C(workers)).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Stop each serving group's head first
  ansible.builtin.systemd_service:
    name: "{{ item }}"
    state: stopped
  loop: "{{ (_record.instances | kvfleet.vllm.restart_order(workers=_record.workers)).stop_heads }}"
  vars:
    _record: "{{ ansible_local.kvfleet_vllm_server.current }}"
"""

RETURN = r"""
_value:
  description: C(restart) (the units outside any group), C(stop_heads), C(stop_workers), C(start_workers)
    and C(start_heads) (each group step, in this order); unit names.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.module_utils._group_order import restart_order


def _restart_order(units, workers=()):
    try:
        return restart_order(units, workers)
    except ValueError as exc:
        raise AnsibleFilterError("restart_order: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"restart_order": _restart_order}
