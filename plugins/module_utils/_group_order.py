# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The order in which vLLM units restart, a serving group's included; written once.

A serving group restarts as one unit (docs/serving-groups.md): its heads stop first (their
in-flight requests still need the workers' engines), then its workers stop; the workers start
before the heads (a worker cannot rejoin a head that kept running, and a head waits for every
engine). An instance outside any group restarts on its own. Across hosts each step is done on
every host before the next, so each is a task of its own where Ansible runs it.

Used by the server role's handlers and kvfleet.vllm.rolling_restart (the restart_order filter),
the server role's rollback plan (plugin_utils/_rollback.py) and the host program's restart
guard (roles/hosttools/files/kvfleet_vllm.py, which runs on the hosts: standard library only).
"""

from __future__ import annotations

from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import unit_name

__all__ = ["GROUP_STEPS", "restart_order", "systemctl_steps", "unique"]

# the serving group's steps in the order they run, each with the systemctl verb it uses
GROUP_STEPS = (("stop_heads", "stop"), ("stop_workers", "stop"),
               ("start_workers", "start"), ("start_heads", "start"))


def unique(units):
    """Unit names once each, in their first order."""
    return list(dict.fromkeys(units))


def restart_order(units, workers=()):
    """units: the units that restart, in the host's order, each a dict with 'unit', and 'group'
    (a serving group member's group; also read from its 'record') and 'headless' (a group's
    worker: a headless vLLM or a Ray node); workers: more of a group's workers (a deployment
    record lists them apart from its instances).

    An item without 'unit' is named by its instance 'name' (vllm-NAME.service).

    -> {'restart': the units outside any group, 'stop_heads', 'stop_workers', 'start_workers',
    'start_heads'}: unit names, each list in the given order."""
    heads, members, plain = [], [], []
    for item in list(units or []) + [dict(w, headless=True) for w in workers or []]:
        if not isinstance(item, dict) or not (item.get("unit") or item.get("name")):
            raise ValueError("each unit must be a dict with its 'unit' (or instance 'name'), got %r" % (item,))
        # a deployment record written before 0.3.0 names the instance only
        item = dict(item, unit=item.get("unit") or unit_name(item["name"]))
        grouped = item.get("group") is not None or (item.get("record") or {}).get("group") is not None
        if item.get("headless"):
            members.append(item["unit"])
        elif grouped:
            heads.append(item["unit"])
        else:
            plain.append(item["unit"])
    heads, members = unique(heads), unique(members)
    return {"restart": unique(plain), "stop_heads": heads, "stop_workers": members,
            "start_workers": members, "start_heads": heads}


def systemctl_steps(order):
    """The systemctl calls of one host's restart_order, in order: [(verb, unit)]."""
    steps = [("restart", unit) for unit in order.get("restart") or []]
    for key, verb in GROUP_STEPS:
        steps.extend((verb, unit) for unit in order.get(key) or [])
    return steps
