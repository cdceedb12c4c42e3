# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: disk_headroom
short_description: (internal) Why a host's disks are too full for what is about to be written, in sentences
version_added: 0.2.0
description:
  - Compares the free space of the filesystems that paths are (or will be) created on with what
    is needed there, before anything changes. The free space comes from the server role's
    C(venv_probe.py) (its C(disk) list), which walks up to the nearest existing parent of a path
    that does not exist yet.
  - Needs on the same filesystem add up.
  - Returns an empty list when everything fits. A need of 0 GiB is no check.
options:
  _input:
    description: The probe's C(disk) list, each with C(path), C(at) (the existing folder measured),
      C(dev) (its device number) and C(free) (bytes).
    type: list
    elements: dict
    required: true
  needs:
    description:
      - What must be free, each with C(path) (one of the probed paths), C(gib) (GiB, 1024^3
        bytes), C(var) (the variable that sets it, named in the message) and C(what) (what
        the space is for).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Fail before any change when the disk is too full
  ansible.builtin.assert:
    that: _problems | length == 0
    fail_msg: "{{ _problems | join(' ') }}"
  vars:
    _problems: >-
      {{ probe.disk | kvfleet.vllm.disk_headroom([{'path': '/opt/vllm', 'gib': 12,
                                                   'var': 'vllm_server_min_free_gb',
                                                   'what': 'the vllm 0.32.0 venv'}]) }}
"""

RETURN = r"""
_value:
  description: One sentence per filesystem with less free space than needed.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

GIB = 1024 ** 3


def _gib(nbytes):
    return "%.1f GiB" % (nbytes / float(GIB))


def disk_headroom(probes, needs):
    by_path = {}
    for p in probes or []:
        if not isinstance(p, dict) or not {"path", "at", "dev", "free"} <= set(p):
            raise AnsibleFilterError("disk_headroom expects the probe's disk entries "
                                     "(path, at, dev, free), got %r" % (p,))
        by_path[p["path"]] = p
    groups = {}   # dev -> [probe, [need, ...]], in the order first needed
    for need in needs or []:
        if not isinstance(need, dict) or not {"path", "gib", "var", "what"} <= set(need):
            raise AnsibleFilterError("disk_headroom: each need has path, gib, var and what, got %r" % (need,))
        try:
            gib = float(need["gib"])
        except (TypeError, ValueError):
            gib = -1.0
        if not gib >= 0:
            raise AnsibleFilterError("%s must be a number of GiB, 0 or more (0 turns the check off), got %r"
                                     % (need["var"], need["gib"]))
        if gib == 0:
            continue
        if need["path"] not in by_path:
            raise AnsibleFilterError("disk_headroom: %s was not probed" % need["path"])
        probe = by_path[need["path"]]
        groups.setdefault(probe["dev"], [probe, []])[1].append(dict(need, gib=gib))
    problems = []
    for probe, group in groups.values():
        total = sum(n["gib"] for n in group) * GIB
        free = int(probe["free"])
        if free >= total:
            continue
        paths = []
        for n in group:
            if n["path"] not in paths:
                paths.append(n["path"])
        parts = ", ".join("%s %s for %s" % (n["var"], _gib(n["gib"] * GIB), n["what"]) for n in group)
        if len(paths) > 1:
            head = "%s (one filesystem) need" % " and ".join(paths)
        elif paths[0] != probe["at"]:
            head = "%s (not there yet, measured at %s) needs" % (paths[0], probe["at"])
        else:
            head = "%s needs" % paths[0]
        problems.append("%s %s free (%s), has %s." % (head, _gib(total), parts, _gib(free)))
    return problems


class FilterModule(object):
    def filters(self):
        return {"disk_headroom": disk_headroom}
