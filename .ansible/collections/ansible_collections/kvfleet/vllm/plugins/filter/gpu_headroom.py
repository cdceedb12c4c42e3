# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_headroom
short_description: Why vLLM instances would not fit on a host's GPUs, in sentences
version_added: 0.2.0
description:
  - vLLM reserves O(instances[].gpu_memory_utilization) of each visible GPU's total memory and
    refuses to start when less than that is free. This filter checks that before anything
    changes, from the output of M(kvfleet.vllm.gpu_info).
  - Instances sharing a GPU add up and must stay at or below 1.0 of it.
  - An instance must see as many GPUs as its engines on the host take, C(gpus_needed) of
    M(kvfleet.vllm.vllm_instances) (local data parallel engines x tensor x pipeline parallel size).
  - Memory held by the processes in O(own_pids) (this host's vLLM units, which a deploy restarts)
    counts as free; memory held by any other process does not, and the message names those
    processes.
  - Returns an empty list when everything fits.
options:
  _input:
    description: The registered result of M(kvfleet.vllm.gpu_info).
    type: dict
    required: true
  instances:
    description:
      - The instances to place, each with C(name), C(gpu_memory_utilization) and optionally
        C(cuda_visible_devices) (indexes or UUIDs, comma-separated; empty means every GPU), and
        C(gpus_needed) (C(count), C(why)) when its engines take more than one GPU.
    type: list
    elements: dict
    required: true
  own_pids:
    description: Process ids of this host's own vLLM units.
    type: list
    elements: int
    default: []
"""

EXAMPLES = r"""
- name: Read the GPUs
  kvfleet.vllm.gpu_info:
  register: gpu

- name: Fail before any change when the instances do not fit
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join(' ') }}"
  vars:
    _problems: >-
      {{ gpu | kvfleet.vllm.gpu_headroom([{'name': 'main', 'gpu_memory_utilization': 0.9,
                                            'cuda_visible_devices': '0'}]) }}
"""

RETURN = r"""
_value:
  description: One sentence per problem (GPU over-committed, not enough free memory, unknown GPU id).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import headroom


def gpu_headroom(gpu_facts, instances, own_pids=None):
    if not isinstance(gpu_facts, dict) or "gpus" not in gpu_facts:
        raise AnsibleFilterError("gpu_headroom expects the registered result of "
                                 "kvfleet.vllm.gpu_info (a dict with 'gpus')")
    for inst in instances or []:
        if not isinstance(inst, dict) or "name" not in inst:
            raise AnsibleFilterError("gpu_headroom: each instance needs a name, got %r" % (inst,))
        try:
            share = float(inst.get("gpu_memory_utilization"))
        except (TypeError, ValueError):
            share = -1
        if not 0 < share <= 1:
            raise AnsibleFilterError(
                "gpu_headroom: instance %s has gpu_memory_utilization %r; allowed: a number in "
                "(0, 1]" % (inst["name"], inst.get("gpu_memory_utilization")))
    try:
        pids = [int(p) for p in own_pids or []]
    except (TypeError, ValueError):
        raise AnsibleFilterError("gpu_headroom: own_pids must be process ids, got %r" % (own_pids,))
    return headroom(gpu_facts, instances or [], pids)


class FilterModule(object):
    def filters(self):
        return {"gpu_headroom": gpu_headroom}
