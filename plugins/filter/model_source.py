# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: model_source
short_description: Where a pinned model comes from and where it lives on the host
version_added: 0.4.0
description:
  - Checks C(vllm_server_model_source) (name, revision, from, path, manifest) and derives the
    host folder the instances' C(--model) points at, the staging folder beside it and the model's
    folder of revisions.
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
"""

EXAMPLES = r"""
- name: Where the model goes
  ansible.builtin.debug:
    msg: "{{ (vllm_server_model_source | kvfleet.vllm.model_source(store='/var/lib/vllm/models')).dir }}"
"""

RETURN = r"""
_value:
  description: The source's fields plus dir, staging, model_dir, staged (copied from the controller) and label (name@revision).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._model_source import (
    ModelSourceError, model_source)


def _model_source(source, store):
    try:
        return model_source(source, store)
    except ModelSourceError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"model_source": _model_source}
