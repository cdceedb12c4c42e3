# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: restart_baseline
short_description: (internal) The baseline of the analysis after a scheduled restart
version_added: 0.4.0
description:
  - The servers that the restart guard on one host compares its restarted instances with
    (C(vllm_restart_analysis_seconds) of M(kvfleet.vllm.scheduled_restart)), that is every
    instance of the other hosts, from their deployment records, reached from this host as a
    router reaches them (at the host's O(addresses) entry, when it is bound to every address or to
    that address), with its record's scheme and scheduler limits.
  - The targets hold no API key. The analysis reads C(/metrics), C(/health) and C(/version),
    which vLLM does not guard with C(--api-key).
  - A host without a record (not in the play, or never deployed) is left out.
  - Fails, naming the host and the instance, for an instance this host cannot reach (bound to
    loopback on another host).
options:
  _input:
    description: Each other host's deployment record (C(ansible_local.kvfleet_vllm_server.current)) by host name.
    type: dict
    required: true
  host:
    description: The host whose guard runs the analysis.
    type: str
    required: true
  addresses:
    description: Where each host's instances bound to every address are reached, by host name
      (C(vllm_router_backend_address), else C(ansible_host)); the host's name where missing.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: The other hosts of the restart group, as this host's guard reaches them
  ansible.builtin.set_fact:
    _baseline: >-
      {{ dict(_peers | zip(_peers | map('extract', hostvars)
                            | map(attribute='ansible_local.kvfleet_vllm_server.current', default={})))
         | kvfleet.vllm.restart_baseline(host=inventory_hostname) }}
  vars:
    _peers: "{{ vllm_restart_hosts | difference([inventory_hostname]) }}"
"""

RETURN = r"""
_value:
  description: Targets of the analysis's baseline, each with C(name) (C(host/instance)), C(host), C(url)
    and the instance's scheduler limits.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._rollout import RolloutError, peer_targets


def _restart_baseline(records, host=None, addresses=None):
    if not isinstance(records, dict):
        raise AnsibleFilterError("restart_baseline takes the other hosts' deployment records by host name, got %s"
                                 % type(records).__name__)
    if not host:
        raise AnsibleFilterError("restart_baseline needs host, the host whose guard runs the analysis")
    addresses = addresses or {}
    peers = [{"host": name, "record": record, "address": addresses.get(name) or ""}
             for name, record in records.items() if record]
    try:
        return peer_targets(peers, host)
    except RolloutError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"restart_baseline": _restart_baseline}
