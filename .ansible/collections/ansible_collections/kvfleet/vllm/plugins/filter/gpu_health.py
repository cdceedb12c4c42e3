# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_health
short_description: The GPUs vLLM instances would run on that are not healthy, in sentences
version_added: 0.4.0
description:
  - Reads the C(health) that M(kvfleet.vllm.gpu_info) returns for each GPU and keeps the GPUs
    the instances can see (their C(cuda_visible_devices); empty means every GPU of the host), so
    that a deploy can refuse an unhealthy GPU before anything changes.
  - Each sentence names the GPU (index, name, UUID), its verdict, each reason with its numbers,
    and what to do (docs/gpu-health.md).
  - A GPU whose health NVML cannot read (verdict null) is in neither list. Ids in
    C(cuda_visible_devices) that are not on the host are left to M(kvfleet.vllm.gpu_headroom),
    which names them.
options:
  _input:
    description: The registered result of M(kvfleet.vllm.gpu_info).
    type: dict
    required: true
  instances:
    description:
      - The instances to place, each with C(name) and optionally C(cuda_visible_devices)
        (indexes or UUIDs, comma-separated). Omitted or null, every GPU counts.
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Read the GPUs
  kvfleet.vllm.gpu_info:
  register: gpu

- name: Refuse an unhealthy GPU before any change
  ansible.builtin.assert:
    that: _health.unhealthy | length == 0
    fail_msg: "{{ _health.unhealthy | join(' ') }}"
  vars:
    _health: "{{ gpu | kvfleet.vllm.gpu_health([{'name': 'main', 'cuda_visible_devices': '0'}]) }}"
"""

RETURN = r"""
_value:
  description: The sentences, by verdict.
  type: dict
  contains:
    unhealthy:
      description: One sentence per unhealthy GPU the instances can see.
      type: list
      elements: str
    degraded:
      description: One sentence per degraded GPU the instances can see.
      type: list
      elements: str
    gpus:
      description: The indexes of the GPUs the instances can see.
      type: list
      elements: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import gpus_visible, health_findings


def gpu_health(gpu_facts, instances=None):
    if not isinstance(gpu_facts, dict) or not isinstance(gpu_facts.get("gpus"), list):
        raise AnsibleFilterError("gpu_health expects the registered result of "
                                 "kvfleet.vllm.gpu_info (a dict with 'gpus')")
    gpus = gpu_facts["gpus"]
    for gpu in gpus:
        if not isinstance(gpu, dict) or "index" not in gpu:
            raise AnsibleFilterError("gpu_health: each GPU of gpu_info's result needs an index, got %r" % (gpu,))
    if instances is None:
        seen = [g["index"] for g in gpus]
    else:
        if not isinstance(instances, list):
            raise AnsibleFilterError("gpu_health: instances must be a list, got %s" % type(instances).__name__)
        seen = []
        for inst in instances:
            if not isinstance(inst, dict) or "name" not in inst:
                raise AnsibleFilterError("gpu_health: each instance needs a name, got %r" % (inst,))
            for index in gpus_visible(inst.get("cuda_visible_devices"), gpus):
                if index not in seen:
                    seen.append(index)
    found = [f for f in health_findings(gpus) if f["index"] in seen]
    return {"unhealthy": [f["text"] for f in found if f["verdict"] == "unhealthy"],
            "degraded": [f["text"] for f in found if f["verdict"] == "degraded"],
            "gpus": sorted(seen)}


class FilterModule(object):
    def filters(self):
        return {"gpu_health": gpu_health}
