# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_router_backends
short_description: The URLs a router reaches every vLLM instance of a group at
version_added: 0.4.0
description:
  - P(kvfleet.vllm.router_backends#filter) for every host of a group, from Ansible's C(hostvars), in
    the hosts' order; what the P(kvfleet.vllm.router#role) role lists in the router's C(--worker-urls).
  - Each host's instances are its deployment record's (C(ansible_local.kvfleet_vllm_server.current.instances)),
    else the server role's instance model derived in the run (its result's C(server_result.records)); each host is reached
    at its C(vllm_router_backend_address), else C(ansible_host), else its name.
  - Fails as P(kvfleet.vllm.router_backends#filter) does, naming the host and the instance; loopback-bound
    instances are reachable on O(router_host) only.
options:
  _input:
    description: The host names.
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars).
    type: dict
    required: true
  router_host:
    description: The host the router runs on.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Every instance of group vllm, as the router on this host reaches them
  ansible.builtin.set_fact:
    _router_backends: "{{ groups['vllm'] | kvfleet.vllm.fleet_router_backends(hostvars, router_host=inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: One C(http://ADDRESS:PORT) URL per instance.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.filter.router_backends import _router_backends
from ansible_collections.kvfleet.vllm.plugins.plugin_utils._hostvars import current_record, server_result, var


def _fleet_router_backends(hosts, hostvars=None, router_host=""):
    if hostvars is None:
        raise AnsibleFilterError("fleet_router_backends needs hostvars")
    out = []
    for name in hosts:
        hv = hostvars[name]
        current = current_record(hv)
        records = current["instances"] if "instances" in current else server_result(hv, "records", [])
        address = var(hv, "vllm_router_backend_address") or var(hv, "ansible_host") or name
        out.extend(_router_backends(records, address, host=name, same_host=name == router_host))
    return out


class FilterModule(object):
    def filters(self):
        return {"fleet_router_backends": _fleet_router_backends}
