# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_instances
short_description: (internal) Every fact about each vLLM instance, derived once from the server role's variables
version_added: 0.3.0
description:
  - The one model of an instance that the server role, its unit template, the deployment record
    and through it the monitor, the restart guard and the playbooks use.
  - Merges the shared options, O(settings.options) and each instance's C(options) and C(extra_args);
    renders the argv with P(kvfleet.vllm.vllm_args#filter) rules; then reads back what vLLM will
    really run with (the last C(--host), C(--port), C(--max-num-seqs) and C(--shutdown-timeout),
    C(extra_args) included).
  - Fails, naming the instance and the variable, on a listen address other than loopback without
    an API key (unless O(settings.allow_unauthenticated)), secret flags in C(options) or
    C(extra_args), duplicate names or ports, invalid environment variable names, line breaks in
    any value that reaches a unit or environment file, and invalid C(cuda_visible_devices).
options:
  _input:
    description: The instances (C(vllm_server_instances)), each with C(name) and optionally C(port),
      C(options), C(extra_args), C(environment), C(cuda_visible_devices), C(data_parallel) (size,
      size_local, start_rank, address, rpc_port; docs/serving-groups.md); C(ray) and C(ray_node),
      which P(kvfleet.vllm.serving_group#filter) sets for a serving group over Ray.
    type: list
    elements: dict
    required: true
  settings:
    description:
      - The role's shared values. Keys C(version), C(device), C(options) (flag options shared by
        every instance), C(extra_args), C(port) (default port), C(environment), C(config_dir),
        C(api_key_set), C(allow_unauthenticated), C(var_prefix); for a serving group over Ray,
        C(ray_temp_dir), C(ray_start_args) and C(ray_version).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Each instance's unit, probe URL and cap
  ansible.builtin.debug:
    msg: "{{ item.unit }} {{ item.url }} max_num_seqs={{ item.max_num_seqs }}"
  loop: "{{ [{'name': 'gpu0', 'port': 8000, 'options': {'host': '10.0.0.5'}}] | kvfleet.vllm.vllm_instances(settings) }}"
  vars:
    settings:
      version: "0.32.0"
      device: cuda
      options: {model: meta-llama/Meta-Llama-3.1-8B-Instruct, host: 127.0.0.1, max_num_seqs: 128}
      api_key_set: true
"""

RETURN = r"""
_value:
  description: One dictionary per instance.
  type: list
  elements: dict
  contains:
    name: {description: The instance name., type: str}
    unit: {description: "The systemd unit, C(vllm-NAME.service).", type: str}
    port: {description: The port vLLM listens on (after C(extra_args))., type: int}
    bind: {description: "The listen address (empty: every interface).", type: str}
    public: {description: Whether other machines can reach it., type: bool}
    url: {description: "How this host reaches it (C(http://127.0.0.1:PORT) for an any-address bind).", type: str}
    argv: {description: The vLLM arguments., type: list, elements: str}
    max_num_seqs: {description: The concurrency cap it runs with (null when vLLM's default)., type: int}
    drain_seconds: {description: "C(--shutdown-timeout): how long a stop waits for in-flight requests.", type: int}
    gpu_memory_utilization: {description: The share of each visible GPU it reserves., type: float}
    gpus_needed:
      description: >-
        The GPUs its engines on this host take (C(count)), and why (C(why): local data parallel
        engines x tensor x pipeline parallel size), for the GPU preflight.
      type: dict
    cuda_visible_devices: {description: The GPUs it sees (empty for all)., type: str}
    environment_keys:
      description: >-
        The names of its extra environment variables (sorted), never their values: Ansible prints a
        loop's whole item with -v. The values come from P(kvfleet.vllm.vllm_instance_environments#filter).
      type: list
      elements: str
    env_file: {description: Its 0600 environment file., type: str}
    record: {description: What the deployment record keeps of it (read by the host program and playbooks)., type: dict}
    headless: {description: "A serving group's worker: no API server, no URL (C(url) is null); the record lists heads only.", type: bool}
    group_role: {description: "C(head) or C(worker) in a serving group across hosts; null otherwise.", type: str}
    data_parallel: {description: The data parallel options it runs with (null without C(data_parallel))., type: dict}
    ray:
      description: >-
        A Ray group's head: its cluster (role, address, port, node_address, gpus, world); its argv ends
        with C(--distributed-executor-backend ray) and its environment has C(RAY_ADDRESS) (in C(environment_keys)). Null otherwise.
      type: dict
    ray_node:
      description: >-
        A Ray group member's Ray node (the same settings): C(argv) is then what follows C(ray start), the
        unit runs it from the vLLM venv, headless. Null otherwise.
      type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._instances import (
    InstanceError, build)

display = Display()


def vllm_instances(instances, settings):
    try:
        out, warnings = build(instances, settings)
    except InstanceError as exc:
        raise AnsibleFilterError(str(exc))
    for warning in warnings:
        display.warning(warning)
    return out


class FilterModule(object):
    def filters(self):
        return {"vllm_instances": vllm_instances}
