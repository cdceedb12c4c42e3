# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: lora_runtime
short_description: (internal) Whether a vLLM unit change is only its LoRA adapters (loaded and unloaded without a restart)
version_added: 0.4.0
description:
  - Compares the unit on the host with the one the server role would write, with the words of
    C(--lora-modules) taken out. When nothing else differs and LoRA is enabled, the change can be
    made on the running server through M(kvfleet.vllm.lora_adapter) instead of a restart.
  - Any other difference (a flag, the version, a unit setting) is a restart, and says so in C(why).
options:
  _input:
    description: The unit's text on the host; empty when there is none.
    type: str
    required: true
  wanted:
    description: The unit's text the role would write.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: What changes at runtime
  ansible.builtin.debug:
    msg: "{{ (current.content | b64decode) | kvfleet.vllm.lora_runtime(lookup('ansible.builtin.template', 'vllm.service.j2')) }}"
"""

RETURN = r"""
_value:
  description: The decision.
  type: dict
  contains:
    runtime: {description: True when only the adapters change., type: bool}
    load: {description: Adapters that are new or come from another folder (C(name), C(path))., type: list, elements: dict}
    unload: {description: Names of the adapters no longer listed., type: list, elements: str}
    why: {description: The reason, in words., type: str}
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._lora_runtime import LoraRuntimeError, plan


def _lora_runtime(current, wanted):
    try:
        return plan(current, wanted)
    except LoraRuntimeError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"lora_runtime": _lora_runtime}
