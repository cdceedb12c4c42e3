# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: model_source
short_description: (internal) Where a pinned model comes from and where it lives on the host
version_added: 0.4.0
description:
  - Checks C(vllm_server_model_source) (name, revision, from, path, manifest; repo with C(from=hub))
    and derives the host folder the instances' C(--model) points at, the staging folder beside it
    and the model's folder of revisions.
  - C(from=hub) needs the revision as a commit (40 hex digits) and adds C(hub_url), the revision's
    resolve URL that M(kvfleet.vllm.model_fetch) downloads from, and C(path), the controller folder
    it downloads into.
  - Fails naming the field and the allowed values.
options:
  _input:
    description: The C(vllm_server_model_source) dictionary.
    type: dict
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
- name: Where the model goes
  ansible.builtin.debug:
    msg: "{{ (vllm_server_model_source | kvfleet.vllm.model_source(store='/var/lib/vllm/models')).dir }}"
"""

RETURN = r"""
_value:
  description: The source's fields plus dir, staging, model_dir, staged (copied from the controller), label (name@revision) and, for C(from=hub), hub_url.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._model_source import (
    ModelSourceError, model_source)


def _model_source(source, store, hub_cache=None, hub_endpoint=None):
    try:
        return model_source(source, store, hub_cache=hub_cache, hub_endpoint=hub_endpoint)
    except ModelSourceError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"model_source": _model_source}
