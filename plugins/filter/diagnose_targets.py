# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: diagnose_targets
short_description: (internal) Every instance the controller probes in kvfleet.vllm.diagnose
version_added: 0.4.0
description:
  - The targets of M(kvfleet.vllm.cache_gate) when C(vllm_diagnose_from_controller) is true, one per
    instance of each host, in the hosts' order.
  - The instances are the ones the diagnose playbook read on the host (C(_diagnose_instances)), else
    the host's cached deployment record (C(ansible_local.kvfleet_vllm_server.current.instances)).
  - Each instance is reached at C(vllm_diagnose_urls[name]) when set; at the record's own URL for a
    host reached with the local connection (it is the controller); else at the record's scheme,
    C(vllm_diagnose_address) (default C(ansible_host), else the host's name) and the instance's port.
  - Each target carries the instance's scheduler limits from its record, null where unknown.
options:
  _input:
    description: The host names to probe.
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: List every instance the controller probes
  ansible.builtin.set_fact:
    _diagnose_targets: "{{ groups['vllm'] | kvfleet.vllm.diagnose_targets(hostvars) }}"
"""

RETURN = r"""
_value:
  description: One target per instance, with C(name), C(host), C(url), C(max_num_seqs),
    C(max_num_batched_tokens), C(max_num_active_seqs) and C(max_model_len).
  type: list
  elements: dict
"""

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._hostvars import current_record, host_names, var

LIMITS = ("max_num_batched_tokens", "max_num_active_seqs", "max_model_len")


def host_targets(name, hv):
    """The targets of one host, from that host's variables (a mapping)."""
    instances = var(hv, "_diagnose_instances")
    if instances is None:
        instances = current_record(hv).get("instances") or []
    urls = var(hv, "vllm_diagnose_urls", {})
    local = var(hv, "ansible_connection", "ssh") == "local"
    address = var(hv, "vllm_diagnose_address") or var(hv, "ansible_host") or name
    out = []
    for inst in instances:
        if not isinstance(inst, Mapping) or not inst.get("name"):
            raise AnsibleFilterError("diagnose_targets: host %s has an instance without a name: %r" % (name, inst))
        limits = inst.get("limits") or {}
        if inst["name"] in urls:
            url = urls[inst["name"]]
        elif local:
            url = inst.get("url")
        else:
            scheme = (inst.get("url") or "http:").split(":")[0]
            url = "%s://%s:%s" % (scheme, address, inst.get("port"))
        target = {"name": inst["name"], "host": name, "url": url, "max_num_seqs": inst.get("max_num_seqs")}
        target.update((key, limits.get(key)) for key in LIMITS)
        out.append(target)
    return out


def _diagnose_targets(hosts, hostvars=None):
    if hostvars is None:
        raise AnsibleFilterError("diagnose_targets needs hostvars")
    out = []
    for name in host_names("diagnose_targets", hosts):
        out.extend(host_targets(name, hostvars[name]))
    return out


class FilterModule(object):
    def filters(self):
        return {"diagnose_targets": _diagnose_targets}
