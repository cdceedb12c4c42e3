#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_info
short_description: NVIDIA GPU facts through NVML (driver, CUDA, memory, processes)
version_added: 0.1.0
description:
  - Reads the NVIDIA driver and CUDA driver versions and, per GPU, its index, UUID, name, memory,
    utilisation, compute capability, persistence mode and the processes using it, through NVML.
  - Used by the C(kvfleet.vllm.server) role and the C(kvfleet.vllm.deploy) playbook as a
    preflight on CUDA hosts.
author:
  - kvfleet maintainers (@kvfleet)
extends_documentation_fragment:
  - kvfleet.vllm.attributes.info_module
requirements:
  - nvidia-ml-py (provides the C(pynvml) module; the PyPI package named C(pynvml) is a deprecated wrapper of it)
  - an NVIDIA driver on the managed host
options:
  gpus_required:
    description:
      - Fail when NVML cannot be used or finds no GPU.
      - When false, return an empty RV(gpus) list and the reason in RV(nvml_error) instead.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Require GPUs before installing vLLM for CUDA
  kvfleet.vllm.gpu_info:
  register: gpu

- name: Show free memory per GPU
  ansible.builtin.debug:
    msg: "GPU {{ item.index }} {{ item.name }}: {{ (item.memory_free / 2**30) | round(1) }} GiB free"
  loop: "{{ gpu.gpus }}"

- name: Report GPUs where present, without failing elsewhere
  kvfleet.vllm.gpu_info:
    gpus_required: false
  register: maybe_gpu
"""

RETURN = r"""
driver_version:
  description: NVIDIA driver version.
  returned: when NVML could be initialised
  type: str
  sample: "550.54.15"
cuda_driver_version:
  description: Highest CUDA version the driver supports.
  returned: when NVML could be initialised
  type: str
  sample: "12.4"
nvml_version:
  description: NVML library version.
  returned: when NVML could be initialised
  type: str
gpus:
  description: One entry per GPU, in NVML index order.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML index (what C(CUDA_VISIBLE_DEVICES) uses by default).
      type: int
    uuid:
      description: GPU UUID.
      type: str
    name:
      description: Product name.
      type: str
      sample: NVIDIA H100 80GB HBM3
    memory_total:
      description: Total memory in bytes.
      type: int
    memory_used:
      description: Used memory in bytes.
      type: int
    memory_free:
      description: Free memory in bytes.
      type: int
    utilization_gpu:
      description: GPU utilisation in percent over the last sample period; null if unsupported.
      type: int
    utilization_memory:
      description: Memory controller utilisation in percent; null if unsupported.
      type: int
    compute_capability:
      description: CUDA compute capability, for example C(9.0).
      type: str
    persistence_mode:
      description: Whether persistence mode is on; null if unsupported.
      type: bool
    processes:
      description: Processes using the GPU, with C(pid), C(used_memory) (bytes, null if unknown) and C(types).
      type: list
      elements: dict
nvml_error:
  description: Why no GPU is listed, when O(gpus_required=false).
  returned: when NVML failed or found no GPU and O(gpus_required=false)
  type: str
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kvfleet.vllm.plugins.module_utils._nvml import NvmlUnavailable, collect

try:
    import pynvml
except ImportError:
    pynvml = None
    PYNVML_IMPORT_ERROR = traceback.format_exc()
else:
    PYNVML_IMPORT_ERROR = None


def main():
    module = AnsibleModule(argument_spec=dict(gpus_required=dict(type="bool", default=True)),
                           supports_check_mode=True)
    required = module.params["gpus_required"]
    if pynvml is None:
        if required:
            module.fail_json(msg=missing_required_lib("nvidia-ml-py"),
                             exception=PYNVML_IMPORT_ERROR)
        module.exit_json(changed=False, gpus=[], nvml_error="the pynvml module is not installed "
                         "(pip package nvidia-ml-py)")
    try:
        facts = collect(pynvml)
    except NvmlUnavailable as exc:
        if required:
            module.fail_json(msg=str(exc))
        module.exit_json(changed=False, gpus=[], nvml_error=str(exc))
    if not facts["gpus"] and required:
        module.fail_json(msg="NVML works (driver %s) but finds no GPU on this host"
                         % facts["driver_version"], **facts)
    if not facts["gpus"]:
        facts["nvml_error"] = "no GPU found"
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
