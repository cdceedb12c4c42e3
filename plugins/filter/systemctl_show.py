# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: systemctl_show
short_description: (internal) The output of C(systemctl show) for several units, one dict per unit
version_added: 0.4.0
description:
  - C(systemctl show --property=...) prints one block of C(KEY=VALUE) lines per unit, the blocks
    separated by an empty line. Gives one dict per block, in order; a value keeps any C(=) in it.
options:
  _input:
    description: The command's standard output.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The state of each unit
  ansible.builtin.debug:
    msg: "{{ _show.stdout | kvfleet.vllm.systemctl_show }}"
"""

RETURN = r"""
_value:
  description: One dict per unit, e.g. C({Id, ActiveState, SubState, NRestarts}).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError


def systemctl_show(text):
    if not isinstance(text, str):
        raise AnsibleFilterError("systemctl_show takes systemctl show's output, a string, got %s" % type(text).__name__)
    units = []
    for block in text.split("\n\n"):
        unit = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if unit:
            units.append(unit)
    return units


class FilterModule(object):
    def filters(self):
        return {"systemctl_show": systemctl_show}
