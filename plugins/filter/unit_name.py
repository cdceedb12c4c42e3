# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: unit_name
short_description: The systemd unit of a vLLM instance
version_added: 0.4.0
description:
  - The unit the server role writes for an instance, from the one pattern in
    C(plugins/module_utils/_layout.py). Deployment records written before 0.3.0 name no unit.
options:
  _input:
    description: The instance's name.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read an instance's restart count
  ansible.builtin.command:
    argv: [systemctl, show, -p, NRestarts, --value, "{{ item.unit | default(item.name | kvfleet.vllm.unit_name) }}"]
  loop: "{{ ansible_local.kvfleet_vllm_server.current.instances }}"
  changed_when: false
"""

RETURN = r"""
_value:
  description: The unit's name.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import unit_name


def _unit_name(instance):
    try:
        return unit_name(instance)
    except ValueError as exc:
        raise AnsibleFilterError("unit_name: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"unit_name": _unit_name}
