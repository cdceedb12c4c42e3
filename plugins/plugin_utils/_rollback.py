# -*- coding: utf-8 -*-
# Copyright (c) kvfleet.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the server role's rollback restarts, and in which order (roles/server/tasks/rollback.yml).

A restored instance restarts when its unit or environment file changed back, when it is not
running, or when the failed deployment added a unit. A serving group restarts as one unit
(docs/serving-groups.md), in the order every restart uses (module_utils/_group_order.py): its
heads stop first, then its workers; the workers start before the heads. It restarts when the deploy asks
(a member changed on another host), when the failed deployment touched one of its units, or when
one of the restored group's units is touched. The failed deployment's own group units stop in the
same order before the restored instances start. Pure; plugins/filter/rollback_plan.py reads the
role's facts into it.
"""

from __future__ import annotations

import re

from ansible_collections.kvfleet.vllm.plugins.module_utils._group_order import GROUP_STEPS, restart_order, unique
from ansible_collections.kvfleet.vllm.plugins.module_utils._layout import unit_name

# an instance's environment (or key) file, named after the instance: its unit restarts with it
_INSTANCE_FILE = re.compile(r"^(.*)\.(env|keys\.yaml)$")


def _as_unit(name):
    """The unit of an instance's environment or key file; a unit name as it is."""
    match = _INSTANCE_FILE.match(name)
    return unit_name(match.group(1)) if match else name


class RollbackError(ValueError):
    """Input the plan cannot be made from; the message names it."""


def _names(value, what):
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise RollbackError("%s must be a list of file or unit names, got %r" % (what, value))
    return list(value)


def plan(backup_units, now_units=(), changed=(), running=(), current=None, instances=(), group_restart=False):
    """backup_units: the kept units (file names) put back; now_units: the units in place before
    the rollback; changed: the units and environment files the rollback changed back; running:
    the host's running services; current: the restored record's `current` (its instances and
    headless workers); instances: the failed deployment's instance model (each `unit`,
    `headless`, `record`); group_restart: the deploy asks for the groups' restart.

    Returns {added, restart, stop_heads, stop_workers, start_heads, start_workers}: units the
    failed deployment added (stopped and removed), the restored instances outside any group that
    restart, and each group step in its order."""
    backup_units = _names(backup_units, "backup_units")
    now_units = _names(now_units, "now_units")
    changed = _names(changed, "changed")
    running = set(_names(running, "running"))
    current = current if isinstance(current, dict) else {}
    changed_back = [_as_unit(name) for name in changed]
    not_running = [u for u in backup_units if u not in running]
    added = [u for u in unique(now_units) if u not in backup_units]
    touched = changed_back + not_running + added
    # the restored groups' members, and the failed deployment's group units, each in the order
    # every restart uses (module_utils/_group_order.py)
    restored = restart_order([i for i in current.get("instances") or [] if isinstance(i, dict) and "group" in i],
                             [w for w in current.get("workers") or [] if isinstance(w, dict)])
    failed = restart_order([i for i in instances or [] if isinstance(i, dict) and "group" in (i.get("record") or {})
                            and i.get("unit") in touched])
    heads, workers = restored["start_heads"], restored["start_workers"]
    restart_groups = (bool(group_restart) or bool(failed["stop_heads"] + failed["stop_workers"])
                      or any(u in touched for u in heads + workers))
    if not restart_groups:
        steps = dict((key, []) for key, _verb in GROUP_STEPS)
    else:
        steps = dict((key, unique(restored[key] + (failed[key] if key.startswith("stop") else [])))
                     for key, _verb in GROUP_STEPS)
    stop = steps["stop_heads"] + steps["stop_workers"]
    return dict(steps, added=added,
                restart=[u for u in backup_units if u in touched + stop and u not in heads + workers])
