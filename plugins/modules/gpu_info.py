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
  - Per GPU, RV(gpus[].health) reads the GPU's health (ECC errors, retired pages, remapped rows,
    clock event reasons, PCIe link, NVLink errors, critical Xid events, temperature) and judges it
    C(healthy), C(degraded) or C(unhealthy), each reason with its numbers and what to do
    (docs/gpu-health.md). A field NVML does not support on a GPU is null, never a failure.
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
  xid_wait_ms:
    description:
      - Milliseconds to wait, on one NVML event set for every GPU, for critical Xid events
        (RV(gpus[].health.xid)). NVML delivers only the events raised during the wait; the ones
        logged before are in the kernel log.
      - C(0) does not wait; RV(gpus[].health.xid) is then null. At most C(10000).
    type: int
    default: 100
    version_added: 0.4.0
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

- name: Stop on a GPU that needs a reset or a replacement
  ansible.builtin.assert:
    that: gpu.gpus | selectattr('health.verdict', 'equalto', 'unhealthy') | list | length == 0
    fail_msg: "{{ gpu.gpus | map(attribute='health.reasons') | flatten | map(attribute='remedy') | unique | join('; ') }}"
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
    health:
      description:
        - The GPU's health as NVML reads it. Each field is null where NVML does not support it on
          this GPU. A GPU NVML calls lost (fallen off the bus) is listed with C(gpu_lost) true,
          null or 0 elsewhere.
        - docs/gpu-health.md has each reason, its threshold and its source.
      type: dict
      version_added: 0.4.0
      contains:
        verdict:
          description: C(healthy), C(degraded) or C(unhealthy); null when NVML supports none of the fields below.
          type: str
        reasons:
          description: What makes it degraded or unhealthy, unhealthy first.
          type: list
          elements: dict
          contains:
            id:
              description:
                - C(gpu_lost), C(reset_required), C(ecc_uncorrected_volatile), C(retired_pages_pending),
                  C(row_remap_failed), C(row_remap_pending), C(xid_critical) (unhealthy);
                - C(xid_degraded), C(ecc_uncorrected_aggregate), C(retired_pages_high),
                  C(row_remap_banks_exhausted), C(clock_slowdown), C(temperature_slowdown),
                  C(pcie_width_reduced), C(pcie_gen_reduced), C(nvlink_errors) (degraded).
              type: str
            severity:
              description: C(unhealthy) or C(degraded).
              type: str
            evidence:
              description: The numbers that show it, and the threshold.
              type: dict
            remedy:
              description: What to do, for example C(reset the GPU so that the pending row remapping takes effect).
              type: str
        gpu_lost:
          description: NVML answered C(GPU is lost) (NVML_ERROR_GPU_IS_LOST).
          type: bool
        reset_required:
          description: NVML answered C(GPU requires reset) (NVML_ERROR_RESET_REQUIRED).
          type: bool
        ecc:
          description: >-
            C(enabled), and the ECC error counts C(volatile) (since the driver loaded) and
            C(aggregate) (the GPU's life), each with C(corrected) and C(uncorrected).
          type: dict
        retired_pages:
          description: >-
            Pages retired by cause, C(multiple_single_bit_ecc) and C(double_bit_ecc), and
            C(pending) (a retirement waits for a reset or a driver reload). Null on GPUs with row
            remapping instead (Ampere and later).
          type: dict
        remapped_rows:
          description: >-
            C(correctable), C(uncorrectable) (rows remapped for each kind of error), C(pending)
            (waits for a GPU reset), C(failed), and C(histogram) (banks by spare rows left:
            C(max), C(high), C(partial), C(low), C(none)) where NVML has it.
          type: dict
        clock_event_reasons:
          description: Why the clocks are below their maximum now, for example C(gpu_idle), C(sw_power_cap), C(hw_slowdown).
          type: list
          elements: str
        pcie:
          description: >-
            The PCIe link: current C(gen) and C(width), the link's C(max_gen) and C(max_width) with
            this GPU in this slot, and the GPU's own C(gpu_max_gen).
          type: dict
        nvlink:
          description: >-
            Active NVLinks, each with C(link) and its error counters C(replay), C(recovery),
            C(crc_flit), C(crc_data), C(ecc_data); null when the GPU has no NVLink.
          type: list
          elements: dict
        xid:
          description: >-
            C(waited_ms), C(events) (critical Xids raised on this GPU during the wait) and
            C(unattributed) (ones NVML did not say the GPU of); null when O(xid_wait_ms=0) or
            the GPU does not deliver Xid events.
          type: dict
        temperature:
          description: C(current), C(slowdown) and C(shutdown) thresholds, in degrees C.
          type: dict
nvml_error:
  description: Why no GPU is listed, when O(gpus_required=false).
  returned: when NVML failed or found no GPU and O(gpus_required=false)
  type: str
"""

import sys
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
    module = AnsibleModule(argument_spec=dict(gpus_required=dict(type="bool", default=True),
                                              xid_wait_ms=dict(type="int", default=100)),
                           supports_check_mode=True)
    required = module.params["gpus_required"]
    wait = module.params["xid_wait_ms"]
    if not 0 <= wait <= 10000:
        module.fail_json(msg="xid_wait_ms must be 0 (no wait) to 10000 milliseconds, got %d" % wait)
    if pynvml is None:
        if required:
            module.fail_json(msg=missing_required_lib("nvidia-ml-py"),
                             exception=PYNVML_IMPORT_ERROR)
        module.exit_json(changed=False, gpus=[], nvml_error="the pynvml module is not installed in "
                         "%s (pip package nvidia-ml-py)" % sys.executable)
    try:
        facts = collect(pynvml, xid_wait_ms=wait)
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
