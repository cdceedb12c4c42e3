# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: cuda_compat
short_description: Whether a host's NVIDIA driver runs the CUDA the vLLM wheel is built for
version_added: 0.4.0
description:
  - Compares the driver that M(kvfleet.vllm.gpu_info) reads (C(driver_version), and
    C(cuda_driver_version), the highest CUDA it supports) with the CUDA the vLLM wheel's torch is
    built for, and gives a verdict with a sentence naming both versions and the minimum driver
    (NVIDIA's CUDA Toolkit Release Notes, "CUDA Toolkit and Corresponding Driver Versions").
  - "The wheel's CUDA, first found of: O(metadata) (the installed torch's METADATA: its
    C(+cu128)/C(+cpu) version label, or its C(nvidia-cuda-runtime-cu12)/C(cuda-toolkit)
    requirement), O(cuda), the collection's table of vLLM's PyPI wheels by O(vllm_version)."
  - "C(refuse): the driver's CUDA has a lower major version than the wheel's, or the driver is
    below that major's minor-version-compatibility floor (525.60.13 for 12.x, 580 for 13.x,
    450.80.02 for 11.x), or the installed torch is a CPU or ROCm build. C(warn): same major,
    lower minor (it runs under minor version compatibility). C(unknown): one side is not known.
    C(ok) otherwise."
options:
  _input:
    description: The registered result of M(kvfleet.vllm.gpu_info).
    type: dict
    required: true
  metadata:
    description: The text of the installed torch's C(METADATA) (dist-info); empty before vLLM is installed.
    type: str
    default: ""
  cuda:
    description: The CUDA version the wheel to install is built for, for example C(12.8); empty to use the table.
    type: str
    default: ""
  vllm_version:
    description: The vLLM version to install, looked up in the table when O(metadata) and O(cuda) say nothing.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Read the GPUs
  kvfleet.vllm.gpu_info:
  register: gpu

- name: Refuse a driver too old for the CUDA of the wheel
  ansible.builtin.assert:
    that: _cuda.verdict != 'refuse'
    fail_msg: "{{ _cuda.message }}"
  vars:
    _cuda: "{{ gpu | kvfleet.vllm.cuda_compat(cuda='12.8') }}"
"""

RETURN = r"""
_value:
  description: The verdict.
  type: dict
  contains:
    verdict:
      description: C(ok), C(warn), C(refuse) or C(unknown).
      type: str
    message:
      description: A sentence naming the driver, its CUDA, the wheel's CUDA and the minimum driver.
      type: str
    wheel_cuda:
      description: The wheel's CUDA, for example C(13.0); null when not known or not a CUDA build.
      type: str
    source:
      description: Where the wheel's CUDA came from (the installed torch's label or requirement, the setting, the table).
      type: str
    driver_version:
      description: The driver's version.
      type: str
    driver_cuda:
      description: The highest CUDA the driver supports.
      type: str
    min_driver:
      description: The driver NVIDIA names for the wheel's CUDA release; null when not in the table.
      type: str
    floor:
      description: The oldest driver of the wheel's CUDA major release (minor version compatibility).
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.module_utils._cuda_compat import (
    VLLM_WHEEL_CUDA, cuda_from_metadata, judge, parse_cuda)


def cuda_compat(gpu_facts, metadata="", cuda="", vllm_version=""):
    if not isinstance(gpu_facts, dict):
        raise AnsibleFilterError("cuda_compat expects the registered result of kvfleet.vllm.gpu_info (a dict)")
    try:
        parse_cuda(cuda or None)
    except ValueError as exc:
        raise AnsibleFilterError("cuda_compat: cuda (vllm_server_cuda_version): %s" % exc)
    driver = gpu_facts.get("driver_version")
    wheel = cuda_from_metadata(metadata) if metadata else {"build": None}
    if wheel["build"] in ("cpu", "rocm"):
        out = judge(driver, gpu_facts.get("cuda_driver_version"), None)
        out.update(verdict="refuse", wheel_cuda=None, source=wheel["source"], message=(
            "the installed %s %s is a %s build (%s), not a CUDA one: it would not use the NVIDIA GPUs. "
            "Install a CUDA build of vLLM (docs/gpu.md) or set vllm_server_device: cpu"
            % (wheel["name"] or "torch", wheel["version"], wheel["build"].upper(), wheel["source"])))
        return out
    if wheel["build"] == "cuda":
        wheel_cuda, source = wheel["cuda"], "the installed %s %s (%s)" % (wheel["name"], wheel["version"], wheel["source"])
    elif cuda:
        wheel_cuda, source = str(cuda), "vllm_server_cuda_version"
    elif vllm_version and str(vllm_version) in VLLM_WHEEL_CUDA:
        wheel_cuda, source = VLLM_WHEEL_CUDA[str(vllm_version)], "the PyPI wheel of vLLM %s" % vllm_version
    else:
        wheel_cuda, source = None, None
    what = "the vLLM wheel (CUDA from %s)" % source if source else \
        "vLLM %s (not in the collection's table: set vllm_server_cuda_version)" % (vllm_version or "?")
    out = judge(driver, gpu_facts.get("cuda_driver_version"), wheel_cuda, wheel=what)
    out["source"] = source
    return out


class FilterModule(object):
    def filters(self):
        return {"cuda_compat": cuda_compat}
