# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: layout
short_description: Where the collection's fixed things live on a managed host
version_added: 0.4.0
description:
  - The paths and names written once in C(plugins/module_utils/_layout.py), for the roles and
    playbooks; the modules and the host program read the same file.
  - C(unit_dir) (systemd's folder for the units the roles write), C(unit_glob) (every vLLM unit of
    the collection's; the C(kvfleet.vllm.unit_name) filter names one instance's), C(record) (the
    deployment record), C(drain_marker) (present while a deploy has the host out of its load
    balancer), C(router_record) (the router role's record), C(command) (the kvfleet-vllm host
    program) and C(converged_state) (what the last verified deploy left on the host).
options:
  _terms:
    description: The names to look up.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Read the deployment record
  ansible.builtin.slurp:
    src: "{{ lookup('kvfleet.vllm.layout', 'record') }}"
  register: record
"""

RETURN = r"""
_raw:
  description: The value of each name, in order.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        unknown = [t for t in terms if t not in LAYOUT]
        if unknown:
            raise AnsibleLookupError("kvfleet.vllm.layout: unknown name %s; one of %s"
                                     % (", ".join(map(repr, unknown)), ", ".join(sorted(LAYOUT))))
        return [LAYOUT[t] for t in terms]
