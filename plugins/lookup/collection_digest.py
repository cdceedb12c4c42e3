# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: collection_digest
short_description: One digest of this collection's roles and plugins, on the controller
version_added: 0.4.0
description:
  - The sha256 over the path and bytes of every file under the collection's C(roles/) and
    C(plugins/). Part of a host's converged fingerprint (the server role's C(converged) entry
    point), so that a newer collection makes every host take the deploy's full path once.
  - Reads every file of those folders; the deploy computes it once per run.
"""

EXAMPLES = r"""
- name: Compute the digest once for the run
  ansible.builtin.set_fact:
    collection_digest: "{{ lookup('kvfleet.vllm.collection_digest') }}"
  run_once: true
"""

RETURN = r"""
_raw:
  description: The digest, as hexadecimal.
  type: list
  elements: str
"""

from ansible.plugins.lookup import LookupBase

from ansible_collections.kvfleet.vllm.plugins.plugin_utils._digest import collection_digest


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [collection_digest()]
