# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: serving_group
short_description: A host's part in a serving group, one model replica across hosts on vLLM data parallel
version_added: 0.4.0
description:
  - A serving group is an inventory group whose hosts serve one model replica together with
    vLLM's own multi-node data parallel. Its first host (inventory order) is the head, which
    serves the API. The others run C(vllm serve --headless) and register their engines with it.
  - Gives the host's one instance its C(data_parallel) settings (size, this host's engines,
    start rank, the head's address and RPC port) for P(kvfleet.vllm.vllm_instances#filter).
  - Each member's C(vllm_server_serving_group_engines) and C(vllm_server_serving_group_address)
    are read from the inventory (host or group variables); the head's
    C(vllm_server_serving_group_rpc_port) is the group's.
  - With O(backend=ray), the head's instance gets the Ray cluster's settings (C(ray)) and every
    member a Ray node (C(ray_node)), which runs C(ray start --head) on the head beside its
    instance and C(ray start --address) on the others in place of theirs.
  - Fails, naming the variable, when the group is unknown or has one host, the host is not in it,
    the host has more than one instance, the head's address is loopback, the members name
    different backends, or a value is not valid.
  - Fails, naming O(trusted_network), unless the operator said that only the group's hosts reach
    its ports (vLLM's data parallel RPC port and Ray's ports authenticate nobody).
options:
  _input:
    description: The host's instances (C(vllm_server_instances)); returned as they are without a group.
    type: list
    elements: dict
    required: true
  group:
    description: The inventory group (C(vllm_server_serving_group)); empty for none.
    type: str
    required: true
  groups:
    description: The inventory's C(groups).
    type: dict
    required: true
  hostvars:
    description: The inventory's C(hostvars).
    type: dict
    required: true
  me:
    description: This host's C(inventory_hostname).
    type: str
    required: true
  engines:
    description: This host's engine count (C(vllm_server_serving_group_engines)); another host without one in the inventory has 1.
    type: int
    default: 1
  address:
    description: This host's address for the group (C(vllm_server_serving_group_address)).
    type: str
  rpc_port:
    description: The RPC port (C(vllm_server_serving_group_rpc_port)) when the head does not set its own.
    type: int
    default: 13345
  backend:
    description:
      - C(dp) (vLLM's multi-node data parallel) or C(ray) (one Ray cluster over the group's hosts;
        the head runs C(vllm serve) with the Ray executor, tensor and pipeline parallel across
        them). Every member must name the same one (C(vllm_server_serving_group_backend)).
    type: str
    default: dp
    choices: [dp, ray]
  gpus:
    description: This host's GPUs in the Ray cluster (C(vllm_server_serving_group_gpus)); another host without one in the inventory has 1.
    type: int
    default: 1
  ray_port:
    description: The head's Ray GCS port (C(vllm_server_ray_port)).
    type: int
    default: 6379
  trusted_network:
    description:
      - The group's ports are reachable only from its hosts (a private network, or a firewall that
        says so); C(vllm_server_serving_group_trusted_network).
      - The head's data parallel RPC port and, with O(backend=ray), Ray's GCS and node ports accept
        whoever reaches them (Ray runs any job it is sent), so a group is refused without it.
    type: bool
    default: false
    version_added: 0.4.0
"""

EXAMPLES = r"""
- name: The instance of this host with its serving group's settings
  ansible.builtin.debug:
    msg: >-
      {{ vllm_server_instances | kvfleet.vllm.serving_group('llama70b_a', groups, hostvars,
         inventory_hostname, engines=2, address='10.0.0.5', trusted_network=true) }}
"""

RETURN = r"""
_value:
  description:
    - The instances, the one instance with C(data_parallel) (size, size_local, start_rank, address, rpc_port).
    - With O(backend=ray), the head's instance with C(ray) and a Ray node C(ray) after it; a worker's
      one instance replaced by its Ray node (C(name) kept, C(ray_node)).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._serving_group import (
    RAY_NODE_NAME, GroupError, plan, ray_plan)

