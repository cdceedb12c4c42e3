# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rollback_plan
short_description: (internal) What the server role's rollback restarts, and the serving groups' order
version_added: 0.4.0
description:
  - A restored instance restarts when its unit or environment file changed back, when it is not
    running, or when the failed deployment added a unit.
  - A serving group restarts as one unit (heads stop first, then workers; workers start before
    heads) when the deploy asks, when the failed deployment touched one of its units, or when one
    of the restored group's units is touched. The failed deployment's own group units stop in the
    same order.
  - Used by the P(kvfleet.vllm.server#role) role's C(rollback) entry point.
options:
  _input:
    description: The kept units (file names) the rollback put back.
    type: list
    elements: str
    required: true
  now_units:
    description: The units in place before the rollback.
    type: list
    elements: str
    default: []
  changed:
    description: The units and environment files the rollback changed back (file names).
    type: list
    elements: str
    default: []
  running:
    description: The host's running services.
    type: list
    elements: str
    default: []
  current:
    description: The restored deployment record's C(current) part (its instances and workers).
    type: dict
    default: {}
  instances:
    description: The failed deployment's instance model (each C(unit), C(headless), C(record)).
    type: list
    elements: dict
    default: []
  group_restart:
    description: The deploy asks for the serving groups' restart (a member changed on another host).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Plan the restarts
  ansible.builtin.set_fact:
    _plan: "{{ ['vllm-main.service'] | kvfleet.vllm.rollback_plan(changed=['main.env'], running=['vllm-main.service']) }}"
"""

RETURN = r"""
_value:
  description: C(added) (units the failed deployment added), C(restart) (restored instances outside any
    group that restart), C(stop_heads), C(stop_workers), C(start_workers), C(start_heads) (each group
    step, in this order).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollback import RollbackError, plan


def _rollback_plan(backup_units, now_units=(), changed=(), running=(), current=None, instances=(), group_restart=False):
    try:
        return plan(backup_units, now_units=now_units, changed=changed, running=running, current=current,
                    instances=instances, group_restart=bool(group_restart))
    except RollbackError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"rollback_plan": _rollback_plan}
