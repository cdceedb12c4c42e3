# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: lora_sources
short_description: (internal) Where each pinned LoRA adapter comes from and where it lives on the host
version_added: 0.4.0
description:
  - Checks each item of C(vllm_server_lora_adapters) like P(kvfleet.vllm.model_source#filter) checks
    the model (name, revision, from, path, manifest), under C(<store>/loras), and refuses a name
    used twice. The name is the model name clients ask for.
options:
  _input:
    description: The C(vllm_server_lora_adapters) list.
    type: list
    elements: dict
    required: true
  store:
    description: The host folder that holds the staged models (C(vllm_server_model_store)).
    type: str
    required: true
  hub_cache:
    description:
      - The controller folder that C(from=hub) sources are downloaded into, one folder per name and
        revision (C(vllm_server_model_hub_cache)), unless the source gives its own C(path).
    type: str
  hub_endpoint:
    description: The hub's base URL for C(from=hub) sources (C(vllm_server_model_hub_endpoint)).
    type: str
"""

EXAMPLES = r"""
- name: Where the adapters go
  ansible.builtin.debug:
    msg: "{{ vllm_server_lora_adapters | kvfleet.vllm.lora_sources(store='/var/lib/vllm/models') | map(attribute='dir') }}"
"""

RETURN = r"""
_value:
  description: Per adapter, what P(kvfleet.vllm.model_source#filter) returns.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._model_source import (
    ModelSourceError, lora_sources)


def _lora_sources(adapters, store, hub_cache=None, hub_endpoint=None):
    try:
        return lora_sources(adapters, store, hub_cache=hub_cache, hub_endpoint=hub_endpoint)
    except ModelSourceError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"lora_sources": _lora_sources}