_PREFIX = "vllm_server_"
_BACKENDS = ("dp", "ray")


def _ray(instances, group, groups, hostvars, me, address, gpus, ray_port):
    members = []
    for host in (groups or {}).get(group) or []:
        if host == me:
            members.append({"host": host, "gpus": gpus, "address": address or me})
            continue
        hv = hostvars[host]
        backend = hv.get(_PREFIX + "serving_group_backend", "dp")
        if backend != "ray":
            raise AnsibleFilterError("%sserving_group %r: %s names backend %r, this host (%s) ray; every "
                                     "member must name the same %sserving_group_backend"
                                     % (_PREFIX, group, host, backend, me, _PREFIX))
        members.append({"host": host, "gpus": hv.get(_PREFIX + "serving_group_gpus", 1),
                        "address": hv.get(_PREFIX + "serving_group_address") or hv.get("ansible_host") or host})
    try:
        ray = ray_plan(group, members, me, ray_port, _PREFIX)
    except GroupError as exc:
        raise AnsibleFilterError(str(exc))
    if ray["role"] == "head":
        return [dict(instances[0], ray=ray), {"name": RAY_NODE_NAME, "ray_node": ray}]
    # a worker host serves nothing itself: its one instance becomes its Ray node (same unit)
    return [{"name": instances[0].get("name"), "ray_node": ray}]


def _trusted(group, backend, rpc_port, ray_port, trusted_network):
    """vLLM's data parallel handshake (ZMQ) and Ray's GCS take whoever connects: a group is
    refused, before anything changes, unless the operator says only its hosts reach them."""
    if isinstance(trusted_network, bool) and trusted_network:
        return
    ports = ("Ray's GCS port %s and its node ports" % ray_port if backend == "ray"
             else "the head's data parallel RPC port %s" % rpc_port)
    raise AnsibleFilterError(
        "%sserving_group %r: %s authenticate nobody (whoever reaches them can join the group%s); keep "
        "them on a network that only the group's hosts reach, then set %sserving_group_trusted_network: "
        "true (docs/serving-groups.md)" % (_PREFIX, group, ports, " and run jobs in it" if backend == "ray" else "",
                                           _PREFIX))


def serving_group(instances, group, groups, hostvars, me, engines=1, address=None, rpc_port=13345,
                  backend="dp", gpus=1, ray_port=6379, trusted_network=False):
    if not group:
        return instances
    if not isinstance(instances, list) or len(instances) != 1:
        raise AnsibleFilterError("%sserving_group %r: a group member runs one instance; "
                                 "%sinstances lists %d" % (_PREFIX, group, _PREFIX,
                                                           len(instances) if isinstance(instances, list) else 0))
    if backend not in _BACKENDS:
        raise AnsibleFilterError("%sserving_group_backend must be one of %s, got %r"
                                 % (_PREFIX, ", ".join(_BACKENDS), backend))
    if backend == "ray":
        out = _ray(instances, group, groups, hostvars, me, address, gpus, ray_port)
        _trusted(group, backend, rpc_port, ray_port, trusted_network)
        return out
    members = []
    for host in (groups or {}).get(group) or []:
        if host == me:
            members.append({"host": host, "engines": engines, "address": address or me,
                            "rpc_port": rpc_port})
            continue
        hv = hostvars[host]
        members.append({
            "host": host,
            # the role's default: another host's role defaults are not in hostvars
            "engines": hv.get(_PREFIX + "serving_group_engines", 1),
            "address": hv.get(_PREFIX + "serving_group_address") or hv.get("ansible_host") or host,
            "rpc_port": hv.get(_PREFIX + "serving_group_rpc_port", rpc_port),
        })
    try:
        dp = plan(group, members, me, _PREFIX)
    except GroupError as exc:
        raise AnsibleFilterError(str(exc))
    _trusted(group, backend, dp["rpc_port"], ray_port, trusted_network)
    return [dict(instances[0], data_parallel=dp)]


class FilterModule(object):
    def filters(self):
        return {"serving_group": serving_group}
