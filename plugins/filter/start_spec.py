# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: start_spec
short_description: (internal) Each instance's unit and the files its process reads at start
version_added: 0.4.0
description:
  - What the host program's C(kvfleet-vllm start --spec) takes (and C(stale) for one unit), from the
    server role's instance model; a process older than one of its files is stale and restarts.
  - The files are the unit file, the environment file, the key file where the instance has one, and
    the TLS certificate, key and CA under O(tls_dir).
options:
  _input:
    description: The instances (C(_server_instances)), each with C(unit), C(env_file) and C(keys_file).
    type: list
    elements: dict
    required: true
  tls_dir:
    description: The server role's TLS folder (C(vllm_server_tls_dir)).
    type: str
    required: true
  unit_dir:
    description: Where the units are written.
    type: str
    default: /etc/systemd/system
"""

EXAMPLES = r"""
- name: The start spec
  ansible.builtin.debug:
    msg: "{{ _server_instances | kvfleet.vllm.start_spec(tls_dir=vllm_server_tls_dir) }}"
"""

RETURN = r"""
_value:
  description: One C({unit, files}) per instance, in order.
  type: list
  elements: dict
"""

import posixpath

from ansible.errors import AnsibleFilterError

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import LAYOUT


def start_spec(instances, tls_dir, unit_dir=LAYOUT["unit_dir"]):
    if not tls_dir:
        raise AnsibleFilterError("start_spec needs tls_dir, the server role's TLS folder")
    spec = []
    for inst in instances or []:
        if not inst.get("unit") or not inst.get("env_file"):
            raise AnsibleFilterError("start_spec: an instance without unit or env_file: %r" % (inst.get("name"),))
        files = [posixpath.join(unit_dir, inst["unit"]), inst["env_file"]]
        if inst.get("keys_file"):
            files.append(inst["keys_file"])
        files += [posixpath.join(tls_dir, name) for name in ("server.crt", "server.key", "ca.crt")]
        spec.append({"unit": inst["unit"], "files": files})
    return spec


class FilterModule(object):
    def filters(self):
        return {"start_spec": start_spec}
