# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: net_problems
short_description: (internal) Why a host's instances could not bind their ports or reach their serving group's head, in sentences
version_added: 0.3.0
description:
  - Reads the server role's C(net_probe.py) result (its C(bind) and C(reach) lists), before
    anything changes. vLLM binds its port, and a serving group's head its RPC port, only when it
    starts, which in a deploy is after the drain.
  - A port held only by the collection's own vLLM units (C(vllm-*.service)) is no problem, since
    that unit is the instance itself, or restarts with this change. Where the probe may not read the
    holding processes (root without C(CAP_SYS_PTRACE), as in a container), a port whose sockets
    all belong to O(service_user) counts as held by those units.
  - A worker whose connection to the head is refused has reached it (nothing listens there
    before the head starts); a timeout, an unreachable network or a name that does not resolve
    is a problem. A firewall that rejects rather than drops reads as reached.
  - Returns an empty list when there is nothing to say.
options:
  _input:
    description: The probe's result, C(bind) (each with C(address), C(port), C(state) free,
      in_use, not_local or error, C(holders)) and C(reach) (each with C(host), C(port), C(state)).
    type: dict
    required: true
  service_user:
    description: The user the collection's vLLM units run as (C(vllm_server_user)).
    type: str
    default: vllm
"""

EXAMPLES = r"""
- name: Fail before any change when a port is taken
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join(' ') }}"
  vars:
    _problems: "{{ probe.stdout | from_json | kvfleet.vllm.net_problems }}"
"""

RETURN = r"""
_value:
  description: One sentence per port that cannot be bound and per head that cannot be reached.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import unit_instance


def _holder(h):
    return "%s (pid %s, %s)" % (h.get("command") or "?", h.get("pid"), h.get("unit") or "no unit")


def _foreign(entry, service_user):
    """The holders of an in-use port that are not the collection's vLLM units, or None when it
    is theirs; where no holder could be read, the sockets' owners decide."""
    holders = entry.get("holders") or []
    if holders:
        return [h for h in holders if unit_instance(h.get("unit")) is None] or None
    owners = entry.get("owners") or []
    return None if owners and all(o == service_user for o in owners) else []


def net_problems(probe, service_user="vllm"):
    if not isinstance(probe, dict) or not isinstance(probe.get("bind", []), list) \
            or not isinstance(probe.get("reach", []), list):
        raise AnsibleFilterError("net_problems expects the net probe's result {bind: [...], reach: [...]}, got %r"
                                 % (probe,))
    out = []
    for b in probe.get("bind") or []:
        where = "port %s on %s" % (b.get("port"), b.get("address"))
        state = b.get("state")
        if state == "not_local":
            out.append("%s is not an address of this host, so vLLM cannot bind it (vllm_server_host, or "
                       "the head's vllm_server_serving_group_address)." % b.get("address"))
        elif state == "in_use":
            foreign = _foreign(b, service_user)
            if foreign is None:
                continue
            who = ", ".join(_holder(h) for h in foreign) or "a process of %s" % (
                " and ".join("user %s" % o for o in b.get("owners") or []) or "an unknown user")
            out.append("%s is held by %s, not by a vLLM unit of this collection: stop it or choose "
                       "another port (vllm_server_instances[].port, vllm_server_port, or the head's "
                       "vllm_server_serving_group_rpc_port)." % (where, who))
        elif state not in ("free", None):
            out.append("%s cannot be bound: %s." % (where, b.get("detail") or state))
    for r in probe.get("reach") or []:
        if r.get("state") not in ("connected", "refused"):
            out.append("the serving group's head at %s:%s is %s from here (%s): every worker must reach "
                       "the head's vllm_server_serving_group_address on its vllm_server_serving_group_rpc_port."
                       % (r.get("host"), r.get("port"), r.get("state"), r.get("detail") or "no detail"))
    return out


class FilterModule(object):
    def filters(self):
        return {"net_problems": net_problems}
