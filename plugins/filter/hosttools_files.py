# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: hosttools_files
short_description: (internal) The files the hosttools role installs on a host
version_added: 0.4.0
description:
  - The host program's library (the package markers, then the collection's own module_utils,
    unchanged), the unit checker, the program and the C(kvfleet-vllm) command, each with its
    source on the controller (C(src)) or its text (C(content)), its destination and its mode.
  - Used by the internal P(kvfleet.vllm.hosttools#role) role, which copies only those whose
    installed copy differs (P(kvfleet.vllm.hosttools_stale#filter)).
options:
  _input:
    description: Where the host tools live on the host (C(kvfleet_hosttools_dir)).
    type: str
    required: true
  collection:
    description: The collection's root on the controller.
    type: str
    required: true
  module_utils:
    description: The module_utils file names the host program imports.
    type: list
    elements: str
    required: true
  command:
    description: The C(kvfleet-vllm) command's text and where it goes, C({content, dest}).
    type: dict
    required: true
  verify_unit:
    description: Where the unit checker goes.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The files
  ansible.builtin.debug:
    msg: >-
      {{ '/opt/kvfleet' | kvfleet.vllm.hosttools_files(collection=role_path ~ '/../..', module_utils=['_prom.py'],
         command={'content': '#!/bin/sh\n', 'dest': '/usr/local/bin/kvfleet-vllm'}, verify_unit='/opt/kvfleet/verify-unit') }}
"""

RETURN = r"""
_value:
  description: One C({src or content, dest, mode}) per file, in install order.
  type: list
  elements: dict
"""

import posixpath

from ansible.errors import AnsibleFilterError

PACKAGES = ("", "/kvfleet", "/kvfleet/vllm", "/kvfleet/vllm/plugins", "/kvfleet/vllm/plugins/module_utils")


def hosttools_files(tools_dir, collection=None, module_utils=None, command=None, verify_unit=None):
    if not tools_dir or not collection or not command or not verify_unit:
        raise AnsibleFilterError("hosttools_files needs the tools folder, collection, command and verify_unit")
    lib = tools_dir.rstrip("/") + "/lib/ansible_collections"
    role_files = posixpath.join(collection, "roles", "hosttools", "files")
    out = [{"dest": lib + pkg + "/__init__.py", "content": "", "mode": "0644"} for pkg in PACKAGES]
    out += [{"src": posixpath.join(collection, "plugins", "module_utils", name),
             "dest": lib + "/kvfleet/vllm/plugins/module_utils/" + name, "mode": "0644"} for name in module_utils or []]
    out.append({"src": posixpath.join(role_files, "verify-unit"), "dest": verify_unit, "mode": "0755"})
    out.append({"src": posixpath.join(role_files, "kvfleet_vllm.py"), "dest": tools_dir.rstrip("/") + "/kvfleet_vllm.py",
                "mode": "0644"})
    out.append({"content": command["content"], "dest": command["dest"], "mode": "0755"})
    return out


class FilterModule(object):
    def filters(self):
        return {"hosttools_files": hosttools_files}
