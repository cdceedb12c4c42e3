# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: restart_plan
short_description: Spread scheduled restarts of a fleet over a window, a few hosts at a time
version_added: 0.1.0
description:
  - Gives each host, in the order given (inventory order), a restart slot so that no more than
    O(max_concurrent) hosts restart in the same slot, with the used slots spread evenly over the
    window. Deterministic.
  - Fails, naming the variable, when the window is too short for the fleet.
options:
  _input:
    description: Host names, in inventory order.
    type: list
    elements: str
    required: true
  max_concurrent:
    description: Hosts per slot, as a count (C(3)) or a share of the hosts (C(10%)); at least 1.
    type: raw
    required: true
  window_start:
    description: Start of the window, C(HH:MM) local time of the hosts.
    type: str
    default: "04:00"
  window_minutes:
    description: Length of the window in minutes.
    type: int
    default: 120
  slot_minutes:
    description: Length of one slot; a host's drain, restart and health wait must fit in it.
    type: int
    default: 10
"""

EXAMPLES = r"""
- name: Show when each host restarts
  ansible.builtin.debug:
    msg: "{{ groups['gpu'] | kvfleet.vllm.restart_plan('10%', '03:00', 180, 15) }}"
"""

RETURN = r"""
_value:
  description: Per host, C(slot) (index), C(hour), C(minute), C(time) (C(HH:MM)) and C(day_offset) (1 when the window crosses midnight).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._restart_plan import PlanError, plan


def restart_plan(hosts, max_concurrent, window_start="04:00", window_minutes=120, slot_minutes=10):
    try:
        return plan(hosts, max_concurrent, window_start, int(window_minutes), int(slot_minutes))
    except (PlanError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"restart_plan": restart_plan}
