# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: hosttools_stale
short_description: (internal) The host tools whose installed copy differs from the controller's
version_added: 0.4.0
description:
  - Compares each file of P(kvfleet.vllm.hosttools_files#filter) with what one command read on the
    host, a line per file, in order, C(MODE OWNER:GROUP SHA256) or C(missing). A file differs when
    its mode, its owner (root:root) or its content's SHA-256 does. A C(src) is read on the controller.
options:
  _input:
    description: The files (P(kvfleet.vllm.hosttools_files#filter)).
    type: list
    elements: dict
    required: true
  installed:
    description: The lines read on the host, one per file.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: What to copy
  ansible.builtin.debug:
    msg: "{{ __hosttools_files | kvfleet.vllm.hosttools_stale(__hosttools_now.stdout_lines) }}"
"""

RETURN = r"""
_value:
  description: The files to copy, as given.
  type: list
  elements: dict
"""

import hashlib

from ansible.errors import AnsibleFilterError


def _digest(entry):
    if "content" in entry:
        return hashlib.sha256(entry["content"].encode("utf-8")).hexdigest()
    try:
        with open(entry["src"], "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as exc:
        raise AnsibleFilterError("hosttools_stale cannot read %s: %s" % (entry.get("src"), exc))


def hosttools_stale(files, installed=None):
    if installed is None:
        raise AnsibleFilterError("hosttools_stale needs the lines read on the host")
    installed = list(installed)
    stale = []
    for index, entry in enumerate(files):
        now = installed[index] if index < len(installed) else ""
        if now != "%s root:root %s" % (entry["mode"][1:], _digest(entry)):
            stale.append(entry)
    return stale


class FilterModule(object):
    def filters(self):
        return {"hosttools_stale": hosttools_stale}
