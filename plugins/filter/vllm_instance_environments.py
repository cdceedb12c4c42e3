# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_instance_environments
short_description: (internal) Each vLLM instance's environment variables, apart from the instance model
version_added: 0.4.0
description:
  - The values P(kvfleet.vllm.vllm_instances#filter) leaves out of its instances, which give the names
    only (C(environment_keys)). For each instance, the shared C(environment) of O(settings), its own
    C(environment) over it, and C(RAY_ADDRESS) for a Ray group's head unless set.
  - The values may be secrets. Keep the result out of loops (Ansible prints a loop's whole item with
    -v, whatever its label) and read it with C(no_log) where an environment file is written.
  - Takes the same input and O(settings) as P(kvfleet.vllm.vllm_instances#filter) and fails the same way.
options:
  _input:
    description: The instances (C(vllm_server_instances)), as P(kvfleet.vllm.vllm_instances#filter) takes them.
    type: list
    elements: dict
    required: true
  settings:
    description: The role's shared values, as P(kvfleet.vllm.vllm_instances#filter) takes them.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Keep the instances' environments apart from the instances (no_log - values may be secrets)
  ansible.builtin.set_fact:
    environments: "{{ [{'name': 'gpu0', 'port': 8000, 'environment': {'HF_HUB_OFFLINE': '1'}}] | kvfleet.vllm.vllm_instance_environments(settings) }}"
  no_log: true
  vars:
    settings:
      version: "0.32.0"
      device: cuda
      options: {model: meta-llama/Meta-Llama-3.1-8B-Instruct, host: 127.0.0.1}
"""

RETURN = r"""
_value:
  description: Instance name -> its environment (variable name -> value).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import (
    InstanceError, environments)


def vllm_instance_environments(instances, settings):
    # the warnings are vllm_instances' to show (the same input): not twice
    try:
        return environments(instances, settings)
    except InstanceError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"vllm_instance_environments": vllm_instance_environments}
