# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: kv_sizing
short_description: (internal) What each instance's KV cache holds, from the gate run after a deploy
version_added: 0.3.0
description:
  - For each instance of the gate's results, the cache in tokens and blocks (from
    C(vllm:cache_config_info)), how many sequences of C(--max-model-len) and of a typical request
    it holds, beside C(--max-num-seqs).
  - Adds a C(warning) when the cache holds at least twice C(--max-num-seqs) typical requests, so
    that a cap far below the cache (the fragmentation guide's 128 on a large GPU) shows before the
    first queue forms.
options:
  _input:
    description: The registered results of M(kvfleet.vllm.cache_gate) looped over instance records.
    type: list
    elements: dict
    required: true
  typical_tokens:
    description: Tokens (prompt and output) of a typical request.
    type: int
    default: 2048
"""

EXAMPLES = r"""
- name: Size the caches
  ansible.builtin.set_fact:
    sizing: "{{ gate.results | kvfleet.vllm.kv_sizing(typical_tokens=1024) }}"
"""

RETURN = r"""
_value:
  description: One dict per instance (instance, cache_tokens, cache_blocks, block_size, max_model_len,
    fits_max_model_len, typical_tokens, fits_typical, max_num_seqs, warning).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._report import kv_sizing


def _kv_sizing(results, typical_tokens=2048):
    if not isinstance(typical_tokens, int) or isinstance(typical_tokens, bool) or typical_tokens < 1:
        raise AnsibleFilterError("kv_sizing: typical_tokens must be a positive integer, got %r"
                                 % (typical_tokens,))
    return kv_sizing(results, typical_tokens)


class FilterModule(object):
    def filters(self):
        return {"kv_sizing": _kv_sizing}
