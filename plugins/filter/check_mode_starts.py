# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: check_mode_starts
short_description: (internal) In check mode, the units the server role would start
version_added: 0.4.0
description:
  - In check mode the host program's C(start) does not run; the role asks
    M(ansible.builtin.systemd_service) instead, one result per existing unit. A changed result
    for a unit that is not active is a unit that would start.
  - Gives the same shape as C(start)'s C(units), so that the tasks after it read one list either way.
options:
  _input:
    description: The loop's results (C(results) of the registered variable), each with C(item.unit).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: What would start
  ansible.builtin.debug:
    msg: "{{ _server_started.results | kvfleet.vllm.check_mode_starts }}"
"""

RETURN = r"""
_value:
  description: One C({unit, started, stale, why}) per unit that would start (C(started) true, C(stale) false, C(why) null).
  type: list
  elements: dict
"""


def check_mode_starts(results):
    out = []
    for r in results or []:
        if r.get("skipped") or not r.get("changed"):
            continue
        if ((r.get("status") or {}).get("ActiveState") or "") == "active":
            continue
        out.append({"unit": r["item"]["unit"], "started": True, "stale": False, "why": None})
    return out


class FilterModule(object):
    def filters(self):
        return {"check_mode_starts": check_mode_starts}
